// The expert sidecar: writer, reader, fingerprint, decompression workers (see sidecar.h).
// Tested by tests/test_tier_zstd.cpp.
#include "tiers/sidecar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "io/check.h"
#include "io/fd.h"

namespace strata::tiers {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'Z', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kEntryBytes = 32;  // offset, bytes, raw_bytes, flags: 4 x u64
constexpr int kSamplePages = 64;

// Header layout (little-endian, kHeaderBytes, zero padded):
//   0 magic[8]  8 u32 version  12 u32 level  16 u64 file_size  24 u64 header_hash
//   32 u64 sample_hash  40 u32 n_layer  44 u32 0  48 u64 n_entries  56 u64 index_offset
//   64 u64 index_bytes  72 u64 frames_offset
// Index at index_offset: n_layer u32 expert counts, padded to 8 bytes, then n_entries entries.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t level;
  uint64_t file_size;
  uint64_t header_hash;
  uint64_t sample_hash;
  uint32_t n_layer;
  uint32_t zero;
  uint64_t n_entries;
  uint64_t index_offset;
  uint64_t index_bytes;
  uint64_t frames_offset;
};
static_assert(sizeof(Header) == 80);

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

uint64_t fnv1a(uint64_t h, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) {
    h ^= static_cast<uint8_t>(b);
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

using io::Fd;

// The three slices back to back.
void read_expert(const io::PartFiles& fd, const ExpertExtents& x, std::vector<std::byte>& out) {
  uint64_t raw = 0;
  for (const SliceExtent& s : x) raw += s.bytes;
  out.resize(raw);
  uint64_t at = 0;
  for (const SliceExtent& s : x) {
    fd.read_at(s.offset, {out.data() + at, s.bytes});
    at += s.bytes;
  }
}

}  // namespace

ModelFingerprint model_fingerprint(const io::FileParts& parts) {
  STRATA_ASSERT(!parts.empty(), "no model file");
  if (parts.size() == 1) return model_fingerprint(parts[0].path, parts[0].header_bytes);
  // A split model: every shard's, folded in order.
  ModelFingerprint all;
  all.header_hash = all.sample_hash = kFnvBasis;
  for (const io::FilePart& p : parts) {
    const ModelFingerprint f = model_fingerprint(p.path, p.header_bytes);
    all.file_size += f.file_size;
    all.header_hash = fnv1a(all.header_hash, std::as_bytes(std::span(&f.header_hash, 1)));
    all.sample_hash = fnv1a(all.sample_hash, std::as_bytes(std::span(&f.sample_hash, 1)));
  }
  return all;
}

ModelFingerprint model_fingerprint(const std::string& path, uint64_t data_offset) {
  const Fd fd(path, O_RDONLY);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail_sys("fstat", path);
  ModelFingerprint f;
  f.file_size = uint64_t(st.st_size);
  std::vector<std::byte> buf(std::min<uint64_t>(data_offset, f.file_size));
  fd.read_at(0, buf);
  f.header_hash = fnv1a(kFnvBasis, buf);
  buf.resize(std::min<uint64_t>(4096, f.file_size));
  f.sample_hash = kFnvBasis;
  if (f.file_size >= buf.size() && !buf.empty()) {
    for (int i = 0; i < kSamplePages; ++i) {
      const uint64_t at = (f.file_size - buf.size()) / (kSamplePages - 1) * uint64_t(i);
      fd.read_at(at, buf);
      f.sample_hash = fnv1a(f.sample_hash, buf);
    }
  }
  return f;
}

uint64_t Sidecar::raw_bytes() const {
  uint64_t n = 0;
  for (const auto& l : entries)
    for (const SidecarEntry& e : l) n += e.raw_bytes;
  return n;
}

uint64_t Sidecar::stored_bytes() const {
  uint64_t n = 0;
  for (const auto& l : entries)
    for (const SidecarEntry& e : l) n += e.bytes;
  return n;
}

double Sidecar::ratio() const {
  const uint64_t s = stored_bytes();
  return s ? double(raw_bytes()) / double(s) : 1.0;
}

uint64_t Sidecar::max_read_bytes() const {
  uint64_t m = 0;
  for (const auto& l : entries)
    for (const SidecarEntry& e : l) m = std::max(m, e.read_bytes());
  return m;
}

uint64_t Sidecar::max_raw_bytes() const {
  uint64_t m = 0;
  for (const auto& l : entries)
    for (const SidecarEntry& e : l) m = std::max(m, e.raw_bytes);
  return m;
}

Sidecar write_sidecar(const io::FileParts& model_parts, const ExtentTable& extents,
                      const std::string& out, const PackOptions& o) {
  const std::string& model_path = model_parts.at(0).path;
  Sidecar sc;
  sc.path = out;
  sc.level = o.level;
  sc.fingerprint = model_fingerprint(model_parts);

  // Experts in layer-major order; each is one job.
  struct Job {
    int layer, expert;
  };
  std::vector<Job> jobs;
  sc.entries.resize(extents.size());
  uint64_t total_raw = 0;
  for (size_t l = 0; l < extents.size(); ++l) {
    sc.entries[l].resize(extents[l].size());
    for (size_t e = 0; e < extents[l].size(); ++e) {
      jobs.push_back({int(l), int(e)});
      for (const SliceExtent& s : extents[l][e]) total_raw += s.bytes;
    }
  }
  const uint64_t n_layer = extents.size();
  const uint64_t counts_bytes = align_up(4 * n_layer, 8);
  const uint64_t index_bytes = counts_bytes + kEntryBytes * jobs.size();
  const uint64_t frames_offset = align_up(kHeaderBytes + index_bytes, 4096);

  const std::string tmp = out + ".tmp";
  {
    const io::PartFiles model(model_parts);
    const Fd file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    const int n_threads = std::max(1, o.threads);
    // Batches of experts compressed in parallel, then written in order.
    const size_t batch = size_t(4 * n_threads);
    std::vector<std::vector<std::byte>> raw(batch), packed(batch);
    uint64_t at = frames_offset, done_raw = 0;
    for (size_t first = 0; first < jobs.size(); first += batch) {
      const size_t n = std::min(batch, jobs.size() - first);
      std::atomic<size_t> next{0};
      std::vector<std::string> errors(n_threads);
      auto worker = [&](int t) {
        ZSTD_CCtx* cctx = ZSTD_createCCtx();
        // A content checksum in every frame: a flipped bit on disk is an error, never wrong
        // expert bytes.
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, o.level);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
        try {
          for (size_t i = next++; i < n; i = next++) {
            const Job& j = jobs[first + i];
            read_expert(model, extents[j.layer][j.expert], raw[i]);
            packed[i].resize(ZSTD_compressBound(raw[i].size()));
            const size_t r = ZSTD_compress2(cctx, packed[i].data(), packed[i].size(), raw[i].data(),
                                            raw[i].size());
            if (ZSTD_isError(r))
              errors[t] = fmt::format("zstd: {}", ZSTD_getErrorName(r));
            else
              packed[i].resize(r);
          }
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
        ZSTD_freeCCtx(cctx);
      };
      std::vector<std::thread> threads;
      for (int t = 1; t < n_threads; ++t) threads.emplace_back(worker, t);
      worker(0);
      for (auto& th : threads) th.join();
      for (const auto& e : errors)
        if (!e.empty()) fail(ErrorKind::kIo, "{}: packing {}: {}", out, model_path, e);
      for (size_t i = 0; i < n; ++i) {
        const Job& j = jobs[first + i];
        SidecarEntry& en = sc.entries[j.layer][j.expert];
        en.raw_bytes = raw[i].size();
        en.stored_raw = packed[i].size() >= raw[i].size();
        const std::vector<std::byte>& bytes = en.stored_raw ? raw[i] : packed[i];
        en.offset = at;
        en.bytes = bytes.size();
        file.write_at(at, bytes);
        at = align_up(at + bytes.size(), 4096);
        done_raw += en.raw_bytes;
      }
      if (o.progress) o.progress(done_raw, total_raw);
    }
    // The file ends on a 4 KiB boundary, so every frame's aligned read stays inside it.
    if (ftruncate(file.get(), off_t(at)) != 0) fail_sys("ftruncate", tmp);

    std::vector<std::byte> head(kHeaderBytes + index_bytes, std::byte{0});
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.level = uint32_t(o.level);
    h.file_size = sc.fingerprint.file_size;
    h.header_hash = sc.fingerprint.header_hash;
    h.sample_hash = sc.fingerprint.sample_hash;
    h.n_layer = uint32_t(n_layer);
    h.n_entries = jobs.size();
    h.index_offset = kHeaderBytes;
    h.index_bytes = index_bytes;
    h.frames_offset = frames_offset;
    std::memcpy(head.data(), &h, sizeof h);
    std::byte* idx = head.data() + kHeaderBytes;
    for (uint64_t l = 0; l < n_layer; ++l) {
      const uint32_t c = uint32_t(extents[l].size());
      std::memcpy(idx + 4 * l, &c, 4);
    }
    std::byte* ent = idx + counts_bytes;
    for (const Job& j : jobs) {
      const SidecarEntry& en = sc.entries[j.layer][j.expert];
      const uint64_t v[4] = {en.offset, en.bytes, en.raw_bytes, en.stored_raw ? 1u : 0u};
      std::memcpy(ent, v, sizeof v);
      ent += kEntryBytes;
    }
    file.write_at(0, head);
    if (fsync(file.get()) != 0) fail_sys("fsync", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) fail(ErrorKind::kIo, "{}: cannot rename into place: {}", out, ec.message());
  return sc;
}

Sidecar read_sidecar(const std::string& path, const ExtentTable& extents) {
  const Fd fd(path, O_RDONLY);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail_sys("fstat", path);
  const uint64_t size = uint64_t(st.st_size);
  if (size < kHeaderBytes)
    throw FileError(path, 0, "not an expert sidecar: shorter than its header");
  std::vector<std::byte> head(kHeaderBytes);
  fd.read_at(0, head);
  Header h{};
  std::memcpy(&h, head.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw FileError(path, 0, "not an expert sidecar (bad magic)");
  if (h.version != kVersion)
    throw FileError(path, 8,
                    fmt::format("sidecar version {} (strata reads {})", h.version, kVersion));
  const uint64_t n_layer = extents.size();
  if (h.n_layer != n_layer)
    throw FileError(path, 40,
                    fmt::format("sidecar has {} layers, the model {}", h.n_layer, n_layer));
  const uint64_t counts_bytes = align_up(4 * n_layer, 8);
  if (h.index_offset != kHeaderBytes || h.index_bytes != counts_bytes + kEntryBytes * h.n_entries ||
      h.index_offset + h.index_bytes > size || h.frames_offset > size)
    throw FileError(path, 56, "sidecar index outside the file");

  Sidecar sc;
  sc.path = path;
  sc.level = int(h.level);
  sc.fingerprint = {h.file_size, h.header_hash, h.sample_hash};
  std::vector<std::byte> idx(h.index_bytes);
  fd.read_at(h.index_offset, idx);
  uint64_t n_entries = 0;
  sc.entries.resize(n_layer);
  for (uint64_t l = 0; l < n_layer; ++l) {
    uint32_t c = 0;
    std::memcpy(&c, idx.data() + 4 * l, 4);
    if (c != extents[l].size())
      throw FileError(path, h.index_offset + 4 * l,
                      fmt::format("layer {} has {} experts in the sidecar, {} in the model", l, c,
                                  extents[l].size()));
    sc.entries[l].resize(c);
    n_entries += c;
  }
  if (n_entries != h.n_entries) throw FileError(path, 48, "sidecar entry count mismatch");
  const std::byte* ent = idx.data() + counts_bytes;
  for (uint64_t l = 0; l < n_layer; ++l) {
    for (size_t e = 0; e < sc.entries[l].size(); ++e, ent += kEntryBytes) {
      uint64_t v[4];
      std::memcpy(v, ent, sizeof v);
      SidecarEntry& en = sc.entries[l][e];
      en = {v[0], v[1], v[2], v[3] != 0};
      const uint64_t at = h.index_offset + uint64_t(ent - idx.data());
      uint64_t raw = 0;
      for (const SliceExtent& s : extents[l][e]) raw += s.bytes;
      if (en.raw_bytes != raw)
        throw FileError(path, at,
                        fmt::format("layer {} expert {}: {} raw bytes in the sidecar, {} in the "
                                    "model",
                                    l, e, en.raw_bytes, raw));
      if (en.offset % 4096 != 0 || en.offset < h.frames_offset || en.bytes == 0 ||
          en.offset + en.read_bytes() > size || (en.stored_raw && en.bytes != en.raw_bytes))
        throw FileError(path, at,
                        fmt::format("layer {} expert {}: frame of {} bytes at {} is invalid", l, e,
                                    en.bytes, en.offset));
    }
  }
  return sc;
}

double measure_decompress_gbps(const Sidecar& sc, int n_frames) {
  const Fd fd(sc.path, O_RDONLY);
  std::vector<std::byte> src, dst;
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  double seconds = 0;
  uint64_t raw = 0;
  int done = 0;
  for (const auto& l : sc.entries) {
    for (const SidecarEntry& e : l) {
      if (done == n_frames) break;
      if (e.stored_raw) continue;
      src.resize(e.bytes);
      dst.resize(e.raw_bytes);
      fd.read_at(e.offset, src);
      const auto t0 = Clock::now();
      const size_t r = ZSTD_decompressDCtx(dctx, dst.data(), dst.size(), src.data(), src.size());
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      if (ZSTD_isError(r) || r != e.raw_bytes) {
        ZSTD_freeDCtx(dctx);
        throw FileError(sc.path, e.offset, "corrupt zstd frame");
      }
      raw += e.raw_bytes;
      ++done;
    }
    if (done == n_frames) break;
  }
  ZSTD_freeDCtx(dctx);
  return seconds > 0 ? double(raw) / 1e9 / seconds : 0.0;
}

Decompressor::Decompressor(std::string path, int threads) : path_(std::move(path)) {
  for (int t = 0; t < std::max(1, threads); ++t) workers_.emplace_back([this] { work(); });
}

Decompressor::~Decompressor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  todo_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void Decompressor::submit(const Job& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo_.push_back(job);
  }
  ++pending_;
  todo_cv_.notify_one();
}

void Decompressor::work() {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      todo_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
      if (todo_.empty()) break;  // stopping, nothing left
      job = todo_.front();
      todo_.pop_front();
    }
    Done d;
    d.tag = job.tag;
    d.file_offset = job.file_offset;
    const auto t0 = Clock::now();
    if (job.stored_raw) {
      std::memcpy(job.dst, job.src, job.raw_bytes);
    } else {
      const size_t r = ZSTD_decompressDCtx(dctx, job.dst, job.raw_bytes, job.src, job.src_bytes);
      if (ZSTD_isError(r))
        d.error = ZSTD_getErrorName(r);
      else if (r != job.raw_bytes)
        d.error = fmt::format("frame holds {} bytes, expected {}", r, job.raw_bytes);
    }
    d.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(d));
    }
    done_cv_.notify_one();
  }
  ZSTD_freeDCtx(dctx);
}

size_t Decompressor::reap(std::span<Done> out, bool block) {
  std::unique_lock<std::mutex> lock(mu_);
  if (block && pending_ > 0) done_cv_.wait(lock, [&] { return !done_.empty(); });
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n] = std::move(done_.front());
    done_.pop_front();
    --pending_;
    if (!out[n].error.empty())
      throw FileError(path_, out[n].file_offset,
                      fmt::format("corrupt expert frame: {}", out[n].error));
    ++n;
  }
  return n;
}

}  // namespace strata::tiers
