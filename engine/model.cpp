// Model loading: config + weight binding over one GGUF mapping.
// Exercised by tests/test_model_config.cpp and tests/test_model_forward.cpp.
#include "engine/model.h"

namespace strata::engine {

Model Model::load(const std::string& path) {
  return from_file(io::GgufFile::open(path));
}

Model Model::from_file(io::GgufFile file) {
  Model m;
  m.file_ = std::make_unique<io::GgufFile>(std::move(file));
  m.cfg_ = load_model_config(*m.file_);
  m.weights_ = bind_weights(*m.file_, m.cfg_);
  return m;
}

}  // namespace strata::engine
