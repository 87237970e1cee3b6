// engine/prof without a store: time shares sum to 100% (with and without timed parts), latency
// percentiles and max, the verdict follows the largest share, the JSON keeps the Tiers-issue keys
// and has the new ones, begin_window() starts a fresh report, PROF=0 counts nothing.
#include <gtest/gtest.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "engine/prof.h"

namespace strata::engine {
namespace {

double sum(const TimeShares& t) {
  return t.attention + t.expert_ram + t.expert_ssd + t.expert_vram + t.io_wait + t.router +
         t.shared_experts + t.head + t.sampling + t.other;
}

TEST(Prof, SharesSumToOneAndVerdictFollowsTheLargest) {
  Profiler p(1, "");
  p.add_prefill(10, 1.0);
  for (int i = 1; i <= 10; ++i) p.add_decode_token(0.1 * i);  // 5.5 s of decode
  p.counters().compute_seconds[size_t(ExpertHome::kRam)] = 4.0;
  p.counters().sampling_seconds = 0.5;
  p.counters().head_seconds = 0.25;
  const TimeShares t = p.time_shares();
  EXPECT_NEAR(sum(t), 1.0, 1e-9);
  EXPECT_NEAR(t.head, 0.25 / 6.5, 1e-9);
  EXPECT_NEAR(t.expert_ram, 4.0 / 6.5, 1e-9);
  EXPECT_NEAR(t.sampling, 0.5 / 6.5, 1e-9);
  EXPECT_EQ(p.verdict().bound, "RAM-bandwidth-bound");
  EXPECT_EQ(p.verdict().knob, "THREADS");

  const nlohmann::json j = nlohmann::json::parse(p.json());
  for (const char* k : {"version", "prefill_tokens", "prefill_seconds", "prefill_tok_s",
                        "decode_tokens", "decode_seconds", "decode_tok_s", "decode_latency_ms",
                        "tiers", "cache", "io", "plan", "header", "time_shares", "hit_rates",
                        "ssd_gb_per_token", "ceilings_gb_s", "verdict", "machine"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j["decode_latency_ms"]["max"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(j["decode_latency_ms"]["p50"].get<double>(), 500.0);
  double js = 0;
  for (const auto& [k, v] : j["time_shares"].items()) js += v.get<double>();
  EXPECT_NEAR(js, 1.0, 1e-9);
  EXPECT_EQ(j["verdict"]["bound"], "RAM-bandwidth-bound");
  for (const char* tier : {"ram", "ssd", "vram"})
    for (const char* k :
         {"expert_loads", "bytes", "seconds", "gb_s", "experts_served", "served_bytes",
          "experts_computed", "compute_seconds", "achieved_gb_s", "ceiling_pct"})
      EXPECT_TRUE(j["tiers"][tier].contains(k)) << tier << "." << k;

  const std::string r = p.report();
  for (const char* s : {"prof: machine: CPU", "max 1000.0 ms", "prof: time: attention",
                        "prof: hit rates", "prof: verdict: RAM-bandwidth-bound"})
    EXPECT_NE(r.find(s), std::string::npos) << s << "\n" << r;
}

TEST(Prof, CpuExpertsBelowHalfTheProbeAreComputeBound) {
  // A 523-token prefill on the 30B synth streamed its experts at 4.3 GB/s against a 45.9 GB/s
  // probe: that is arithmetic, not RAM bandwidth.
  const Verdict prefill = cpu_experts_verdict(0.55, 4.28, 45.9, false);
  EXPECT_EQ(prefill.bound, "CPU-compute-bound");
  EXPECT_EQ(prefill.knob, "THREADS");
  EXPECT_NE(prefill.why.find("(9% of the probed 45.9 GB/s)"), std::string::npos) << prefill.why;
  EXPECT_NE(prefill.why.find("arithmetic"), std::string::npos) << prefill.why;
  // Decode at the roofline.
  const Verdict decode = cpu_experts_verdict(0.8, 40.0, 45.9, true);
  EXPECT_EQ(decode.bound, "RAM-bandwidth-bound");
  EXPECT_EQ(decode.knob, "VRAM_GB");
  EXPECT_EQ(decode.why.find("arithmetic"), std::string::npos) << decode.why;
  EXPECT_EQ(cpu_experts_verdict(0.8, 0.5 * 45.9, 45.9, false).bound, "RAM-bandwidth-bound");
  // No probe: nothing to hold the rate against; the report says how to get one.
  const Verdict unprobed = cpu_experts_verdict(0.8, 1.0, 0, false);
  EXPECT_EQ(unprobed.bound, "RAM-bandwidth-bound");
  EXPECT_NE(unprobed.why.find("run `strata probe`"), std::string::npos) << unprobed.why;
}

TEST(Prof, RooflineIsBytesPerTokenOverTheProbe) {
  Profiler p(1, "");
  EXPECT_EQ(p.roofline().gb_per_token, 0.0);  // no decode bytes set: no roofline
  p.set_decode_bytes({/*dense=*/1'000'000'000, /*kv_per_position=*/1000});
  TierCeilings c;
  c.ram_gb_s = 10.0;
  c.threads = c.ram_threads = 2;
  p.set_ceilings(c);
  p.add_prefill(4, 1.0);
  p.add_decode_token(0.5, 5);
  p.add_decode_token(0.5, 6);
  p.add_decode_token(1.0, 7);  // a slow token: the mean drops, the median does not
  const Roofline r = p.roofline();
  EXPECT_DOUBLE_EQ(r.dense_gb, 1.0);
  EXPECT_DOUBLE_EQ(r.experts_gb, 0.0);  // no store: no experts served
  EXPECT_NEAR(r.kv_gb, 6e-6, 1e-15);    // 1000 B x (5 + 6 + 7) positions / 3 tokens
  EXPECT_DOUBLE_EQ(r.tok_s, 1.5);
  EXPECT_NEAR(r.gb_s, 1.5 * (1.0 + 6e-6), 1e-12);
  EXPECT_NEAR(r.roofline_tok_s, 10.0 / (1.0 + 6e-6), 1e-9);
  EXPECT_NEAR(r.fraction, 0.15 * (1.0 + 6e-6), 1e-12);
  EXPECT_NEAR(r.fraction_p50, 0.2 * (1.0 + 6e-6), 1e-12);
  const std::string rep = p.report();
  EXPECT_NE(rep.find("prof: roofline: decode read 1.000 GB/token"), std::string::npos) << rep;
  EXPECT_NE(rep.find("RAM read probed 10.0 GB/s at 2 threads"), std::string::npos) << rep;
  EXPECT_NE(rep.find("decode at 15% of it (the median token at 20%)"), std::string::npos) << rep;
  const nlohmann::json j = nlohmann::json::parse(p.json());
  EXPECT_NEAR(j["roofline"]["fraction"].get<double>(), r.fraction, 1e-12);
  EXPECT_NEAR(j["roofline"]["fraction_p50"].get<double>(), r.fraction_p50, 1e-12);
  EXPECT_FALSE(j["ceilings_gb_s"]["ram_now"].get<bool>());

  // PROF_PROBE: the ceiling was measured as the run started, and the report says so.
  c.ram_now = true;
  p.set_ceilings(c);
  EXPECT_NE(p.report().find("RAM read probed 10.0 GB/s at 2 threads as the run started"),
            std::string::npos)
      << p.report();
  EXPECT_TRUE(nlohmann::json::parse(p.json())["ceilings_gb_s"]["ram_now"].get<bool>());
}

// LOOKUP: a pass that runs a token and its draft reads the dense weights once; the tokens served
// from drafted rows add no pass, no dense bytes and no KV bytes. The report says so, and the
// median token's rate (meaningless when most tokens cost nothing) is left out.
TEST(Prof, LookupReadsTheDenseWeightsOncePerPass) {
  Profiler p(1, "");
  p.set_decode_bytes({/*dense=*/1'000'000'000, /*kv_per_position=*/1000});
  TierCeilings c;
  c.ram_gb_s = 10.0;
  c.threads = c.ram_threads = 2;
  p.set_ceilings(c);
  p.add_decode_token(0.6, 5, /*ran=*/true, /*drafted=*/3);  // a pass over a token + 3 drafted
  p.add_decode_token(0.0, 6, /*ran=*/false);                // two drafted rows used
  p.add_decode_token(0.0, 7, /*ran=*/false);
  p.add_decode_token(0.4, 8, /*ran=*/true, /*drafted=*/0);  // the third drafted row was not
  EXPECT_EQ(p.counters().decode_tokens, 4u);
  EXPECT_EQ(p.counters().decode_steps, 2u);
  EXPECT_EQ(p.counters().lookup_drafted, 3u);
  EXPECT_EQ(p.counters().lookup_accepted, 2u);
  const Roofline r = p.roofline();
  EXPECT_DOUBLE_EQ(r.dense_gb, 0.5);                   // 2 passes x 1 GB over 4 tokens
  EXPECT_NEAR(r.kv_gb, 1000.0 * 13 / 4 / 1e9, 1e-15);  // positions 5 and 8, the passes'
  EXPECT_DOUBLE_EQ(r.tok_s, 4.0);
  EXPECT_EQ(r.fraction_p50, 0.0);
  const std::string rep = p.report();
  EXPECT_NE(rep.find("prof: lookup: 2 forward passes for 4 decode tokens (2.00 tokens a pass); 2 "
                     "of 3 drafted tokens used (67%)"),
            std::string::npos)
      << rep;
  EXPECT_EQ(rep.find("the median token"), std::string::npos) << rep;
  const nlohmann::json j = nlohmann::json::parse(p.json());
  EXPECT_EQ(j["decode_steps"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["lookup"]["drafted"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["lookup"]["accepted"].get<uint64_t>(), 2u);

  // Without LOOKUP there is no lookup line.
  Profiler q(1, "");
  q.add_decode_token(0.5);
  EXPECT_EQ(q.report().find("prof: lookup"), std::string::npos);
}

// PROF_PROBE_EVERY: a real pass (real threads, a real buffer) after the prompt and after every N
// decode tokens; each window between two passes is held against the mean of those two.
TEST(Prof, InRunProbeHoldsEachWindowAgainstItsOwnPasses) {
  Profiler p(1, "");
  p.set_decode_bytes({/*dense=*/1'000'000'000, /*kv_per_position=*/0});
  EXPECT_EQ(p.probe_tick(), 0.0);  // no probe: nothing, and nothing reported
  EXPECT_EQ(p.run_probe().passes, 0u);
  EXPECT_TRUE(nlohmann::json::parse(p.json())["run_probe"].is_null());
  EXPECT_EQ(p.report().find("in-run probe"), std::string::npos);

  p.set_run_probe(std::make_unique<placement::RamReadProbe>(2, 8 << 20), 4);
  p.add_prefill(4, 1.0);
  EXPECT_GT(p.probe_tick(), 0.0);  // the first pass, after the prompt
  EXPECT_NE(p.report().find("no window yet"), std::string::npos) << p.report();
  for (int t = 0; t < 4; ++t) {
    p.add_decode_token(0.5, 5 + t);
    p.counters().decode_expert_ram_bytes += 500'000'000;  // what a store would have served
    p.counters().compute_seconds[size_t(ExpertHome::kRam)] += 0.25;
    const double spent = p.probe_tick();
    if (t < 3) {
      EXPECT_EQ(spent, 0.0) << t;
    } else {
      EXPECT_GT(spent, 0.0);
    }
  }
  const RunProbe r = p.run_probe();
  EXPECT_EQ(r.every, 4);
  EXPECT_EQ(r.bytes, uint64_t{8 << 20});
  EXPECT_EQ(r.passes, 2u);
  EXPECT_EQ(r.windows, 1u);
  EXPECT_DOUBLE_EQ(r.seconds, p.counters().probe_seconds);
  ASSERT_GT(r.min_gb_s, 0.0);
  EXPECT_LE(r.min_gb_s, r.median_gb_s);
  EXPECT_LE(r.median_gb_s, r.max_gb_s);
  // The window: 4 tokens read 4 GB of dense weights and 2 GB of experts in 2 s of decode (3 GB/s);
  // the experts' 2 GB took 1 s of expert compute (2 GB/s). Both over the mean of the two passes.
  const double probe = 0.5 * (r.min_gb_s + r.max_gb_s);
  EXPECT_NEAR(r.roofline_p50, 3.0 / probe, 1e-9 * r.roofline_p50);
  EXPECT_NEAR(r.experts_p50, 2.0 / probe, 1e-9 * r.experts_p50);
  EXPECT_DOUBLE_EQ(r.roofline_p25, r.roofline_p50);  // one window: every quartile is it
  EXPECT_DOUBLE_EQ(r.experts_p75, r.experts_p50);
  const std::string rep = p.report();
  EXPECT_NE(rep.find("prof: in-run probe: 2 passes of 8 MiB at 2 threads, one after the prompt "
                     "and after every 4 decode tokens"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("per window between two passes (median of 1, quartiles): decode at"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("experts streamed at"), std::string::npos) << rep;
  const nlohmann::json j = nlohmann::json::parse(p.json())["run_probe"];
  EXPECT_EQ(j["passes"].get<size_t>(), 2u);
  EXPECT_EQ(j["windows"].get<size_t>(), 1u);
  EXPECT_EQ(j["every"].get<int>(), 4);
  EXPECT_DOUBLE_EQ(j["experts_fraction"]["p50"].get<double>(), r.experts_p50);
  EXPECT_DOUBLE_EQ(j["roofline_fraction"]["p50"].get<double>(), r.roofline_p50);
  EXPECT_DOUBLE_EQ(j["gb_s"]["median"].get<double>(), r.median_gb_s);

  p.begin_window();  // a new window starts over
  EXPECT_EQ(p.run_probe().passes, 0u);
  EXPECT_EQ(p.run_probe().windows, 0u);
}

TEST(Prof, OvershootingPartsAreScaledNotNegative) {
  Profiler p(1, "");
  p.add_prefill(1, 1.0);
  p.counters().compute_seconds[size_t(ExpertHome::kSsd)] = 0.9;
  p.counters().sampling_seconds = 0.3;  // not inside the clock, but not said to be outside
  const TimeShares t = p.time_shares();
  EXPECT_NEAR(sum(t), 1.0, 1e-9);
  EXPECT_EQ(t.other, 0.0);
}

// `strata run` times its sampler outside the decode clock: the shares divide the time of both.
TEST(Prof, SamplingOutsideTheClockAddsToTheTotal) {
  Profiler p(1, "");
  p.add_prefill(1, 1.0);
  p.counters().compute_seconds[size_t(ExpertHome::kRam)] = 0.9;
  p.counters().sampling_seconds = 0.5;
  p.counters().sampling_outside_seconds = 0.5;
  const TimeShares t = p.time_shares();
  EXPECT_NEAR(sum(t), 1.0, 1e-9);
  EXPECT_NEAR(t.expert_ram, 0.9 / 1.5, 1e-9);
  EXPECT_NEAR(t.sampling, 0.5 / 1.5, 1e-9);
  EXPECT_NEAR(t.other, 0.1 / 1.5, 1e-9);
}

TEST(Prof, NothingRunIsBalancedAndAllOther) {
  Profiler p(1, "");
  EXPECT_NEAR(sum(p.time_shares()), 1.0, 1e-12);
  EXPECT_EQ(p.verdict().bound, "balanced");
}

TEST(Prof, BeginWindowStartsOver) {
  Profiler p(1, "");
  p.reserve_decode(64);
  p.add_prefill(5, 1.0);
  p.add_decode_token(0.5);
  p.begin_window();
  EXPECT_EQ(p.counters().prefill_tokens, 0u);
  EXPECT_EQ(p.counters().decode_tokens, 0u);
  EXPECT_TRUE(p.counters().decode_token_seconds.empty());
  EXPECT_GE(p.counters().decode_token_seconds.capacity(), 64u);  // still preallocated
}

// `strata bench`'s untimed work (a -d prefill, a warm-up) leaves no trace in the report; what the
// timed parts add around it stays.
TEST(Prof, UntimedIntervalsAreLeftOut) {
  Profiler p(1, "");
  p.counters().attention_seconds = 1.0;
  p.add_decode_token(2.0, 10);
  p.begin_untimed();
  p.counters().attention_seconds += 50.0;  // a deep context's prefill
  p.counters().compute_seconds[size_t(ExpertHome::kRam)] += 30.0;
  p.counters().router_seconds += 5.0;
  p.end_untimed();
  p.counters().attention_seconds += 0.5;
  p.add_decode_token(1.0, 11);
  EXPECT_EQ(p.counters().decode_tokens, 2u);
  EXPECT_DOUBLE_EQ(p.counters().attention_seconds, 1.5);
  EXPECT_DOUBLE_EQ(p.counters().compute_seconds[size_t(ExpertHome::kRam)], 0.0);
  EXPECT_DOUBLE_EQ(p.counters().router_seconds, 0.0);
  EXPECT_EQ(p.counters().decode_token_seconds.size(), 2u);
  EXPECT_NEAR(p.time_shares().attention, 1.5 / 3.0, 1e-12);
  // Half the run in attention: the verdict offers F16 rows, then (already f16 or q8_0) a shorter
  // context.
  EXPECT_EQ(p.verdict().bound, "attention-bound");
  EXPECT_EQ(p.verdict().knob, "KV_TYPE");
  DecodeBytes b;
  b.kv_f32 = false;
  p.set_decode_bytes(b);
  EXPECT_EQ(p.verdict().knob, "--ctx");
}

// Attention-bound at a short context: the KV pass is small beside the dense weights (the q/k/v/o
// projections), so the verdict names no KV knob; at a long one it does.
TEST(Prof, AttentionVerdictTellsProjectionsFromTheKvPass) {
  Profiler p(1, "");
  DecodeBytes b;
  b.dense = 40'000'000;
  b.kv_per_position = 100'000;
  p.set_decode_bytes(b);
  p.counters().attention_seconds = 2.0;
  p.add_decode_token(1.5, 10);  // 1 MB of KV against 40 MB of dense weights
  p.add_decode_token(1.5, 12);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_step(), 1.1e6);
  EXPECT_EQ(p.verdict().bound, "attention-bound");
  EXPECT_EQ(p.verdict().knob, "-");
  EXPECT_NE(p.verdict().why.find("mostly its q/k/v/o projections"), std::string::npos)
      << p.verdict().why;
  Profiler q(1, "");
  q.set_decode_bytes(b);
  q.counters().attention_seconds = 2.0;
  q.add_decode_token(1.5, 4000);  // 400 MB of KV
  q.add_decode_token(1.5, 4001);
  EXPECT_EQ(q.verdict().knob, "KV_TYPE");
}

TEST(Prof, OffMeansOff) {
  Profiler p(0, "");
  EXPECT_FALSE(p.enabled());
  double into = 0;
  { const ScopedTimer t(&p, into); }
  EXPECT_EQ(into, 0.0);
}

TEST(Prof, MachineSummaryNamesTheHost) {
  const std::string m = machine_summary();
  EXPECT_NE(m.find("CPU "), std::string::npos) << m;
  EXPECT_NE(m.find("RAM "), std::string::npos) << m;
  EXPECT_NE(m.find("GPUs "), std::string::npos) << m;
}

}  // namespace
}  // namespace strata::engine

namespace strata::engine {
namespace {

// Shared experts (DeepSeek / GLM / Qwen2-MoE) get their own share instead of hiding in "other",
// in the text report, the JSON and the verdict (they count as expert compute).
TEST(Prof, SharedExpertsHaveTheirOwnShare) {
  Profiler p(1, "");
  p.add_prefill(1, 1.0);
  p.counters().compute_seconds[size_t(ExpertHome::kRam)] = 0.3;
  p.counters().shared_expert_seconds = 0.3;
  p.counters().attention_seconds = 0.3;
  const TimeShares t = p.time_shares();
  EXPECT_NEAR(sum(t), 1.0, 1e-9);
  EXPECT_NEAR(t.shared_experts, 0.3, 1e-9);
  EXPECT_NEAR(t.other, 0.1, 1e-9);
  EXPECT_NE(p.report().find("shared experts 30.0%"), std::string::npos) << p.report();
  EXPECT_NEAR(nlohmann::json::parse(p.json())["time_shares"]["shared_experts"].get<double>(), 0.3,
              1e-9);
  // Routed 30% + shared 30%: expert compute bounds the run (not "balanced"). No shared bytes
  // counted: the GPU computed them (CUDA_DENSE), so the rate is the routed experts' alone.
  EXPECT_EQ(p.verdict().bound, "RAM-bandwidth-bound") << p.verdict().why;
  EXPECT_NE(p.verdict().why.find("shared experts 30% of the run on the GPU, routed 30% at 0.00"),
            std::string::npos)
      << p.verdict().why;
  EXPECT_EQ(p.report().find("prof: shared experts:"), std::string::npos) << p.report();
  // 3 GB read by the CPU in their 0.3 s: 10 GB/s of their own, and the expert rate the verdict
  // quotes is both kinds' bytes over both kinds' compute, (0 + 3 GB) / 0.6 s.
  p.counters().shared_expert_bytes = 3'000'000'000;
  EXPECT_NE(p.verdict().why.find("streaming expert weights at 5.00 GB/s"), std::string::npos)
      << p.verdict().why;
  EXPECT_NE(p.verdict().why.find("shared experts 30% of the run at 10.00 GB/s, routed 30%"),
            std::string::npos)
      << p.verdict().why;
  EXPECT_NE(p.report().find("prof: shared experts: 3.000 GB read in 0.300 s of their compute, "
                            "10.00 GB/s"),
            std::string::npos)
      << p.report();
  EXPECT_NEAR(nlohmann::json::parse(p.json())["shared_experts"]["gb_s"].get<double>(), 10.0, 1e-9);
  // Below half together: balanced, the sentence naming the shared experts' share.
  p.counters().compute_seconds[size_t(ExpertHome::kRam)] = 0.1;
  EXPECT_EQ(p.verdict().bound, "balanced");
  EXPECT_NE(p.verdict().why.find("shared experts 30%"), std::string::npos) << p.verdict().why;
  // A model without them keeps the line as it was.
  Profiler q(1, "");
  q.add_prefill(1, 1.0);
  EXPECT_EQ(q.report().find("shared experts"), std::string::npos);
}

// The SSD-bound verdict's advice (RAM_GB=<every expert>) says when this machine could not hold
// that much beside the dense weights and the KV cache.
TEST(Prof, RamFitNoteOnlyWhenEveryExpertCannotFit) {
  EXPECT_EQ(ram_fit_note(0, 10ull << 30), "");            // unknown
  EXPECT_EQ(ram_fit_note(12ull << 30, 10ull << 30), "");  // they fit
  EXPECT_EQ(ram_fit_note(9ull << 30, 10ull << 30),
            ", but this machine held at most 9.000 GiB of experts beside the dense weights and KV "
            "cache: the rest needs more memory (or a smaller quantization)");
}

}  // namespace
}  // namespace strata::engine
