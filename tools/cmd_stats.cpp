// `strata stats -m MODEL (--tokens FILE | --prompts FILE [-n N]) -o STATS [--merge A B ...]
// [--force]` and `strata stats --from-trace TRACE... -o STATS`: expert usage stats
// (docs/FORMATS.md "Usage stats"). Token files (one stream of ids per line) are teacher-forced as
// one prefill per stream; prompt files (one prompt per line) are tokenized, prefilled, and N tokens
// are generated greedily (decode counts). --merge adds stats files (without -m: only merges them).
// --from-trace counts route traces (ROUTE_TRACE, docs/FORMATS.md "Route trace") as the usage hook
// would have. Tested by tests/test_usage_stats.cpp (the file), tests/test_pin_heldout.cpp (the
// engine hook) and tests/test_route_trace.cpp (traces).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "kernels/threadpool.h"
#include "placement/route_trace.h"
#include "placement/usage_stats.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

struct StatsOptions {
  std::string model;
  std::string tokens;
  std::string prompts;
  std::string out;
  std::vector<std::string> merge;
  std::vector<std::string> from_trace;
  int n_predict = 32;
  uint32_t ubatch = 512;
  bool force = false;
  KnobOverrides knobs;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kNotFound, "{}: cannot open", path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  if (lines.empty()) fail(ErrorKind::kBadValue, "{}: no non-blank lines", path);
  return lines;
}

std::vector<std::vector<int32_t>> token_streams(const std::string& path, uint32_t n_vocab) {
  std::vector<std::vector<int32_t>> streams;
  size_t line_no = 0;
  for (const std::string& line : read_lines(path)) {
    ++line_no;
    std::vector<int32_t> ids;
    const char* p = line.data();
    const char* end = p + line.size();
    while (p < end) {
      if (*p == ' ' || *p == '\t' || *p == '\r') {
        ++p;
        continue;
      }
      int64_t id = 0;
      const auto r = std::from_chars(p, end, id);
      if (r.ec != std::errc() || (r.ptr < end && *r.ptr != ' ' && *r.ptr != '\t' && *r.ptr != '\r'))
        fail(ErrorKind::kBadValue, "{}: stream {}: not a token id at column {}", path, line_no,
             p - line.data() + 1);
      if (id < 0 || id >= int64_t{n_vocab})
        fail(ErrorKind::kBadValue, "{}: stream {}: token id {} out of range (n_vocab {})", path,
             line_no, id, n_vocab);
      ids.push_back(static_cast<int32_t>(id));
      p = r.ptr;
    }
    streams.push_back(std::move(ids));
  }
  return streams;
}

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int run_stats(const StatsOptions& o) {
  if (o.out.empty()) fail(ErrorKind::kBadValue, "stats: -o STATS is required");
  if (!o.from_trace.empty()) {
    if (!o.model.empty() || !o.tokens.empty() || !o.prompts.empty())
      fail(ErrorKind::kBadValue, "stats: --from-trace takes no -m, --tokens or --prompts");
    placement::UsageStats all = placement::usage_from_traces(o.from_trace, o.force);
    for (const std::string& m : o.merge) all.merge(placement::UsageStats::load(m), o.force);
    all.save(o.out);
    std::fprintf(stderr, "stats: %zu traces, %llu tokens (%llu decode, %llu prefill) -> %s\n",
                 o.from_trace.size(), static_cast<unsigned long long>(all.tokens()),
                 static_cast<unsigned long long>(all.decode_tokens()),
                 static_cast<unsigned long long>(all.prefill_tokens()), o.out.c_str());
    return 0;
  }
  if (o.model.empty()) {
    if (o.merge.empty())
      fail(ErrorKind::kBadValue, "stats: give -m MODEL, --from-trace TRACES or --merge FILES");
    placement::UsageStats all = placement::UsageStats::load(o.merge[0]);
    for (size_t i = 1; i < o.merge.size(); ++i)
      all.merge(placement::UsageStats::load(o.merge[i]), o.force);
    all.save(o.out);
    std::fprintf(stderr, "stats: merged %zu files, %llu tokens -> %s\n", o.merge.size(),
                 static_cast<unsigned long long>(all.tokens()), o.out.c_str());
    return 0;
  }
  if (o.tokens.empty() == o.prompts.empty())
    fail(ErrorKind::kBadValue, "stats: give exactly one of --tokens FILE or --prompts FILE");
  if (o.n_predict < 0) fail(ErrorKind::kBadValue, "-n must be >= 0");
  const engine::Knobs knobs = load_knobs(o.knobs);
  const int threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  const engine::Model model = engine::Model::load(o.model);
  const engine::ModelConfig& cfg = model.config();

  std::vector<std::vector<int32_t>> streams;
  std::unique_ptr<engine::Tokenizer> tok;
  if (!o.tokens.empty()) {
    streams = token_streams(o.tokens, cfg.n_vocab);
  } else {
    tok = std::make_unique<engine::Tokenizer>(engine::Tokenizer::from_gguf(model.file()));
    for (const std::string& p : read_lines(o.prompts))
      streams.push_back(tok->tokenize(p, true, true));
  }
  size_t longest = 0;
  for (const auto& s : streams) longest = std::max(longest, s.size());
  const size_t gen = o.prompts.empty() ? 0 : static_cast<size_t>(o.n_predict);

  engine::ForwardOptions fo;
  fo.n_ctx = static_cast<uint32_t>(std::max<size_t>(1, longest + gen));
  fo.n_ubatch = o.ubatch;
  fo.n_threads = threads;
  engine::TierOptions topts = engine::tier_options(knobs);
  topts.n_ctx = fo.n_ctx;
  std::unique_ptr<UsageRecorder> recorder = apply_placement_knobs(model, knobs, topts, true);
  engine::ExpertSource experts(model, topts);
  fo.experts = &experts;
  fo.kv_type = topts.kv_type;
  const std::unique_ptr<placement::RouteTraceWriter> trace = make_route_trace(model, knobs);
  fo.route_trace = trace.get();
  engine::Forward fwd(model, fo);
  for (const auto& ids : streams) {
    if (ids.empty()) continue;
    fwd.reset();
    std::span<const float> logits = fwd.prefill(ids);
    for (size_t i = 0; i < gen; ++i) {
      const int32_t id = argmax(logits);
      if (tok && tok->vocab().is_eog(id)) break;
      if (i + 1 < gen) logits = fwd.decode(id);
    }
  }
  placement::UsageStats& stats = recorder->stats();
  for (const std::string& m : o.merge) stats.merge(placement::UsageStats::load(m), o.force);
  stats.save(o.out);
  std::fprintf(stderr, "stats: %zu streams, %llu tokens (%llu decode, %llu prefill) -> %s\n",
               streams.size(), static_cast<unsigned long long>(stats.tokens()),
               static_cast<unsigned long long>(stats.decode_tokens()),
               static_cast<unsigned long long>(stats.prefill_tokens()), o.out.c_str());
  return 0;
}

}  // namespace

void add_stats(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand("stats", "Expert usage statistics from token or prompt files");
  auto o = std::make_shared<StatsOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file");
  cmd->add_option("--tokens", o->tokens, "Token file: one stream of ids per line (teacher-forced)");
  cmd->add_option("--prompts", o->prompts, "Prompt file: one prompt per line (generated from)");
  cmd->add_option("-o,--out", o->out, "Stats file to write")->required();
  cmd->add_option("--merge", o->merge, "Stats files to add (same model)");
  cmd->add_option("--from-trace", o->from_trace,
                  "Route traces (ROUTE_TRACE) to count instead of running a model");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens generated per prompt (default 32)");
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_flag("--force", o->force,
                "Merge files / traces whose model fingerprint differs (same shape)");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_stats(*o); }; });
}

}  // namespace strata::tools
