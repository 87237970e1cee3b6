// MOEL / MOER readers and writers (see logit_dump.h). Little-endian host assumed (x86-64).
// Exercised by tests/test_model_forward.cpp and tests/test_model_replay.cpp.
#include "engine/logit_dump.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "io/check.h"

namespace strata::engine {
namespace {

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "{}: cannot open for reading", path);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
}

// Sequential reader over a file image; every failure names the offset.
class Cursor {
 public:
  Cursor(const std::string& path, const std::vector<char>& bytes) : path_(path), b_(bytes) {}
  uint32_t u32(const char* what) {
    uint32_t v;
    take(&v, sizeof v, what);
    return v;
  }
  template <typename T>
  void array(std::vector<T>& out, uint64_t n, const char* what) {
    if (n > (b_.size() - pos_) / sizeof(T))
      throw FileError(
          path_, pos_,
          fmt::format("{}: {} values do not fit in the {} bytes left", what, n, b_.size() - pos_));
    out.resize(n);
    take(out.data(), n * sizeof(T), what);
  }
  void expect_end() {
    if (pos_ != b_.size())
      throw FileError(path_, pos_, fmt::format("{} trailing bytes", b_.size() - pos_));
  }
  [[noreturn]] void bad(const std::string& what) { throw FileError(path_, pos_, what); }
  size_t pos() const { return pos_; }

 private:
  void take(void* dst, size_t n, const char* what) {
    if (n > b_.size() - pos_)
      throw FileError(path_, pos_, fmt::format("truncated while reading {}", what));
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
  }
  const std::string& path_;
  const std::vector<char>& b_;
  size_t pos_ = 0;
};

// Writes PATH.tmp in one go, then renames it over PATH.
class AtomicWriter {
 public:
  explicit AtomicWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail_sys("fopen", tmp_);
  }
  ~AtomicWriter() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  void put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail_sys("fwrite", tmp_);
  }
  void u32(uint32_t v) { put(&v, sizeof v); }
  void commit() {
    if (std::fflush(f_) != 0) fail_sys("fflush", tmp_);
    if (::fsync(fileno(f_)) != 0) fail_sys("fsync", tmp_);
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail_sys("fclose", tmp_);
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail_sys("rename", path_);
  }

 private:
  std::string path_;
  std::string tmp_;
  std::FILE* f_ = nullptr;
};

}  // namespace

void RoutingTrace::reset(uint32_t n_layer_, uint32_t n_expert_, uint32_t k_) {
  n_layer = n_layer_;
  n_expert = n_expert_;
  k = k_;
  n_pos = 0;
  capacity_ = 0;
  topk_.clear();
  weight_.clear();
  prob_.clear();
}

void RoutingTrace::ensure_positions(uint32_t want) {
  if (want <= n_pos) return;
  if (want > capacity_) {
    const uint32_t cap = std::max(want, capacity_ * 2);
    std::vector<int32_t> t(size_t{n_layer} * cap * k, -1);
    std::vector<float> w(size_t{n_layer} * cap * k, 0.0f);
    std::vector<float> p(size_t{n_layer} * cap * n_expert, 0.0f);
    for (size_t il = 0; il < n_layer; ++il) {
      const size_t from = il * capacity_, to = il * cap;
      std::copy_n(topk_.begin() + from * k, size_t{n_pos} * k, t.begin() + to * k);
      std::copy_n(weight_.begin() + from * k, size_t{n_pos} * k, w.begin() + to * k);
      std::copy_n(prob_.begin() + from * n_expert, size_t{n_pos} * n_expert,
                  p.begin() + to * n_expert);
    }
    topk_ = std::move(t);
    weight_ = std::move(w);
    prob_ = std::move(p);
    capacity_ = cap;
  }
  n_pos = want;
}

bool RoutingTrace::same_as(const RoutingTrace& o) const {
  if (n_layer != o.n_layer || n_expert != o.n_expert || k != o.k || n_pos != o.n_pos) return false;
  for (uint32_t il = 0; il < n_layer; ++il) {
    for (uint32_t p = 0; p < n_pos; ++p) {
      if (!std::equal(topk_at(il, p), topk_at(il, p) + k, o.topk_at(il, p))) return false;
      if (std::memcmp(weight_at(il, p), o.weight_at(il, p), k * sizeof(float)) != 0) return false;
      if (std::memcmp(prob_at(il, p), o.prob_at(il, p), n_expert * sizeof(float)) != 0)
        return false;
    }
  }
  return true;
}

LogitDump read_logit_dump(const std::string& path) {
  const std::vector<char> bytes = slurp(path);
  Cursor c(path, bytes);
  if (c.u32("magic") != kMoelMagic) c.bad("not a MOEL file (bad magic)");
  const uint32_t version = c.u32("version");
  if (version != kDumpVersion)
    c.bad(fmt::format("MOEL version {} (expected {})", version, kDumpVersion));
  const uint32_t n_pos = c.u32("n_pos");
  LogitDump d;
  d.n_vocab = c.u32("n_vocab");
  c.array(d.tokens, n_pos, "tokens");
  c.array(d.logits, uint64_t{n_pos} * d.n_vocab, "logits");
  c.expect_end();
  return d;
}

RoutingTrace read_routing_dump(const std::string& path) {
  const std::vector<char> bytes = slurp(path);
  Cursor c(path, bytes);
  if (c.u32("magic") != kMoerMagic) c.bad("not a MOER file (bad magic)");
  const uint32_t version = c.u32("version");
  if (version != kDumpVersion)
    c.bad(fmt::format("MOER version {} (expected {})", version, kDumpVersion));
  const uint32_t n_layer = c.u32("n_layer");
  const uint32_t n_pos = c.u32("n_pos");
  const uint32_t n_expert = c.u32("n_expert");
  const uint32_t k = c.u32("k");
  const uint64_t n_sel = uint64_t{n_layer} * n_pos * k;
  std::vector<int32_t> topk;
  std::vector<float> weight, prob;
  c.array(topk, n_sel, "topk");
  c.array(weight, n_sel, "weight");
  c.array(prob, uint64_t{n_layer} * n_pos * n_expert, "prob");
  c.expect_end();
  RoutingTrace t;
  t.reset(n_layer, n_expert, k);
  t.ensure_positions(n_pos);
  for (uint32_t il = 0; il < n_layer; ++il) {
    for (uint32_t p = 0; p < n_pos; ++p) {
      const size_t r = size_t{il} * n_pos + p;
      std::copy_n(topk.begin() + r * k, k, t.topk_at(il, p));
      std::copy_n(weight.begin() + r * k, k, t.weight_at(il, p));
      std::copy_n(prob.begin() + r * n_expert, n_expert, t.prob_at(il, p));
    }
  }
  return t;
}

void write_logit_dump(const std::string& path, std::span<const int32_t> tokens,
                      std::span<const float> logits, uint32_t n_vocab) {
  STRATA_ASSERT(logits.size() == tokens.size() * n_vocab, "{} logits for {} x {}", logits.size(),
                tokens.size(), n_vocab);
  AtomicWriter w(path);
  w.u32(kMoelMagic);
  w.u32(kDumpVersion);
  w.u32(static_cast<uint32_t>(tokens.size()));
  w.u32(n_vocab);
  w.put(tokens.data(), tokens.size_bytes());
  w.put(logits.data(), logits.size_bytes());
  w.commit();
}

void write_routing_dump(const std::string& path, const RoutingTrace& t) {
  AtomicWriter w(path);
  for (uint32_t v : {kMoerMagic, kDumpVersion, t.n_layer, t.n_pos, t.n_expert, t.k}) w.u32(v);
  // Rows are contiguous per layer in memory, so each layer is one write per section.
  for (uint32_t il = 0; il < t.n_layer && t.n_pos; ++il)
    w.put(t.topk_at(il, 0), size_t{t.n_pos} * t.k * sizeof(int32_t));
  for (uint32_t il = 0; il < t.n_layer && t.n_pos; ++il)
    w.put(t.weight_at(il, 0), size_t{t.n_pos} * t.k * sizeof(float));
  for (uint32_t il = 0; il < t.n_layer && t.n_pos; ++il)
    w.put(t.prob_at(il, 0), size_t{t.n_pos} * t.n_expert * sizeof(float));
  w.commit();
}

}  // namespace strata::engine
