// GGUF v3 reader (mmap) and streaming writer, byte-compatible with llama.cpp's gguf.
// Every malformed input is a strata::FileError naming the file and byte offset.
// Tested by tests/test_gguf.cpp; fuzzed by tests/fuzz_gguf.cpp (STRATA_FUZZ=ON).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "io/file_parts.h"
#include "io/ggml_type.h"

namespace strata::io {

// The numbering is the file's; it equals the index of the alternative in GgufValue::Variant.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);

struct GgufValue;

struct GgufArray {
  GgufType elem_type = GgufType::kU8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  using Variant = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  Variant v;

  GgufValue() = default;
  template <typename T>
  GgufValue(T x) : v(std::move(x)) {}  // NOLINT: implicit on purpose, GgufValue(uint32_t{4})
  GgufValue(const char* s) : v(std::string(s)) {}

  GgufType type() const { return static_cast<GgufType>(v.index()); }
  bool is_integer() const;
  bool is_number() const;  // integer or float
  // Numeric value converted (integers exactly; nullopt if not a number or out of range).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  std::optional<double> as_double() const;
  const std::string* as_string() const { return std::get_if<std::string>(&v); }
  const GgufArray* as_array() const { return std::get_if<GgufArray>(&v); }
  const bool* as_bool() const { return std::get_if<bool>(&v); }
  // Short human rendering: numbers, "string", [n × type].
  std::string to_display(size_t max_items = 8) const;
};

// Helpers to build arrays for the writer.
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items);
GgufValue gguf_string_array(const std::vector<std::string>& items);
GgufValue gguf_f32_array(const std::vector<float>& items);
GgufValue gguf_i32_array(const std::vector<int32_t>& items);

struct GgufKv {
  std::string key;
  GgufValue value;
};

constexpr int kGgufMaxDims = 4;

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<uint64_t, kGgufMaxDims> ne = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to its file's data section, as stored in the file
  uint64_t file_offset = 0;  // absolute byte offset in the file (a split model's: in parts())
  uint64_t n_bytes = 0;
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes of one row (ne[0] elements).
  uint64_t row_bytes() const;
  std::string shape_string() const;  // "[2048, 768, 128]"
};

// gguf-split's keys: a model split into split.count files, this one number split.no (from 0),
// named PREFIX-{split.no + 1:05}-of-{split.count:05}.gguf; the first holds all the metadata.
constexpr const char* kGgufSplitNo = "split.no";
constexpr const char* kGgufSplitCount = "split.count";
constexpr const char* kGgufSplitTensors = "split.tensors.count";
// The name of shard `no` (from 0) of `count`: PREFIX-00002-of-00003.gguf.
std::string gguf_split_path(const std::string& prefix, uint64_t no, uint64_t count);

class GgufFile {
 public:
  // Opens and parses path (mmap, read-only). Throws FileError / Error. A shard of a split model
  // (split.count > 1; any of the shards may be named) opens every shard beside it as one model:
  // the first shard's metadata, all shards' tensors, one mapping (parts() says where each file
  // lies in it). Error naming the shard that is missing, foreign or inconsistent.
  static GgufFile open(const std::string& path);
  // Parses an in-memory image; `name` is used in error messages. The bytes must outlive the
  // returned object. Used by the fuzzer and tests.
  static GgufFile parse(std::string name, std::span<const std::byte> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  // The file opened, or a split model's first shard.
  const std::string& path() const { return path_; }
  // The files and where each lies in the tensors' file_offset numbering: one part at 0 for a
  // plain file.
  const FileParts& parts() const { return parts_; }
  bool split() const { return parts_.size() > 1; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }       // the first part's
  uint64_t file_size() const { return parts_bytes(parts_); }  // every part's bytes

  const std::vector<GgufKv>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters. Missing key: Error(kNotFound) naming the key. Wrong type: Error(kBadFile)
  // naming the key and both types. The *_or forms return the default when the key is missing.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  double get_double(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  std::optional<int64_t> get_int_opt(std::string_view key) const;
  std::optional<uint64_t> get_uint_opt(std::string_view key) const;
  std::optional<double> get_double_opt(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;
  const GgufArray* get_array_opt(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Pointer into the mapping for a tensor's bytes (the file is mapped read-only and lazily, so
  // untouched tensors cost no RAM).
  const std::byte* tensor_data(const GgufTensorInfo& t) const {
    return bytes_.data() + t.file_offset;
  }
  // The mapping, [0, parts_end(parts())): a split model's gaps between parts are not readable.
  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  GgufFile() = default;
  static GgufFile open_one(const std::string& path);
  static GgufFile open_split(const std::string& path, const GgufFile& shard, uint64_t count);
  void parse_all();

  std::string path_;
  std::span<const std::byte> bytes_;
  void* map_ = nullptr;  // owned mapping (nullptr for parse())
  size_t map_len_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kv_;
  std::vector<GgufTensorInfo> tensors_;
  FileParts parts_;
};

// Streaming writer: declare metadata and tensors, then write() streams the header and asks for
// each tensor's bytes in order, so files larger than RAM can be written. The file is written to
// PATH.tmp and renamed on success (no partial outputs).
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32);

  void set(std::string key, GgufValue value);  // replaces an existing key, keeps its position
  // Returns the tensor's index. ne[0] must be a multiple of the type's block size.
  size_t add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne);
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  uint64_t total_bytes() const;  // the size the file will have

  // fill(i, out) writes exactly tensors()[i].n_bytes bytes into out.
  using FillFn = std::function<void(size_t index, std::span<std::byte> out)>;
  // progress(bytes_written, total_bytes), called after each tensor.
  using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
  void write(const std::string& path, const FillFn& fill, const ProgressFn& progress = {}) const;
  // The same bytes, in memory (tests, fuzz seeds).
  std::vector<std::byte> to_bytes(const FillFn& fill) const;

 private:
  std::vector<std::byte> header_bytes() const;
  uint64_t alignment_;
  std::vector<GgufKv> kv_;
  std::vector<GgufTensorInfo> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace strata::io
