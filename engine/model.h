// A loaded model: the GGUF mapping, its ModelConfig and its bound weights (views into the mapping).
// Exercised by tests/test_model_config.cpp and tests/test_model_forward.cpp.
#pragma once

#include <memory>
#include <string>

#include "engine/dense_arena.h"
#include "engine/model_config.h"
#include "engine/weights.h"
#include "io/gguf.h"

namespace strata::engine {

class Model {
 public:
  // Opens path, reads the config and binds every weight; throws strata::Error naming the
  // file/key/tensor on any problem.
  static Model load(const std::string& path);
  // The same from an already opened file (tests build files in memory).
  static Model from_file(io::GgufFile file);

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }
  const io::GgufFile& file() const { return *file_; }
  // REPACK for the dense weights (engine::interleave_dense): only once they are private writable
  // memory (ExpertSource's tiered path made them resident). Returns the bytes repacked.
  uint64_t interleave_dense() { return engine::interleave_dense(weights_); }
  // DENSE_ARENA (engine::arrange_dense): the decode path's dense tensors moved into one huge-page
  // arena the model owns, interleaved on the way when `interleave` (REPACK). Same precondition.
  DenseArrangement arrange_dense(bool interleave, tiers::NumaMode numa) {
    return engine::arrange_dense(weights_, interleave, numa, dense_arena_);
  }

 private:
  // unique_ptr: the views in weights_ point into the file's mapping, which must not move.
  std::unique_ptr<io::GgufFile> file_;
  ModelConfig cfg_;
  ModelWeights weights_;
  tiers::RamArena dense_arena_;  // DENSE_ARENA: where arrange_dense() put the dense tensors
};

}  // namespace strata::engine
