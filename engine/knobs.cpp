// The knob table and its parser (see knobs.h). The only file in strata that calls getenv.
#include "engine/knobs.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "io/check.h"

extern char** environ;

namespace strata::engine {
namespace {

// One row per knob. Add a knob here and it gets an env var, a flag, validation, `strata knobs`
// and a line in docs/KNOBS.md.
constexpr KnobSpec kKnobs[] = {
    {"THREADS", KnobType::kInt, "", "threads", "1..1024",
     "Compute threads (including the main thread). Auto: one per physical core."},
    {"CACHE_DIR", KnobType::kString, "", "path", "",
     "Where generated models and machine profiles go. Auto: $XDG_CACHE_HOME/strata, else "
     "~/.cache/strata."},
    {"RAM_GB", KnobType::kFloat, "", "GiB", "0..1048576",
     "RAM for routed experts: their RAM homes plus the cache for SSD-streamed experts. Experts "
     "that do not fit stream from the model file on SSD. Auto: what MemAvailable (and the memory "
     "cgroup limit) leave after the dense weights, the KV cache and headroom, at most every "
     "expert. Below the model's minimum (two layers' top-k in the cache) is an error, as is a "
     "value whose experts, with the dense weights and the KV cache, exceed the memory available "
     "(it would be killed part-way through the load)."},
    {"CACHE_GB", KnobType::kFloat, "", "GiB", "0..1048576",
     "Part of RAM_GB given to the LRU cache of SSD-streamed experts instead of fixed RAM homes: "
     "a bigger cache follows skewed routing without a usage profile, fixed homes are never "
     "re-read. Auto: the minimum (two layers' top-k experts). Unused when every expert fits."},
    {"VRAM_GB", KnobType::kString, "", "GiB", "",
     "VRAM for routed experts: one number (the total, split evenly over the GPUs) or one per GPU "
     "(\"24,24\"). The hottest experts get VRAM homes first (PIN's counts, else the spread "
     "order), several GPUs balanced by expected routed rows; each MoE layer's GPU experts run as "
     "one launch per GPU while the CPU computes the rest. Auto: each GPU's free memory less 1 GiB "
     "+ 5% headroom, the executor's buffers, expert biases and CUDA_DENSE's matrices; 0 without "
     "a GPU. An explicit value above a GPU's free memory less those buffers is an error naming "
     "the most that fits. Layers the GPU kernel cannot run "
     "(expert types other than Q4_0/Q5_0/Q8_0/Q4_K/Q6_K/MXFP4) stay off the GPU (one notice)."},
    {"CUDA_DENSE", KnobType::kInt, "0", "", "0..2",
     "1: in decode, the attention projections (q, k, v, o; not MLA), the dense FFN layers, the "
     "shared experts and the output head on GPU 0, uploaded once at load, computed by the GPU's "
     "own dequant-GEMV kernels in the CPU kernels' canonical order (an FFN's activation on the "
     "host), so the numbers do not change; weights of the GPU kernels' types (Q4_0, Q4_1, Q5_0, "
     "Q5_1, Q8_0, MXFP4, IQ4_NL, IQ4_XS, Q2_K..Q6_K) only: F32/F16/BF16 matrices (and FFNs with "
     "biases) stay on the CPU, as does prefill. 2: also prefill's attention projections and those "
     "FFNs, as cuBLASLt F32 GEMMs on those weights dequantized on the GPU: faster long prompts, "
     "logits close to but not bit-identical with the CPU's. Needs a CUDA device (or "
     "VRAM_EMULATE=1)."},
    {"VRAM_EMULATE", KnobType::kBool, "0", "", "0|1",
     "testing: VRAM homes computed by the host emulation of the CUDA kernels on one worker thread "
     "per emulated GPU (VRAM_GB entries); no device needed. Same numbers as a GPU, far slower."},
    {"PREFETCH", KnobType::kInt, "1", "layers", "0..16",
     "Decode: after layer L's attention, predict the experts of layers L+1..L+D with their "
     "routers and start io_uring reads for predicted SSD experts that are not cached, so they "
     "load while layer L computes (0 = off; +26-36% decode where experts stream, bench/RESULTS.md; "
     "nothing runs when no expert lives on SSD). Guarded: fills only the LRU tail when unused for "
     "half the cache's lookups, at most half the cache prefetched-unused. Never changes the "
     "numbers; PROF reports precision, recall and the I/O wait saved."},
    {"LOOKUP", KnobType::kInt, "0", "tokens", "0..16",
     "Prompt-lookup decoding in `run` and `chat`: when the tokens so far end with an n-gram "
     "(4 tokens down to LOOKUP_NGRAM) that occurred earlier, up to N of the tokens that followed "
     "it are drafted and run with the next token as one forward pass (every weight and routed "
     "expert read once for all of them); each sampled token that matches the draft then needs no "
     "pass of its own. The tokens are exactly plain decoding's, greedy or seeded sampling alike "
     "(decode and prefill give the same bits). Pays when the reply repeats its context (code "
     "edits, quotes, lists); a pass whose draft goes unused costs more than a plain step, so "
     "after one the next 1, 2, 4 .. 64 drafts found are dropped. PROF "
     "reports the passes and the drafted tokens used. Verify passes count as prefill for "
     "PREFETCH and REPIN, and usage counts and ROUTE_TRACE include their drafted positions, "
     "used or not (the experts were read). 0 = off. Not with CUDA_DENSE=2."},
    {"LOOKUP_NGRAM", KnobType::kInt, "3", "tokens", "1..4",
     "LOOKUP: the shortest match that drafts (longer ones, up to 4 tokens, are tried first)."},
    {"THINK", KnobType::kEnum, "on", "", "on|hide|off",
     "Thinking models (<think> blocks: Qwen3, DeepSeek-R1, GLM-4.5; gpt-oss's analysis "
     "channel), in `chat` and `serve`. on: the model reasons as its template has it; `chat` "
     "shows the reasoning dimmed (framed by <think> tags when stdout is not a terminal) before "
     "the answer, `serve` returns it as reasoning_content. hide: the same reasoning, but `chat` "
     "prints only the answer (stderr says how long it thought) and `serve` leaves "
     "reasoning_content out. off: the prompt ends with the template's no-think text (Qwen3's "
     "empty <think> block), so the model answers at once; a template without that switch "
     "thinks anyway (a notice says so). Either way a reply joins the conversation without its "
     "reasoning, as these models' templates keep it, and structured output constrains the "
     "answer, after the reasoning."},
    {"THINK_BUDGET", KnobType::kInt, "", "tokens", "0..1073741824",
     "Thinking models, in `chat` and `serve` (a request's thinking_budget, or Anthropic's "
     "thinking.budget_tokens, overrides it): at most this many tokens of reasoning per reply. "
     "When they are spent the reasoning is closed for the model (\"\\n</think>\\n\\n\"; gpt-oss: "
     "the "
     "analysis message ended and a final one opened) and it answers from what it has thought. "
     "The close's tokens count toward max_tokens. Unset: no limit; 0: the reasoning is closed "
     "as soon as it opens (a template with a no-think switch does better with THINK=off)."},
    {"PROMPT_CACHE", KnobType::kString, "", "path", "",
     "Keep the KV cache of a prompt in this file (`run`: the prompt, after its prefill; `chat`: "
     "the conversation, at exit) and restore the longest prefix a later run's prompt shares with "
     "it instead of prefilling it again (a long system prompt on a model streaming from SSD: "
     "seconds instead of minutes). The continuation is exactly a recomputed prefix's. A file "
     "for another model (fingerprint), KV shape or CUDA_DENSE=2 setting, or a damaged one, is "
     "not used (a notice says why) and is overwritten. F32 rows: n_layer x KV width x 4 bytes a "
     "token (docs/FORMATS.md \"Prompt cache\")."},
    {"REPIN", KnobType::kInt, "0", "tokens", "0..",
     "Every N decode tokens, move up to REPIN_MOVES SSD experts just computed from the RAM "
     "cache into the GPU slots (VRAM_GB), then the RAM homes, of experts used less (decayed "
     "counts, REPIN_HALF_LIFE; a candidate needs 1.5x the incumbent's count + 2), between "
     "layers; the incumbents become SSD homes. A copy from the cache, no file I/O, same "
     "numbers. 0 = off."},
    {"REPIN_HALF_LIFE", KnobType::kFloat, "256", "tokens", "1..",
     "Half-life of REPIN's online usage counts in decode tokens."},
    {"REPIN_MOVES", KnobType::kInt, "4", "experts", "1..4096",
     "Most experts REPIN moves per pass (each move swaps one RAM home with one SSD home)."},
    {"ZSTD", KnobType::kEnum, "auto", "", "auto|0|1",
     "Read SSD-streamed experts from the model's zstd sidecar (MODEL.gguf.stz, written by "
     "`strata pack`; decompressed by I/O-side threads). auto: when the sidecar matches the model "
     "and pays (disk GB/s x ratio and decompression GB/s beat the disk; disk speed from `strata "
     "probe`, else 1 GB/s). 1: always (no or a foreign sidecar is an error). 0: never."},
    {"NUMA", KnobType::kEnum, "interleave", "", "interleave|local|off",
     "Expert RAM over NUMA nodes: interleave pages over every node, bind each layer's experts to "
     "one node (local, layers alternate), or no policy (off: first touch decides)."},
    {"KV_TYPE", KnobType::kEnum, "f32", "", "f32|f16|q8_0",
     "Element type of the attention KV cache. f32 (the default) keeps the projections' floats, "
     "as llama.cpp's reference runs do; f16 stores IEEE halves (llama.cpp's default cache type): "
     "half the KV memory (more RAM left for experts at long contexts) and half the KV bytes each "
     "decode token reads, at a rounding of K and V (on the fixtures, logits within 2e-3 of f32's). "
     "Decode, "
     "prefill, threads and ISAs still agree bit for bit. MLA layers (DeepSeek, Kimi-K2) store "
     "their compressed latents as halves too. q8_0 stores Q8_0 blocks (8-bit codes and an fp16 "
     "scale per 32 elements, llama.cpp's -ctk/-ctv q8_0): 34 bytes per 32 elements, under a "
     "third of f32's, for a larger rounding (on the fixtures' tiny random models, logits within "
     "0.03-0.9 of f32's, top tokens at 90%+ of positions the same) and no faster decode than "
     "f16 (widening its codes costs the attention core what its fewer bytes save): a choice for "
     "memory; needs KV heads whose widths are multiples of 32. PROMPT_CACHE files are per type."},
    {"REPACK", KnobType::kBool, "1", "", "0|1",
     "Repack quantized weights held in RAM (RAM-homed experts at load and on REPIN, attention "
     "and other dense matrices, an untied output head) into 16-row interleaved groups (Q4_0 on "
     "AVX-512: pairs of them woven into one stream) that the CPU kernels stream with no byte "
     "shuffles (kernels/interleave.h; faster GEMVs, bench/RESULTS.md). Same bytes, never changes "
     "the numbers; cache slots stay as in the file. Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, "
     "Q5_K, Q6_K, IQ4_XS, IQ4_NL and MXFP4 on CPUs with AVX2 or AVX-512; Q8_0 with AVX-512 or "
     "AVX-VNNI (a plain AVX2 CPU's row kernel streams it as fast); 0 = keep the file's layout."},
    {"ISA", KnobType::kEnum, "auto", "", "auto|avx512|avx2|avx2-plain|ref",
     "Highest CPU instruction set the kernels use (GEMV/GEMM, the layouts REPACK picks, the "
     "activation quantizers, attention). auto: the best this CPU has (AVX-512 needs F, BW, VL, "
     "DQ and VNNI). avx2 runs an AVX-512 host as an AVX2-only one would (with AVX-VNNI where the "
     "CPU has it, as Intel's client cores since Alder Lake do), to compare kernels or size an "
     "AVX2 machine; avx2-plain is avx2 without AVX-VNNI (Zen 2/3, Intel before Alder Lake); ref "
     "is the scalar reference kernels (slow). Every level computes the "
     "same bits, so the numbers never change. A level this CPU lacks is an error."},
    {"DENSE_ARENA", KnobType::kBool, "1", "", "0|1",
     "Move the dense tensors a decode token reads (attention projections, norms, routers, dense "
     "FFNs, shared experts, the output head) into one 2 MiB-aligned huge-page arena, in the order "
     "a token reads them, interleaving them on the way with REPACK; their resident pages in the "
     "file's address range are given back. Their pages there lie between the experts' and mostly "
     "miss huge pages, which halved the projections' read rate (bench/RESULTS.md). Same bytes, "
     "never changes the numbers; 0 = keep them in place."},
    {"DIRECT", KnobType::kBool, "1", "", "0|1",
     "Read SSD experts with O_DIRECT (no page cache); 0 = buffered reads. Falls back to buffered, "
     "with one notice, where the file system refuses O_DIRECT."},
    {"URING", KnobType::kBool, "1", "", "0|1",
     "Read SSD experts through io_uring; 0 = a pread thread pool. Falls back to the pool, with "
     "one notice, where io_uring is unavailable."},
    {"QD", KnobType::kInt, "", "reads", "1..1024",
     "SSD expert reads in flight (io_uring queue depth; further reads queue and go as earlier "
     "ones land). Auto: the deepest queue depth within 5% of the best rate `strata probe` "
     "measured at the expert read size (deeper queues can be slower), else 16."},
    {"PROF", KnobType::kInt, "0", "level", "0..2",
     "Profile: 0 off, 1 = tier/cache/I/O/tok/s report on stderr at the end, 2 = also one line "
     "per decoded token."},
    {"PROF_PROBE", KnobType::kInt, "0", "MiB", "0..65536",
     "With PROF: measure the RAM read bandwidth at THREADS over a buffer of this many MiB (the "
     "best pass of a second's worth, under 2 s at 2048; use well over the CPU's caches) as the "
     "run starts, and hold the roofline and the RAM tier's rate against it instead of "
     "machine.json's (a shared host's bandwidth swings minute to minute). 0 = machine.json's "
     "probe."},
    {"PROF_PROBE_EVERY", KnobType::kInt, "0", "tokens", "0..1000000",
     "With PROF and PROF_PROBE (`strata run`, and each `strata chat` reply; other commands ignore "
     "it): also one pass over "
     "the PROF_PROBE buffer after "
     "the prompt and after every this many decode tokens, outside the decode clock, and the "
     "roofline and the experts' rate per window between two passes held against the mean of "
     "those two: a ceiling taken in the same seconds as the tokens it judges. Each pass adds "
     "PROF_PROBE MiB of reads to the run's wall time (~40 ms at 2048 MiB and 50 GB/s). 0 = off."},
    {"PROF_JSON", KnobType::kString, "", "path", "",
     "Write the PROF counters as JSON to this file at the end (written to a temp file, then "
     "renamed; schema in docs/FORMATS.md). Works at any PROF level."},
    {"PIN", KnobType::kString, "", "path", "",
     "Place experts with the planner from this usage stats file (`strata stats`, docs/FORMATS.md "
     "\"Usage stats\"): the hottest experts get RAM homes. `learned`: this model's USAGE_AUTO "
     "profile (a file named so: ./learned). Unset: the learned profile when USAGE_AUTO allows, "
     "else the usage-free default plan. A file from another model is an error (see PIN_FORCE)."},
    {"PIN_FORCE", KnobType::kBool, "0", "", "0|1",
     "Use a PIN file whose model fingerprint differs (same shape only: n_layer and n_expert must "
     "still match)."},
    {"USAGE_SAVE", KnobType::kString, "", "path", "",
     "Save the expert usage counts of this run (replay, run, chat, stats) to this stats file at "
     "exit, also after Ctrl-C, SIGTERM or SIGHUP (written to a temp file, then renamed)."},
    {"PROMPT_PLACE", KnobType::kBool, "1", "", "0|1",
     "When the experts were placed without usage counts (no PIN, no learned profile yet: a "
     "model's first runs), after a prompt (a forward chunk of at least 32 tokens) and before its "
     "first decoded token, each MoE layer gives the RAM homes of the experts the prompt used least "
     "to the "
     "SSD-homed experts it used most (by 1.5x + 2, as REPIN), reading those once from the file: "
     "the reply's experts mostly follow its prompt's. Once per run, chat or server (the first "
     "prompt; later ones would re-read experts for every turn), put off while the reply may be "
     "under 16 tokens (run's and chat's -n, a request's max_tokens: too short to repay the "
     "reads); never in replay, stats or bench. "
     "Same numbers. PROF's `prompt placement:` line says what it moved and the seconds it took. 0 "
     "= "
     "off."},
    {"USAGE_AUTO", KnobType::kInt, "256", "tokens", "0..",
     "Learn a usage profile per model: run, chat and serve add their expert usage counts to "
     "CACHE_DIR/usage/NAME-FINGERPRINT.stats at exit (serve also every --learn-every seconds; "
     "halved whenever it passes 2^20 tokens, so "
     "recent use weighs more), and while PIN is unset a profile of at least this many tokens "
     "places the experts as PIN would (the hottest in VRAM, then RAM): a model that does not fit "
     "is placed by its own usage from the second run on, and the plan line says so. Same "
     "numbers, like any placement. replay, ab, sweep, stats, bench and plan never write it "
     "(their arms stay reproducible); of them only plan reads it by itself (PIN=learned hands it "
     "to any command). 0 = off."},
    {"ROUTE_TRACE", KnobType::kString, "", "path", "",
     "Record every token's routing (per MoE layer: the selected experts and their weights) of "
     "this run (replay, run, chat) to this zstd-compressed route trace (docs/FORMATS.md \"Route "
     "trace\"); written as it goes to FILE.tmp, renamed at exit (also after Ctrl-C, SIGTERM or "
     "SIGHUP). "
     "`strata stats --from-trace` turns traces into usage stats."},
};

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Parses "lo..hi", "lo..", "..hi" into bounds (missing side = unbounded).
void parse_range(std::string_view allowed, double& lo, double& hi) {
  lo = -1e300;
  hi = 1e300;
  const auto dots = allowed.find("..");
  if (dots == std::string_view::npos) return;
  const auto a = allowed.substr(0, dots);
  const auto b = allowed.substr(dots + 2);
  if (!a.empty()) lo = std::strtod(std::string(a).c_str(), nullptr);
  if (!b.empty()) hi = std::strtod(std::string(b).c_str(), nullptr);
}

[[noreturn]] void bad_value(const KnobSpec& k, std::string_view value, std::string_view why) {
  fail(ErrorKind::kBadValue, "knob {} ({}): bad value '{}': {}{}", k.name, knob_flag(k.name), value,
       why, k.allowed.empty() ? "" : fmt::format(" (allowed: {})", k.allowed));
}

// Returns the canonical form of a valid value; throws otherwise.
std::string validate(const KnobSpec& k, std::string_view value) {
  switch (k.type) {
    case KnobType::kInt: {
      int64_t v = 0;
      const auto* end = value.data() + value.size();
      const auto r = std::from_chars(value.data(), end, v);
      if (r.ec != std::errc() || r.ptr != end) bad_value(k, value, "not an integer");
      double lo, hi;
      parse_range(k.allowed, lo, hi);
      if (static_cast<double>(v) < lo || static_cast<double>(v) > hi)
        bad_value(k, value, "out of range");
      return std::to_string(v);
    }
    case KnobType::kFloat: {
      const std::string s(value);
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || v != v) bad_value(k, value, "not a number");
      double lo, hi;
      parse_range(k.allowed, lo, hi);
      if (v < lo || v > hi) bad_value(k, value, "out of range");
      return s;
    }
    case KnobType::kBool: {
      const std::string v = lower(value);
      if (v == "1" || v == "true" || v == "on" || v == "yes") return "1";
      if (v == "0" || v == "false" || v == "off" || v == "no") return "0";
      bad_value(k, value, "not a boolean (0 or 1)");
    }
    case KnobType::kEnum: {
      const std::string v = lower(value);
      std::string_view rest = k.allowed;
      while (!rest.empty()) {
        const auto bar = rest.find('|');
        const auto item = rest.substr(0, bar);
        if (item == v) return v;
        rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
      }
      bad_value(k, value, "not one of the choices");
    }
    case KnobType::kString:
      return std::string(value);
  }
  return std::string(value);
}

const KnobSpec& spec(std::string_view name) {
  const KnobSpec* k = find_knob(name);
  STRATA_ASSERT(k != nullptr, "unknown knob {}", name);
  return *k;
}

}  // namespace

std::span<const KnobSpec> knob_table() {
  return kKnobs;
}

const KnobSpec* find_knob(std::string_view name) {
  for (const auto& k : kKnobs)
    if (k.name == name) return &k;
  return nullptr;
}

std::string knob_flag(std::string_view name) {
  std::string f = "--" + lower(name);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

Knobs Knobs::from_values(const std::map<std::string, std::string>& values) {
  Knobs r;
  for (const auto& [name, value] : values) {
    const KnobSpec* k = find_knob(name);
    if (!k) fail(ErrorKind::kBadValue, "unknown knob '{}' (see `strata knobs`)", name);
    if (value.empty() || lower(value) == "auto") continue;
    r.values_[name] = validate(*k, value);
    r.explicit_[name] = true;
  }
  for (const auto& k : kKnobs)
    if (!r.values_.count(k.name) && !k.default_value.empty())
      r.values_[std::string(k.name)] = std::string(k.default_value);
  return r;
}

Knobs Knobs::load(const std::map<std::string, std::string>& cli) {
  std::map<std::string, std::string> merged;
  std::vector<std::string> warnings;
  for (const auto& k : kKnobs) {
    const std::string name(k.name);
    const char* plain = std::getenv(name.c_str());
    const char* prefixed = std::getenv(("STRATA_" + name).c_str());
    if (prefixed) merged[name] = prefixed;
    if (plain) merged[name] = plain;
  }
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    const auto name = kv.substr(0, eq);
    if (name.rfind("STRATA_", 0) == 0 && !find_knob(name.substr(7)))
      warnings.push_back(
          fmt::format("unknown environment variable {} ignored (see `strata knobs`)", name));
  }
  for (const auto& [name, value] : cli) merged[name] = value;
  Knobs r = from_values(merged);
  r.warnings_ = std::move(warnings);
  return r;
}

bool Knobs::is_set(std::string_view name) const {
  spec(name);
  return explicit_.find(name) != explicit_.end();
}

std::optional<std::string> Knobs::raw(std::string_view name) const {
  spec(name);
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> Knobs::int_opt(std::string_view name) const {
  STRATA_ASSERT(spec(name).type == KnobType::kInt || spec(name).type == KnobType::kBool, "{}",
                name);
  const auto v = raw(name);
  if (!v) return std::nullopt;
  return std::stoll(*v);
}

std::optional<double> Knobs::float_opt(std::string_view name) const {
  const auto v = raw(name);
  if (!v) return std::nullopt;
  return std::strtod(v->c_str(), nullptr);
}

int64_t Knobs::get_int(std::string_view name) const {
  const auto v = int_opt(name);
  STRATA_ASSERT(v.has_value(), "knob {} has no value (auto) here", name);
  return *v;
}

double Knobs::get_float(std::string_view name) const {
  const auto v = float_opt(name);
  STRATA_ASSERT(v.has_value(), "knob {} has no value (auto) here", name);
  return *v;
}

bool Knobs::get_bool(std::string_view name) const {
  return get_int(name) != 0;
}

std::string Knobs::get_string(std::string_view name) const {
  return raw(name).value_or("");
}

std::string Knobs::describe() const {
  std::string s;
  for (const auto& k : kKnobs) {
    const auto v = raw(k.name);
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", k.name, v ? *v : "auto");
  }
  return s;
}

std::string cache_dir(const Knobs& knobs) {
  if (auto d = knobs.raw("CACHE_DIR")) return *d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/strata";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/strata";
  return ".strata-cache";
}

std::string knobs_markdown() {
  std::string s =
      "| knob (env var) | flag | type | default | unit | allowed | what it does |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& k : kKnobs) {
    const char* type = "";
    switch (k.type) {
      case KnobType::kInt:
        type = "int";
        break;
      case KnobType::kFloat:
        type = "float";
        break;
      case KnobType::kBool:
        type = "bool";
        break;
      case KnobType::kString:
        type = "string";
        break;
      case KnobType::kEnum:
        type = "enum";
        break;
    }
    std::string allowed(k.allowed);
    std::replace(allowed.begin(), allowed.end(), '|', ',');
    s += fmt::format("| `{}` | `{}` | {} | {} | {} | {} | {} |\n", k.name, knob_flag(k.name), type,
                     k.default_value.empty() ? "auto" : k.default_value, k.unit, allowed, k.doc);
  }
  return s;
}

}  // namespace strata::engine
