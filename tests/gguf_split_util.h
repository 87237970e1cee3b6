// Writes a GGUF as gguf-split shards, the way llama-gguf-split --split does: PREFIX-00001-of-0000N
// .gguf …, the first file holding every metadata key, each file split.no (from 0), split.count and
// split.tensors.count, the tensors in order. Used by tests/test_gguf_split.cpp and
// tests/test_tier_invariance.cpp.
#pragma once

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace strata::testing {

struct SplitOptions {
  int n_files = 3;
  bool first_empty = false;  // llama-gguf-split --no-tensor-first-split: shard 1 holds no tensors
  // Called on each shard's writer before it is written (tests corrupt shards with it).
  std::function<void(io::GgufWriter&, int shard)> edit;
};

// Returns the shards' paths in order.
inline std::vector<std::string> write_gguf_split(const io::GgufFile& src, const std::string& prefix,
                                                 const SplitOptions& o = {}) {
  const auto& tensors = src.tensors();
  const int holders = o.first_empty ? o.n_files - 1 : o.n_files;
  const size_t per = (tensors.size() + holders - 1) / holders;
  std::vector<std::string> paths;
  size_t next = 0;
  for (int i = 0; i < o.n_files; ++i) {
    io::GgufWriter w(i == 0 ? src.alignment() : 32);
    if (i == 0)
      for (const io::GgufKv& kv : src.metadata())
        if (kv.key.rfind("split.", 0) != 0) w.set(kv.key, kv.value);
    w.set(io::kGgufSplitNo, static_cast<uint16_t>(i));
    w.set(io::kGgufSplitCount, static_cast<uint16_t>(o.n_files));
    w.set(io::kGgufSplitTensors, static_cast<int32_t>(tensors.size()));
    std::vector<const io::GgufTensorInfo*> mine;
    if (!(o.first_empty && i == 0)) {
      for (size_t k = 0; k < per && next < tensors.size(); ++k) mine.push_back(&tensors[next++]);
    }
    for (const io::GgufTensorInfo* t : mine)
      w.add_tensor(t->name, t->type,
                   std::vector<uint64_t>(t->ne.begin(), t->ne.begin() + std::max(t->n_dims, 1u)));
    if (o.edit) o.edit(w, i);
    const std::string path =
        io::gguf_split_path(prefix, static_cast<uint64_t>(i), static_cast<uint64_t>(o.n_files));
    w.write(path, [&](size_t k, std::span<std::byte> out) {
      if (k < mine.size())
        std::memcpy(out.data(), src.tensor_data(*mine[k]), out.size());
      else  // a tensor `edit` added
        std::memset(out.data(), 0, out.size());
    });
    paths.push_back(path);
  }
  return paths;
}

}  // namespace strata::testing
