// `strata run -m MODEL -p PROMPT -n N [-t N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
// [--repeat-penalty R] [--seed S]`: tokenizes the prompt (BOS as the vocabulary asks, special
// tokens parsed), prefills it, then samples N tokens one at a time and streams their text to
// stdout; stops early at an end-of-generation token. Prefill and decode tok/s go to stderr.
// Exercised by tests/test_model_replay.cpp (greedy run vs the fixture's reference continuation).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/lookup.h"
#include "engine/model.h"
#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "kernels/threadpool.h"
#include "tools/cli.h"
#include "tools/json_flags.h"
#include "tools/knob_flags.h"
#include "tools/progress.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  int n_predict = 64;
  uint32_t ubatch = 512;
  uint32_t ctx = 0;
  bool no_display_prompt = false;
  bool ignore_eos = false;
  engine::SamplerParams sampling;
  int64_t seed = -1;  // -1: random
  JsonFlags json;
  KnobOverrides knobs;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_run(RunOptions o) {
  const engine::Knobs knobs = load_knobs(o.knobs);
  const int threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  if (o.n_predict < 0) fail(ErrorKind::kBadValue, "-n must be >= 0");
  probe_every_knob(knobs);  // a bad PROF_PROBE_EVERY fails before the model loads
  const engine::LookupParams lookup_p = engine::lookup_params(knobs);
  const auto schema = json_schema_of(o.json);  // a bad schema fails before the model loads too
  engine::Model model = engine::Model::load(o.model);
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> prompt = tok.tokenize(o.prompt, true, true);
  if (prompt.empty()) fail(ErrorKind::kBadValue, "the prompt tokenizes to nothing");

  const size_t needed = prompt.size() + size_t(o.n_predict);
  engine::ForwardOptions fo;
  fo.n_ctx = o.ctx ? o.ctx : static_cast<uint32_t>(needed);
  if (needed > fo.n_ctx)
    fail(ErrorKind::kBadValue, "prompt ({} tokens) + -n {} exceeds --ctx {}", prompt.size(),
         o.n_predict, fo.n_ctx);
  warn_context_beyond_training(fo.n_ctx, model);
  fo.n_ubatch = o.ubatch;
  fo.n_threads = threads;
  const TierSetup tiers = make_tier_setup(model, knobs, fo.n_ctx, /*progress_bar=*/false,
                                          /*record_usage=*/false, /*learn=*/true,
                                          /*reply_tokens=*/o.n_predict);
  engine::Profiler& prof = *tiers.prof;
  arm_run_probe(prof, knobs, threads);
  fo.experts = tiers.experts.get();
  fo.kv_type = tiers.kv_type;
  fo.prof = &prof;
  fo.route_trace = tiers.trace.get();
  engine::Forward fwd(model, fo);
  engine::LookupDecoder lookup(fwd, lookup_p);  // LOOKUP=0: every step is fwd.decode
  std::vector<int32_t> history = prompt;        // LOOKUP's drafts come from it
  history.reserve(needed);
  const StopSignals sigint;  // Ctrl-C, SIGTERM, SIGHUP: stop generating; files still saved

  o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
  engine::Sampler sampler(o.sampling);
  for (int32_t t : prompt) sampler.accept(t);
  // --json / --json-schema: sampled among the tokens that keep the reply a viable document.
  std::optional<engine::TokenConstraint> constraint;
  if (schema) constraint.emplace(schema, std::make_shared<const engine::TokenTexts>(tok));

  // PROMPT_CACHE: the prefix of the prompt a file holds is restored, not prefilled (the last
  // prompt token always runs: its logits start the reply).
  const std::string cache_path = knobs.get_string("PROMPT_CACHE");
  const uint32_t cache_flags = engine::prompt_cache_flags(knobs);
  engine::PromptCacheLoad cached;
  if (!cache_path.empty()) {
    const auto t_load = std::chrono::steady_clock::now();
    cached = engine::load_prompt_cache(cache_path, fwd, prompt, uint32_t(prompt.size() - 1),
                                       cache_flags);
    print_prompt_cache_load("run", cache_path, cached, prompt.size(), seconds_since(t_load));
  }
  const size_t reused = cached.tokens.size();

  // A prompt longer than one chunk gets a progress bar on a terminal (minutes where experts
  // stream from SSD); the prompt text is shown after it then, not under it.
  const size_t to_prefill = prompt.size() - reused;
  std::optional<Progress> bar;
  if (::isatty(STDERR_FILENO) && to_prefill > fwd.n_ubatch()) {
    bar.emplace("prefill tokens", to_prefill, ProgressUnit::kItems);
    fwd.set_prefill_progress([&bar](size_t done, size_t) { bar->update(done); });
  }
  const auto display_prompt = [&] {
    if (o.no_display_prompt) return;
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
  };
  if (!bar) display_prompt();
  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = fwd.prefill(std::span(prompt).subspan(reused));
  const double prefill_s = seconds_since(t0);
  if (bar) {
    fwd.set_prefill_progress({});
    bar->update(to_prefill);
    bar->finish();
    display_prompt();
  }
  prof.add_prefill(prompt.size() - reused, prefill_s);
  if (!cache_path.empty() && cached.file_tokens != prompt) {
    const uint64_t bytes = engine::save_prompt_cache(cache_path, fwd, prompt, cache_flags);
    std::fprintf(stderr, "run: prompt cache %s: saved %zu tokens (%.1f MiB)\n", cache_path.c_str(),
                 prompt.size(), double(bytes) / (1 << 20));
  }
  prof.probe_tick();  // PROF_PROBE_EVERY's first pass (else nothing)

  t0 = std::chrono::steady_clock::now();
  const double probe_s0 = prof.counters().probe_seconds;
  int generated = 0;
  for (; generated < o.n_predict && !sigint.requested(); ++generated) {
    int32_t id = 0;
    {
      const double before = prof.counters().sampling_seconds;
      {
        const engine::ScopedTimer t(&prof, prof.counters().sampling_seconds);
        id = sampler.sample(logits, constraint ? &*constraint : nullptr);
      }
      // Outside the decode clock (add_decode_token times fwd.decode alone).
      prof.counters().sampling_outside_seconds += prof.counters().sampling_seconds - before;
    }
    if (id < 0) break;  // the schema allows no token of this vocabulary
    if (!o.ignore_eos && tok.vocab().is_eog(id)) break;
    if (constraint) constraint->accept(id);
    const std::string piece = tok.token_to_piece(id, false);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    if (constraint && constraint->finished()) {  // the document is complete
      ++generated;
      break;
    }
    if (generated + 1 < o.n_predict) {
      const auto t_token = std::chrono::steady_clock::now();
      history.push_back(id);
      logits = lookup.decode(id, history);
      const double token_s = seconds_since(t_token);
      prof.add_decode_token(token_s, lookup.n_past(), lookup.ran(), lookup.drafted());
      prof.probe_tick();
      if (prof.level() >= 2)
        std::fprintf(stderr, "%s\n",
                     prof.token_line(prof.counters().decode_tokens, token_s).c_str());
    }
  }
  // Without PROF_PROBE_EVERY's passes (outside the decode, like the prompt's).
  const double decode_s = seconds_since(t0) - (prof.counters().probe_seconds - probe_s0);
  std::fputc('\n', stdout);
  std::fprintf(stderr,
               "run: prefill %zu tokens in %.3f s (%.1f tok/s) | decode %d tokens in %.3f s "
               "(%.1f tok/s) | %d threads, seed %llu\n",
               prompt.size() - reused, prefill_s,
               prefill_s > 0 ? double(prompt.size() - reused) / prefill_s : 0.0, generated,
               decode_s, decode_s > 0 ? generated / decode_s : 0.0, threads,
               static_cast<unsigned long long>(o.sampling.seed));
  if (constraint)
    std::fprintf(stderr,
                 "run: %s: the model's pick refused at %llu of %d tokens (a vocabulary pass each, "
                 "%.1f ms in all)%s\n",
                 o.json.json ? "--json" : "--json-schema",
                 static_cast<unsigned long long>(constraint->masks()), generated,
                 constraint->mask_seconds() * 1e3,
                 constraint->finished() ? "" : "; the document is unfinished");
  if (lookup_p.max_draft > 0)
    std::fprintf(stderr, "run: LOOKUP=%d: %s\n", lookup_p.max_draft,
                 engine::describe(lookup.counters()).c_str());
  finish_prof(prof);
  if (sigint.requested()) {
    std::fprintf(stderr, "run: interrupted after %d tokens\n", generated);
    return sigint.exit_status();
  }
  return 0;
}

}  // namespace

void add_run(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  auto o = std::make_shared<RunOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (default 64)");
  add_sampling_flags(cmd, o->sampling);
  add_json_flags(cmd, o->json);
  cmd->add_option("--seed", o->seed, "Sampling seed (default: random, printed on stderr)");
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_option("--ctx", o->ctx, "KV cache size (default: prompt + -n)");
  cmd->add_flag("--no-display-prompt", o->no_display_prompt, "Do not echo the prompt");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_run(*o); }; });
}

}  // namespace strata::tools
