// A GGUF model summary for `strata inspect`: architecture, hyperparameters, tokenizer, tensor
// types, and the routed-expert layout (per-layer expert count and bytes per expert) a tiered engine
// moves. Reads only the header (no weights are touched). Tested by tests/test_inspect.cpp on every
// fixture.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/ggml_type.h"
#include "io/gguf.h"

namespace strata::engine {

struct TokenizerInfo {
  bool present = false;  // tokenizer.ggml.model exists
  std::string model;     // "gpt2", "llama", ...
  std::string pre;       // "qwen2", "" when absent
  uint64_t n_tokens = 0;
  uint64_t n_merges = 0;
  uint64_t n_control = 0;  // token_type 3
  std::optional<int64_t> bos, eos, pad, unk;
  std::string bos_text, eos_text;
  std::optional<bool> add_bos, add_eos;
  bool has_chat_template = false;
  std::string chat_family;  // "chatml", "llama3", ..., "custom"
  uint64_t chat_template_chars = 0;
  std::string chat_template_head;  // the first characters, newlines escaped
  // How chat turns run on it (the template's family as the chat tools detect it): a thinking
  // model's format (reasoning_format_name; "none"), whether its template can turn thinking off
  // (THINK=off) and whether its generation prompt opens the reasoning; the tool-call format
  // `serve` speaks (tool_format_name; "none").
  std::string reasoning = "none";
  bool no_think_switch = false;
  bool prompt_opens_reasoning = false;
  std::string tool_format = "none";
};

struct TypeStat {
  GgmlType type = GgmlType::F32;
  uint64_t count = 0;
  uint64_t bytes = 0;
};

// One slice of a routed expert: the per-expert part of a stacked ffn_{gate,up,down}_exps tensor.
struct ExpertSliceInfo {
  bool present = false;
  GgmlType type = GgmlType::F32;
  uint64_t bytes = 0;        // per expert (tensor bytes / n_expert)
  std::vector<uint64_t> ne;  // of the whole stacked tensor, e.g. {n_embd, n_ff_exp, n_expert}
};

enum class LayerKind { kMoe, kDense, kNoFfn };

struct LayerInfo {
  int index = 0;
  LayerKind kind = LayerKind::kNoFfn;
  uint32_t n_expert = 0;             // routed experts (0 for a dense layer)
  ExpertSliceInfo gate, up, down;    // the .weight slices
  uint64_t bytes_per_expert = 0;     // every *_exps tensor's per-expert share (weights + biases)
  uint64_t expert_bytes = 0;         // routed expert bytes of the layer
  uint64_t shared_expert_bytes = 0;  // ffn_*_shexp (counted as dense)
  uint64_t dense_ffn_bytes = 0;      // ffn_gate/up/down of a dense layer
  uint64_t other_bytes = 0;          // attention, norms, router ...
};

struct ModelInfo {
  std::string path;                 // a split model's first shard
  uint64_t file_size = 0;           // every shard's bytes
  std::vector<std::string> shards;  // a split model's files in order (empty: one file)
  uint32_t gguf_version = 0;
  uint64_t alignment = 0;
  uint64_t n_kv = 0;
  std::string arch;  // general.architecture ("" when absent)
  std::string name;  // general.name
  std::optional<uint64_t> file_type;

  // Every "<arch>." key in file order, prefix stripped ("block_count", "attention.head_count").
  std::vector<std::pair<std::string, io::GgufValue>> hparams;
  std::string rope_type;  // from the architecture (GGUF does not store it): "norm", "neox", "?"
  // Derived: head dim (key_length, else n_embd / n_head), MoE/dense layer counts.
  std::optional<uint64_t> head_dim;
  uint32_t n_layer = 0;  // blk.N tensors seen
  uint32_t n_moe_layers = 0;
  uint32_t n_dense_layers = 0;

  TokenizerInfo tokenizer;

  uint64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  std::vector<TypeStat> types;  // by bytes, largest first
  std::vector<LayerInfo> layers;
  uint64_t expert_bytes = 0;         // routed experts (the tiered part)
  uint64_t dense_bytes = 0;          // everything else (includes shared experts)
  uint64_t shared_expert_bytes = 0;  // part of dense_bytes
  uint32_t max_n_expert = 0;
  uint64_t max_bytes_per_expert = 0;

  // How strata runs the model, from engine::load_model_config (metadata only): one summary line
  // and the architecture-specific hyperparameters (gating, groups, shared experts, MLA ranks,
  // sliding window, RoPE scaling, ...). Empty with engine_error set when the engine would refuse
  // the file (the error's one line).
  std::string engine_summary;
  std::vector<std::pair<std::string, std::string>> arch_details;
  std::string engine_error;

  const io::GgufValue* hparam(std::string_view key) const;  // without the "<arch>." prefix
};

// Summarizes an open file. Never reads tensor data; missing keys are simply absent.
ModelInfo summarize_model(const io::GgufFile& file);
// Opens path and summarizes it; a truncated or non-GGUF file throws strata::FileError.
ModelInfo inspect_model(const std::string& path);

// The chat template family as llama.cpp's substring detection names it, or "custom".
std::string chat_template_family(const std::string& tmpl);

// Human-readable report (several lines) and the same content as JSON.
std::string format_model_info(const ModelInfo& info);
nlohmann::ordered_json model_info_json(const ModelInfo& info);

}  // namespace strata::engine
