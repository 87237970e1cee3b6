// Route traces: the zstd stream writer, the checking reader, and traces -> usage stats (see
// route_trace.h; layout in docs/FORMATS.md "Route trace").
#include "placement/route_trace.h"

#include <fmt/format.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/check.h"

namespace strata::placement {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'T', 'R', 'A', 'C', 'E'};
constexpr uint8_t kRecordRouting = 1;
constexpr uint8_t kRecordEnd = 2;
constexpr uint8_t kFlagDecode = 1;
constexpr size_t kInBytes = size_t{1} << 20;  // pending raw bytes before a compress call
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxLayers = 1u << 16;
constexpr uint32_t kMaxExperts = 1u << 16;

// Record header: kind, flags, 2 reserved bytes, layer, pos0, n_tokens (little-endian u32s).
struct RecordHead {
  uint8_t kind;
  uint8_t flags;
  uint16_t reserved;
  uint32_t layer;
  uint32_t pos0;
  uint32_t n_tokens;
};
static_assert(sizeof(RecordHead) == 16);

}  // namespace

struct RouteTraceWriter::Ctx {
  ZSTD_CCtx* c = nullptr;
  ~Ctx() { ZSTD_freeCCtx(c); }
};

struct RouteTraceReader::Ctx {
  ZSTD_DCtx* d = nullptr;
  ~Ctx() { ZSTD_freeDCtx(d); }
};

RouteTraceHeader route_trace_header(ModelIdentity id, const std::vector<int>& n_expert,
                                    const std::vector<uint32_t>& k) {
  STRATA_ASSERT(n_expert.size() == k.size());
  RouteTraceHeader h;
  h.id = std::move(id);
  for (size_t l = 0; l < n_expert.size(); ++l) {
    h.n_expert.push_back(static_cast<uint32_t>(n_expert[l]));
    h.k.push_back(n_expert[l] > 0 ? k[l] : 0);
  }
  return h;
}

// ---- writer ----

RouteTraceWriter::RouteTraceWriter(std::string path, RouteTraceHeader header, int level)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), header_(std::move(header)) {
  for (uint32_t l = 0; l < header_.n_layer(); ++l)
    if (header_.n_expert[l] > 0) {
      first_moe_ = static_cast<int>(l);
      break;
    }
  z_ = std::make_unique<Ctx>();
  z_->c = ZSTD_createCCtx();
  STRATA_ASSERT(z_->c != nullptr, "ZSTD_createCCtx");
  ZSTD_CCtx_setParameter(z_->c, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(z_->c, ZSTD_c_checksumFlag, 1);
  in_.resize(kInBytes);
  out_.resize(ZSTD_CStreamOutSize());
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail(ErrorKind::kIo, "ROUTE_TRACE: cannot create {}: {}", tmp_, std::strerror(errno));

  put(kMagic, sizeof kMagic);
  const uint32_t version = kRouteTraceVersion, n_layer = header_.n_layer();
  put(&version, 4);
  put(&n_layer, 4);
  put(&header_.id.fingerprint, 8);
  const std::string name = header_.id.name.substr(0, kMaxName);
  const uint32_t name_len = static_cast<uint32_t>(name.size());
  put(&name_len, 4);
  put(name.data(), name.size());
  for (uint32_t l = 0; l < n_layer; ++l) {
    put(&header_.n_expert[l], 4);
    put(&header_.k[l], 4);
  }
}

RouteTraceWriter::~RouteTraceWriter() {
  if (!finished_) {
    try {
      finish();
      std::fprintf(stderr, "strata: route trace of %llu tokens (%llu records) saved to %s\n",
                   static_cast<unsigned long long>(tokens_),
                   static_cast<unsigned long long>(records_), path_.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: ROUTE_TRACE: %s\n", e.what());
    }
  }
  if (f_) {  // finish failed part way: the temp file is not a trace
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void RouteTraceWriter::put(const void* data, size_t n) {
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    const size_t take = std::min(n, in_.size() - in_used_);
    std::memcpy(in_.data() + in_used_, p, take);
    in_used_ += take;
    p += take;
    n -= take;
    if (in_used_ == in_.size()) compress(false);
  }
}

void RouteTraceWriter::compress(bool end) {
  ZSTD_inBuffer in{in_.data(), in_used_, 0};
  for (;;) {
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t r = ZSTD_compressStream2(z_->c, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(r))
      fail(ErrorKind::kIo, "ROUTE_TRACE {}: zstd: {}", tmp_, ZSTD_getErrorName(r));
    if (out.pos > 0 && std::fwrite(out_.data(), 1, out.pos, f_) != out.pos)
      fail(ErrorKind::kIo, "ROUTE_TRACE: writing {}: {}", tmp_, std::strerror(errno));
    if (end ? r == 0 : in.pos == in.size) break;
  }
  in_used_ = 0;
}

void RouteTraceWriter::add(uint32_t layer, uint32_t pos0, uint32_t n, const int32_t* topk,
                           const float* weights) {
  STRATA_ASSERT(!finished_ && layer < header_.n_layer() && header_.k[layer] > 0,
                "route trace: layer {}", layer);
  const RecordHead h{kRecordRouting, n == 1 ? kFlagDecode : uint8_t{0}, 0, layer, pos0, n};
  put(&h, sizeof h);
  const size_t k = header_.k[layer];
  put(topk, sizeof(int32_t) * n * k);
  put(weights, sizeof(float) * n * k);
  ++records_;
  if (static_cast<int>(layer) == first_moe_) tokens_ += n;
}

void RouteTraceWriter::finish() {
  if (finished_) return;
  finished_ = true;  // a failure below is final too (the destructor removes the temp file)
  const RecordHead h{kRecordEnd, 0, 0, 0, 0, 0};
  put(&h, sizeof h);
  put(&records_, 8);
  compress(true);
  std::FILE* f = f_;
  f_ = nullptr;
  const bool flushed = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed) {
    std::remove(tmp_.c_str());
    fail(ErrorKind::kIo, "ROUTE_TRACE: writing {}: {}", tmp_, std::strerror(flushed ? errno : err));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    fail(ErrorKind::kIo, "ROUTE_TRACE: renaming {} to {}: {}", tmp_, path_, ec.message());
  }
}

// ---- reader ----

RouteTraceReader::RouteTraceReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  if (!f_)
    fail(ErrorKind::kNotFound, "{}: cannot open route trace: {}", path_, std::strerror(errno));
  z_ = std::make_unique<Ctx>();
  z_->d = ZSTD_createDCtx();
  STRATA_ASSERT(z_->d != nullptr, "ZSTD_createDCtx");
  in_.resize(ZSTD_DStreamInSize());
  out_.resize(ZSTD_DStreamOutSize());

  char magic[sizeof kMagic];
  try {
    read(magic, sizeof magic);
  } catch (const FileError&) {
    bad("not a strata route trace (too short)");
  }
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) bad("not a strata route trace (magic)");
  uint32_t version = 0, n_layer = 0, name_len = 0;
  read(&version, 4);
  if (version != kRouteTraceVersion)
    bad(fmt::format("route trace version {} (this build reads {})", version, kRouteTraceVersion));
  read(&n_layer, 4);
  if (n_layer == 0 || n_layer > kMaxLayers) bad(fmt::format("n_layer {} out of range", n_layer));
  read(&header_.id.fingerprint, 8);
  read(&name_len, 4);
  if (name_len > kMaxName) bad(fmt::format("model name of {} bytes", name_len));
  header_.id.name.resize(name_len);
  read(header_.id.name.data(), name_len);
  header_.n_expert.resize(n_layer);
  header_.k.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l) {
    read(&header_.n_expert[l], 4);
    read(&header_.k[l], 4);
    const uint32_t ne = header_.n_expert[l], k = header_.k[l];
    if (ne > kMaxExperts || k > ne || (ne > 0) != (k > 0))
      bad(fmt::format("layer {}: {} experts, top-{} is not a valid shape", l, ne, k));
  }
}

RouteTraceReader::~RouteTraceReader() {
  if (f_) std::fclose(f_);
}

void RouteTraceReader::bad(const std::string& why) const {
  throw FileError(path_, file_offset_, why);
}

bool RouteTraceReader::refill() {
  for (;;) {
    if (in_pos_ == in_size_ && !flush_pending_) {
      in_size_ = std::fread(in_.data(), 1, in_.size(), f_);
      in_pos_ = 0;
      if (in_size_ == 0) {
        if (std::ferror(f_)) bad(fmt::format("read error: {}", std::strerror(errno)));
        return false;
      }
    }
    ZSTD_inBuffer in{in_.data(), in_size_, in_pos_};
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t r = ZSTD_decompressStream(z_->d, &out, &in);
    file_offset_ += in.pos - in_pos_;
    in_pos_ = in.pos;
    if (ZSTD_isError(r)) bad(fmt::format("corrupt zstd data ({})", ZSTD_getErrorName(r)));
    frame_done_ = r == 0;
    flush_pending_ = out.pos == out.size;  // more output may wait without new input
    out_pos_ = 0;
    out_size_ = out.pos;
    if (out_size_ > 0) return true;
  }
}

void RouteTraceReader::read(void* dst, size_t n) {
  auto* p = static_cast<std::byte*>(dst);
  while (n > 0) {
    if (out_pos_ == out_size_ && !refill())
      bad(frame_done_ ? "truncated: the trace ends without its end record"
                      : "truncated: the zstd stream ends mid-frame");
    const size_t take = std::min(n, out_size_ - out_pos_);
    std::memcpy(p, out_.data() + out_pos_, take);
    out_pos_ += take;
    raw_offset_ += take;
    p += take;
    n -= take;
  }
}

bool RouteTraceReader::next(RouteRecord& r) {
  if (ended_) return false;
  RecordHead h{};
  read(&h, sizeof h);
  if (h.kind == kRecordEnd) {
    uint64_t records = 0;
    read(&records, 8);
    if (records != records_)
      bad(fmt::format("end record counts {} records, the trace holds {}", records, records_));
    // The rest of the frame (its checksum, checked by zstd) and nothing after it.
    if (out_pos_ != out_size_ || refill()) bad("data after the end record");
    if (!frame_done_) bad("truncated: the zstd stream ends mid-frame");
    ended_ = true;
    return false;
  }
  if (h.kind != kRecordRouting) bad(fmt::format("unknown record kind {}", h.kind));
  if (h.layer >= header_.n_layer() || header_.k[h.layer] == 0)
    bad(fmt::format("record {}: layer {} has no routed experts", records_, h.layer));
  if (h.n_tokens == 0 || h.n_tokens > (1u << 20))
    bad(fmt::format("record {}: {} tokens", records_, h.n_tokens));
  if ((h.flags & ~kFlagDecode) != 0 || ((h.flags & kFlagDecode) != 0) != (h.n_tokens == 1))
    bad(fmt::format("record {}: flags {:#x} for {} tokens", records_, h.flags, h.n_tokens));
  const size_t n = size_t{h.n_tokens} * header_.k[h.layer];
  r.layer = h.layer;
  r.pos0 = h.pos0;
  r.n_tokens = h.n_tokens;
  r.decode = (h.flags & kFlagDecode) != 0;
  r.topk.resize(n);
  r.weights.resize(n);
  read(r.topk.data(), n * sizeof(int32_t));
  read(r.weights.data(), n * sizeof(float));
  for (int32_t e : r.topk)
    if (e < 0 || static_cast<uint32_t>(e) >= header_.n_expert[h.layer])
      bad(fmt::format("record {}: expert id {} out of range (layer {} has {})", records_, e,
                      h.layer, header_.n_expert[h.layer]));
  ++records_;
  return true;
}

// ---- traces -> usage stats ----

UsageStats usage_from_traces(const std::vector<std::string>& paths, bool force) {
  STRATA_ASSERT(!paths.empty());
  UsageStats all;
  for (size_t i = 0; i < paths.size(); ++i) {
    RouteTraceReader rd(paths[i]);
    const RouteTraceHeader& h = rd.header();
    std::vector<int> n_expert(h.n_expert.begin(), h.n_expert.end());
    UsageStats one(h.id, n_expert);
    const int first = one.first_moe_layer();
    RouteRecord r;
    while (rd.next(r)) {
      for (int32_t e : r.topk) one.record(static_cast<int>(r.layer), e, 1, r.decode);
      if (static_cast<int>(r.layer) == first) one.add_tokens(r.n_tokens, r.decode);
    }
    if (i == 0) {
      all = std::move(one);
    } else {
      all.check_compatible(one.identity(), one.n_expert(), force, "route trace " + paths[i]);
      all.merge(one, force);
    }
  }
  return all;
}

}  // namespace strata::placement
