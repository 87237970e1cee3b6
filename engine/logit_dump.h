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

// MOER in memory: routing per layer and position. Also what the forward pass records into.
// Dense layers hold topk -1, weight 0, prob 0.
struct RoutingTrace {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t k = 0;
  uint32_t n_pos = 0;
  std::vector<int32_t> topk;  // [n_layer][n_pos][k]
  std::vector<float> weight;  // [n_layer][n_pos][k]
  std::vector<float> prob;    // [n_layer][n_pos][n_expert]

  void reset(uint32_t n_layer, uint32_t n_expert, uint32_t k);
  // Grows to hold positions [0, n_pos), keeping what is recorded (a diagnostic; it may allocate).
  void ensure_positions(uint32_t n_pos);
  int32_t* topk_at(uint32_t il, uint32_t pos) { return &topk[(size_t{il} * n_pos + pos) * k]; }
  float* weight_at(uint32_t il, uint32_t pos) { return &weight[(size_t{il} * n_pos + pos) * k]; }
  float* prob_at(uint32_t il, uint32_t pos) { return &prob[(size_t{il} * n_pos + pos) * n_expert]; }
  const int32_t* topk_at(uint32_t il, uint32_t pos) const {
    return &topk[(size_t{il} * n_pos + pos) * k];
  }
  const float* weight_at(uint32_t il, uint32_t pos) const {
    return &weight[(size_t{il} * n_pos + pos) * k];
  }
  const float* prob_at(uint32_t il, uint32_t pos) const {
    return &prob[(size_t{il} * n_pos + pos) * n_expert];
  }
};

// Readers: Error / FileError naming the file and byte offset on any inconsistency.
LogitDump read_logit_dump(const std::string& path);
RoutingTrace read_routing_dump(const std::string& path);

// Writers. logits: [tokens.size(), n_vocab].
void write_logit_dump(const std::string& path, std::span<const int32_t> tokens,
                      std::span<const float> logits, uint32_t n_vocab);
void write_routing_dump(const std::string& path, const RoutingTrace& trace);

}  // namespace strata::engine
