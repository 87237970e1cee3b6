// Usage stats: counts, the text file, merge and identity checks (see usage_stats.h).
#include "placement/usage_stats.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/check.h"
#include "io/gguf.h"

namespace strata::placement {
namespace {

constexpr std::string_view kMagic = "strata-usage";
constexpr int kVersion = 1;

std::vector<int64_t> begins(const std::vector<int>& n_expert) {
  std::vector<int64_t> b(n_expert.size() + 1, 0);
  for (size_t l = 0; l < n_expert.size(); ++l) b[l + 1] = b[l] + n_expert[l];
  return b;
}

// Splits on single spaces/tabs; empty fields are dropped.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t j = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > j) out.push_back(line.substr(j, i - j));
  }
  return out;
}

bool parse_u64(std::string_view s, uint64_t& v, int base = 10) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

std::string shape_string(const std::vector<int>& n) {
  std::string s = fmt::format("{} layers, experts [", n.size());
  for (size_t i = 0; i < n.size(); ++i) s += fmt::format("{}{}", i ? " " : "", n[i]);
  return s + "]";
}

}  // namespace

void Fnv1a::add(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
}

ModelIdentity model_identity(const io::GgufFile& file) {
  ModelIdentity id;
  Fnv1a f;
  f.add(file.get_string_opt("general.architecture").value_or(""));
  // gguf-split's keys say how the file is stored, not what the model is: a stats file fits the
  // model split or whole.
  for (const io::GgufKv& kv : file.metadata())
    if (kv.key.rfind("split.", 0) != 0) f.add(kv.key);
  for (const io::GgufTensorInfo& t : file.tensors()) {
    f.add(t.name);
    f.add_u64(static_cast<uint64_t>(t.type));
    for (uint64_t ne : t.ne) f.add_u64(ne);
  }
  id.fingerprint = f.h;
  id.name = file.get_string_opt("general.name")
                .value_or(std::filesystem::path(file.path()).filename().string());
  for (char& c : id.name)
    if (c == '\n' || c == '\r') c = ' ';
  return id;
}

UsageStats::UsageStats(ModelIdentity id, std::vector<int> n_expert)
    : id_(std::move(id)), n_expert_(std::move(n_expert)), layer_begin_(begins(n_expert_)) {
  cells_.resize(static_cast<size_t>(layer_begin_.back()));
}

int UsageStats::first_moe_layer() const {
  for (int l = 0; l < n_layer(); ++l)
    if (n_expert_[l] > 0) return l;
  return -1;
}

uint64_t UsageStats::decode_count(int layer, int expert) const {
  return cells_[static_cast<size_t>(layer_begin_[layer] + expert)].decode;
}
uint64_t UsageStats::prefill_count(int layer, int expert) const {
  return cells_[static_cast<size_t>(layer_begin_[layer] + expert)].prefill;
}

std::vector<uint64_t> UsageStats::counts() const {
  std::vector<uint64_t> c(cells_.size());
  for (size_t i = 0; i < cells_.size(); ++i) c[i] = cells_[i].decode + cells_[i].prefill;
  return c;
}

void UsageStats::check_compatible(const ModelIdentity& id, const std::vector<int>& n_expert,
                                  bool force, std::string_view what) const {
  if (n_expert != n_expert_)
    fail(ErrorKind::kBadValue,
         "usage stats: {} is for model '{}' ({}) but this is model '{}' ({}); shapes must match "
         "even with --force",
         what, id.name, shape_string(n_expert), id_.name, shape_string(n_expert_));
  if (!force && id.fingerprint != id_.fingerprint)
    fail(ErrorKind::kBadValue,
         "usage stats: {} is for model '{}' (fingerprint {:016x}) but this is model '{}' "
         "(fingerprint {:016x}); --force (PIN_FORCE=1) uses it anyway",
         what, id.name, id.fingerprint, id_.name, id_.fingerprint);
}

void UsageStats::merge(const UsageStats& other, bool force) {
  check_compatible(other.id_, other.n_expert_, force, "the merged file");
  for (size_t i = 0; i < cells_.size(); ++i) {
    cells_[i].decode += other.cells_[i].decode;
    cells_[i].prefill += other.cells_[i].prefill;
  }
  decode_tokens_ += other.decode_tokens_;
  prefill_tokens_ += other.prefill_tokens_;
}

void UsageStats::halve() {
  for (Cell& c : cells_) {
    c.decode /= 2;
    c.prefill /= 2;
  }
  decode_tokens_ /= 2;
  prefill_tokens_ /= 2;
}

void UsageStats::subtract(const UsageStats& earlier) {
  STRATA_ASSERT(earlier.n_expert_ == n_expert_, "subtract: another shape");
  for (size_t i = 0; i < cells_.size(); ++i) {
    STRATA_ASSERT(earlier.cells_[i].decode <= cells_[i].decode &&
                      earlier.cells_[i].prefill <= cells_[i].prefill,
                  "subtract: not an earlier snapshot");
    cells_[i].decode -= earlier.cells_[i].decode;
    cells_[i].prefill -= earlier.cells_[i].prefill;
  }
  STRATA_ASSERT(
      earlier.decode_tokens_ <= decode_tokens_ && earlier.prefill_tokens_ <= prefill_tokens_,
      "subtract: not an earlier snapshot");
  decode_tokens_ -= earlier.decode_tokens_;
  prefill_tokens_ -= earlier.prefill_tokens_;
}

std::string UsageStats::to_text() const {
  std::string s = fmt::format("{} {}\n", kMagic, kVersion);
  s += fmt::format("model {}\n", id_.name);
  s += fmt::format("fingerprint {:016x}\n", id_.fingerprint);
  s += fmt::format("n_layer {}\n", n_layer());
  s += "n_expert";
  for (int n : n_expert_) s += fmt::format(" {}", n);
  s += fmt::format("\ntokens {} {}\n", decode_tokens_, prefill_tokens_);
  s += "# layer expert decode_count prefill_count\n";
  for (int l = 0; l < n_layer(); ++l)
    for (int e = 0; e < n_expert_[l]; ++e) {
      const Cell& c = cells_[static_cast<size_t>(layer_begin_[l] + e)];
      if (c.decode || c.prefill) s += fmt::format("{} {} {} {}\n", l, e, c.decode, c.prefill);
    }
  return s;
}

void UsageStats::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const std::string text = to_text();
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(ErrorKind::kIo, "usage stats: cannot create {}: {}", tmp, std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    fail(ErrorKind::kIo, "usage stats: cannot write {}", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(ErrorKind::kIo, "usage stats: cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
}

UsageStats UsageStats::parse(std::string_view text, const std::string& file) {
  int line_no = 0;
  std::string_view rest = text;
  // The next line that is neither empty nor a comment; false at the end.
  const auto next = [&](std::string_view& line) {
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!line.empty() && line[0] != '#') return true;
    }
    return false;
  };
  const auto bad = [&](std::string_view why) -> void {
    fail(ErrorKind::kBadFile, "{}:{}: {}", file, line_no, why);
  };
  const auto header = [&](std::string_view key) {
    std::string_view line;
    if (!next(line)) bad(fmt::format("truncated: expected '{}'", key));
    if (line.substr(0, key.size() + 1) != fmt::format("{} ", key))
      bad(fmt::format("expected '{} ...'", key));
    return line.substr(key.size() + 1);
  };

  {
    const std::string_view v = header(kMagic);
    if (v != std::to_string(kVersion))
      bad(fmt::format("unsupported version '{}' (this build reads {})", v, kVersion));
  }
  ModelIdentity id;
  id.name = std::string(header("model"));
  if (!parse_u64(header("fingerprint"), id.fingerprint, 16)) bad("bad fingerprint (16 hex digits)");
  uint64_t n_layer = 0;
  if (!parse_u64(header("n_layer"), n_layer) || n_layer == 0 || n_layer > 4096)
    bad("bad n_layer (1..4096)");
  std::vector<int> n_expert;
  for (std::string_view f : fields(header("n_expert"))) {
    uint64_t n = 0;
    if (!parse_u64(f, n) || n > 65536) bad(fmt::format("bad expert count '{}' (0..65536)", f));
    n_expert.push_back(static_cast<int>(n));
  }
  if (n_expert.size() != n_layer)
    bad(fmt::format("n_expert has {} values, n_layer is {}", n_expert.size(), n_layer));
  UsageStats s(std::move(id), std::move(n_expert));
  {
    const auto f = fields(header("tokens"));
    if (f.size() != 2 || !parse_u64(f[0], s.decode_tokens_) || !parse_u64(f[1], s.prefill_tokens_))
      bad("expected 'tokens DECODE PREFILL'");
  }
  std::vector<bool> seen(s.cells_.size(), false);
  std::string_view line;
  while (next(line)) {
    const auto f = fields(line);
    uint64_t v[4];
    if (f.size() != 4) bad("expected 'layer expert decode_count prefill_count'");
    for (int i = 0; i < 4; ++i)
      if (!parse_u64(f[i], v[i])) bad(fmt::format("'{}' is not a non-negative integer", f[i]));
    if (v[0] >= n_layer) bad(fmt::format("layer {} out of range (n_layer {})", v[0], n_layer));
    const int l = static_cast<int>(v[0]);
    if (v[1] >= static_cast<uint64_t>(s.n_expert_[l]))
      bad(fmt::format("expert {} out of range (layer {} has {})", v[1], l, s.n_expert_[l]));
    const size_t i = static_cast<size_t>(s.layer_begin_[l] + static_cast<int64_t>(v[1]));
    if (seen[i]) bad(fmt::format("duplicate line for layer {} expert {}", l, v[1]));
    seen[i] = true;
    s.cells_[i] = {v[2], v[3]};
  }
  return s;
}

UsageStats UsageStats::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "usage stats: cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

}  // namespace strata::placement
