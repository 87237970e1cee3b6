// CLI glue shared by the commands that run a model (replay, run, chat): the tiered ExpertSource and
// the Profiler from the knobs, the plan line printed before the experts load, and the PROF output
// at the end. Exercised by tests/test_tier_invariance.cpp and tests/test_tier_faults.cpp.
#pragma once

#include <memory>

#include "engine/expert_source.h"
#include "engine/knobs.h"
#include "engine/model.h"
#include "engine/prof.h"
#include "engine/prompt_cache.h"
#include "tools/placement_setup.h"

namespace strata::tools {

struct TierSetup {
  std::unique_ptr<engine::Profiler> prof;
  std::unique_ptr<UsageRecorder>
      usage;  // USAGE_SAVE / USAGE_AUTO; saves at exit (outlives experts)
  // ROUTE_TRACE; finished at exit. Give it to ForwardOptions::route_trace.
  std::unique_ptr<placement::RouteTraceWriter> trace;
  std::unique_ptr<engine::ExpertSource> experts;
  engine::KvType kv_type = engine::KvType::kF32;  // KV_TYPE: give it to ForwardOptions::kv_type
};

// Prints "strata: plan: ..." (every line at PROF >= 1, the totals line otherwise) and builds the
// source (dense weights resident, RAM homes loaded). n_ctx: the KV positions the run allocates.
// progress_bar: draw a bar on stderr while RAM-homed experts load (chat; a terminal only, else
// one summary line). record_usage: count usage even without USAGE_SAVE (chat's /save-usage).
// learn: USAGE_AUTO's learned profile is read and added to (run, chat, serve; see
// apply_placement_knobs), and PROMPT_PLACE may run (off otherwise). reply_tokens: the most tokens
// each reply will decode when the command knows (run's and chat's -n; -1: unknown), given to
// ExpertSource::set_reply_hint.
TierSetup make_tier_setup(engine::Model& model, const engine::Knobs& knobs, uint32_t n_ctx,
                          bool progress_bar = false, bool record_usage = false, bool learn = false,
                          int reply_tokens = -1);

// One warning line on stderr when n_ctx (the KV positions a command allocates) exceeds the model's
// training context (context_length): positions past it are extrapolation. And for a LongRoPE model
// (phimoe) one line naming the factor set n_ctx picks (engine::rope_freq_factors).
void warn_context_beyond_training(uint32_t n_ctx, const engine::Model& model);

// PROF_PROBE_EVERY (run, chat): 0 when off; a one-line error when it is set without PROF_PROBE
// (the MiB each pass reads). Call before the model loads.
int probe_every_knob(const engine::Knobs& knobs);

// PROF_PROBE_EVERY > 0 with PROF on: the profiler holds a RamReadProbe of PROF_PROBE MiB at
// `threads` for the run (Profiler::probe_tick takes its passes).
void arm_run_probe(engine::Profiler& prof, const engine::Knobs& knobs, int threads);

// PROF >= 1: the report on stderr; PROF_JSON: the JSON file.
void finish_prof(const engine::Profiler& prof);

// PROMPT_CACHE's line on stderr after load_prompt_cache: what was restored (n_prompt: the
// prompt's tokens, 0 in chat where the first turn decides), or why the file was not used.
void print_prompt_cache_load(const char* cmd, const std::string& path,
                             const engine::PromptCacheLoad& load, size_t n_prompt, double seconds);

}  // namespace strata::tools
