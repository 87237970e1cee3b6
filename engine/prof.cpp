// PROF counters, the stderr report and the JSON file (see prof.h; schema in docs/FORMATS.md).
// Tested by tests/test_tier_invariance.cpp.
#include "engine/prof.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/check.h"
#include "placement/plan.h"

namespace strata::engine {
namespace {

constexpr const char* kTierNames[] = {"ram", "ssd", "vram"};  // ExpertHome order

double rate(double n, double seconds) {
  return seconds > 0 ? n / seconds : 0.0;
}

// Nearest-rank percentile of a copy (p in 0..100); 0 for no samples.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

const tiers::TierCounters& tier(const tiers::StoreCounters& s, size_t home) {
  return home == size_t(ExpertHome::kRam)   ? s.ram
         : home == size_t(ExpertHome::kSsd) ? s.ssd
                                            : s.vram;
}

}  // namespace

Profiler::Profiler(int level, std::string json_path)
    : level_(level), enabled_(level > 0 || !json_path.empty()), json_path_(std::move(json_path)) {}

void Profiler::add_prefill(uint64_t tokens, double seconds) {
  c_.prefill_tokens += tokens;
  c_.prefill_seconds += seconds;
}

void Profiler::add_decode_token(double seconds) {
  ++c_.decode_tokens;
  c_.decode_seconds += seconds;
  c_.decode_token_seconds.push_back(seconds);
}

std::string Profiler::token_line(uint64_t index, double seconds) {
  const tiers::StoreCounters now = store_ ? store_->counters() : tiers::StoreCounters{};
  const std::string line = fmt::format(
      "prof: decode token {}: {:.1f} ms, ssd {} experts {:.1f} MB, cache {}/{} hits, wait {:.1f} "
      "ms",
      index, seconds * 1e3, now.ssd.loads - last_.ssd.loads,
      static_cast<double>(now.ssd.load_bytes - last_.ssd.load_bytes) / 1e6,
      now.cache_hits - last_.cache_hits,
      (now.cache_hits + now.cache_misses) - (last_.cache_hits + last_.cache_misses),
      (now.io_wait_seconds - last_.io_wait_seconds) * 1e3);
  last_ = now;
  return line;
}

std::string Profiler::report() const {
  const tiers::StoreCounters s = store_ ? store_->counters() : tiers::StoreCounters{};
  std::string out;
  if (!header_.empty()) {
    size_t at = 0;
    while (at < header_.size()) {
      const size_t nl = header_.find('\n', at);
      out += "prof: " + header_.substr(at, nl - at) + "\n";
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  const auto& d = c_.decode_token_seconds;
  out += fmt::format(
      "prof: prefill {} tokens in {:.3f} s ({:.2f} tok/s) | decode {} tokens in {:.3f} s ({:.2f} "
      "tok/s), latency p50 {:.1f} ms p90 {:.1f} ms p99 {:.1f} ms\n",
      c_.prefill_tokens, c_.prefill_seconds, rate(double(c_.prefill_tokens), c_.prefill_seconds),
      c_.decode_tokens, c_.decode_seconds, rate(double(c_.decode_tokens), c_.decode_seconds),
      percentile(d, 50) * 1e3, percentile(d, 90) * 1e3, percentile(d, 99) * 1e3);
  out += fmt::format("prof: {:<5} {:>10} {:>12} {:>9} {:>12} {:>9} {:>8} {:>10}\n", "tier",
                     "computed", "served", "loads", "load bytes", "load s", "GB/s", "compute s");
  for (size_t h = 0; h < kNumHomes; ++h) {
    const tiers::TierCounters& t = tier(s, h);
    out +=
        fmt::format("prof: {:<5} {:>10} {:>12} {:>9} {:>12} {:>9.3f} {:>8.3f} {:>10.3f}\n",
                    kTierNames[h], c_.experts_computed[h], placement::format_bytes(t.served_bytes),
                    t.loads, placement::format_bytes(t.load_bytes), t.load_seconds,
                    rate(double(t.load_bytes) / 1e9, t.load_seconds), c_.compute_seconds[h]);
  }
  const tiers::ExpertCache* cache = store_ ? store_->cache() : nullptr;
  out += fmt::format(
      "prof: cache: {} hits, {} misses, hit rate {:.1f}%, {} evictions, {} slots of {}\n",
      s.cache_hits, s.cache_misses, 100.0 * s.hit_rate(), s.evictions, cache ? cache->n_slots() : 0,
      placement::format_bytes(cache ? cache->slot_bytes() : 0));
  const double run_s = c_.prefill_seconds + c_.decode_seconds;
  out += fmt::format(
      "prof: io: wait felt {:.3f} s ({:.1f}% of prefill + decode), service {:.3f} s (summed over "
      "{} reads), {}{}\n",
      s.io_wait_seconds, run_s > 0 ? 100.0 * s.io_wait_seconds / run_s : 0.0, s.io_service_seconds,
      s.reads, store_ ? (store_->uring() ? "io_uring" : "pread pool") : "no SSD tier",
      store_ ? (store_->direct() ? " + O_DIRECT" : " + buffered") : "");
  return out;
}

std::string Profiler::json() const {
  using nlohmann::json;
  const tiers::StoreCounters s = store_ ? store_->counters() : tiers::StoreCounters{};
  const auto& d = c_.decode_token_seconds;
  json j;
  j["version"] = 1;
  j["prefill_tokens"] = c_.prefill_tokens;
  j["prefill_seconds"] = c_.prefill_seconds;
  j["prefill_tok_s"] = rate(double(c_.prefill_tokens), c_.prefill_seconds);
  j["decode_tokens"] = c_.decode_tokens;
  j["decode_seconds"] = c_.decode_seconds;
  j["decode_tok_s"] = rate(double(c_.decode_tokens), c_.decode_seconds);
  j["decode_latency_ms"] = {{"p50", percentile(d, 50) * 1e3},
                            {"p90", percentile(d, 90) * 1e3},
                            {"p99", percentile(d, 99) * 1e3}};
  json tiers_j = json::object();
  for (size_t h = 0; h < kNumHomes; ++h) {
    const tiers::TierCounters& t = tier(s, h);
    tiers_j[kTierNames[h]] = {{"expert_loads", t.loads},
                              {"bytes", t.load_bytes},
                              {"seconds", t.load_seconds},
                              {"gb_s", rate(double(t.load_bytes) / 1e9, t.load_seconds)},
                              {"experts_served", t.served},
                              {"served_bytes", t.served_bytes},
                              {"experts_computed", c_.experts_computed[h]},
                              {"compute_seconds", c_.compute_seconds[h]}};
  }
  j["tiers"] = tiers_j;
  const tiers::ExpertCache* cache = store_ ? store_->cache() : nullptr;
  j["cache"] = {{"hits", s.cache_hits},
                {"misses", s.cache_misses},
                {"hit_rate", s.hit_rate()},
                {"evictions", s.evictions},
                {"slots", cache ? cache->n_slots() : 0},
                {"slot_bytes", cache ? cache->slot_bytes() : 0}};
  j["io"] = {{"wait_seconds", s.io_wait_seconds},
             {"service_seconds", s.io_service_seconds},
             {"reads", s.reads},
             {"uring", store_ ? store_->uring() : false},
             {"direct", store_ ? store_->direct() : false}};
  if (store_) {
    const placement::PlacementPlan& p = store_->plan();
    j["plan"] = {{"ram_budget_bytes", p.budgets().ram_bytes},
                 {"ram_used_bytes", p.ram_bytes_used()},
                 {"cache_bytes", p.cache_bytes()},
                 {"experts_ram", p.count(placement::HomeKind::kRam)},
                 {"experts_ssd", p.count(placement::HomeKind::kSsd)},
                 {"experts_vram", p.count(placement::HomeKind::kVram)},
                 {"bytes_ram", p.bytes(placement::HomeKind::kRam)},
                 {"bytes_ssd", p.bytes(placement::HomeKind::kSsd)},
                 {"bytes_vram", p.bytes(placement::HomeKind::kVram)}};
  } else {
    j["plan"] = nullptr;
  }
  j["header"] = header_;
  return j.dump(2) + "\n";
}

void Profiler::write_json() const {
  if (json_path_.empty()) return;
  const std::string tmp = json_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(ErrorKind::kIo, "{}: cannot write the PROF JSON file", tmp);
    out << json();
    out.flush();
    if (!out) fail(ErrorKind::kIo, "{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, json_path_, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(ErrorKind::kIo, "{}: cannot rename the PROF JSON file into place", json_path_);
  }
}

}  // namespace strata::engine
