// MOEL (logits) and MOER (routing) dump files, byte-for-byte the layouts of
// ../shared/fixtures/README.md, with readers that reject malformed files by offset and writers that
// write PATH.tmp and rename (no partial files). Exercised by tests/test_model_forward.cpp (reads
// the llama.cpp references, round trips) and the replay CLI test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::engine {

inline constexpr uint32_t kMoelMagic = 0x4C454F4D;  // "MOEL"
inline constexpr uint32_t kMoerMagic = 0x52454F4D;  // "MOER"
inline constexpr uint32_t kDumpVersion = 1;

// MOEL: ids and one logits row per position.
struct LogitDump {
  uint32_t n_vocab = 0;
  std::vector<int32_t> tokens;  // [n_pos]
  std::vector<float> logits;    // [n_pos, n_vocab]
  uint32_t n_pos() const { return static_cast<uint32_t>(tokens.size()); }
  const float* row(uint32_t pos) const { return logits.data() + size_t{pos} * n_vocab; }
};

// MOER in memory: routing per layer and position; also what the forward pass records into.
// Positions not recorded (and dense layers) hold topk -1, weight 0, prob 0.
class RoutingTrace {
 public:
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t k = 0;
  uint32_t n_pos = 0;  // positions held

  void reset(uint32_t n_layer, uint32_t n_expert, uint32_t k);
  // Holds at least positions [0, want), keeping what is recorded; storage grows geometrically so
  // recording one decode step at a time stays linear (tracing is a diagnostic; it may allocate).
  void ensure_positions(uint32_t want);

  int32_t* topk_at(uint32_t il, uint32_t pos) { return &topk_[row(il, pos) * k]; }
  float* weight_at(uint32_t il, uint32_t pos) { return &weight_[row(il, pos) * k]; }
  float* prob_at(uint32_t il, uint32_t pos) { return &prob_[row(il, pos) * n_expert]; }
  const int32_t* topk_at(uint32_t il, uint32_t pos) const { return &topk_[row(il, pos) * k]; }
  const float* weight_at(uint32_t il, uint32_t pos) const { return &weight_[row(il, pos) * k]; }
  const float* prob_at(uint32_t il, uint32_t pos) const { return &prob_[row(il, pos) * n_expert]; }
  // Same shape and the same recorded values, bit for bit.
  bool same_as(const RoutingTrace& o) const;

 private:
  size_t row(uint32_t il, uint32_t pos) const { return size_t{il} * capacity_ + pos; }
  uint32_t capacity_ = 0;      // positions allocated per layer
  std::vector<int32_t> topk_;  // [n_layer][capacity][k]
  std::vector<float> weight_;  // [n_layer][capacity][k]
  std::vector<float> prob_;    // [n_layer][capacity][n_expert]
};

// Readers: Error / FileError naming the file and byte offset on any inconsistency.
LogitDump read_logit_dump(const std::string& path);
RoutingTrace read_routing_dump(const std::string& path);

// Writers. logits: [tokens.size(), n_vocab].
void write_logit_dump(const std::string& path, std::span<const int32_t> tokens,
                      std::span<const float> logits, uint32_t n_vocab);
void write_routing_dump(const std::string& path, const RoutingTrace& trace);

}  // namespace strata::engine
