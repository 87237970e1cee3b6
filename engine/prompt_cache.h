// PROMPT_CACHE: the KV cache rows of a token prefix saved to a file, so that the next `run` or
// `chat` whose prompt starts with the same tokens restores them instead of prefilling them again —
// on a model that streams its experts from SSD, a long system prompt's prefill takes minutes and
// its restore a second. The rows are the F32 values the run computed; decode and prefill give the
// same bits whatever the chunking, threads, tiers or ISA, so a restored prefix continues exactly as
// a recomputed one (tests/test_prompt_cache.cpp). The file names the model by the sidecar's
// fingerprint (tiers::model_fingerprint: size, header, sampled pages of every file) and carries a
// checksum; a file for another model, another KV geometry, or a damaged one is not used and says
// why. Format: docs/FORMATS.md "Prompt cache".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/knobs.h"

namespace strata::engine {

constexpr uint32_t kPromptCacheGpuPrefill = 1;  // written by a run with CUDA_DENSE=2's prefill
constexpr uint32_t kPromptCacheF16 = 2;         // KV_TYPE=f16 rows (IEEE halves)
constexpr uint32_t kPromptCacheQ8_0 = 4;        // KV_TYPE=q8_0 rows (Q8_0 blocks)
constexpr uint32_t kPromptCacheKvTypes = kPromptCacheF16 | kPromptCacheQ8_0;
// Keys rotated with LongRoPE's long factor set (phimoe at a context beyond the original one; the
// short set otherwise): added by save/load themselves from the Forward's context, so a file
// written at a context that picks the other set is not used.
constexpr uint32_t kPromptCacheRopeLong = 8;
// The flag of a cache of this type (0 for f32).
uint32_t prompt_cache_kv_flag(KvType t);
// The flags a run with these knobs writes and accepts.
uint32_t prompt_cache_flags(const Knobs& knobs);

// Writes positions 0 .. tokens.size() - 1 of fwd's cache (which must hold at least that many)
// and the tokens they hold to path (PATH.tmp, fsynced, renamed). flags: prompt_cache_flags' (the
// cache's rows are written as stored: the KV type's flag must match its type). Returns the bytes
// written. Error(kIo) naming the path on failure (no file left behind).
uint64_t save_prompt_cache(const std::string& path, const Forward& fwd,
                           std::span<const int32_t> tokens, uint32_t flags);

struct PromptCacheLoad {
  bool found = false;                // the file exists
  std::string ignored;               // why it was not used; "" when it was (or was absent)
  std::vector<int32_t> tokens;       // the positions restored, in order
  std::vector<int32_t> file_tokens;  // every token the file holds (when it was readable)
};

// Restores from path into fwd (reset first) the longest prefix of `want` the file holds, at most
// max_tokens positions (and n_ctx); an empty `want` restores the file's tokens (up to
// max_tokens) whatever they are. The result's tokens are what fwd's cache now holds.
PromptCacheLoad load_prompt_cache(const std::string& path, Forward& fwd,
                                  std::span<const int32_t> want, uint32_t max_tokens,
                                  uint32_t flags);

}  // namespace strata::engine
