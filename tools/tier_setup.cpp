// Tiered source + profiler for replay/run (see tier_setup.h).
#include "tools/tier_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/gpu_lane.h"
#include "io/check.h"
#include "kernels/gemv.h"
#include "placement/machine_profile.h"
#include "placement/plan.h"
#include "tools/progress.h"

namespace strata::tools {

TierSetup make_tier_setup(engine::Model& model, const engine::Knobs& knobs, uint32_t n_ctx,
                          bool progress_bar, bool record_usage, bool learn, int reply_tokens) {
  TierSetup s;
  const int level = static_cast<int>(knobs.get_int("PROF"));
  s.prof = std::make_unique<engine::Profiler>(level, knobs.get_string("PROF_JSON"));
  // "% of ceiling" needs `strata probe`'s measured bandwidths (none: the report says so).
  if (s.prof->enabled()) s.prof->set_ceilings(engine::probed_ceilings(knobs));
  engine::DecodeBytes per_token;
  per_token.dense = engine::dense_bytes_per_token(model.weights());
  const engine::ModelConfig& cfg = model.config();
  engine::TierOptions opts = engine::tier_options(knobs);
  // Placement adapts by itself (PROMPT_PLACE, USAGE_AUTO) only in run, chat and serve: replay,
  // stats and bench measure the plan they were given.
  if (!learn) opts.prompt_place = false;
  per_token.kv_per_position = engine::KvCache::position_bytes(cfg, opts.kv_type);
  per_token.kv_f32 = opts.kv_type == engine::KvType::kF32;
  s.kv_type = opts.kv_type;
  opts.n_ctx = n_ctx;
  opts.prof = s.prof.get();
  // The disk's measured speed decides whether a zstd sidecar pays (ZSTD=auto); without a
  // profile from `strata probe`, the conservative default.
  const std::string profile =
      (std::filesystem::path(engine::cache_dir(knobs)) / "machine.json").string();
  const placement::MachineProfile machine = std::filesystem::exists(profile)
                                                ? placement::load_machine_profile(profile)
                                                : placement::default_machine_profile();
  opts.ssd_gbps = machine.ssd_gbps();
  // QD: expert reads in flight; auto = the probe's best queue depth (deeper can be slower).
  const int probed_qd = machine.best_queue_depth();
  opts.queue_depth = static_cast<int>(
      knobs.int_opt("QD").value_or(probed_qd > 0 ? probed_qd : engine::kDefaultQueueDepth));
  s.usage = apply_placement_knobs(model, knobs, opts, record_usage, learn);
  opts.on_plan = [usage = s.usage.get()](const placement::PlacementPlan& plan) {
    const std::string text = plan.describe();
    std::fprintf(stderr, "strata: %s\n", text.substr(0, text.find('\n')).c_str());
    // USAGE_AUTO's profile placed the experts; said only when some are off RAM (it mattered).
    if (usage && usage->learned_tokens() > 0 &&
        plan.count(placement::HomeKind::kRam) < plan.sizes().total_experts())
      std::fprintf(stderr,
                   "strata: placed by this model's usage in earlier runs (%llu tokens, %s; "
                   "USAGE_AUTO=0 to plan without it)\n",
                   static_cast<unsigned long long>(usage->learned_tokens()),
                   usage->learned_from().c_str());
  };
  std::unique_ptr<Progress> bar;
  if (progress_bar)
    opts.progress = [&bar](uint64_t done, uint64_t total) {
      if (!bar) bar = std::make_unique<Progress>("strata: loading RAM-homed experts", total);
      bar->update(done);
    };
  try {
    s.experts = std::make_unique<engine::ExpertSource>(model, opts);
    s.experts->set_reply_hint(reply_tokens);
  } catch (...) {
    if (bar) bar->abort();
    throw;
  }
  if (bar) bar->finish();
  // CUDA_DENSE: the matrices GPU 0 holds are read from VRAM, not RAM, by every decode token.
  if (s.experts->gpu_dense() != nullptr) {
    per_token.vram_dense = std::min(engine::gpu_dense_bytes(model), per_token.dense);
    per_token.dense -= per_token.vram_dense;
  }
  s.prof->set_decode_bytes(per_token);
  // DENSE_ARENA and REPACK: the dense tensors into one huge-page arena (interleaved on the way),
  // or REPACK alone in place, now that they are resident (private, writable).
  uint64_t repacked = 0;
  engine::DenseArrangement arranged;
  if (s.experts->resident_dense_bytes() > 0) {
    if (opts.dense_arena) {
      arranged = model.arrange_dense(opts.repack, opts.numa);
      repacked = arranged.repacked_bytes;
      const std::string why = engine::dense_huge_page_notice(arranged, engine::thp_mode());
      if (!why.empty() && opts.notice) opts.notice(why);
    } else if (opts.repack) {
      repacked = model.interleave_dense();
    }
  }
  s.trace = make_route_trace(model, knobs);  // after the source: a refused run writes no trace

  std::string header = "knobs: " + knobs.describe() + "\n";
  header += fmt::format("cpu kernels: {}{}\n", kernels::isa_name(kernels::best_isa()),
                        kernels::best_isa() == kernels::Isa::kAvx2
                            ? (kernels::avxvnni_in_use() ? " + AVX-VNNI" : " (no AVX-VNNI)")
                            : "");
  if (const placement::PlacementPlan* plan = s.experts->plan()) {
    header += plan->describe();
    if (const tiers::Sidecar* sc = s.experts->sidecar())
      header += fmt::format("zstd: SSD experts from {} (ratio {:.3f})\n", sc->path, sc->ratio());
    const tiers::TierCounters& ram = s.experts->store()->counters().ram;
    header += fmt::format(
        "load: dense {} resident in {:.2f} s; {} RAM-homed experts ({}) read in {:.2f} s "
        "({:.2f} GB/s)",
        placement::format_bytes(s.experts->resident_dense_bytes()),
        s.experts->resident_dense_seconds(), ram.loads, placement::format_bytes(ram.load_bytes),
        ram.load_seconds,
        ram.load_seconds > 0 ? static_cast<double>(ram.load_bytes) / 1e9 / ram.load_seconds : 0.0);
    if (opts.repack)
      header += fmt::format("; REPACK: {} of RAM experts and {} of dense weights interleaved",
                            placement::format_bytes(s.experts->store()->repacked_bytes()),
                            placement::format_bytes(repacked));
    if (arranged.moved_bytes > 0)
      header += fmt::format(
          "; DENSE_ARENA: {} of dense tensors in a 2 MiB-aligned arena, {} of "
          "it on huge pages",
          placement::format_bytes(arranged.moved_bytes),
          placement::format_bytes(arranged.huge_bytes));
    s.prof->set_store(s.experts->store());
    s.prof->set_plan(plan);
    s.prof->set_gpu(s.experts->gpu_lane());
  } else {
    header += "plan: no routed experts (dense model)";
  }
  s.prof->set_header(header);
  return s;
}

void warn_context_beyond_training(uint32_t n_ctx, const engine::Model& model) {
  const engine::ModelConfig& cfg = model.config();
  if (cfg.n_ctx_train > 0 && n_ctx > cfg.n_ctx_train)
    fmt::print(stderr, "strata: warning: context {} exceeds the model's training context {}\n",
               n_ctx, cfg.n_ctx_train);
  // LongRoPE: the context size, not the prompt, picks the factor set (as in llama.cpp).
  const engine::ModelWeights& w = model.weights();
  if (w.rope_long.present()) {
    const bool long_set = engine::rope_long_set(w, cfg, n_ctx);
    fmt::print(stderr,
               "strata: LongRoPE: context {} {} the original {}: keys turn by the {} factor set "
               "(--ctx picks it, as llama.cpp's -c does; the two sets give different outputs)\n",
               n_ctx, long_set ? "exceeds" : "is within", cfg.rope_n_ctx_orig(),
               long_set ? "long" : "short");
  }
}

int probe_every_knob(const engine::Knobs& knobs) {
  const int every = static_cast<int>(knobs.get_int("PROF_PROBE_EVERY"));
  if (every > 0 && knobs.get_int("PROF_PROBE") == 0)
    fail(ErrorKind::kBadValue,
         "PROF_PROBE_EVERY={} needs PROF_PROBE, the MiB each pass reads (e.g. PROF_PROBE=2048)",
         every);
  return every;
}

void arm_run_probe(engine::Profiler& prof, const engine::Knobs& knobs, int threads) {
  const int every = probe_every_knob(knobs);
  if (!prof.enabled() || every == 0) return;
  prof.set_run_probe(std::make_unique<placement::RamReadProbe>(
                         threads, uint64_t(knobs.get_int("PROF_PROBE")) << 20),
                     every);
}

void finish_prof(const engine::Profiler& prof) {
  if (prof.level() >= 1) std::fputs(prof.report().c_str(), stderr);
  prof.write_json();
}

void print_prompt_cache_load(const char* cmd, const std::string& path,
                             const engine::PromptCacheLoad& load, size_t n_prompt, double seconds) {
  if (!load.found) {
    fmt::print(stderr, "{}: prompt cache {}: none yet; written after this run's prefill\n", cmd,
               path);
  } else if (!load.ignored.empty()) {
    fmt::print(stderr, "{}: prompt cache {}: not used ({}); it will be overwritten\n", cmd, path,
               load.ignored);
  } else if (n_prompt > 0) {
    fmt::print(stderr,
               "{}: prompt cache {}: {} of the prompt's {} tokens restored in {:.2f} s (the file "
               "holds {})\n",
               cmd, path, load.tokens.size(), n_prompt, seconds, load.file_tokens.size());
  } else {
    fmt::print(stderr,
               "{}: prompt cache {}: {} tokens restored in {:.2f} s; the first turn keeps the "
               "prefix it shares with them\n",
               cmd, path, load.tokens.size(), seconds);
  }
}

}  // namespace strata::tools
