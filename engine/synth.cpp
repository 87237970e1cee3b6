// Synthetic MoE GGUF generator, qwen3moe / deepseek2 / gpt-oss (see synth.h): presets, the BPE
// tokenizer learner, the router Monte-Carlo and the direct writers of quantized blocks. Tested by
// tests/test_synth.cpp and tests/test_arch_synth.cpp.
#include "engine/synth.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <queue>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "engine/names.h"
#include "io/check.h"
#include "kernels/quant.h"

namespace strata::engine {
namespace {

constexpr SynthPreset kPresets[] = {
    {"tiny", "4 layers, n_embd 256, 16 experts top-4 x 128, vocab 1000 (a few MB, for tests)", 4,
     256, 4, 2, 64, 16, 4, 128, 512, 1000, 2048, 1e6f, 1e-6f, GgmlType::Q4_0, GgmlType::Q4_0,
     GgmlType::Q8_0, GgmlType::Q6_K},
    {"demo", "16 layers, n_embd 1024, 64 experts top-8 x 512, vocab 8192 (~1 GB)", 16, 1024, 16, 4,
     64, 64, 8, 512, 2816, 8192, 4096, 1e6f, 1e-6f, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q8_0,
     GgmlType::Q6_K},
    {"qwen3-30b-a3b",
     "Qwen3-30B-A3B shapes: 48 layers, n_embd 2048, 32/4 heads x 128, 128 experts top-8 x 768, "
     "vocab 151936 (~17 GB)",
     48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 40960, 1e6f, 1e-6f, GgmlType::Q4_0,
     GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K},
    // DeepSeek-V3-style routing (sigmoid, groups, scale) on tiny MLA shapes, with YaRN.
    {.name = "tiny-deepseek2",
     .doc = "deepseek2 (MLA, V3-style sigmoid routing with groups, shared expert, dense lead, "
            "YaRN): 4 layers, n_embd 256, 16 experts top-4 x 128, vocab 1000 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 1,
     .head_dim = 48,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 512,
     .n_vocab = 1000,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q4_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "deepseek2",
     .q_lora = 128,
     .kv_lora = 64,
     .qk_rope = 16,
     .v_head = 32,
     .n_dense_lead = 1,
     .n_shared = 1,
     .gating = 2,
     .weights_norm = true,
     .weights_scale = 2.5f,
     .n_groups = 4,
     .n_groups_used = 2,
     .yarn_factor = 4.0f,
     .yarn_orig_ctx = 1024,
     .yarn_log_mul = 0.1f},
    // DeepSeek-V2-Lite (config.json of deepseek-ai/DeepSeek-V2-Lite): no q LoRA, softmax routing.
    {.name = "deepseek-v2-lite",
     .doc = "DeepSeek-V2-Lite shapes: 27 layers, n_embd 2048, 16 heads, MLA kv_lora 512 "
            "(128 + 64 / 128), 64 experts top-6 x 1408 + 2 shared, 1 dense lead, vocab 102400, "
            "YaRN x40 (~9 GB)",
     .n_layer = 27,
     .n_embd = 2048,
     .n_head = 16,
     .n_head_kv = 1,
     .head_dim = 192,
     .n_expert = 64,
     .n_expert_used = 6,
     .n_ff_exp = 1408,
     .n_ff = 10944,
     .n_vocab = 102400,
     .n_ctx = 163840,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q4_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "deepseek2",
     .q_lora = 0,
     .kv_lora = 512,
     .qk_rope = 64,
     .v_head = 128,
     .n_dense_lead = 1,
     .n_shared = 2,
     .gating = 1,
     .weights_norm = false,
     .weights_scale = 1.0f,
     .yarn_factor = 40.0f,
     .yarn_orig_ctx = 4096,
     .yarn_log_mul = 0.0707f},
    {.name = "tiny-gpt-oss",
     .doc = "gpt-oss (sinks, sliding window 16, biases, SwiGLU-OAI, MXFP4 experts, YaRN): "
            "4 layers, n_embd 192, 4/2 heads x 64, 32 experts top-4 x 64, vocab 1000 (tests)",
     .n_layer = 4,
     .n_embd = 192,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 32,
     .n_expert_used = 4,
     .n_ff_exp = 64,
     .n_ff = 64,
     .n_vocab = 1000,
     .n_ctx = 4096,
     .rope_freq_base = 150000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::MXFP4,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q8_0,
     .arch = "gpt-oss",
     .n_swa = 16,
     .yarn_factor = 8.0f,
     .yarn_orig_ctx = 512},
    // gpt-oss-20b (openai/gpt-oss-20b config.json), MXFP4 experts as OpenAI ships them.
    {.name = "gpt-oss-20b",
     .doc = "gpt-oss-20b shapes: 24 layers, n_embd 2880, 64/8 heads x 64, 32 experts top-4 x "
            "2880 (MXFP4), sliding window 128, vocab 201088, YaRN x32 (~12 GB)",
     .n_layer = 24,
     .n_embd = 2880,
     .n_head = 64,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_expert = 32,
     .n_expert_used = 4,
     .n_ff_exp = 2880,
     .n_ff = 2880,
     .n_vocab = 201088,
     .n_ctx = 131072,
     .rope_freq_base = 150000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::MXFP4,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q8_0,
     .arch = "gpt-oss",
     .n_swa = 128,
     .yarn_factor = 32.0f,
     .yarn_orig_ctx = 4096},
    // Qwen2-MoE: q/k/v biases, softmax routing without renormalization, one shared expert scaled
    // by sigmoid(ffn_gate_inp_shexp · x). Checked against llama.cpp (tests/test_synth_peer.cpp).
    {.name = "tiny-qwen2moe",
     .doc = "qwen2moe (q/k/v biases, sigmoid-gated shared expert x 256): 4 layers, n_embd 256, "
            "4/2 heads x 64, 16 experts top-4 x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 512,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 1e6f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "qwen2moe",
     .n_ff_shexp = 256},
    // Qwen1.5-MoE-A2.7B (config.json of Qwen/Qwen1.5-MoE-A2.7B).
    {.name = "qwen1.5-moe-a2.7b",
     .doc = "Qwen1.5-MoE-A2.7B shapes: 24 layers, n_embd 2048, 16 heads x 128, 60 experts top-4 x "
            "1408 + shared 5632 (gated), vocab 151936 (~8 GB)",
     .n_layer = 24,
     .n_embd = 2048,
     .n_head = 16,
     .n_head_kv = 16,
     .head_dim = 128,
     .n_expert = 60,
     .n_expert_used = 4,
     .n_ff_exp = 1408,
     .n_ff = 5632,
     .n_vocab = 151936,
     .n_ctx = 8192,
     .rope_freq_base = 1e6f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q4_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "qwen2moe",
     .n_ff_shexp = 5632},
    // DeepSeek-MoE (V1, deepseek-moe-16b): llama attention, a dense lead layer, shared experts.
    // Checked against llama.cpp (tests/test_synth_peer.cpp).
    {.name = "tiny-deepseek",
     .doc = "deepseek (V1: llama attention, 1 dense lead layer, 2 shared experts, softmax top-4 "
            "not renormalized): 4 layers, n_embd 256, 4/4 heads x 64, 16 experts top-4 x 128, "
            "vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 512,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "deepseek",
     .n_dense_lead = 1,
     .n_shared = 2},
    // DeepSeek-MoE-16B (config.json of deepseek-ai/deepseek-moe-16b-base).
    {.name = "deepseek-moe-16b",
     .doc = "DeepSeek-MoE-16B shapes: 28 layers, n_embd 2048, 16 heads x 128, 64 experts top-6 x "
            "1408 + 2 shared, 1 dense lead (10944), vocab 102400 (~9 GB)",
     .n_layer = 28,
     .n_embd = 2048,
     .n_head = 16,
     .n_head_kv = 16,
     .head_dim = 128,
     .n_expert = 64,
     .n_expert_used = 6,
     .n_ff_exp = 1408,
     .n_ff = 10944,
     .n_vocab = 102400,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q4_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "deepseek",
     .n_dense_lead = 1,
     .n_shared = 2},
    // DBRX: LayerNorms, one fused q/k/v matrix whose output is clamped, NEOX RoPE. The clamp is
    // tight here (1.5, DBRX's is 8) so that it cuts values. Checked against llama.cpp
    // (tests/test_synth_peer.cpp).
    {.name = "tiny-dbrx",
     .doc = "dbrx (LayerNorms, fused q/k/v clamped to 1.5, softmax top-4 renormalized): 4 layers, "
            "n_embd 256, 4/2 heads x 64, 16 experts top-4 x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 500000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "dbrx",
     .clamp_kqv = 1.5f},
    // A Mixtral-layout llama MoE built from Llama 3.1 models (mergekit-moe style): llama's graph
    // with the rope_freqs divisors the converter writes for Llama 3.1. Checked against llama.cpp
    // (tests/test_synth_peer.cpp).
    {.name = "tiny-llama3-moe",
     .doc = "llama with experts and Llama 3.1 rope_freqs (softmax top-2 renormalized): 4 layers, "
            "n_embd 256, 4/2 heads x 64, 8 experts top-2 x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 500000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "llama",
     .llama3_rope = true},
    // Grok-1: GELU experts, scores capped by 30·tanh (q and k four times larger than elsewhere,
    // so the cap bends them), RMSNorms on the attention and MoE outputs, its fixed embedding and
    // logit multipliers. Checked against llama.cpp (tests/test_synth_peer.cpp).
    {.name = "tiny-grok",
     .doc = "grok (GELU experts, 30·tanh score cap, post-attention / post-MoE norms, softmax "
            "top-2 renormalized): 4 layers, n_embd 256, 4/2 heads x 64, 8 experts top-2 x 128, "
            "vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "grok",
     .qk_gain = 4.0f},
    // Grok-2's layout at test size: a dense FFN beside the experts, the multipliers as keys, a
    // final logit cap. Checked against llama.cpp c392e50 with its grok graph brought up to
    // upstream's (scripts/peer/grok2_peer.md).
    {.name = "tiny-grok2",
     .doc = "grok as Grok-2 (dense GELU FFN x 384 beside 8 experts top-2 x 128, multipliers from "
            "keys, logit cap 8): 4 layers, n_embd 256, 4/2 heads x 64, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff = 384,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "grok",
     .qk_gain = 4.0f,
     .grok2 = true},
    {.name = "tiny-minimax-m2",
     .doc = "minimax-m2 (q/k norms over the whole projection, RoPE on 32 of 64 head dims, sigmoid "
            "routing with a selection bias, top-4 renormalized): 4 layers, n_embd 256, 4/2 heads "
            "x 64, 16 experts x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 5000000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "minimax-m2",
     .n_rot = 32},
    // MiniMax-M2's shapes (230B parameters, 10B active; ~130 GB at Q4_0: tensor tables only in
    // the tests).
    {.name = "minimax-m2",
     .doc = "MiniMax-M2 shapes (minimax-m2): 62 layers, n_embd 3072, 48/8 heads x 128 (RoPE on "
            "64), 256 experts top-8 x 1536, vocab 200064 (~130 GB)",
     .n_layer = 62,
     .n_embd = 3072,
     .n_head = 48,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 1536,
     .n_ff = 1536,
     .n_vocab = 200064,
     .n_ctx = 196608,
     .rope_freq_base = 5000000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "minimax-m2",
     .n_rot = 64},
    {.name = "tiny-dots1",
     .doc = "dots1 (per-head q/k norms, a dense lead layer, 2 shared experts, sigmoid routing with "
            "a selection bias, top-4 renormalized x 2.5): 4 layers, n_embd 256, 4/4 heads x 64 "
            "(llama.cpp's dots1 has no GQA), 16 experts x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 384,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 10000000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "dots1",
     .n_dense_lead = 1,
     .n_shared = 2,
     .gating = 2,
     .weights_norm = true,
     .weights_scale = 2.5f},
    // dots.llm1's shapes (142B parameters, 14B active; ~84 GB at Q4_0: tensor tables only in the
    // tests).
    {.name = "dots-llm1",
     .doc = "dots.llm1 shapes (dots1): 62 layers (1 dense), n_embd 4096, 32/32 heads x 128, 128 "
            "experts top-6 x 1408 + 2 shared, vocab 152064 (~84 GB)",
     .n_layer = 62,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 32,
     .head_dim = 128,
     .n_expert = 128,
     .n_expert_used = 6,
     .n_ff_exp = 1408,
     .n_ff = 10944,
     .n_vocab = 152064,
     .n_ctx = 32768,
     .rope_freq_base = 10000000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "dots1",
     .n_dense_lead = 1,
     .n_shared = 2,
     .gating = 2,
     .weights_norm = true,
     .weights_scale = 2.5f},
    {.name = "tiny-ernie4_5-moe",
     .doc = "ernie4_5-moe (llama attention, a dense lead layer, a shared expert, softmax routing "
            "with a selection bias, top-4 renormalized): 4 layers, n_embd 256, 4/2 heads x 64, 16 "
            "experts x 128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 384,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 500000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "ernie4_5-moe",
     .n_dense_lead = 1,
     .n_ff_shexp = 256},
    // ERNIE-4.5-21B-A3B's shapes (21B parameters, 3B active; ~12 GB at Q4_0: tensor tables only
    // in the tests).
    {.name = "ernie-4.5-21b-a3b",
     .doc = "ERNIE-4.5-21B-A3B shapes (ernie4_5-moe): 28 layers (1 dense), n_embd 2560, 20/4 heads "
            "x 128, 64 experts top-6 x 1536 + 2 shared, vocab 103424 (~12 GB)",
     .n_layer = 28,
     .n_embd = 2560,
     .n_head = 20,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_expert = 64,
     .n_expert_used = 6,
     .n_ff_exp = 1536,
     .n_ff = 12288,
     .n_vocab = 103424,
     .n_ctx = 131072,
     .rope_freq_base = 500000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "ernie4_5-moe",
     .n_dense_lead = 1,
     .n_ff_shexp = 3072},
    {.name = "tiny-hunyuan-moe",
     .doc =
         "hunyuan-moe (per-head q/k norms after RoPE, softmax routing top-4 renormalized beside a "
         "shared expert in every layer): 4 layers, n_embd 256, 4/2 heads x 64, 16 experts x "
         "128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 11158840.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "hunyuan-moe",
     .n_ff_shexp = 256},
    // Hunyuan-A13B's shapes (80B parameters, 13B active; ~45 GB at Q4_0: tensor tables only in
    // the tests).
    {.name = "hunyuan-a13b",
     .doc = "Hunyuan-A13B shapes (hunyuan-moe): 32 layers, n_embd 4096, 32/8 heads x 128, 64 "
            "experts top-8 x 3072 + 1 shared, vocab 128167 (~45 GB)",
     .n_layer = 32,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 64,
     .n_expert_used = 8,
     .n_ff_exp = 3072,
     .n_ff = 3072,
     .n_vocab = 128167,
     .n_ctx = 262144,
     .rope_freq_base = 11158840.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "hunyuan-moe",
     .n_ff_shexp = 3072},
    {.name = "tiny-bailingmoe2",
     .doc = "bailingmoe2 (fused q/k/v, per-head q/k norms, RoPE on 32 of 64 head dims, a dense "
            "lead layer, a shared expert, sigmoid routing in 4 groups (2 kept) with a selection "
            "bias, top-4 renormalized x 2.5): 4 layers, n_embd 256, 4/2 heads x 64, 16 experts x "
            "128, vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 384,
     .n_vocab = 512,
     .n_ctx = 8192,
     .rope_freq_base = 600000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "bailingmoe2",
     .n_dense_lead = 1,
     .n_shared = 1,
     .gating = 2,
     .weights_norm = true,
     .weights_scale = 2.5f,
     .n_groups = 4,
     .n_groups_used = 2,
     .n_rot = 32},
    // Ling-flash-2.0's shapes (100B parameters, 6B active; ~59 GB at Q4_0: tensor tables only in
    // the tests).
    {.name = "ling-flash-2.0",
     .doc = "Ling-flash-2.0 shapes (bailingmoe2): 32 layers (1 dense), n_embd 4096, 32/4 heads x "
            "128 (RoPE on 64), 256 experts top-8 x 1024 in 8 groups + 1 shared, vocab 157184 "
            "(~59 GB)",
     .n_layer = 32,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 1024,
     .n_ff = 9216,
     .n_vocab = 157184,
     .n_ctx = 32768,
     .rope_freq_base = 600000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "bailingmoe2",
     .n_dense_lead = 1,
     .n_shared = 1,
     .gating = 2,
     .weights_norm = true,
     .weights_scale = 2.5f,
     .n_groups = 8,
     .n_groups_used = 4,
     .n_rot = 64},
    // Grok-1's shapes (314B parameters, ~181 GB at Q4_0: tensor tables only in the tests).
    {.name = "grok-1",
     .doc = "Grok-1 shapes (grok): 64 layers, n_embd 6144, 48/8 heads x 128, 8 experts top-2 x "
            "32768, vocab 131072 (~181 GB)",
     .n_layer = 64,
     .n_embd = 6144,
     .n_head = 48,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 32768,
     .n_ff = 32768,
     .n_vocab = 131072,
     .n_ctx = 8192,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "grok"},
    // The same with 4 layers: Grok-1's 340 MB experts on a machine that cannot hold 64 layers.
    {.name = "grok-1-slice",
     .doc = "Grok-1 shapes, 4 of its 64 layers (grok): n_embd 6144, 48/8 heads x 128, 8 experts "
            "top-2 x 32768 (340 MB each), vocab 131072 (~12.8 GB)",
     .n_layer = 4,
     .n_embd = 6144,
     .n_head = 48,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 32768,
     .n_ff = 32768,
     .n_vocab = 131072,
     .n_ctx = 8192,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "grok"},
    // Snowflake Arctic: llama attention, a dense residual FFN (n_embd wide) on the attention's
    // output and the routed experts beside it on the layer's input. Checked against llama.cpp
    // (tests/test_synth_peer.cpp).
    {.name = "tiny-arctic",
     .doc = "arctic (dense residual FFN x 256, experts beside it on the layer input, softmax "
            "top-2 renormalized): 4 layers, n_embd 256, 4/2 heads x 64, 16 experts top-2 x 128, "
            "vocab 512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "arctic"},
    // Snowflake Arctic's shapes (480B parameters, 17B active; ~270 GB at Q4_0: tensor tables only
    // in the tests).
    {.name = "snowflake-arctic",
     .doc = "Snowflake Arctic shapes (arctic): 35 layers, n_embd 7168, 56/8 heads x 128, dense "
            "residual FFN x 7168, 128 experts top-2 x 4864, vocab 32000 (~270 GB)",
     .n_layer = 35,
     .n_embd = 7168,
     .n_head = 56,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 128,
     .n_expert_used = 2,
     .n_ff_exp = 4864,
     .n_ff = 4864,
     .n_vocab = 32000,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "arctic"},
    // Phi-3.5-MoE: biased RMSNorms, q/k/v/o and head biases, NEOX RoPE with LongRoPE's factor
    // sets (the long set here: the tests' 512 positions exceed the original 256). Checked against
    // llama.cpp (tests/test_synth_peer.cpp).
    {.name = "tiny-phimoe",
     .doc = "phimoe (biased RMSNorms, q/k/v/o and head biases, LongRoPE from 256, softmax top-2 "
            "renormalized): 4 layers, n_embd 256, 4/2 heads x 64, 16 experts top-2 x 128, vocab "
            "512 (tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "phimoe",
     .longrope_orig_ctx = 256},
    // Phi-3.5-MoE-instruct's shapes (41.9B parameters, 6.6B active). Not named "phi-3...":
    // llama.cpp gives a model whose general.name holds "phi-3" or "phi3" Phi-3's token attributes,
    // and fails on the synthetic vocabulary, which lacks its "</s>".
    {.name = "phimoe-3.5",
     .doc = "Phi-3.5-MoE shapes (phimoe): 32 layers, n_embd 4096, 32/8 heads x 128, 16 experts "
            "top-2 x 6400, vocab 32064, LongRoPE 4096 -> 131072 (~23 GB)",
     .n_layer = 32,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_expert = 16,
     .n_expert_used = 2,
     .n_ff_exp = 6400,
     .n_ff = 6400,
     .n_vocab = 32064,
     .n_ctx = 131072,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-5f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q6_K,
     .arch = "phimoe",
     .longrope_orig_ctx = 4096},
    // Granite-3.x-MoE: llama (Mixtral) with four multipliers and the embedding as the head.
    // Checked against llama.cpp (tests/test_synth_peer.cpp).
    {.name = "tiny-granitemoe",
     .doc = "granitemoe (embedding x12, residual x0.22, attention scale 1/64, logits /8, tied "
            "head): 4 layers, n_embd 256, 4/2 heads x 64, 16 experts top-4 x 128, vocab 512 "
            "(tests)",
     .n_layer = 4,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .n_ff = 128,
     .n_vocab = 512,
     .n_ctx = 4096,
     .rope_freq_base = 10000.0f,
     .rms_eps = 1e-6f,
     .expert_type = GgmlType::Q4_0,
     .attn_type = GgmlType::Q8_0,
     .embd_type = GgmlType::Q8_0,
     .output_type = GgmlType::Q8_0,
     .arch = "granitemoe",
     .embedding_scale = 12.0f,
     .residual_scale = 0.22f,
     .attention_scale = 0.015625f,
     .logit_scale = 8.0f},
};

// ---- counter-based RNG: the n-th output of a splitmix64 stream is mix(key + n * gamma) ----

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Independent stream keys for (seed, purpose, index).
uint64_t stream_key(uint64_t seed, uint64_t purpose, uint64_t index) {
  return mix64(mix64(mix64(seed + kGamma) ^ (purpose * 0xD1B54A32D192ED03ull)) + index * kGamma);
}

inline uint64_t rng_at(uint64_t key, uint64_t n) {
  return mix64(key + (n + 1) * kGamma);
}

inline double to_unit(uint64_t w) {
  return static_cast<double>(w >> 11) * 0x1.0p-53;
}  // [0, 1)

// Box-Muller from two words (the cosine branch only: one normal per pair keeps it counter-based).
inline double normal_from(uint64_t w0, uint64_t w1) {
  const double u1 = (static_cast<double>(w0 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * to_unit(w1));
}

// A sequential view of one stream, for the small design draws (targets, biases, norms).
class SeqRng {
 public:
  explicit SeqRng(uint64_t key) : key_(key) {}
  uint64_t next() { return rng_at(key_, n_++); }
  double uniform() { return to_unit(next()); }
  double normal() {
    const uint64_t a = next();
    return normal_from(a, next());
  }

 private:
  uint64_t key_;
  uint64_t n_ = 0;
};

enum Purpose : uint64_t { kTensor = 1, kRouterDesign = 2, kCalib = 3, kValid = 4, kFiller = 5 };

// ---- code tables for the quantized writers ----

// Every code distribution is symmetric around the format's zero (mean weight exactly 0): a
// nonzero mean, like uniform Q4_0 nibbles' -0.5, makes the all-ones direction an eigenvector of
// every matrix with eigenvalue ~ -0.1 sqrt(fan_in), and that mode then grows several-fold per layer
// until every token's hidden state (and route) is the same.
struct CodeTables {
  std::array<uint8_t, 256> q4_uniform;  // byte -> 4-bit code, uniform on 1..15 (values -7..7)
  std::array<uint8_t, 256> q4_gauss;    // byte -> 4-bit code, discretized N(8, 2.3^2) on 1..15
  std::vector<int8_t> q8_gauss;         // 16 bits -> int8 code, discretized N(0, 32^2)
  double q4_uniform_rms, q4_gauss_rms;  // rms of (code - 8)
  double q8_uniform_rms, q8_gauss_rms;  // rms of the int8 code
  double q6_uniform_rms;                // rms of (code - 32)
};

// Codes with probability proportional to weight(q) over [lo, hi], by inverse CDF on n_slots
// equally likely slots.
template <typename T, typename W>
void discretized(T* out, int n_slots, int lo, int hi, W weight) {
  std::vector<double> cdf;
  double sum = 0;
  for (int q = lo; q <= hi; ++q) {
    sum += weight(q);
    cdf.push_back(sum);
  }
  int q = 0;
  for (int s = 0; s < n_slots; ++s) {
    const double p = (s + 0.5) / n_slots * sum;
    while (cdf[q] < p) ++q;
    out[s] = static_cast<T>(lo + q);
  }
}

template <typename T>
double rms_around(const T& codes, double zero) {
  double s = 0;
  for (auto q : codes) s += (q - zero) * (q - zero);
  return std::sqrt(s / static_cast<double>(codes.size()));
}

const CodeTables& code_tables() {
  static const CodeTables t = [] {
    CodeTables c;
    auto gauss = [](double mu, double tau) {
      return [=](int q) { return std::exp(-(q - mu) * (q - mu) / (2 * tau * tau)); };
    };
    discretized(c.q4_uniform.data(), 256, 1, 15, [](int) { return 1.0; });
    discretized(c.q4_gauss.data(), 256, 1, 15, gauss(8.0, 2.3));
    c.q8_gauss.resize(65536);
    discretized(c.q8_gauss.data(), 65536, -127, 127, gauss(0.0, 32.0));
    c.q4_uniform_rms = rms_around(c.q4_uniform, 8.0);
    c.q4_gauss_rms = rms_around(c.q4_gauss, 8.0);
    c.q8_gauss_rms = rms_around(c.q8_gauss, 0.0);
    std::array<int, 256> q8_uniform;  // what q8_codes draws: byte - 128, with -128 -> 0
    for (int b = 0; b < 256; ++b) q8_uniform[b] = b == 0 ? 0 : b - 128;
    c.q8_uniform_rms = rms_around(q8_uniform, 0.0);
    std::array<int, 64> q6;
    for (int q = 0; q < 64; ++q) q6[q] = q;
    c.q6_uniform_rms = rms_around(q6, 32.0);
    return c;
  }();
  return t;
}

// Per-block scale jitter d = base * (0.75 + 0.5 u): real scales vary block to block.
constexpr double kJitterRms = 1.0103629710818451;  // sqrt(E[(0.75 + 0.5 u)^2]) = sqrt(49/48)
inline uint16_t jittered_scale(double base, uint64_t w) {
  return kernels::f32_to_fp16(static_cast<float>(base * (0.75 + 0.5 * to_unit(w))));
}

constexpr double kMxfp4CodeRms = 5.852349955359813;  // sqrt(mean of {0,1,2,3,4,6,8,12}^2)
constexpr double kQ4KScaleRms = 5.612486080160912;   // rms of the sub-block scales {4, 5, 6, 7}
constexpr double kQ6KScaleRms = 11.726039399558575;  // rms of the sub-block scales 8..15
// rms of the centred Q6_K / Q5_K codes: 6 (5) random bits, code 0 moved to the zero 32 (16), so
// the values -31..31 (-15..15) are symmetric with 0 twice as likely.
constexpr double kQ6KCentredRms = 18.041618552668716;  // sqrt(2 * sum_{k<=31} k^2 / 64)
constexpr double kQ5KCentredRms = 8.803408430829505;   // sqrt(2 * sum_{k<=15} k^2 / 32)
constexpr double kQ2KCodeRms = 1.118033988749895;      // rms of the codes 0..3 around 1.5
constexpr double kQ2KScaleRms = 3.6742346141747673;    // rms of the group scales {2, 3, 4, 5}
constexpr double kQ3KCodeRms = 2.345207879911715;      // rms of the values -4..3 (around 0)
constexpr double kIq4CodeRms =
    67.43886120034946;  // sqrt(mean of kIq4nlValues^2), the 16 codes uniform

// Words of randomness one block consumes (the counter stride): one for the scales, then one byte
// per 4-bit code, one or two per 8-bit code.
uint64_t words_per_block(GgmlType t, SynthDist d) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::MXFP4:
      return 1 + 4;
    case GgmlType::Q8_0:
      return 1 + (d == SynthDist::kGaussian ? 8 : 4);
    case GgmlType::Q4_K:
      return 1 + 32;
    case GgmlType::Q6_K:
      return 2 + 24;
    case GgmlType::Q5_K:
      return 1 + 20;
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      return 2 + 2;
    case GgmlType::Q4_1:
      return 1 + 4;
    case GgmlType::IQ4_XS:
      return 2 + 16;
    case GgmlType::Q2_K:
      return 1 + 8;
    case GgmlType::Q3_K:
      return 2 + 12;
    case GgmlType::F16:
    case GgmlType::F32:
      return 2;
    default:
      fail(ErrorKind::kUnsupported, "synth cannot write {} weights", ggml_type_name(t));
  }
}

// Raw random bytes, 8 per word (Q6_K's 6-bit codes, whose -0.5 mean only shifts every logit of
// the output head alike).
inline void random_bytes(uint8_t* dst, int n_bytes, uint64_t key, uint64_t n) {
  for (int i = 0; i < n_bytes; i += 8) {
    const uint64_t w = rng_at(key, n + i / 8);
    std::memcpy(dst + i, &w, 8);
  }
}

// Fills n_bytes with pairs of 4-bit codes, one random byte per code through the table.
inline void q4_bytes(uint8_t* dst, int n_bytes, uint64_t key, uint64_t n, SynthDist dist) {
  const auto& lut = dist == SynthDist::kUniform ? code_tables().q4_uniform : code_tables().q4_gauss;
  for (int i = 0; i < n_bytes; i += 4) {
    const uint64_t w = rng_at(key, n + i / 4);
    for (int j = 0; j < 4; ++j)
      dst[i + j] = static_cast<uint8_t>(lut[(w >> (16 * j)) & 0xFF] |
                                        (lut[(w >> (16 * j + 8)) & 0xFF] << 4));
  }
}

inline void q8_codes(int8_t* dst, int n, uint64_t key, uint64_t c, SynthDist dist) {
  if (dist == SynthDist::kUniform) {
    for (int i = 0; i < n; i += 8) {
      const uint64_t w = rng_at(key, c + i / 8);
      for (int j = 0; j < 8; ++j) {
        const int v = static_cast<int>((w >> (8 * j)) & 0xFF) - 128;
        dst[i + j] = static_cast<int8_t>(v == -128 ? 0 : v);
      }
    }
    return;
  }
  const auto& lut = code_tables().q8_gauss;
  for (int i = 0; i < n; i += 4) {
    const uint64_t w = rng_at(key, c + i / 4);
    for (int j = 0; j < 4; ++j) dst[i + j] = lut[(w >> (16 * j)) & 0xFFFF];
  }
}

// ggml's 12-byte packing of eight 6-bit scales and mins of Q4_K / Q5_K (get_scale_min_k4 inverts
// it).
inline void pack_k_scales(uint8_t* scales, const uint8_t* sc, const uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

// One quantized block of weights with rms sigma; n = the block's first counter.
// head: the output head (Q6_K keeps its raw uniform codes there).
void write_block(GgmlType t, SynthDist dist, double sigma, uint64_t key, uint64_t n, std::byte* dst,
                 bool head = false) {
  const CodeTables& ct = code_tables();
  const bool g = dist == SynthDist::kGaussian;
  switch (t) {
    case GgmlType::Q4_0: {
      auto* b = reinterpret_cast<kernels::BlockQ4_0*>(dst);
      const double rms = g ? ct.q4_gauss_rms : ct.q4_uniform_rms;
      b->d = jittered_scale(sigma / (rms * kJitterRms), rng_at(key, n));
      q4_bytes(b->qs, sizeof(b->qs), key, n + 1, dist);
      return;
    }
    case GgmlType::MXFP4: {
      // Uniform 4-bit codes (sign bit + e2m1 magnitude: symmetric, mean 0) under the power-of-two
      // scale 2^(e - 128) closest to sigma / rms(code values) (always uniform: the format's
      // nonlinear codes already give it heavy tails).
      auto* b = reinterpret_cast<kernels::BlockMXFP4*>(dst);
      const double e = std::round(std::log2(sigma / kMxfp4CodeRms)) + 128;
      b->e = static_cast<uint8_t>(std::clamp(e, 1.0, 254.0));
      random_bytes(b->qs, sizeof(b->qs), key, n + 1);
      return;
    }
    case GgmlType::Q8_0: {
      auto* b = reinterpret_cast<kernels::BlockQ8_0*>(dst);
      const double rms = g ? ct.q8_gauss_rms : ct.q8_uniform_rms;
      b->d = jittered_scale(sigma / (rms * kJitterRms), rng_at(key, n));
      q8_codes(b->qs, kernels::kQK, key, n + 1, dist);
      return;
    }
    case GgmlType::Q4_K: {
      // value = d * sc * q - dmin * m with dmin = d and m = 8 sc: d * sc * (q - 8), so code 8 is
      // an exact zero as in Q4_0.
      auto* b = reinterpret_cast<kernels::BlockQ4_K*>(dst);
      const uint64_t w = rng_at(key, n);
      const double rms = g ? ct.q4_gauss_rms : ct.q4_uniform_rms;
      b->d = jittered_scale(sigma / (rms * kQ4KScaleRms * kJitterRms), w);
      b->dmin = b->d;
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>(4 + ((w >> (2 * j)) & 3));
        mn[j] = static_cast<uint8_t>(8 * sc[j]);
      }
      pack_k_scales(b->scales, sc, mn);
      q4_bytes(b->qs, sizeof(b->qs), key, n + 1, dist);
      return;
    }
    case GgmlType::Q6_K: {
      // Always uniform 6-bit codes; value = d * scale[j] * (q - 32). The output head keeps them
      // raw (their -0.5 mean shifts every logit alike); elsewhere code 0 becomes 32 (symmetric).
      auto* b = reinterpret_cast<kernels::BlockQ6_K*>(dst);
      const uint64_t w = rng_at(key, n);
      for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<int8_t>(8 + ((w >> (4 * j)) & 7));
      b->d = jittered_scale(
          sigma / ((head ? ct.q6_uniform_rms : kQ6KCentredRms) * kQ6KScaleRms * kJitterRms),
          rng_at(key, n + 1));
      random_bytes(b->ql, sizeof(b->ql), key, n + 2);
      random_bytes(b->qh, sizeof(b->qh), key, n + 2 + 16);
      if (head) return;
      for (int j = 0; j < kernels::kQK_K; ++j) {
        // Element j: half h, quadrant q, lane l (as zero_element).
        const int h = j / 128, q = (j % 128) / 32, l = j % 32;
        const uint8_t& ql = b->ql[h * 64 + l + (q & 1) * 32];
        uint8_t& qh = b->qh[h * 32 + l];
        if (((q < 2 ? ql : ql >> 4) & 0xF) == 0 && ((qh >> (2 * q)) & 3) == 0)
          qh = static_cast<uint8_t>(qh | (2 << (2 * q)));
      }
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      // Q5_0: value = d * (q - 16); Q5_1: d * q + m with m = -16 d, the same values. Uniform 5-bit
      // codes with code 0 moved to 16, so the values -15..15 are symmetric (always uniform).
      uint16_t d = jittered_scale(sigma / (kQ5KCentredRms * kJitterRms), rng_at(key, n));
      uint8_t* qh = nullptr;
      uint8_t* qs = nullptr;
      if (t == GgmlType::Q5_0) {
        auto* b = reinterpret_cast<kernels::BlockQ5_0*>(dst);
        b->d = d;
        qh = b->qh;
        qs = b->qs;
      } else {
        auto* b = reinterpret_cast<kernels::BlockQ5_1*>(dst);
        b->d = d;
        b->m = kernels::f32_to_fp16(-16.0f * kernels::fp16_to_f32(d));
        qh = b->qh;
        qs = b->qs;
      }
      const auto h = static_cast<uint32_t>(rng_at(key, n + 1));
      std::memcpy(qh, &h, 4);
      random_bytes(qs, 16, key, n + 2);
      uint32_t bits = h;
      for (int j = 0; j < kernels::kQK; ++j) {
        const int low = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        if (low == 0 && ((bits >> j) & 1) == 0) bits |= 1u << j;
      }
      std::memcpy(qh, &bits, 4);
      return;
    }
    case GgmlType::Q4_1: {
      // value = d * q + m with m = -8 d: d * (q - 8), the codes as Q4_0's.
      auto* b = reinterpret_cast<kernels::BlockQ4_1*>(dst);
      const double rms = g ? ct.q4_gauss_rms : ct.q4_uniform_rms;
      b->d = jittered_scale(sigma / (rms * kJitterRms), rng_at(key, n));
      b->m = kernels::f32_to_fp16(-8.0f * kernels::fp16_to_f32(b->d));
      q4_bytes(b->qs, sizeof(b->qs), key, n + 1, dist);
      return;
    }
    case GgmlType::Q5_K: {
      // value = d * sc * q - dmin * m with dmin = 2 d and m = 8 sc: d * sc * (q - 16); uniform
      // 5-bit codes with code 0 moved to 16, so the values -15..15 are symmetric (always uniform).
      auto* b = reinterpret_cast<kernels::BlockQ5_K*>(dst);
      const uint64_t w = rng_at(key, n);
      b->d = jittered_scale(sigma / (kQ5KCentredRms * kQ4KScaleRms * kJitterRms), w);
      b->dmin = kernels::f32_to_fp16(2.0f * kernels::fp16_to_f32(b->d));
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>(4 + ((w >> (2 * j)) & 3));
        mn[j] = static_cast<uint8_t>(8 * sc[j]);
      }
      pack_k_scales(b->scales, sc, mn);
      random_bytes(b->qs, sizeof(b->qs), key, n + 1);
      random_bytes(b->qh, sizeof(b->qh), key, n + 1 + 16);
      for (int j = 0; j < kernels::kQK_K; ++j) {
        // Element j: 64-element chunk c, lane l < 64; its 5th bit is bit j / 32 of qh[j % 32].
        const int c = j / 64, l = j % 64;
        const uint8_t& q = b->qs[32 * c + l % 32];
        if (((l < 32 ? q : q >> 4) & 0xF) == 0 && ((b->qh[j % 32] >> (j / 32)) & 1) == 0)
          b->qh[j % 32] = static_cast<uint8_t>(b->qh[j % 32] | (1 << (j / 32)));
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      // Uniform codes (the table's values are not centred: their mean is -5.9) under sub-block
      // scales of random sign, +-4..7, so the weights' mean is 0: value = d * sc * table[code].
      auto* b = reinterpret_cast<kernels::BlockIQ4_XS*>(dst);
      b->d = jittered_scale(sigma / (kIq4CodeRms * kQ4KScaleRms * kJitterRms), rng_at(key, n));
      const uint64_t w = rng_at(key, n + 1);
      uint16_t sh = 0;
      std::memset(b->scales_l, 0, sizeof(b->scales_l));
      for (int j = 0; j < 8; ++j) {
        const int sc = 4 + static_cast<int>((w >> (3 * j)) & 3);
        const int field = 32 + (((w >> (3 * j + 2)) & 1) != 0 ? -sc : sc);
        b->scales_l[j / 2] =
            static_cast<uint8_t>(b->scales_l[j / 2] | ((field & 0xF) << (4 * (j % 2))));
        sh = static_cast<uint16_t>(sh | ((field >> 4) << (2 * j)));
      }
      b->scales_h = sh;
      random_bytes(b->qs, sizeof(b->qs), key, n + 2);
      return;
    }
    case GgmlType::Q2_K: {
      // Uniform codes 0..3 under group scales sc in {2..5} with mins m = 3 sc and dmin = d / 2:
      // value = d * sc * (q - 1.5), centred (always uniform).
      auto* b = reinterpret_cast<kernels::BlockQ2_K*>(dst);
      const uint64_t w = rng_at(key, n);
      b->d = jittered_scale(sigma / (kQ2KCodeRms * kQ2KScaleRms * kJitterRms), w);
      b->dmin = kernels::f32_to_fp16(kernels::fp16_to_f32(b->d) * 0.5f);
      for (int j = 0; j < 16; ++j) {
        const int sc = 2 + static_cast<int>((w >> (2 * j)) & 3);
        b->scales[j] = static_cast<uint8_t>(sc | ((3 * sc) << 4));
      }
      random_bytes(b->qs, sizeof(b->qs), key, n + 1);
      return;
    }
    case GgmlType::Q3_K: {
      // Uniform values -4..3 (2 low bits and the hmask bit) under group scales +-4..7 of random
      // sign, so the weights' mean is 0: value = d * (field - 32) * q (always uniform).
      auto* b = reinterpret_cast<kernels::BlockQ3_K*>(dst);
      b->d = jittered_scale(sigma / (kQ3KCodeRms * kQ4KScaleRms * kJitterRms), rng_at(key, n));
      const uint64_t w = rng_at(key, n + 1);
      std::memset(b->scales, 0, sizeof(b->scales));
      for (int g = 0; g < 16; ++g) {
        const int sc = 4 + static_cast<int>((w >> (3 * g)) & 3);
        const int field = 32 + (((w >> (3 * g + 2)) & 1) != 0 ? -sc : sc);
        // ggml's packing (q3_k_scale_words inverts it): the low nibble in byte g % 8 (high half
        // for g >= 8), the top 2 bits in byte 8 + g % 4 at bits 2 (g / 4).
        b->scales[g % 8] =
            static_cast<uint8_t>(b->scales[g % 8] | ((field & 0xF) << (4 * (g / 8))));
        b->scales[8 + g % 4] =
            static_cast<uint8_t>(b->scales[8 + g % 4] | ((field >> 4) << (2 * (g / 4))));
      }
      random_bytes(b->hmask, sizeof(b->hmask), key, n + 2);
      random_bytes(b->qs, sizeof(b->qs), key, n + 2 + 4);
      return;
    }
    case GgmlType::F32:
    case GgmlType::F16: {
      const float v = static_cast<float>(sigma * normal_from(rng_at(key, n), rng_at(key, n + 1)));
      if (t == GgmlType::F32)
        std::memcpy(dst, &v, 4);
      else {
        const uint16_t h = kernels::f32_to_fp16(v);
        std::memcpy(dst, &h, 2);
      }
      return;
    }
    default:
      fail(ErrorKind::kUnsupported, "synth cannot write {} weights", ggml_type_name(t));
  }
}

// Makes element j of a block an exact zero (a matrix's column for the massive dimension).
void zero_element(GgmlType t, std::byte* blk, int j) {
  switch (t) {
    case GgmlType::Q4_0: {
      auto* b = reinterpret_cast<kernels::BlockQ4_0*>(blk);
      if (j < 16)
        b->qs[j] = static_cast<uint8_t>((b->qs[j] & 0xF0) | 8);
      else
        b->qs[j - 16] = static_cast<uint8_t>((b->qs[j - 16] & 0x0F) | 0x80);
      return;
    }
    case GgmlType::Q8_0:
      reinterpret_cast<kernels::BlockQ8_0*>(blk)->qs[j] = 0;
      return;
    case GgmlType::MXFP4: {  // code 0 is +0
      auto* b = reinterpret_cast<kernels::BlockMXFP4*>(blk);
      if (j < 16)
        b->qs[j] = static_cast<uint8_t>(b->qs[j] & 0xF0);
      else
        b->qs[j - 16] = static_cast<uint8_t>(b->qs[j - 16] & 0x0F);
      return;
    }
    case GgmlType::Q4_K: {
      // Code 8 is zero (write_block's m = 8 sc). Element j: 64-element chunk c, lane l; the first
      // 32 lanes are low nibbles, the next 32 high nibbles of the same 32 bytes.
      auto* b = reinterpret_cast<kernels::BlockQ4_K*>(blk);
      const int c = j / 64, l = j % 64;
      uint8_t& q = b->qs[32 * c + l % 32];
      q = static_cast<uint8_t>(l < 32 ? (q & 0xF0) | 8 : (q & 0x0F) | 0x80);
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      // Code 16 is zero (Q5_1: write_block's m = -16 d): low nibble 0, the 5th bit set.
      const bool q5_0 = t == GgmlType::Q5_0;
      auto* b0 = reinterpret_cast<kernels::BlockQ5_0*>(blk);
      auto* b1 = reinterpret_cast<kernels::BlockQ5_1*>(blk);
      uint8_t* qs = q5_0 ? b0->qs : b1->qs;
      uint8_t* qh = q5_0 ? b0->qh : b1->qh;
      qs[j % 16] = static_cast<uint8_t>(j < 16 ? (qs[j % 16] & 0xF0) : (qs[j % 16] & 0x0F));
      qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | (1 << (j % 8)));
      return;
    }
    case GgmlType::Q4_1: {  // code 8 is zero (m = -8 d)
      auto* b = reinterpret_cast<kernels::BlockQ4_1*>(blk);
      b->qs[j % 16] =
          static_cast<uint8_t>(j < 16 ? (b->qs[j % 16] & 0xF0) | 8 : (b->qs[j % 16] & 0x0F) | 0x80);
      return;
    }
    case GgmlType::Q5_K: {
      // Code 16 is zero (write_block's dmin * m = 16 d sc): low nibble 0, the 5th bit set.
      auto* b = reinterpret_cast<kernels::BlockQ5_K*>(blk);
      const int c = j / 64, l = j % 64;
      uint8_t& q = b->qs[32 * c + l % 32];
      q = static_cast<uint8_t>(l < 32 ? (q & 0xF0) : (q & 0x0F));
      b->qh[j % 32] = static_cast<uint8_t>(b->qh[j % 32] | (1 << (j / 32)));
      return;
    }
    case GgmlType::Q6_K: {
      // Element j lives in half h, quadrant q, lane l; code 32 = low nibble 0, high bits 2.
      auto* b = reinterpret_cast<kernels::BlockQ6_K*>(blk);
      const int h = j / 128, q = (j % 128) / 32, l = j % 32;
      uint8_t& ql = b->ql[h * 64 + l + (q & 1) * 32];
      ql = static_cast<uint8_t>(q < 2 ? (ql & 0xF0) : (ql & 0x0F));
      uint8_t& qh = b->qh[h * 32 + l];
      qh = static_cast<uint8_t>((qh & ~(3 << (2 * q))) | (2 << (2 * q)));
      return;
    }
    case GgmlType::IQ4_XS: {
      // The table has no zero: the whole 32-element sub-block of element j gets scale field 32,
      // i.e. 0 (its 31 neighbours are zero too).
      auto* b = reinterpret_cast<kernels::BlockIQ4_XS*>(blk);
      const int s = j / 32;
      b->scales_l[s / 2] = static_cast<uint8_t>(b->scales_l[s / 2] & (0xF0 >> (4 * (s % 2))));
      b->scales_h = static_cast<uint16_t>((b->scales_h & ~(3u << (2 * s))) | (2u << (2 * s)));
      return;
    }
    case GgmlType::Q2_K: {
      // No code is zero (q - 1.5): the whole group of 16 of element j gets scale and min 0 (its
      // 15 neighbours are zero too).
      reinterpret_cast<kernels::BlockQ2_K*>(blk)->scales[j / 16] = 0;
      return;
    }
    case GgmlType::Q3_K: {
      // Value 0 = low bits 0 with the hmask bit set. Element j: half h, field f, lane l.
      auto* b = reinterpret_cast<kernels::BlockQ3_K*>(blk);
      const int h = j / 128, f = (j % 128) / 32, l = j % 32;
      b->qs[32 * h + l] = static_cast<uint8_t>(b->qs[32 * h + l] & ~(3 << (2 * f)));
      b->hmask[l] = static_cast<uint8_t>(b->hmask[l] | (1 << (j / 32)));
      return;
    }
    case GgmlType::F32:
      std::memset(blk + 4 * j, 0, 4);
      return;
    case GgmlType::F16:
      std::memset(blk + 2 * j, 0, 2);
      return;
    default:
      fail(ErrorKind::kUnsupported, "synth cannot zero an element of {}", ggml_type_name(t));
  }
}

// ---- tokenizer ----

// GPT-2's bytes_to_unicode order: printable Latin-1 first, then the rest mapped to U+0100...
std::array<uint8_t, 256> gpt2_byte_order() {
  std::array<uint8_t, 256> order{};
  std::array<bool, 256> printable{};
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
      printable[b] = true;
      order[n++] = static_cast<uint8_t>(b);
    }
  for (int b = 0; b < 256; ++b)
    if (!printable[b]) order[n++] = static_cast<uint8_t>(b);
  return order;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80)
    s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool is_letter(uint8_t c) {
  return std::isalpha(c) || c >= 0x80;
}
bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
bool is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_newline(uint8_t c) {
  return c == '\n' || c == '\r';
}

// Splits text into pieces the way Qwen2's pre-tokenizer regex does, for ASCII (bytes >= 0x80 count
// as letters). Approximate is fine: the merges only need to be plausible.
void pretokenize(std::string_view s, std::map<std::string, int64_t>& words) {
  size_t i = 0;
  const size_t n = s.size();
  auto u = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  while (i < n) {
    size_t j = i + 1;
    const uint8_t c = u(i);
    if (c == '\'' && i + 1 < n) {
      const char a = static_cast<char>(std::tolower(u(i + 1)));
      const char b = i + 2 < n ? static_cast<char>(std::tolower(u(i + 2))) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd')
        j = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        j = i + 3;
    }
    const bool contraction = j > i + 1;
    if (contraction) {
      // 's 't 're 've 'm 'll 'd
    } else if (is_letter(c) ||
               (!is_newline(c) && !is_digit(c) && i + 1 < n && is_letter(u(i + 1)))) {
      while (j < n && is_letter(u(j))) ++j;
    } else if (is_digit(c)) {
      // every digit is its own piece
    } else if (!is_space(c) || (c == ' ' && i + 1 < n && !is_space(u(i + 1)) &&
                                !is_letter(u(i + 1)) && !is_digit(u(i + 1)))) {
      while (j < n && !is_space(u(j)) && !is_letter(u(j)) && !is_digit(u(j))) ++j;
      while (j < n && is_newline(u(j))) ++j;
    } else {
      size_t e = i;
      while (e < n && is_space(u(e))) ++e;
      size_t last_nl = n;
      for (size_t k = i; k < e; ++k)
        if (is_newline(u(k))) last_nl = k;
      if (last_nl != n)
        j = last_nl + 1;
      else if (e < n && e - i > 1)
        j = e - 1;  // leave one space for the next word
      else
        j = e;
    }
    ++words[std::string(s.substr(i, j - i))];
    i = j;
  }
}

constexpr std::string_view kBuiltinCorpus =
    "A mixture of experts model routes every token to a few of its many feed forward networks. "
    "The router scores each expert, keeps the best ones and mixes their outputs with the "
    "normalized scores. Because only the selected experts are read for a token, the model can be "
    "much larger than the memory that is fast enough to hold it: the popular experts live in the "
    "graphics card, the others in main memory or on a solid state disk. This paragraph is the "
    "fallback text used to learn the merges of a small byte level tokenizer when the license "
    "texts of the system are not available. It is not a license and grants nothing.\n"
    "Copyright (C) 2026 the strata authors. Version 1.0, section 2(b), 3.1 and 4.\n";

std::string read_corpus(const std::string& dir) {
  namespace fs = std::filesystem;
  constexpr uint64_t kMaxBytes = 4u << 20;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!it->is_symlink(ec) && it->is_regular_file(ec)) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    text += s;
    if (text.size() >= kMaxBytes) break;
  }
  if (text.size() > kMaxBytes) text.resize(kMaxBytes);
  if (text.empty()) text = kBuiltinCorpus;
  return text;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace

const std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' "
    "}}{% endif %}";

std::span<const SynthPreset> synth_presets() {
  return kPresets;
}

const SynthPreset* find_synth_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

std::optional<SynthDist> synth_dist_from_name(std::string_view name) {
  if (name == "uniform") return SynthDist::kUniform;
  if (name == "gaussian") return SynthDist::kGaussian;
  return std::nullopt;
}

std::string_view synth_dist_name(SynthDist d) {
  switch (d) {
    case SynthDist::kUniform:
      return "uniform";
    case SynthDist::kGaussian:
      return "gaussian";
  }
  return "?";
}

std::string gpt2_byte_symbol(uint8_t b) {
  // Printable bytes stand for themselves; the n-th other byte (in byte order) becomes U+0100 + n.
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (printable) return utf8(b);
  uint32_t n = 0;
  for (uint32_t c = 0; c < b; ++c)
    n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  return utf8(256 + n);
}

BpeVocab build_bpe_vocab(uint32_t n_vocab, const std::string& corpus_dir) {
  constexpr uint32_t kControl = 3;
  STRATA_ASSERT(n_vocab >= 256 + kControl, "vocab {} too small", n_vocab);
  const uint32_t n_normal = n_vocab - kControl;

  BpeVocab v;
  const std::string text = read_corpus(corpus_dir);
  v.corpus_bytes = text.size();
  v.corpus_hash = fnv1a(text);

  // Token contents as raw bytes; symbols are made at the end.
  const auto order = gpt2_byte_order();
  std::vector<std::string> tok;
  std::unordered_map<std::string, int32_t> tok_id;
  std::array<int32_t, 256> byte_id{};
  for (int k = 0; k < 256; ++k) {
    tok.emplace_back(1, static_cast<char>(order[k]));
    tok_id[tok.back()] = k;
    byte_id[order[k]] = k;
  }
  std::vector<std::pair<int32_t, int32_t>> merges;

  std::map<std::string, int64_t> word_counts;
  pretokenize(text, word_counts);
  struct Word {
    std::vector<int32_t> s;
    int64_t f;
  };
  std::vector<Word> words;
  for (const auto& [w, f] : word_counts) {
    Word x{{}, f};
    for (char c : w) x.s.push_back(byte_id[static_cast<uint8_t>(c)]);
    if (x.s.size() > 1) words.push_back(std::move(x));
  }

  // Incremental BPE: pair counts, the words each pair occurs in (may hold stale entries) and a
  // max-heap of (count, pair) with lazy deletion. Ties go to the smaller pair key.
  auto key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };
  std::unordered_map<uint64_t, int64_t> count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (uint32_t wi = 0; wi < words.size(); ++wi)
    for (size_t k = 0; k + 1 < words[wi].s.size(); ++k) {
      const uint64_t p = key(words[wi].s[k], words[wi].s[k + 1]);
      count[p] += words[wi].f;
      where[p].push_back(wi);
    }
  std::priority_queue<std::pair<int64_t, uint64_t>> heap;
  for (const auto& [p, c] : count) heap.push({c, ~p});
  std::vector<uint32_t> stamp(words.size(), UINT32_MAX);

  while (tok.size() < n_normal && !heap.empty()) {
    const auto [c, np] = heap.top();
    heap.pop();
    const uint64_t p = ~np;
    const auto it = count.find(p);
    if (it == count.end() || it->second != c) continue;  // stale entry
    if (c < 2) break;  // the corpus has nothing left worth merging
    const int32_t a = static_cast<int32_t>(p >> 32), b = static_cast<int32_t>(p & 0xFFFFFFFF);
    std::string merged = tok[a] + tok[b];
    int32_t t;
    if (auto e = tok_id.find(merged); e != tok_id.end()) {
      t = e->second;  // another merge order already made this string
    } else {
      t = static_cast<int32_t>(tok.size());
      tok_id[merged] = t;
      tok.push_back(std::move(merged));
    }
    merges.push_back({a, b});
    std::vector<uint32_t> affected = std::move(where[p]);
    where.erase(p);
    count.erase(p);
    const uint32_t m = static_cast<uint32_t>(merges.size());
    std::vector<uint64_t> touched;
    for (uint32_t wi : affected) {
      if (stamp[wi] == m) continue;
      stamp[wi] = m;
      Word& w = words[wi];
      bool has = false;
      for (size_t k = 0; k + 1 < w.s.size() && !has; ++k) has = w.s[k] == a && w.s[k + 1] == b;
      if (!has) continue;
      for (size_t k = 0; k + 1 < w.s.size(); ++k) {
        const uint64_t q = key(w.s[k], w.s[k + 1]);
        if (q == p) continue;
        count[q] -= w.f;
        touched.push_back(q);
      }
      std::vector<int32_t> s;
      for (size_t k = 0; k < w.s.size(); ++k) {
        if (k + 1 < w.s.size() && w.s[k] == a && w.s[k + 1] == b) {
          s.push_back(t);
          ++k;
        } else {
          s.push_back(w.s[k]);
        }
      }
      w.s = std::move(s);
      for (size_t k = 0; k + 1 < w.s.size(); ++k) {
        const uint64_t q = key(w.s[k], w.s[k + 1]);
        count[q] += w.f;
        touched.push_back(q);
        if (w.s[k] == t || w.s[k + 1] == t) where[q].push_back(wi);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t q : touched) {
      const int64_t cq = count[q];
      if (cq > 0)
        heap.push({cq, ~q});
      else
        count.erase(q);
    }
  }
  v.n_learned_merges = static_cast<uint32_t>(merges.size());

  // Filler: merges of random word-like pairs (left: optional space + letters, right: letters, at
  // most 16 bytes), so every id is a real, reachable token. The stream does not depend on the seed.
  auto letters = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c));
    });
  };
  std::vector<int32_t> left, right;  // candidate ids
  auto classify = [&](int32_t id) {
    const std::string& s = tok[static_cast<size_t>(id)];
    if (letters(s)) right.push_back(id);
    if (letters(s) || (s.size() > 1 && s[0] == ' ' && letters(std::string_view(s).substr(1))))
      left.push_back(id);
  };
  for (int32_t id = 0; id < static_cast<int32_t>(tok.size()); ++id) classify(id);
  SeqRng rng(stream_key(0, kFiller, n_vocab));
  for (uint64_t attempts = 0; tok.size() < n_normal; ++attempts) {
    STRATA_ASSERT(attempts < 100ull * n_vocab, "filler merges stuck at {}", tok.size());
    const int32_t a = left[rng.next() % left.size()];
    const int32_t b = right[rng.next() % right.size()];
    if (tok[a].size() + tok[b].size() > 16) continue;
    std::string merged = tok[a] + tok[b];
    if (tok_id.count(merged)) continue;
    const auto id = static_cast<int32_t>(tok.size());
    tok_id[merged] = id;
    tok.push_back(std::move(merged));
    merges.push_back({a, b});
    classify(id);
  }

  std::array<std::string, 256> sym;
  for (int b = 0; b < 256; ++b) sym[b] = gpt2_byte_symbol(static_cast<uint8_t>(b));
  auto symbols = [&](const std::string& raw) {
    std::string s;
    for (char c : raw) s += sym[static_cast<uint8_t>(c)];
    return s;
  };
  for (const auto& t : tok) v.tokens.push_back(symbols(t));
  v.token_type.assign(v.tokens.size(), 1);
  for (const auto& [a, b] : merges) v.merges.push_back(v.tokens[a] + " " + v.tokens[b]);
  v.bos = v.pad = static_cast<uint32_t>(v.tokens.size());
  for (const char* c : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(c);
    v.token_type.push_back(3);
  }
  v.eos = n_vocab - 1;
  return v;
}

// ---- routing ----

double gini(std::span<const uint64_t> counts) {
  std::vector<uint64_t> c(counts.begin(), counts.end());
  std::sort(c.begin(), c.end());
  double sum = 0, weighted = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    sum += static_cast<double>(c[i]);
    weighted += static_cast<double>(i + 1) * static_cast<double>(c[i]);
  }
  if (sum == 0 || c.empty()) return 0;
  const double n = static_cast<double>(c.size());
  return 2 * weighted / (n * sum) - (n + 1) / n;
}

namespace {

// Adds one token's top-k of logits [n_expert] to counts.
void count_top_k(const float* logits, uint32_t n_expert, uint32_t k, uint64_t* counts) {
  std::array<float, 64> best_v;
  std::array<uint32_t, 64> best_i;
  STRATA_ASSERT(k <= best_v.size(), "top-{} too large", k);
  uint32_t n = 0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const float v = logits[e];
    if (n == k && v <= best_v[k - 1]) continue;
    uint32_t pos = n < k ? n++ : k - 1;
    while (pos > 0 && best_v[pos - 1] < v) {
      best_v[pos] = best_v[pos - 1];
      best_i[pos] = best_i[pos - 1];
      --pos;
    }
    best_v[pos] = v;
    best_i[pos] = e;
  }
  for (uint32_t j = 0; j < n; ++j) ++counts[best_i[j]];
}

// The hidden-state statistics RouterSim describes: the RMS of h and the normalized massive value.
struct HiddenStats {
  double rms, x_massive;
};
HiddenStats hidden_stats(const RouterSim& sim) {
  const double n = sim.n_embd;
  const double ms =
      (sim.resid_std * sim.resid_std * (n - 1) + double(sim.massive_value) * sim.massive_value) / n;
  const double rms = std::sqrt(ms + sim.rms_eps);
  return {rms, sim.massive_value / rms};
}

// Routing counts of the factored router: logit_e = norm_e * sx * z_te + alpha * b_e * xm, with z
// [n_tokens][n_expert] standard normals shared across calls (common random numbers make the Gini
// a smooth, almost monotone function of alpha).
double factored_gini(const std::vector<float>& z, uint32_t n_tokens, uint32_t n_expert, uint32_t k,
                     const std::vector<float>& norm, const std::vector<float>& bias, double sx,
                     double xm, double alpha) {
  std::vector<uint64_t> counts(n_expert, 0);
  std::vector<float> logits(n_expert);
  for (uint32_t t = 0; t < n_tokens; ++t) {
    for (uint32_t e = 0; e < n_expert; ++e)
      logits[e] =
          static_cast<float>(norm[e] * sx * z[size_t(t) * n_expert + e] + alpha * bias[e] * xm);
    count_top_k(logits.data(), n_expert, k, counts.data());
  }
  return gini(counts);
}

std::vector<float> normals(uint64_t key, size_t n) {
  std::vector<float> z(n);
  for (size_t i = 0; i < n; ++i)
    z[i] = static_cast<float>(normal_from(rng_at(key, 2 * i), rng_at(key, 2 * i + 1)));
  return z;
}

// Attention biases of the qwen2moe presets: std of their N(0, sigma^2) values.
constexpr double kBiasSigma = 0.5;
constexpr double kSelectionBiasSigma = 0.05;

// Variance the residual stream gains over all layers, beyond the embedding's (see SynthModel).
constexpr double kResidGrowth = 0.2;

// Norm weights (attn_norm, ffn_norm, output_norm, q/k norms): U[0.9, 1.1], exactly 1 at the
// massive dimension. E[g^2] over the others:
constexpr double kNormMeanSquare = 1.0 + 0.01 / 3.0;

}  // namespace

std::vector<uint64_t> simulate_router(const RouterSim& sim, std::span<const float> router,
                                      std::span<const float> ffn_norm, uint32_t n_tokens,
                                      uint64_t seed) {
  STRATA_ASSERT(router.size() == size_t(sim.n_embd) * sim.n_expert, "router size {}",
                router.size());
  STRATA_ASSERT(ffn_norm.size() == sim.n_embd, "ffn_norm size {}", ffn_norm.size());
  const uint64_t key = stream_key(seed, kValid, 0x51A);
  std::vector<uint64_t> counts(sim.n_expert, 0);
  std::vector<float> x(sim.n_embd), logits(sim.n_expert);
  for (uint32_t t = 0; t < n_tokens; ++t) {
    double ss = 0;
    for (uint32_t j = 0; j < sim.n_embd; ++j) {
      const uint64_t c = 2 * (uint64_t(t) * sim.n_embd + j);
      x[j] =
          j == sim.massive_dim
              ? sim.massive_value
              : static_cast<float>(sim.resid_std * normal_from(rng_at(key, c), rng_at(key, c + 1)));
      ss += double(x[j]) * x[j];
    }
    const double inv = 1.0 / std::sqrt(ss / sim.n_embd + sim.rms_eps);
    for (uint32_t j = 0; j < sim.n_embd; ++j) x[j] = static_cast<float>(x[j] * inv * ffn_norm[j]);
    for (uint32_t e = 0; e < sim.n_expert; ++e) {
      double acc = 0;
      const float* row = router.data() + size_t(e) * sim.n_embd;
      for (uint32_t j = 0; j < sim.n_embd; ++j) acc += double(row[j]) * x[j];
      logits[e] = static_cast<float>(acc);
    }
    count_top_k(logits.data(), sim.n_expert, sim.n_expert_used, counts.data());
  }
  return counts;
}

// ---- the model ----

namespace {

uint32_t file_type_of(GgmlType expert_type) {
  switch (expert_type) {
    case GgmlType::Q4_0:
      return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case GgmlType::Q8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case GgmlType::Q4_K:
      return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case GgmlType::MXFP4:
      return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    case GgmlType::IQ4_XS:
      return 30;  // LLAMA_FTYPE_MOSTLY_IQ4_XS
    case GgmlType::Q2_K:
      return 10;  // LLAMA_FTYPE_MOSTLY_Q2_K
    case GgmlType::Q3_K:
      return 12;  // LLAMA_FTYPE_MOSTLY_Q3_K_M
    case GgmlType::Q5_K:
      return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
    case GgmlType::Q6_K:
      return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    case GgmlType::Q4_1:
      return 3;  // LLAMA_FTYPE_MOSTLY_Q4_1
    case GgmlType::Q5_0:
      return 8;  // LLAMA_FTYPE_MOSTLY_Q5_0
    case GgmlType::Q5_1:
      return 9;  // LLAMA_FTYPE_MOSTLY_Q5_1
    case GgmlType::F32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case GgmlType::F16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    default:
      fail(ErrorKind::kUnsupported,
           "synth: expert type {} (use Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, "
           "IQ4_XS, Q2_K, Q3_K, F16 or F32)",
           ggml_type_name(expert_type));
  }
}

// A weight type for a matrix whose rows have ne0 elements: K-quants need ne0 % 256 == 0; where
// they do not fit, fall back to Q4_0 (llama-quantize falls back similarly).
GgmlType fit_type(GgmlType t, uint64_t ne0) {
  return ne0 % ggml_type_info(t).block_size == 0 ? t : GgmlType::Q4_0;
}

}  // namespace

SynthModel::SynthModel(const SynthOptions& options)
    : opt_(options), expert_type_(options.expert_type.value_or(options.preset.expert_type)) {
  // An unquantized expert type makes the whole model unquantized (exact peer comparisons).
  if (expert_type_ == GgmlType::F32 || expert_type_ == GgmlType::F16)
    opt_.preset.attn_type = opt_.preset.embd_type = opt_.preset.output_type = expert_type_;
  const SynthPreset& p = opt_.preset;
  const uint64_t seed = opt_.seed;
  STRATA_ASSERT(p.n_embd > kMassiveDim && p.n_embd % 32 == 0, "n_embd {}", p.n_embd);
  const std::string arch(p.arch);
  const bool ds2 = arch == "deepseek2", oss = arch == "gpt-oss", q2 = arch == "qwen2moe";
  const bool granite = arch == "granitemoe", ds1 = arch == "deepseek", dbrx = arch == "dbrx";
  const bool phi = arch == "phimoe", llama = arch == "llama", arctic = arch == "arctic";
  const bool grok = arch == "grok", minimax = arch == "minimax-m2", dots = arch == "dots1";
  const bool ling = arch == "bailingmoe2", ernie = arch == "ernie4_5-moe";
  const bool hunyuan = arch == "hunyuan-moe";
  if (!ds2 && !oss && !q2 && !granite && !ds1 && !dbrx && !phi && !llama && !arctic && !grok &&
      !minimax && !dots && !ling && !ernie && !hunyuan && arch != "qwen3moe")
    fail(ErrorKind::kUnsupported,
         "synth: architecture '{}' (qwen3moe, deepseek2, gpt-oss, qwen2moe, granitemoe, deepseek, "
         "dbrx, phimoe, llama, arctic, grok, minimax-m2, dots1, bailingmoe2, ernie4_5-moe, "
         "hunyuan-moe)",
         arch);
  STRATA_ASSERT(p.n_expert_used <= p.n_expert && p.n_expert_used <= 64, "top-{} of {}",
                p.n_expert_used, p.n_expert);
  const uint32_t file_type = file_type_of(expert_type_);
  for (GgmlType t : {p.attn_type, p.output_type, p.embd_type}) (void)words_per_block(t, opt_.dist);
  if (p.embd_type != GgmlType::Q8_0 && p.embd_type != GgmlType::F32 && p.embd_type != GgmlType::F16)
    fail(ErrorKind::kUnsupported, "synth: embedding type {} (use Q8_0, F16 or F32)",
         ggml_type_name(p.embd_type));
  if (p.output_type == GgmlType::Q4_K)
    fail(ErrorKind::kUnsupported, "synth: output type Q4_K is not supported");

  vocab_ = build_bpe_vocab(p.n_vocab, opt_.corpus_dir);

  // Router design and calibration, per layer.
  constexpr uint32_t kCalibTokens = 2048, kValidTokens = 4096;
  const double embd_std = code_tables().q8_gauss_rms / 2.0 / 16.0;
  routing_.resize(p.n_layer);
  router_bias_.resize(p.n_layer);
  router_norm_.resize(p.n_layer);
  for (uint32_t l = 0; l < p.n_layer; ++l) {
    SeqRng rng(stream_key(seed, kRouterDesign, l));
    SynthLayerRouting& r = routing_[l];
    r.gini_target = static_cast<float>(0.5 + 0.2 * rng.uniform());
    auto& bias = router_bias_[l];
    auto& norm = router_norm_[l];
    for (uint32_t e = 0; e < p.n_expert; ++e) {
      bias.push_back(static_cast<float>(rng.normal()));
      norm.push_back(static_cast<float>(std::exp(0.3 * rng.normal())));
    }
    // The residual writers are scaled by 1/sqrt(2 n_layer), so the stream's variance grows from
    // the embedding's by well under 1 over the whole model: a float forward pass of these weights
    // measures ~0.15-0.2 (attention averages its values, and the top-k weights sum to 1).
    r.resid_std =
        static_cast<float>(std::sqrt(embd_std * embd_std + kResidGrowth * (l + 0.5) / p.n_layer));
    RouterSim sim{p.n_embd,      p.n_expert,  p.n_expert_used, kMassiveDim,
                  kMassiveValue, r.resid_std, p.rms_eps};
    const HiddenStats hs = hidden_stats(sim);
    const double sx = r.resid_std / hs.rms * std::sqrt(kNormMeanSquare);
    const auto z = normals(stream_key(seed, kCalib, l), size_t(kCalibTokens) * p.n_expert);
    auto g = [&](double alpha) {
      return factored_gini(z, kCalibTokens, p.n_expert, p.n_expert_used, norm, bias, sx,
                           hs.x_massive, alpha);
    };
    double lo = 0, hi = 0.5;
    if (g(0) >= r.gini_target) {
      hi = 0;  // the row norms alone already skew this layer enough
    } else {
      while (g(hi) < r.gini_target && hi < 1e4) hi *= 2;
      for (int it = 0; it < 25; ++it) {
        const double mid = 0.5 * (lo + hi);
        (g(mid) < r.gini_target ? lo : hi) = mid;
      }
    }
    r.alpha = static_cast<float>(0.5 * (lo + hi));
    const auto zv = normals(stream_key(seed, kValid, l), size_t(kValidTokens) * p.n_expert);
    r.gini_mc = static_cast<float>(factored_gini(zv, kValidTokens, p.n_expert, p.n_expert_used,
                                                 norm, bias, sx, hs.x_massive, r.alpha));
  }

  // Metadata: what llama.cpp's loader for the architecture reads, the tokenizer, then our own
  // record.
  auto key = [&](Key k) { return key_name(k, arch); };
  io::GgufWriter& w = writer_;
  w.set("general.architecture", arch);
  w.set("general.name", fmt::format("strata-synth-{}", p.name));
  w.set("general.description",
        fmt::format("synthetic random-weight MoE (not a trained model): strata synth --preset {} "
                    "--seed {} --dist {}",
                    p.name, seed, synth_dist_name(opt_.dist)));
  w.set("general.file_type", file_type);
  w.set("general.quantization_version", uint32_t{2});
  w.set("general.alignment", uint32_t{32});
  w.set(key(Key::kBlockCount), p.n_layer);
  w.set(key(Key::kContextLength), p.n_ctx);
  w.set(key(Key::kEmbeddingLength), p.n_embd);
  w.set(key(Key::kFeedForwardLength), p.n_ff);
  w.set(key(Key::kHeadCount), p.n_head);
  if (ds2) {
    // MLA as the current converter writes it: the cache row [c ; k_pe] is one "kv head".
    w.set(key(Key::kHeadCountKv), uint32_t{1});
    w.set(key(Key::kKeyLength), p.kv_lora + p.qk_rope);
    w.set(key(Key::kValueLength), p.kv_lora);
    w.set(key(Key::kKeyLengthMla), p.head_dim);
    w.set(key(Key::kValueLengthMla), p.v_head);
    w.set(key(Key::kRopeDimensionCount), p.qk_rope);
    if (p.q_lora > 0) w.set(key(Key::kQLoraRank), p.q_lora);
    w.set(key(Key::kKvLoraRank), p.kv_lora);
  } else {
    w.set(key(Key::kHeadCountKv), p.n_head_kv);
    w.set(key(Key::kKeyLength), p.head_dim);
    w.set(key(Key::kValueLength), p.head_dim);
  }
  w.set(key(Key::kRopeFreqBase), p.rope_freq_base);
  if (dbrx) {
    w.set(key(Key::kLayerNormEps), p.rms_eps);
    w.set(key(Key::kClampKqv), p.clamp_kqv);
  } else {
    w.set(key(Key::kRmsEps), p.rms_eps);
  }
  w.set(key(Key::kExpertCount), p.n_expert);
  w.set(key(Key::kExpertUsedCount), p.n_expert_used);
  // granite, dbrx, phimoe, llama (Mixtral), arctic and grok: the experts are feed_forward_length
  // (n_ff) wide.
  if ((!granite && !dbrx && !phi && !llama && !arctic && !grok) || p.grok2)
    w.set(key(Key::kExpertFeedForwardLength), p.n_ff_exp);
  if (p.grok2) {
    w.set(key(Key::kEmbeddingScale), 90.5f);
    w.set(key(Key::kLogitScale), 0.5f);
    w.set(key(Key::kAttentionOutputScale), 0.08f);
    w.set(key(Key::kAttnLogitSoftcapping), 30.0f);
    w.set(key(Key::kFinalLogitSoftcapping), 8.0f);
  }
  if (ds2) {
    w.set(key(Key::kVocabSize), p.n_vocab);
    w.set(key(Key::kLeadingDenseBlockCount), p.n_dense_lead);
    w.set(key(Key::kExpertSharedCount), p.n_shared);
    w.set(key(Key::kExpertWeightsScale), p.weights_scale);
    w.set(key(Key::kExpertWeightsNorm), p.weights_norm);
    w.set(key(Key::kExpertGatingFunc), p.gating);
    if (p.n_groups > 1) {
      w.set(key(Key::kExpertGroupCount), p.n_groups);
      w.set(key(Key::kExpertGroupUsedCount), p.n_groups_used);
    }
  }
  if (ds1) {  // the keys llama.cpp's deepseek loader requires
    w.set(key(Key::kLeadingDenseBlockCount), p.n_dense_lead);
    w.set(key(Key::kExpertSharedCount), p.n_shared);
    w.set(key(Key::kExpertWeightsScale), 1.0f);
  }
  if (oss) w.set(key(Key::kSlidingWindow), p.n_swa);
  if (p.n_rot > 0) w.set(key(Key::kRopeDimensionCount), p.n_rot);
  if (dots || ling) {
    w.set(key(Key::kLeadingDenseBlockCount), p.n_dense_lead);
    w.set(key(Key::kExpertSharedCount), p.n_shared);
    w.set(key(Key::kExpertWeightsScale), p.weights_scale);
    w.set(key(Key::kExpertWeightsNorm), p.weights_norm);
    w.set(key(Key::kExpertGatingFunc), p.gating);
    if (p.n_groups > 1) {
      w.set(key(Key::kExpertGroupCount), p.n_groups);
      w.set(key(Key::kExpertGroupUsedCount), p.n_groups_used);
    }
  }
  if (minimax) w.set(key(Key::kExpertGatingFunc), uint32_t{2});
  if (ernie) {  // what llama.cpp's converter writes for ERNIE 4.5
    w.set(key(Key::kLeadingDenseBlockCount), p.n_dense_lead);
    w.set(key(Key::kInterleaveMoeLayerStep), uint32_t{1});
    if (p.n_ff_shexp > 0) w.set(key(Key::kExpertSharedFeedForwardLength), p.n_ff_shexp);
  }
  if (hunyuan) w.set(key(Key::kExpertSharedFeedForwardLength), p.n_ff_shexp);
  if (phi) {
    // What llama.cpp's converter writes for a LongRoPE model: the original context, the
    // attention factor sqrt(1 + ln(scale) / ln(original)), and a sliding window as large as the
    // context that llama.cpp's phimoe loader does not read.
    const double scale = double(p.n_ctx) / p.longrope_orig_ctx;
    w.set(key(Key::kRopeScalingOrigCtx), p.longrope_orig_ctx);
    w.set(key(Key::kRopeScalingAttnFactor),
          static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(p.longrope_orig_ctx))));
    w.set(key(Key::kSlidingWindow), p.n_ctx);
  }
  if (q2) w.set(key(Key::kExpertSharedFeedForwardLength), p.n_ff_shexp);
  if (granite) {
    w.set(key(Key::kEmbeddingScale), p.embedding_scale);
    w.set(key(Key::kResidualScale), p.residual_scale);
    w.set(key(Key::kAttentionScale), p.attention_scale);
    w.set(key(Key::kLogitScale), p.logit_scale);
  }
  if (p.yarn_factor > 1) {
    w.set(key(Key::kRopeScalingType), "yarn");
    w.set(key(Key::kRopeScalingFactor), p.yarn_factor);
    w.set(key(Key::kRopeScalingOrigCtx), p.yarn_orig_ctx);
    if (p.yarn_log_mul != 0) w.set(key(Key::kRopeScalingYarnLogMul), p.yarn_log_mul);
  }
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "qwen2");
  w.set(key(Key::kTokenizerTokens), io::gguf_string_array(vocab_.tokens));
  w.set("tokenizer.ggml.token_type", io::gguf_i32_array(vocab_.token_type));
  w.set("tokenizer.ggml.merges", io::gguf_string_array(vocab_.merges));
  w.set("tokenizer.ggml.bos_token_id", vocab_.bos);
  w.set("tokenizer.ggml.eos_token_id", vocab_.eos);
  w.set("tokenizer.ggml.padding_token_id", vocab_.pad);
  w.set("tokenizer.ggml.add_bos_token", false);
  w.set("tokenizer.chat_template", std::string(kChatMlTemplate));
  std::vector<float> targets, alphas, mc;
  for (const auto& r : routing_) {
    targets.push_back(r.gini_target);
    alphas.push_back(r.alpha);
    mc.push_back(r.gini_mc);
  }
  w.set("strata.synth.version", uint32_t{1});
  w.set("strata.synth.preset", std::string(p.name));
  w.set("strata.synth.seed", seed);
  w.set("strata.synth.dist", std::string(synth_dist_name(opt_.dist)));
  w.set("strata.synth.massive_dim", kMassiveDim);
  w.set("strata.synth.massive_value", kMassiveValue);
  w.set("strata.synth.gini_target", io::gguf_f32_array(targets));
  w.set("strata.synth.router_alpha", io::gguf_f32_array(alphas));
  w.set("strata.synth.gini_mc", io::gguf_f32_array(mc));
  w.set("strata.synth.tokenizer_learned_merges", vocab_.n_learned_merges);
  w.set("strata.synth.corpus_bytes", vocab_.corpus_bytes);
  w.set("strata.synth.corpus_fnv1a", fmt::format("{:016x}", vocab_.corpus_hash));

  // Tensors, in llama.cpp's usual order.
  const uint64_t n_q = uint64_t(p.n_head) * p.head_dim, n_kv = uint64_t(p.n_head_kv) * p.head_dim;
  const double resid_scale = 1.0 / std::sqrt(2.0 * p.n_layer);
  auto add = [&](TensorId id, int layer, GgmlType t, std::vector<uint64_t> ne, Role role,
                 double sigma) {
    w.add_tensor(tensor_name(id, layer), t, std::move(ne));
    recipes_.push_back({role, layer, static_cast<float>(sigma)});
  };
  auto in_sigma = [](uint64_t fan_in) { return 1.0 / std::sqrt(double(fan_in)); };
  add(TensorId::kTokenEmbd, -1, p.embd_type, {p.n_embd, p.n_vocab}, Role::kEmbd, 1.0);
  if (p.llama3_rope)
    add(TensorId::kRopeFreqs, -1, GgmlType::F32, {p.head_dim / 2}, Role::kRopeLlama3, 0);
  if (phi) {
    add(TensorId::kRopeFactorsLong, -1, GgmlType::F32, {p.head_dim / 2}, Role::kRopeLong, 0);
    add(TensorId::kRopeFactorsShort, -1, GgmlType::F32, {p.head_dim / 2}, Role::kRopeShort, 0);
  }
  // phimoe's norms have biases: small, so the routers stay near their calibration.
  constexpr double kNormBiasSigma = 0.05;
  const GgmlType at = p.attn_type;
  const GgmlType et = expert_type_;
  // One FFN stack: a dense FFN / shared expert (n_expert 0: 2-D) or the routed experts (3-D).
  auto add_ffn = [&](int l, TensorId gate, TensorId up, TensorId down, uint64_t n_ff,
                     uint64_t n_exp, GgmlType t) {
    std::vector<uint64_t> in_ne = {p.n_embd, n_ff}, out_ne = {n_ff, p.n_embd};
    if (n_exp > 0) {
      in_ne.push_back(n_exp);
      out_ne.push_back(n_exp);
    }
    add(gate, l, fit_type(t, p.n_embd), in_ne, Role::kIn, in_sigma(p.n_embd));
    add(up, l, fit_type(t, p.n_embd), in_ne, Role::kIn, in_sigma(p.n_embd));
    add(down, l, fit_type(t, n_ff), out_ne, Role::kResidualOut, in_sigma(n_ff) * resid_scale);
  };
  for (int l = 0; l < int(p.n_layer); ++l) {
    add(TensorId::kAttnNorm, l, GgmlType::F32, {p.n_embd}, Role::kNorm, 0);
    if (phi)
      add(TensorId::kAttnNormBias, l, GgmlType::F32, {p.n_embd}, Role::kBias, kNormBiasSigma);
    if (ds2) {
      // MLA. attn_q_b / attn_k_b / attn_v_b read LoRA outputs, not the residual stream; their
      // zeroed massive-dimension column is harmless there.
      const uint64_t nope = p.head_dim - p.qk_rope;
      const uint64_t n_q_mla = uint64_t(p.n_head) * p.head_dim;
      if (p.q_lora > 0) {
        add(TensorId::kAttnQA, l, fit_type(at, p.n_embd), {p.n_embd, p.q_lora}, Role::kIn,
            in_sigma(p.n_embd));
        add(TensorId::kAttnQANorm, l, GgmlType::F32, {p.q_lora}, Role::kNorm, 0);
        add(TensorId::kAttnQB, l, fit_type(at, p.q_lora), {p.q_lora, n_q_mla}, Role::kIn,
            in_sigma(p.q_lora));
      } else {
        add(TensorId::kAttnQ, l, fit_type(at, p.n_embd), {p.n_embd, n_q_mla}, Role::kIn,
            in_sigma(p.n_embd));
      }
      add(TensorId::kAttnKvAMqa, l, fit_type(at, p.n_embd), {p.n_embd, p.kv_lora + p.qk_rope},
          Role::kIn, in_sigma(p.n_embd));
      add(TensorId::kAttnKvANorm, l, GgmlType::F32, {p.kv_lora}, Role::kNorm, 0);
      add(TensorId::kAttnKB, l, fit_type(at, nope), {nope, p.kv_lora, p.n_head}, Role::kIn,
          in_sigma(nope));
      add(TensorId::kAttnVB, l, fit_type(at, p.kv_lora), {p.kv_lora, p.v_head, p.n_head}, Role::kIn,
          in_sigma(p.kv_lora));
      const uint64_t n_v = uint64_t(p.n_head) * p.v_head;
      add(TensorId::kAttnOut, l, fit_type(at, n_v), {n_v, p.n_embd}, Role::kResidualOut,
          in_sigma(n_v) * resid_scale);
    } else {
      if (dbrx || ling) {
        add(TensorId::kAttnQkv, l, fit_type(at, p.n_embd), {p.n_embd, n_q + 2 * n_kv}, Role::kIn,
            in_sigma(p.n_embd));
      } else {
        add(TensorId::kAttnQ, l, fit_type(at, p.n_embd), {p.n_embd, n_q}, Role::kIn,
            in_sigma(p.n_embd) * p.qk_gain);
        add(TensorId::kAttnK, l, fit_type(at, p.n_embd), {p.n_embd, n_kv}, Role::kIn,
            in_sigma(p.n_embd) * p.qk_gain);
        add(TensorId::kAttnV, l, fit_type(at, p.n_embd), {p.n_embd, n_kv}, Role::kIn,
            in_sigma(p.n_embd));
      }
      if (oss) {
        add(TensorId::kAttnQBias, l, GgmlType::F32, {n_q}, Role::kZero, 0);
        add(TensorId::kAttnKBias, l, GgmlType::F32, {n_kv}, Role::kZero, 0);
        add(TensorId::kAttnVBias, l, GgmlType::F32, {n_kv}, Role::kZero, 0);
      } else if (q2 || phi) {  // nonzero, so a peer check sees them
        add(TensorId::kAttnQBias, l, GgmlType::F32, {n_q}, Role::kBias, kBiasSigma);
        add(TensorId::kAttnKBias, l, GgmlType::F32, {n_kv}, Role::kBias, kBiasSigma);
        add(TensorId::kAttnVBias, l, GgmlType::F32, {n_kv}, Role::kBias, kBiasSigma);
      } else if (minimax) {  // over the whole projection
        add(TensorId::kAttnQNorm, l, GgmlType::F32, {n_q}, Role::kNorm, 0);
        add(TensorId::kAttnKNorm, l, GgmlType::F32, {n_kv}, Role::kNorm, 0);
      } else if (!granite && !ds1 && !dbrx && !llama && !arctic && !grok && !ernie) {
        add(TensorId::kAttnQNorm, l, GgmlType::F32, {p.head_dim}, Role::kNorm, 0);
        add(TensorId::kAttnKNorm, l, GgmlType::F32, {p.head_dim}, Role::kNorm, 0);
      }
      add(TensorId::kAttnOut, l, fit_type(at, n_q), {n_q, p.n_embd}, Role::kResidualOut,
          in_sigma(n_q) * resid_scale);
      if (phi)
        add(TensorId::kAttnOutBias, l, GgmlType::F32, {p.n_embd}, Role::kBias, kNormBiasSigma);
      if (oss) {
        add(TensorId::kAttnOutBias, l, GgmlType::F32, {p.n_embd}, Role::kZero, 0);
        add(TensorId::kAttnSinks, l, GgmlType::F32, {p.n_head}, Role::kZero, 0);
      }
      if (grok) add(TensorId::kAttnOutNorm, l, GgmlType::F32, {p.n_embd}, Role::kNorm, 0);
    }
    add(oss    ? TensorId::kPostAttnNorm
        : dbrx ? TensorId::kAttnOutNorm
               : TensorId::kFfnNorm,
        l, GgmlType::F32, {p.n_embd}, Role::kNorm, 0);
    if (phi) add(TensorId::kFfnNormBias, l, GgmlType::F32, {p.n_embd}, Role::kBias, kNormBiasSigma);
    if ((ds2 || ds1 || dots || ling || ernie) && uint32_t(l) < p.n_dense_lead) {
      add_ffn(l, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, p.n_ff, 0, at);
      continue;
    }
    if (arctic) {  // the dense residual FFN, then the experts' own norm
      add_ffn(l, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, p.n_embd, 0, at);
      add(TensorId::kFfnNormExps, l, GgmlType::F32, {p.n_embd}, Role::kNorm, 0);
    }
    add(TensorId::kFfnGateInp, l, GgmlType::F32, {p.n_embd, p.n_expert}, Role::kRouter, 0);
    if (oss) add(TensorId::kFfnGateInpBias, l, GgmlType::F32, {p.n_expert}, Role::kZero, 0);
    if (ds2 && p.gating == 2)
      add(TensorId::kFfnExpProbsB, l, GgmlType::F32, {p.n_expert}, Role::kZero, 0);
    if (minimax || dots ||
        ling)  // small beside the sigmoid scores' spread: it moves a few selections
      add(TensorId::kFfnExpProbsB, l, GgmlType::F32, {p.n_expert}, Role::kBias,
          kSelectionBiasSigma);
    if (ernie)  // the same beside the softmax probabilities (~1/n_expert): a few selections move
      add(TensorId::kFfnExpProbsB, l, GgmlType::F32, {p.n_expert}, Role::kBias,
          kSelectionBiasSigma / p.n_expert);
    add_ffn(l, TensorId::kFfnGateExps, TensorId::kFfnUpExps, TensorId::kFfnDownExps, p.n_ff_exp,
            p.n_expert, et);
    if (oss) {
      add(TensorId::kFfnGateExpsBias, l, GgmlType::F32, {p.n_ff_exp, p.n_expert}, Role::kZero, 0);
      add(TensorId::kFfnUpExpsBias, l, GgmlType::F32, {p.n_ff_exp, p.n_expert}, Role::kZero, 0);
      add(TensorId::kFfnDownExpsBias, l, GgmlType::F32, {p.n_embd, p.n_expert}, Role::kZero, 0);
    }
    if (p.grok2)  // the dense FFN beside the experts, the post norm under its newer name
      add_ffn(l, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, p.n_ff, 0, at);
    if (grok)
      add(p.grok2 ? TensorId::kFfnPostNorm : TensorId::kLayerOutNorm, l, GgmlType::F32, {p.n_embd},
          Role::kNorm, 0);
    if ((ds2 || ds1 || dots || ling) && p.n_shared > 0)
      add_ffn(l, TensorId::kFfnGateShexp, TensorId::kFfnUpShexp, TensorId::kFfnDownShexp,
              uint64_t(p.n_ff_exp) * p.n_shared, 0, at);
    if ((ernie || hunyuan) && p.n_ff_shexp > 0)
      add_ffn(l, TensorId::kFfnGateShexp, TensorId::kFfnUpShexp, TensorId::kFfnDownShexp,
              p.n_ff_shexp, 0, at);
    if (q2) {
      // The gate reads the normalized stream like the other input matrices: logits ~N(0, 1).
      add(TensorId::kFfnGateInpShexp, l, GgmlType::F32, {p.n_embd}, Role::kIn, in_sigma(p.n_embd));
      add_ffn(l, TensorId::kFfnGateShexp, TensorId::kFfnUpShexp, TensorId::kFfnDownShexp,
              p.n_ff_shexp, 0, at);
    }
  }
  add(TensorId::kOutputNorm, -1, GgmlType::F32, {p.n_embd}, Role::kNorm, 0);
  if (phi)
    add(TensorId::kOutputNormBias, -1, GgmlType::F32, {p.n_embd}, Role::kBias, kNormBiasSigma);
  if (!granite)  // granite's head is the token embedding (tied)
    add(TensorId::kOutput, -1, fit_type(p.output_type, p.n_embd), {p.n_embd, p.n_vocab},
        Role::kOutput, in_sigma(p.n_embd));
  if (phi) add(TensorId::kOutputBias, -1, GgmlType::F32, {p.n_vocab}, Role::kBias, kBiasSigma);
  file_bytes_ = w.total_bytes();
}

void SynthModel::fill_rows(size_t index, std::span<std::byte> out, uint64_t row_begin,
                           uint64_t row_end) const {
  const io::GgufTensorInfo& t = writer_.tensors()[index];
  const Recipe& r = recipes_[index];
  const uint64_t key = stream_key(opt_.seed, kTensor, index);
  const uint64_t ne0 = t.ne[0], ne1 = t.ne[1];
  const uint64_t row_bytes = t.row_bytes();
  const auto info = ggml_type_info(t.type);
  const uint64_t blocks_per_row = ne0 / info.block_size;

  switch (r.role) {
    case Role::kZero:  // biases, sinks, selection bias: start neutral
      std::memset(out.data() + row_begin * row_bytes, 0, (row_end - row_begin) * row_bytes);
      return;
    case Role::kNorm: {
      auto* v = reinterpret_cast<float*>(out.data());
      for (uint64_t j = 0; j < ne0; ++j)
        v[j] = j == kMassiveDim ? 1.0f : static_cast<float>(0.9 + 0.2 * to_unit(rng_at(key, j)));
      return;
    }
    case Role::kRopeLong:
    case Role::kRopeShort: {
      // Smooth in the pair index like real LongRoPE sets: 1 at the fastest pair, rising to the
      // set's top at the slowest.
      const double top = r.role == Role::kRopeLong ? 40.0 : 1.5;
      auto* v = reinterpret_cast<float*>(out.data());
      for (uint64_t j = 0; j < ne0; ++j) {
        const double u = ne0 > 1 ? double(j) / double(ne0 - 1) : 0.0;
        v[j] = static_cast<float>(1.0 + (top - 1.0) * u * u);
      }
      return;
    }
    case Role::kRopeLlama3: {
      // Llama 3.1's published recipe (its rope_scaling "llama3"): pairs whose wavelength is
      // under 8192 / 4 turn as trained, those over 8192 / 1 eight times slower, a smooth blend
      // between.
      constexpr double kFactor = 8, kLow = 1, kHigh = 4, kOrigCtx = 8192;
      const SynthPreset& p = opt_.preset;
      auto* v = reinterpret_cast<float*>(out.data());
      for (uint64_t j = 0; j < ne0; ++j) {
        const double freq = std::pow(double(p.rope_freq_base), -2.0 * double(j) / p.head_dim);
        const double wavelen = 2 * std::numbers::pi / freq;
        double f = 1;
        if (wavelen > kOrigCtx / kLow) {
          f = kFactor;
        } else if (wavelen >= kOrigCtx / kHigh) {
          const double smooth = (kOrigCtx / wavelen - kLow) / (kHigh - kLow);
          f = 1 / ((1 - smooth) / kFactor + smooth);
        }
        v[j] = static_cast<float>(f);
      }
      return;
    }
    case Role::kRouter: {
      // Row e: a Gaussian direction with norm router_norm[e] over the ordinary dimensions, and the
      // bias alpha * b_e in the massive dimension's column.
      const auto& rt = routing_[r.layer];
      std::vector<double> z(ne0);
      for (uint64_t e = row_begin; e < row_end; ++e) {
        double ss = 0;
        for (uint64_t j = 0; j < ne0; ++j) {
          const uint64_t c = 2 * (e * ne0 + j);
          z[j] = j == kMassiveDim ? 0.0 : normal_from(rng_at(key, c), rng_at(key, c + 1));
          ss += z[j] * z[j];
        }
        const double scale = router_norm_[r.layer][e] / std::sqrt(ss);
        auto* row = reinterpret_cast<float*>(out.data() + e * row_bytes);
        for (uint64_t j = 0; j < ne0; ++j) row[j] = static_cast<float>(z[j] * scale);
        row[kMassiveDim] = rt.alpha * router_bias_[r.layer][e];
      }
      return;
    }
    case Role::kEmbd: {
      // Values ~N(0, 1) with kMassiveValue exactly at the massive dimension. Q8_0: d = 1/16
      // (exact in fp16), codes = the Gaussian table halved, massive code 96.
      for (uint64_t row = row_begin; row < row_end; ++row) {
        std::byte* dst = out.data() + row * row_bytes;
        if (t.type == GgmlType::Q8_0) {
          const auto& lut = code_tables().q8_gauss;
          for (uint64_t b = 0; b < blocks_per_row; ++b) {
            auto* blk = reinterpret_cast<kernels::BlockQ8_0*>(dst) + b;
            blk->d = kernels::f32_to_fp16(1.0f / 16);
            const uint64_t n = (row * blocks_per_row + b) * 8;
            for (int i = 0; i < kernels::kQK; i += 4) {
              const uint64_t w = rng_at(key, n + i / 4);
              for (int j = 0; j < 4; ++j)
                blk->qs[i + j] = static_cast<int8_t>(lut[(w >> (16 * j)) & 0xFFFF] / 2);
            }
          }
          reinterpret_cast<kernels::BlockQ8_0*>(dst)[kMassiveDim / kernels::kQK]
              .qs[kMassiveDim % kernels::kQK] = static_cast<int8_t>(kMassiveValue * 16);
        } else {
          for (uint64_t j = 0; j < ne0; ++j)
            write_block(t.type, opt_.dist, r.sigma, key, 2 * (row * ne0 + j),
                        dst + j * info.type_size);
          const float m = kMassiveValue;
          if (t.type == GgmlType::F32)
            std::memcpy(dst + 4 * kMassiveDim, &m, 4);
          else {
            const uint16_t h = kernels::f32_to_fp16(m);
            std::memcpy(dst + 2 * kMassiveDim, &h, 2);
          }
        }
      }
      return;
    }
    case Role::kIn:
    case Role::kResidualOut:
    case Role::kOutput:
    case Role::kBias: {
      const uint64_t stride = words_per_block(t.type, opt_.dist);
      for (uint64_t row = row_begin; row < row_end; ++row) {
        std::byte* dst = out.data() + row * row_bytes;
        // Residual writers: the output row of the massive dimension is all zero (d = 0 blocks).
        if (r.role == Role::kResidualOut && row % ne1 == kMassiveDim) {
          std::memset(dst, 0, row_bytes);
          continue;
        }
        for (uint64_t b = 0; b < blocks_per_row; ++b)
          write_block(t.type, opt_.dist, r.sigma, key, (row * blocks_per_row + b) * stride,
                      dst + b * info.type_size, r.role == Role::kOutput);
        // Only the router reads the massive dimension: the column is zero in every other matrix
        // that reads the normalized stream (q/k/v, expert gate/up, output head). Otherwise its
        // constant value would add the same vector to every token's attention and expert outputs,
        // which piles up over the layers and skews the deeper routers far past their targets.
        if (r.role == Role::kIn || r.role == Role::kOutput)
          zero_element(t.type, dst + (kMassiveDim / info.block_size) * info.type_size,
                       kMassiveDim % info.block_size);
      }
      return;
    }
  }
}

void SynthModel::fill(size_t index, std::span<std::byte> out) const {
  const io::GgufTensorInfo& t = writer_.tensors()[index];
  STRATA_ASSERT(out.size() == t.n_bytes, "tensor {}: {} bytes, buffer {}", t.name, t.n_bytes,
                out.size());
  const uint64_t n_rows = t.n_elements() / t.ne[0];
  int n_threads =
      opt_.n_threads > 0 ? opt_.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = std::clamp(n_threads, 1, 16);
  constexpr uint64_t kMinBytesPerThread = 4u << 20;
  n_threads = static_cast<int>(
      std::min<uint64_t>(n_threads, std::max<uint64_t>(1, t.n_bytes / kMinBytesPerThread)));
  if (recipes_[index].role == Role::kNorm || n_threads == 1) {
    fill_rows(index, out, 0, n_rows);
    return;
  }
  std::vector<std::thread> workers;
  for (int i = 1; i < n_threads; ++i)
    workers.emplace_back(
        [&, i] { fill_rows(index, out, n_rows * i / n_threads, n_rows * (i + 1) / n_threads); });
  fill_rows(index, out, 0, n_rows / n_threads);
  for (auto& th : workers) th.join();
}

void SynthModel::write(const std::string& path, const io::GgufWriter::ProgressFn& progress) const {
  writer_.write(
      path, [this](size_t i, std::span<std::byte> out) { fill(i, out); }, progress);
}

std::vector<std::byte> SynthModel::to_bytes() const {
  return writer_.to_bytes([this](size_t i, std::span<std::byte> out) { fill(i, out); });
}

}  // namespace strata::engine
