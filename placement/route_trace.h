// Route traces (ROUTE_TRACE=FILE): for every token and MoE layer of a run, the k selected experts
// and their weights, in order, as one zstd-compressed stream with a versioned header (model
// identity as in usage stats, n_layer, n_expert and k per layer). The writer is fed by the forward
// pass (engine::ForwardOptions::route_trace), buffers a bounded amount, compresses incrementally
// and writes FILE.tmp, renamed to FILE by finish(): a crash never leaves a half trace under the
// final name. The reader refuses truncated, corrupt and foreign files with one line naming the file
// and the byte offset; usage_from_traces() turns traces into the stats file USAGE_SAVE would have
// written for the same run (`strata stats --from-trace`). Format: docs/FORMATS.md "Route trace".
// Tested by tests/test_route_trace.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "placement/usage_stats.h"

namespace strata::placement {

inline constexpr uint32_t kRouteTraceVersion = 1;

struct RouteTraceHeader {
  ModelIdentity id;
  std::vector<uint32_t> n_expert;  // [n_layer] routed experts; 0 = a dense FFN layer (no records)
  std::vector<uint32_t> k;         // [n_layer] experts selected per token; 0 for dense layers
  uint32_t n_layer() const { return static_cast<uint32_t>(n_expert.size()); }
};

// One forward chunk at one MoE layer: n tokens at positions pos0 .. pos0 + n - 1, k experts each.
struct RouteRecord {
  uint32_t layer = 0;
  uint32_t pos0 = 0;
  uint32_t n_tokens = 0;
  bool decode = false;         // a one-token chunk (what usage stats count as decode)
  std::vector<int32_t> topk;   // [n_tokens, k] expert ids, the router's order
  std::vector<float> weights;  // [n_tokens, k] their combine weights
};

class RouteTraceWriter {
 public:
  // Creates path + ".tmp" (Error(kIo) naming it when that fails) and writes the header.
  RouteTraceWriter(std::string path, RouteTraceHeader header, int level = 3);
  // finish() when not done yet; errors are printed, never thrown.
  ~RouteTraceWriter();
  RouteTraceWriter(const RouteTraceWriter&) = delete;
  RouteTraceWriter& operator=(const RouteTraceWriter&) = delete;

  // The hot path, once per (chunk, MoE layer): topk / weights are [n, k(layer)]. Copies into a
  // fixed buffer that is compressed and written when full: no allocation. Error(kIo) when the
  // write fails.
  void add(uint32_t layer, uint32_t pos0, uint32_t n, const int32_t* topk, const float* weights);
  // Writes the end record, closes the zstd frame and the file, renames it to the final path.
  void finish();

  const std::string& path() const { return path_; }
  const RouteTraceHeader& header() const { return header_; }
  uint64_t records() const { return records_; }
  uint64_t tokens() const { return tokens_; }  // tokens routed at the first MoE layer
  bool finished() const { return finished_; }

 private:
  void put(const void* data, size_t n);
  void compress(bool end);

  std::string path_;
  std::string tmp_;
  RouteTraceHeader header_;
  int first_moe_ = -1;
  std::FILE* f_ = nullptr;
  struct Ctx;
  std::unique_ptr<Ctx> z_;
  std::vector<std::byte> in_;  // fixed capacity, in_used_ bytes pending
  size_t in_used_ = 0;
  std::vector<std::byte> out_;  // ZSTD_CStreamOutSize()
  uint64_t records_ = 0;
  uint64_t tokens_ = 0;
  bool finished_ = false;
};

class RouteTraceReader {
 public:
  // Opens the file and reads its header; a bad file is Error(kBadFile) "path: at byte N: why".
  explicit RouteTraceReader(std::string path);
  ~RouteTraceReader();
  RouteTraceReader(const RouteTraceReader&) = delete;
  RouteTraceReader& operator=(const RouteTraceReader&) = delete;

  const RouteTraceHeader& header() const { return header_; }
  // The next record; false after the end record once the whole file checked out (frame complete,
  // checksum right, nothing after it). Truncation or corruption: Error(kBadFile) naming the file
  // and the compressed byte offset.
  bool next(RouteRecord& r);

 private:
  void read(void* dst, size_t n);  // exactly n decompressed bytes
  bool refill();                   // decompresses more; false at the end of the file
  [[noreturn]] void bad(const std::string& why) const;

  std::string path_;
  std::FILE* f_ = nullptr;
  struct Ctx;
  std::unique_ptr<Ctx> z_;
  std::vector<std::byte> in_;
  size_t in_pos_ = 0, in_size_ = 0;
  uint64_t file_offset_ = 0;  // compressed bytes consumed
  std::vector<std::byte> out_;
  size_t out_pos_ = 0, out_size_ = 0;
  uint64_t raw_offset_ = 0;     // decompressed bytes consumed
  bool frame_done_ = true;      // the last decompress call ended a frame
  bool flush_pending_ = false;  // the last call filled the output buffer
  bool ended_ = false;
  uint64_t records_ = 0;
  RouteTraceHeader header_;
};

// The header of a model's trace: identity, expert counts per layer (0 = dense) and top-k.
RouteTraceHeader route_trace_header(ModelIdentity id, const std::vector<int>& n_expert,
                                    const std::vector<uint32_t>& k);

// Every trace read and counted as the engine's usage hook counts (decode = one-token chunk; tokens
// at the first MoE layer), added up; traces of another model are refused unless force (then the
// shape must still match).
UsageStats usage_from_traces(const std::vector<std::string>& paths, bool force = false);

}  // namespace strata::placement
