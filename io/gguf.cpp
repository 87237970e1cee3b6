// GGUF v3 reader and writer (see gguf.h). The parser trusts nothing in the file: every length,
// count, offset and dimension is checked against the bytes that remain before it is used.
// Tested by tests/test_gguf.cpp; fuzzed by tests/fuzz_gguf.cpp.
#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include "io/check.h"

namespace strata::io {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are refused (stack safety)

// Minimum encoded size of one element of a type (strings: their u64 length; arrays: type+count).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

bool valid_type(uint32_t raw) {
  return raw <= static_cast<uint32_t>(GgufType::kF64);
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Bounds-checked little-endian reader over the file image.
class Cursor {
 public:
  Cursor(const std::string& name, std::span<const std::byte> bytes) : name_(name), bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail_at(uint64_t offset, const std::string& what) const {
    throw FileError(name_, offset, what);
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail_at(pos_, fmt::format("truncated: {} needs {} bytes, {} left in the file", what, n,
                                remaining()));
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail_at(at, fmt::format("{} length {} runs past the end of the file ({} bytes left)", what,
                              len, remaining()));
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const std::string& name_;
  std::span<const std::byte> bytes_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Cursor& c, GgufType type, int depth) {
  switch (type) {
    case GgufType::kU8:
      return c.read<uint8_t>("u8 value");
    case GgufType::kI8:
      return c.read<int8_t>("i8 value");
    case GgufType::kU16:
      return c.read<uint16_t>("u16 value");
    case GgufType::kI16:
      return c.read<int16_t>("i16 value");
    case GgufType::kU32:
      return c.read<uint32_t>("u32 value");
    case GgufType::kI32:
      return c.read<int32_t>("i32 value");
    case GgufType::kF32:
      return c.read<float>("f32 value");
    case GgufType::kBool: {
      const uint64_t at = c.pos();
      const uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail_at(at, fmt::format("bool value {} is neither 0 nor 1", b));
      return b != 0;
    }
    case GgufType::kString:
      return c.read_string("string");
    case GgufType::kU64:
      return c.read<uint64_t>("u64 value");
    case GgufType::kI64:
      return c.read<int64_t>("i64 value");
    case GgufType::kF64:
      return c.read<double>("f64 value");
    case GgufType::kArray: {
      const uint64_t at = c.pos();
      if (depth >= kMaxArrayDepth)
        c.fail_at(at, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
      const uint32_t raw = c.read<uint32_t>("array element type");
      if (!valid_type(raw)) c.fail_at(at, fmt::format("unknown array element type {}", raw));
      const auto elem = static_cast<GgufType>(raw);
      const uint64_t count_at = c.pos();
      const uint64_t count = c.read<uint64_t>("array length");
      if (count > c.remaining() / min_encoded_size(elem))
        c.fail_at(count_at, fmt::format("array of {} {} runs past the end of the file "
                                        "({} bytes left)",
                                        count, gguf_type_name(elem), c.remaining()));
      GgufArray arr;
      arr.elem_type = elem;
      arr.items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) arr.items.push_back(read_value(c, elem, depth + 1));
      return arr;
    }
  }
  STRATA_ASSERT(false, "unreachable gguf type {}", static_cast<uint32_t>(type));
}

// Encoding for the writer.
class Sink {
 public:
  template <typename T>
  void put(T v) {
    put_raw(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
  // resize + memcpy rather than insert: g++ 12 warns falsely on vector<byte>::insert.
  void put_raw(const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n) std::memcpy(out.data() + at, p, n);
  }
  void put_value(const GgufValue& v) {
    std::visit(
        [this](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            put_string(x);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            put<uint32_t>(static_cast<uint32_t>(x.elem_type));
            put<uint64_t>(x.items.size());
            for (const auto& item : x.items) {
              STRATA_ASSERT(item.type() == x.elem_type, "array of {} holds a {}",
                            gguf_type_name(x.elem_type), gguf_type_name(item.type()));
              put_value(item);
            }
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else {
            put<T>(x);
          }
        },
        v.v);
  }
  std::vector<std::byte> out;
};

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

// ---- GgufValue ----

bool GgufValue::is_integer() const {
  switch (type()) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_number() const {
  return is_integer() || type() == GgufType::kF32 || type() == GgufType::kF64;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::visit(
      [](const auto& x) -> int64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(x);
        return 0;
      },
      v);
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  auto i = as_int();
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> GgufValue::as_double() const {
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto i = as_int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::string GgufValue::to_display(size_t max_items) const {
  if (const auto* s = as_string()) {
    std::string t = s->size() > 60 ? s->substr(0, 57) + "..." : *s;
    for (char& ch : t)
      if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
    return fmt::format("\"{}\"", t);
  }
  if (const auto* a = as_array()) {
    std::string r = fmt::format("[{} x {}]", a->items.size(), gguf_type_name(a->elem_type));
    if (a->elem_type != GgufType::kArray && !a->items.empty()) {
      r += " {";
      for (size_t i = 0; i < a->items.size() && i < max_items; ++i)
        r += (i ? ", " : "") + a->items[i].to_display(max_items);
      r += a->items.size() > max_items ? ", ...}" : "}";
    }
    return r;
  }
  if (const auto* b = as_bool()) return *b ? "true" : "false";
  if (type() == GgufType::kF32 || type() == GgufType::kF64) return fmt::format("{}", *as_double());
  if (const auto* u = std::get_if<uint64_t>(&v)) return fmt::format("{}", *u);
  return fmt::format("{}", *as_int());
}

GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items) {
  return GgufArray{elem_type, std::move(items)};
}

GgufValue gguf_string_array(const std::vector<std::string>& items) {
  GgufArray a{GgufType::kString, {}};
  a.items.reserve(items.size());
  for (const auto& s : items) a.items.emplace_back(s);
  return a;
}

GgufValue gguf_f32_array(const std::vector<float>& items) {
  GgufArray a{GgufType::kF32, {}};
  a.items.reserve(items.size());
  for (float f : items) a.items.emplace_back(f);
  return a;
}

GgufValue gguf_i32_array(const std::vector<int32_t>& items) {
  GgufArray a{GgufType::kI32, {}};
  a.items.reserve(items.size());
  for (int32_t i : items) a.items.emplace_back(i);
  return a;
}

// ---- GgufTensorInfo ----

uint64_t GgufTensorInfo::row_bytes() const {
  return ggml_row_bytes(type, ne[0]);
}

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t d = 0; d < std::max<uint32_t>(n_dims, 1); ++d)
    s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

// ---- GgufFile ----

GgufFile::GgufFile(GgufFile&& o) noexcept {
  *this = std::move(o);
}

GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, map_len_);
    path_ = std::move(o.path_);
    bytes_ = o.bytes_;
    map_ = std::exchange(o.map_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    version_ = o.version_;
    alignment_ = o.alignment_;
    data_offset_ = o.data_offset_;
    kv_ = std::move(o.kv_);
    tensors_ = std::move(o.tensors_);
    parts_ = std::move(o.parts_);
  }
  return *this;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, map_len_);
}

std::string gguf_split_path(const std::string& prefix, uint64_t no, uint64_t count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, no + 1, count);
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f = open_one(path);
  const GgufValue* count = f.find(kGgufSplitCount);
  if (!count) return f;
  const auto n = count->as_uint();
  if (!n || !count->is_integer())
    fail(ErrorKind::kBadFile, "{}: key '{}' must be an integer, not {}", path, kGgufSplitCount,
         gguf_type_name(count->type()));
  // llama-gguf-split --merge leaves split.count 0 in the merged file.
  if (*n <= 1) return f;
  return open_split(path, f, *n);
}

GgufFile GgufFile::open_split(const std::string& path, const GgufFile& shard, uint64_t count) {
  const auto no = shard.get_uint_opt(kGgufSplitNo);
  if (!no || *no >= count)
    fail(ErrorKind::kBadFile, "{}: {} is {} but {} is {}", path, kGgufSplitCount, count,
         kGgufSplitNo, no ? std::to_string(*no) : std::string("missing"));
  // The other shards are found by gguf-split's names.
  const std::string own = gguf_split_path("", *no, count);
  if (path.size() <= own.size() || path.compare(path.size() - own.size(), own.size(), own) != 0)
    fail(ErrorKind::kBadFile,
         "{}: shard {} of a model split in {} files ({}, {}), but its name does not end in '{}': "
         "strata finds the other shards by the names llama-gguf-split gives them (or join them "
         "into one file with llama-gguf-split --merge)",
         path, *no + 1, count, kGgufSplitNo, kGgufSplitCount, own);
  const std::string prefix = path.substr(0, path.size() - own.size());

  // Every shard's size first: the mapping is reserved whole, then each file mapped into it.
  struct Shard {
    std::string path;
    int fd = -1;
    uint64_t size = 0;
    uint64_t base = 0;
  };
  std::vector<Shard> shards(count);
  auto close_all = [&] {
    for (Shard& s : shards)
      if (s.fd >= 0) ::close(std::exchange(s.fd, -1));
  };
  uint64_t end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    Shard& s = shards[i];
    s.path = gguf_split_path(prefix, i, count);
    s.fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (s.fd < 0 || fstat(s.fd, &st) != 0) {
      const int err = errno;
      close_all();
      fail(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
           "{}: shard {} of the {} this model is split in cannot be opened: {}: {}", path, i + 1,
           count, s.path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      close_all();
      fail(ErrorKind::kBadFile, "{}: not a regular file", s.path);
    }
    s.size = static_cast<uint64_t>(st.st_size);
    s.base = (end + kPartAlign - 1) / kPartAlign * kPartAlign;
    end = s.base + s.size;
  }
  void* reserved =
      end == 0 ? nullptr
               : mmap(nullptr, end, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    close_all();
    fail_sys("mmap", fmt::format("{}: a {}-byte range for {} shards", path, end, count));
  }
  GgufFile f;  // owns the reservation from here: a throw unmaps it
  f.path_ = shards[0].path;
  f.map_ = reserved;
  f.map_len_ = end;
  f.bytes_ = {static_cast<const std::byte*>(reserved), end};
  auto* base = static_cast<std::byte*>(reserved);
  for (const Shard& s : shards) {
    if (s.size > 0 &&
        mmap(base + s.base, s.size, PROT_READ, MAP_SHARED | MAP_FIXED, s.fd, 0) == MAP_FAILED) {
      close_all();
      fail_sys("mmap", s.path);
    }
  }
  close_all();

  std::unordered_set<std::string_view> names;
  uint64_t tensors_in_shards = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const Shard& s = shards[i];
    GgufFile one = parse(s.path, f.bytes_.subspan(s.base, s.size));
    const auto one_no = one.get_uint_opt(kGgufSplitNo);
    const auto one_count = one.get_uint_opt(kGgufSplitCount);
    if (one_no != i || one_count != count)
      fail(ErrorKind::kBadFile,
           "{}: expected shard {} of {} ({} {}, {} {}) but it says {} {}, {} {}: a shard of "
           "another model?",
           s.path, i + 1, count, kGgufSplitNo, i, kGgufSplitCount, count, kGgufSplitNo,
           one_no ? std::to_string(*one_no) : "missing", kGgufSplitCount,
           one_count ? std::to_string(*one_count) : "missing");
    if (i == 0) {
      f.version_ = one.version_;
      f.alignment_ = one.alignment_;
      f.data_offset_ = one.data_offset_;
      f.kv_ = std::move(one.kv_);
    }
    tensors_in_shards += one.tensors_.size();
    for (GgufTensorInfo& t : one.tensors_) {
      t.file_offset += s.base;
      f.tensors_.push_back(std::move(t));
    }
    f.parts_.push_back({s.path, s.base, s.size, one.data_offset_});
  }
  for (const GgufTensorInfo& t : f.tensors_)
    if (!names.insert(t.name).second)
      fail(ErrorKind::kBadFile, "{}: tensor '{}' is in two of its {} shards", path, t.name, count);
  if (const auto want = f.get_uint_opt(kGgufSplitTensors); want && *want != tensors_in_shards)
    fail(ErrorKind::kBadFile, "{}: {} says {} tensors but the {} shards hold {}", f.path_,
         kGgufSplitTensors, *want, count, tensors_in_shards);
  return f;
}

GgufFile GgufFile::open_one(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_sys("open", path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail_sys("fstat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::kBadFile, "{}: not a regular file", path);
  }
  GgufFile f;
  f.path_ = path;
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail_sys("mmap", path);
    }
    f.map_ = p;
    f.map_len_ = size;
    f.bytes_ = {static_cast<const std::byte*>(p), size};
  }
  ::close(fd);
  f.parse_all();
  return f;
}

GgufFile GgufFile::parse(std::string name, std::span<const std::byte> bytes) {
  GgufFile f;
  f.path_ = std::move(name);
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

void GgufFile::parse_all() {
  Cursor c(path_, bytes_);
  if (bytes_.size() < 4) c.fail_at(0, "not a GGUF file: shorter than the 4-byte magic");
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) c.fail_at(0, "not a GGUF file: bad magic (expected \"GGUF\")");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.fail_at(4,
              fmt::format("unsupported GGUF version {} (strata reads versions 2 and 3)", version_));
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv_at = c.pos();
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each kv needs at least key length + type + 1 byte; each tensor info at least 8+4+8+4+8.
  if (n_kv > c.remaining() / 13)
    c.fail_at(n_kv_at, fmt::format("metadata count {} runs past the end of the file", n_kv));
  if (n_tensors > c.remaining() / 32)
    c.fail_at(8, fmt::format("tensor count {} runs past the end of the file", n_tensors));

  std::unordered_set<std::string> keys;
  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = c.pos();
    std::string key = c.read_string("metadata key");
    if (!keys.insert(key).second) c.fail_at(key_at, fmt::format("duplicate key '{}'", key));
    const uint64_t type_at = c.pos();
    const uint32_t raw = c.read<uint32_t>("metadata value type");
    if (!valid_type(raw))
      c.fail_at(type_at, fmt::format("key '{}' has unknown value type {}", key, raw));
    GgufValue v = read_value(c, static_cast<GgufType>(raw), 0);
    kv_.push_back({std::move(key), std::move(v)});
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    const auto al = a->as_uint();
    if (!al || *al == 0 || (*al & (*al - 1)) != 0 || *al > (1u << 30))
      c.fail_at(0, fmt::format("general.alignment {} is not a power of two", a->to_display()));
    alignment_ = *al;
  }

  std::unordered_set<std::string> names;
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    GgufTensorInfo t;
    t.name = c.read_string("tensor name");
    if (!names.insert(t.name).second)
      c.fail_at(at, fmt::format("duplicate tensor name '{}'", t.name));
    const uint64_t dims_at = c.pos();
    t.n_dims = c.read<uint32_t>("tensor dimension count");
    if (t.n_dims > kGgufMaxDims)
      c.fail_at(dims_at, fmt::format("tensor '{}' has {} dimensions (at most {})", t.name, t.n_dims,
                                     kGgufMaxDims));
    for (uint32_t d = 0; d < t.n_dims; ++d) t.ne[d] = c.read<uint64_t>("tensor dimension");
    uint64_t n = 1;
    for (uint32_t d = 0; d < kGgufMaxDims; ++d) {
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (t.ne[d] != 0 &&
           n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / t.ne[d]))
        c.fail_at(dims_at,
                  fmt::format("tensor '{}': dimensions {} overflow", t.name, t.shape_string()));
      n *= t.ne[d];
    }
    const uint64_t type_at = c.pos();
    const uint32_t raw_type = c.read<uint32_t>("tensor type");
    const auto info = ggml_type_info(raw_type);
    if (!info) c.fail_at(type_at, fmt::format("tensor '{}' has unknown type {}", t.name, raw_type));
    t.type = static_cast<GgmlType>(raw_type);
    if (t.ne[0] % info->block_size != 0)
      c.fail_at(dims_at, fmt::format("tensor '{}': row of {} elements is not a multiple of the "
                                     "{} block size {}",
                                     t.name, t.ne[0], info->name, info->block_size));
    t.n_bytes = n / info->block_size * info->type_size;
    const uint64_t off_at = c.pos();
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % alignment_ != 0)
      c.fail_at(off_at, fmt::format("tensor '{}': data offset {} is not a multiple of the "
                                    "alignment {}",
                                    t.name, t.offset, alignment_));
    tensors_.push_back(std::move(t));
  }

  data_offset_ = align_up(c.pos(), alignment_);
  const uint64_t size = bytes_.size();
  if (!tensors_.empty() && data_offset_ > size)
    c.fail_at(c.pos(), fmt::format("data section starts at {} past the end of the file ({} bytes)",
                                   data_offset_, size));
  for (auto& t : tensors_) {
    if (t.offset > size || t.n_bytes > size || data_offset_ > size - t.offset ||
        t.n_bytes > size - data_offset_ - t.offset)
      c.fail_at(std::min<uint64_t>(data_offset_ + std::min(t.offset, size), size),
                fmt::format("tensor '{}' ({} bytes at data offset {}) runs past the end of the "
                            "file ({} bytes): truncated?",
                            t.name, t.n_bytes, t.offset, size));
    t.file_offset = data_offset_ + t.offset;
  }
  parts_ = {FilePart{path_, 0, size, data_offset_}};
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const char* want,
                             const GgufValue& v) {
  fail(ErrorKind::kBadFile, "{}: key '{}' should be {} but is {}", path, key, want,
       gguf_type_name(v.type()));
}
}  // namespace

std::optional<std::string> GgufFile::get_string_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->as_string()) wrong_type(path_, key, "a string", *v);
  return *v->as_string();
}

std::optional<int64_t> GgufFile::get_int_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  auto i = v->as_int();
  if (!i) wrong_type(path_, key, "an integer", *v);
  return i;
}

std::optional<uint64_t> GgufFile::get_uint_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  auto u = v->as_uint();
  if (!u) wrong_type(path_, key, "a non-negative integer", *v);
  return u;
}

std::optional<double> GgufFile::get_double_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  auto d = v->as_double();
  if (!d) wrong_type(path_, key, "a number", *v);
  return d;
}

std::optional<bool> GgufFile::get_bool_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->as_bool()) wrong_type(path_, key, "a bool", *v);
  return *v->as_bool();
}

const GgufArray* GgufFile::get_array_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (!v->as_array()) wrong_type(path_, key, "an array", *v);
  return v->as_array();
}

namespace {
template <typename T>
T required(const std::string& path, std::string_view key, std::optional<T> v) {
  if (!v) fail(ErrorKind::kNotFound, "{}: required key '{}' is missing", path, key);
  return *v;
}
}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  return required(path_, key, get_string_opt(key));
}
int64_t GgufFile::get_int(std::string_view key) const {
  return required(path_, key, get_int_opt(key));
}
uint64_t GgufFile::get_uint(std::string_view key) const {
  return required(path_, key, get_uint_opt(key));
}
double GgufFile::get_double(std::string_view key) const {
  return required(path_, key, get_double_opt(key));
}
bool GgufFile::get_bool(std::string_view key) const {
  return required(path_, key, get_bool_opt(key));
}
const GgufArray& GgufFile::get_array(std::string_view key) const {
  const GgufArray* a = get_array_opt(key);
  if (!a) fail(ErrorKind::kNotFound, "{}: required key '{}' is missing", path_, key);
  return *a;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

// ---- GgufWriter ----

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  STRATA_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment {}", alignment);
  if (alignment != kDefaultAlignment) set("general.alignment", static_cast<uint32_t>(alignment));
}

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& kv : kv_)
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  kv_.push_back({std::move(key), std::move(value)});
}

size_t GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne) {
  STRATA_ASSERT(!ne.empty() && ne.size() <= kGgufMaxDims, "tensor {} has {} dims", name, ne.size());
  for (const auto& t : tensors_) STRATA_ASSERT(t.name != name, "duplicate tensor {}", name);
  GgufTensorInfo t;
  t.name = std::move(name);
  t.n_dims = static_cast<uint32_t>(ne.size());
  for (size_t d = 0; d < ne.size(); ++d) t.ne[d] = ne[d];
  t.type = type;
  const auto info = ggml_type_info(type);
  STRATA_ASSERT(t.ne[0] % info.block_size == 0, "tensor {}: ne[0]={} vs block {}", t.name, t.ne[0],
                info.block_size);
  t.n_bytes = t.n_elements() / info.block_size * info.type_size;
  t.offset = align_up(data_bytes_, alignment_);
  data_bytes_ = t.offset + t.n_bytes;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

std::vector<std::byte> GgufWriter::header_bytes() const {
  Sink s;
  s.put<uint32_t>(kGgufMagic);
  s.put<uint32_t>(3);
  s.put<uint64_t>(tensors_.size());
  s.put<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    s.put_string(kv.key);
    s.put<uint32_t>(static_cast<uint32_t>(kv.value.type()));
    s.put_value(kv.value);
  }
  for (const auto& t : tensors_) {
    s.put_string(t.name);
    s.put<uint32_t>(t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) s.put<uint64_t>(t.ne[d]);
    s.put<uint32_t>(static_cast<uint32_t>(t.type));
    s.put<uint64_t>(t.offset);
  }
  s.out.resize(align_up(s.out.size(), alignment_));
  return std::move(s.out);
}

uint64_t GgufWriter::total_bytes() const {
  return header_bytes().size() + align_up(data_bytes_, alignment_);
}

std::vector<std::byte> GgufWriter::to_bytes(const FillFn& fill) const {
  std::vector<std::byte> out = header_bytes();
  const uint64_t data_at = out.size();
  out.resize(data_at + align_up(data_bytes_, alignment_));
  for (size_t i = 0; i < tensors_.size(); ++i)
    fill(i, {out.data() + data_at + tensors_[i].offset, tensors_[i].n_bytes});
  return out;
}

void GgufWriter::write(const std::string& path, const FillFn& fill,
                       const ProgressFn& progress) const {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_sys("open", tmp);
  std::vector<std::byte> buf;
  uint64_t pos = 0;
  auto write_all = [&](const std::byte* p, uint64_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1u << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_sys("write", tmp);  // the catch below closes and removes the temp file
      }
      p += w;
      n -= static_cast<uint64_t>(w);
      pos += static_cast<uint64_t>(w);
    }
  };
  try {
    const std::vector<std::byte> header = header_bytes();
    write_all(header.data(), header.size());
    const uint64_t data_at = header.size();
    const uint64_t total = data_at + align_up(data_bytes_, alignment_);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      const std::vector<std::byte> pad(data_at + t.offset - pos);
      write_all(pad.data(), pad.size());
      buf.assign(t.n_bytes, std::byte{0});
      fill(i, buf);
      write_all(buf.data(), buf.size());
      if (progress) progress(pos, total);
    }
    const std::vector<std::byte> tail(total - pos);
    write_all(tail.data(), tail.size());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail_sys("close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail_sys("rename", path);
  }
}

}  // namespace strata::io
