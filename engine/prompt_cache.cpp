// PROMPT_CACHE files (see prompt_cache.h; layout in docs/FORMATS.md "Prompt cache").
#include "engine/prompt_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io/check.h"
#include "io/fd.h"
#include "tiers/sidecar.h"

namespace strata::engine {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
// 2: the attention order fuses its multiply-adds (kernels/attention_core.h), so rows a version 1
// file holds are not what this build computes for the same tokens; such a file is not used.
// 3: with KV_TYPE=f16, MLA layers store halves too (a version 2 F16 file holds their floats).
constexpr uint32_t kVersion = 3;
constexpr size_t kFixedBytes = 48;  // magic .. n_tokens

// A checksum of one segment: 8-byte words multiplied in, the tail packed into a last word.
uint64_t segment_hash(std::span<const std::byte> b) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ b.size();
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  if (i < b.size()) {
    uint64_t w = 0;
    std::memcpy(&w, b.data() + i, b.size() - i);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

uint64_t fold(uint64_t total, std::span<const std::byte> segment) {
  return (total ^ segment_hash(segment)) * 0x100000001b3ull;
}

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T get(std::span<const std::byte> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

// The header through the token list.
std::vector<std::byte> header_bytes(const Forward& fwd, std::span<const int32_t> tokens,
                                    uint32_t flags) {
  const KvCache& kv = fwd.kv();
  const uint32_t n_layer = fwd.model().config().n_layer;
  const tiers::ModelFingerprint fp = tiers::model_fingerprint(fwd.model().file().parts());
  std::vector<std::byte> h;
  h.insert(h.end(), reinterpret_cast<const std::byte*>(kMagic),
           reinterpret_cast<const std::byte*>(kMagic) + 8);
  put(h, kVersion);
  put(h, flags);
  put(h, fp.file_size);
  put(h, fp.header_hash);
  put(h, fp.sample_hash);
  put(h, n_layer);
  put(h, static_cast<uint32_t>(tokens.size()));
  for (uint32_t il = 0; il < n_layer; ++il) {
    put(h, kv.n_kv_head(il));
    put(h, kv.head_dim_k(il));
    put(h, kv.head_dim_v(il));
  }
  for (int32_t t : tokens) put(h, t);
  return h;
}

// kPromptCacheRopeLong when fwd's keys are turned by LongRoPE's long set.
uint32_t rope_set_flag(const Forward& fwd) {
  return rope_long_set(fwd.model().weights(), fwd.model().config(), fwd.n_ctx())
             ? kPromptCacheRopeLong
             : 0;
}

}  // namespace

uint32_t prompt_cache_kv_flag(KvType t) {
  switch (t) {
    case KvType::kF16:
      return kPromptCacheF16;
    case KvType::kQ8_0:
      return kPromptCacheQ8_0;
    case KvType::kF32:
      break;
  }
  return 0;
}

uint32_t prompt_cache_flags(const Knobs& knobs) {
  return (knobs.get_int("CUDA_DENSE") == 2 ? kPromptCacheGpuPrefill : 0) |
         prompt_cache_kv_flag(parse_kv_type(knobs.get_string("KV_TYPE")));
}

uint64_t save_prompt_cache(const std::string& path, const Forward& fwd,
                           std::span<const int32_t> tokens, uint32_t flags) {
  STRATA_ASSERT(tokens.size() <= fwd.n_past(), "saving {} positions of {}", tokens.size(),
                fwd.n_past());
  STRATA_ASSERT((flags & kPromptCacheKvTypes) == prompt_cache_kv_flag(fwd.kv().type()),
                "prompt cache flags {} for a {} KV cache", flags, kv_type_name(fwd.kv().type()));
  flags |= rope_set_flag(fwd);
  const std::string tmp = path + ".tmp";
  uint64_t written = 0;
  try {
    const io::Fd f(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    const std::vector<std::byte> head = header_bytes(fwd, tokens, flags);
    uint64_t sum = fold(0, head);
    f.write_at(written, head);
    written += head.size();
    const KvCache& kv = fwd.kv();
    const size_t n = tokens.size();
    for (uint32_t il = 0; il < fwd.model().config().n_layer; ++il) {
      for (int part = 0; part < 2; ++part) {
        const uint32_t row = part == 0 ? kv.k_row_bytes(il) : kv.v_row_bytes(il);
        if (row == 0) continue;
        for (uint32_t g = 0; g < kv.n_kv_head(il); ++g) {
          const std::byte* rows = part == 0 ? kv.k_bytes(il, g, 0) : kv.v_bytes(il, g, 0);
          const std::span<const std::byte> seg(rows, n * row);
          sum = fold(sum, seg);
          f.write_at(written, seg);
          written += seg.size();
        }
      }
    }
    std::vector<std::byte> tail;
    put(tail, sum);
    f.write_at(written, tail);
    written += tail.size();
    if (fsync(f.get()) != 0) fail_sys("fsync", tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    errno = err;
    fail_sys("rename", path);
  }
  return written;
}

namespace {

// Everything after the open: r.ignored says why the file is not used; a failed read throws.
void read_prompt_cache(const io::Fd& f, Forward& fwd, std::span<const int32_t> want,
                       uint32_t max_tokens, uint32_t flags, PromptCacheLoad& r) {
  flags |= rope_set_flag(fwd);
  struct stat st {};
  if (fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    r.ignored = "not a regular file";
    return;
  }
  const uint64_t size = uint64_t(st.st_size);
  std::vector<std::byte> fixed(kFixedBytes);
  if (size >= kFixedBytes + 8) f.read_at(0, fixed);
  if (size < kFixedBytes + 8 || std::memcmp(fixed.data(), kMagic, 8) != 0) {
    r.ignored = "not a strata prompt cache (bad magic or too short)";
    return;
  }
  if (const uint32_t v = get<uint32_t>(fixed, 8); v != kVersion) {
    r.ignored = fmt::format("version {} (this build reads {})", v, kVersion);
    return;
  }
  const ModelConfig& cfg = fwd.model().config();
  const tiers::ModelFingerprint fp = tiers::model_fingerprint(fwd.model().file().parts());
  if (get<uint64_t>(fixed, 16) != fp.file_size || get<uint64_t>(fixed, 24) != fp.header_hash ||
      get<uint64_t>(fixed, 32) != fp.sample_hash) {
    r.ignored = "written for another model (fingerprint differs)";
    return;
  }
  if (const uint32_t fl = get<uint32_t>(fixed, 12); fl != flags) {
    const auto type_of = [](uint32_t f) {
      return (f & kPromptCacheQ8_0) ? "q8_0" : (f & kPromptCacheF16) ? "f16" : "f32";
    };
    const auto rope_set = [](uint32_t f) { return (f & kPromptCacheRopeLong) ? "long" : "short"; };
    r.ignored = (fl ^ flags) & kPromptCacheKvTypes
                    ? fmt::format("written with KV_TYPE={} (this run's cache is {})", type_of(fl),
                                  type_of(flags))
                : (fl ^ flags) & kPromptCacheRopeLong
                    ? fmt::format(
                          "written at a context whose keys turn by LongRoPE's {} factor "
                          "set (this run's context picks the {} set)",
                          rope_set(fl), rope_set(flags))
                    : fmt::format(
                          "written {} CUDA_DENSE=2's GPU prefill, which computes other bits than "
                          "this run's",
                          (fl & kPromptCacheGpuPrefill) ? "with" : "without");
    return;
  }
  const uint32_t n_layer = get<uint32_t>(fixed, 40);
  const uint32_t n = get<uint32_t>(fixed, 44);
  const KvCache& kv = fwd.kv();
  if (n_layer != cfg.n_layer) {
    r.ignored = fmt::format("{} layers, the model has {}", n_layer, cfg.n_layer);
    return;
  }
  // Dimensions and tokens.
  const uint64_t head_bytes = kFixedBytes + uint64_t{n_layer} * 12 + uint64_t{n} * 4;
  uint64_t data_bytes = 0;
  for (uint32_t il = 0; il < n_layer; ++il)
    data_bytes += uint64_t{n} * kv.n_kv_head(il) * (kv.k_row_bytes(il) + kv.v_row_bytes(il));
  if (size != head_bytes + data_bytes + 8) {
    r.ignored = fmt::format("{} bytes where {} positions take {} (truncated?)", size, n,
                            head_bytes + data_bytes + 8);
    return;
  }
  std::vector<std::byte> head(head_bytes);
  f.read_at(0, head);
  for (uint32_t il = 0; il < n_layer; ++il) {
    const size_t at = kFixedBytes + size_t{il} * 12;
    if (get<uint32_t>(head, at) != kv.n_kv_head(il) ||
        get<uint32_t>(head, at + 4) != kv.head_dim_k(il) ||
        get<uint32_t>(head, at + 8) != kv.head_dim_v(il)) {
      r.ignored = fmt::format("layer {}'s KV shape differs from this model's", il);
      return;
    }
  }
  r.file_tokens.resize(n);
  std::memcpy(r.file_tokens.data(), head.data() + kFixedBytes + size_t{n_layer} * 12,
              size_t{n} * 4);
  size_t use = std::min<size_t>({n, max_tokens, fwd.n_ctx()});
  if (!want.empty()) {
    const auto mm =
        std::mismatch(r.file_tokens.begin(), r.file_tokens.end(), want.begin(), want.end());
    use = std::min<size_t>(use, size_t(mm.first - r.file_tokens.begin()));
  }
  if (use == 0) return;

  // Every segment is read (the checksum covers them all); rows past `use` are not kept.
  uint64_t sum = fold(0, head);
  uint64_t at = head_bytes;
  std::vector<std::byte> scratch;
  KvCache& dst = fwd.kv();
  for (uint32_t il = 0; il < n_layer; ++il) {
    for (int part = 0; part < 2; ++part) {
      const size_t row_bytes = part == 0 ? kv.k_row_bytes(il) : kv.v_row_bytes(il);
      if (row_bytes == 0) continue;
      for (uint32_t g = 0; g < kv.n_kv_head(il); ++g) {
        std::byte* rows = part == 0 ? dst.k_bytes(il, g, 0) : dst.v_bytes(il, g, 0);
        const size_t bytes = size_t{n} * row_bytes;
        // The rows go straight into the cache when it has room for all n positions.
        std::byte* into = n <= fwd.n_ctx() ? rows : (scratch.resize(bytes), scratch.data());
        const std::span<std::byte> seg(into, bytes);
        f.read_at(at, seg);
        sum = fold(sum, seg);
        if (into != rows) std::memcpy(rows, into, use * row_bytes);
        at += seg.size();
      }
    }
  }
  std::vector<std::byte> tail(8);
  f.read_at(at, tail);
  if (get<uint64_t>(tail, 0) != sum) {
    r.ignored = "checksum mismatch (the file is damaged)";
    return;
  }
  fwd.restored(uint32_t(use));
  r.tokens.assign(r.file_tokens.begin(), r.file_tokens.begin() + use);
}

}  // namespace

PromptCacheLoad load_prompt_cache(const std::string& path, Forward& fwd,
                                  std::span<const int32_t> want, uint32_t max_tokens,
                                  uint32_t flags) {
  PromptCacheLoad r;
  fwd.reset();
  const io::Fd f = io::Fd::try_open(path, O_RDONLY);
  if (!f.valid()) {
    if (errno != ENOENT) {
      r.found = true;
      r.ignored = fmt::format("cannot open it: {}", std::strerror(errno));
    }
    return r;
  }
  r.found = true;
  try {
    read_prompt_cache(f, fwd, want, max_tokens, flags, r);
  } catch (const FileError& e) {
    r.ignored = e.what();
    r.tokens.clear();
  }
  return r;
}

}  // namespace strata::engine
