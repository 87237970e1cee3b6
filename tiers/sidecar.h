// The compressed SSD tier's sidecar file (`strata pack`): every routed expert's three slices
// (gate, up, down, back to back) as one zstd frame at a 4 KiB-aligned offset, an index, and the
// model's fingerprint; format in docs/FORMATS.md "Expert sidecar". The Decompressor turns frames
// read by the I/O side into expert bytes on its own threads, never on the compute threads.
// Tested by tests/test_tier_zstd.cpp; measured by bench/e2e_tiers.sh (ZSTD rows).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/file_parts.h"
#include "tiers/extents.h"

namespace strata::tiers {

// What identifies a model file's bytes without reading them all: its size, a hash of its header
// (metadata and tensor table: everything before the tensor data) and a hash of 64 4 KiB pages
// spread evenly over the file.
struct ModelFingerprint {
  uint64_t file_size = 0;
  uint64_t header_hash = 0;
  uint64_t sample_hash = 0;
  bool operator==(const ModelFingerprint&) const = default;
};
ModelFingerprint model_fingerprint(const std::string& path, uint64_t data_offset);
// A model's files: one part's is the file's; a split model's folds every shard's in order.
ModelFingerprint model_fingerprint(const io::FileParts& parts);

// One expert's frame in the sidecar.
struct SidecarEntry {
  uint64_t offset = 0;      // in the sidecar, 4 KiB-aligned
  uint64_t bytes = 0;       // stored bytes (the zstd frame, or the raw slices when stored_raw)
  uint64_t raw_bytes = 0;   // gate + up + down slice bytes
  bool stored_raw = false;  // zstd did not shrink it: the slices are stored as they are
  uint64_t read_bytes() const { return (bytes + 4095) / 4096 * 4096; }  // the O_DIRECT read
};

struct Sidecar {
  std::string path;
  ModelFingerprint fingerprint;                    // of the model it was packed from
  int level = 0;                                   // zstd level used
  std::vector<std::vector<SidecarEntry>> entries;  // [n_layer][n_expert], as the extents

  uint64_t raw_bytes() const;     // every expert's slice bytes
  uint64_t stored_bytes() const;  // every frame's bytes
  double ratio() const;           // raw / stored (1 = nothing gained)
  uint64_t max_read_bytes() const;
  uint64_t max_raw_bytes() const;
};

constexpr const char* kSidecarSuffix = ".stz";

struct PackOptions {
  int level = 3;
  int threads = 2;
  std::function<void(uint64_t done, uint64_t total)> progress;  // raw bytes packed
};

// Reads every expert's slices from the model's files (extents in the parts' numbering),
// compresses them and writes out (out.tmp, then renamed). Returns the written sidecar's
// description. Error naming the file on I/O failure.
Sidecar write_sidecar(const io::FileParts& model_parts, const ExtentTable& extents,
                      const std::string& out, const PackOptions& o);

// Reads and checks the header and index: magic, version, counts and raw sizes against extents,
// frames inside the file. Error(kBadFile) naming the sidecar and the offset of what is wrong.
Sidecar read_sidecar(const std::string& path, const ExtentTable& extents);

// Decompresses up to n_frames frames (read with pread) and returns the raw GB/s of one thread.
double measure_decompress_gbps(const Sidecar& sidecar, int n_frames);

// Frames to expert bytes on worker threads. Not thread-safe itself: one thread (the store's
// driver) submits and reaps; the workers only touch the jobs' buffers.
class Decompressor {
 public:
  struct Job {
    const std::byte* src = nullptr;  // the frame as read (src_bytes valid)
    uint64_t src_bytes = 0;
    std::byte* dst = nullptr;  // raw_bytes of room
    uint64_t raw_bytes = 0;
    bool stored_raw = false;
    uint64_t tag = 0;
    uint64_t file_offset = 0;  // for errors
  };
  struct Done {
    uint64_t tag = 0;
    double seconds = 0;        // decompression time
    uint64_t file_offset = 0;  // of the frame
    std::string error;         // empty = ok
  };

  Decompressor(std::string path, int threads);
  ~Decompressor();  // finishes the jobs in flight
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  void submit(const Job& job);
  // Finished jobs, without blocking / blocking until at least one when any is pending. A job
  // whose frame is corrupt throws Error(kBadFile) naming the sidecar and the frame's offset.
  size_t poll(std::span<Done> out) { return reap(out, false); }
  size_t wait(std::span<Done> out) { return reap(out, true); }
  size_t pending() const { return pending_; }

 private:
  size_t reap(std::span<Done> out, bool block);
  void work();

  std::string path_;
  std::mutex mu_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<Job> todo_;
  std::deque<Done> done_;
  size_t pending_ = 0;  // submitted, not yet reaped (driver thread only)
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace strata::tiers
