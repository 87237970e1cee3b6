// ExpertStore: RAM homes loaded once into NUMA arenas, SSD homes streamed into the RAM cache in one
// batch per layer, and the counters PROF reports. Tested by tests/test_tiers_store.cpp.
#include "tiers/expert_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "io/check.h"

namespace strata::tiers {

namespace {

using Clock = std::chrono::steady_clock;
using placement::HomeKind;

constexpr const char* kSliceNames[3] = {"gate", "up", "down"};

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

// Offsets of the three slices packed in a RAM arena, and the packed size.
std::array<uint64_t, 4> packed_layout(const ExpertExtents& x) {
  std::array<uint64_t, 4> at{};
  for (int i = 0; i < 3; ++i) at[i + 1] = at[i] + align_up(x[i].bytes, kSliceAlign);
  return at;
}

uint64_t superset_bytes(const ExpertExtents& x) {
  uint64_t total = 0;
  for (const SliceExtent& s : x) total += aligned_superset(s.offset, s.bytes).bytes;
  return total;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

placement::ExpertSizes expert_sizes(const ExtentTable& extents, int n_expert_used,
                                    const Sidecar* sidecar) {
  placement::ExpertSizes s;
  s.n_expert_used = n_expert_used;
  for (size_t l = 0; l < extents.size(); ++l) {
    const auto& layer = extents[l];
    uint64_t largest = 0;
    for (size_t e = 0; e < layer.size(); ++e) {
      const ExpertExtents& x = layer[e];
      largest = std::max(largest, packed_layout(x)[3]);
      s.slot_bytes = std::max(s.slot_bytes, superset_bytes(x));
      if (sidecar) {
        const SidecarEntry& f = sidecar->entries[l][e];
        s.slot_bytes = std::max(s.slot_bytes, align_up(f.raw_bytes, kDirectAlign) + f.read_bytes());
      }
    }
    s.n_expert.push_back(static_cast<int>(layer.size()));
    s.expert_bytes.push_back(largest);
  }
  return s;
}

ExpertStore::ExpertStore(std::string path, ExtentTable extents, placement::PlacementPlan plan,
                         StoreOptions options, StoreHooks hooks)
    : ExpertStore(io::FileParts{io::FilePart{std::move(path), 0, 0, 0}}, std::move(extents),
                  std::move(plan), options, std::move(hooks)) {}

ExpertStore::ExpertStore(io::FileParts parts, ExtentTable extents, placement::PlacementPlan plan,
                         StoreOptions options, StoreHooks hooks)
    : path_(parts.at(0).path),
      extents_(std::move(extents)),
      plan_(std::move(plan)),
      options_(options),
      hooks_(std::move(hooks)) {
  IoConfig io;
  io.direct = options_.direct;
  io.uring = options_.uring;
  io.threads = options_.io_threads;
  io.queue_depth = options_.queue_depth;
  io.faults = options_.faults;
  io.notice = hooks_.notice;
  reader_ = std::make_unique<IoReader>(std::move(parts), io);
  if (options_.sidecar) {
    zreader_ = std::make_unique<IoReader>(options_.sidecar->path, io);
    decomp_ = std::make_unique<Decompressor>(options_.sidecar->path, options_.decompress_threads);
    zdone_.resize(options_.queue_depth);
  }
  check_inputs();

  const int n_layer = plan_.n_layer();
  layer_begin_.assign(n_layer + 1, 0);
  for (int l = 0; l < n_layer; ++l) layer_begin_[l + 1] = layer_begin_[l] + plan_.n_expert(l);
  experts_.resize(layer_begin_[n_layer]);
  active_.resize(n_layer);

  // Slot layout: the three supersets back to back, each starting on a 4 KiB boundary.
  for (int l = 0; l < n_layer; ++l) {
    for (int e = 0; e < plan_.n_expert(l); ++e) {
      Expert& x = experts_[key(l, e)];
      x.home = plan_.home(l, e);
      uint64_t at = 0;
      for (int i = 0; i < 3; ++i) {
        x.read[i] = aligned_superset(extents_[l][e][i].offset, extents_[l][e][i].bytes);
        x.sub[i] = at;
        at += x.read[i].bytes;
      }
      if (options_.sidecar) {
        // Slot: the slices back to back (as the frame holds them), then the frame as read. Every
        // expert gets its frame: REPIN may demote a RAM home to SSD.
        x.frame = &options_.sidecar->entries[l][e];
        uint64_t raw = 0;
        for (int i = 0; i < 3; ++i) {
          x.zsub[i] = raw;
          raw += extents_[l][e][i].bytes;
        }
        x.zframe_at = align_up(raw, kDirectAlign);
      }
    }
  }

  // The cache, registered with the ring one slot per fixed buffer.
  const uint64_t slot_bytes = plan_.sizes().slot_bytes;
  const int n_slots = plan_.cache_slots();
  cache_ = std::make_unique<ExpertCache>(
      n_slots, slot_bytes, static_cast<int64_t>(experts_.size()),
      RamArena(static_cast<uint64_t>(n_slots) * slot_bytes, RamArena::kAnyNode, options_.numa,
               hooks_.first_touch, hooks_.notice));
  pending_reads_.assign(n_slots, 0);
  prefetch_at_.resize(n_slots);
  filled_at_.resize(n_slots);
  completions_.resize(options_.queue_depth);

  // One arena per RAM node the plan uses, experts packed in layer-major order.
  std::map<int, uint64_t> node_bytes;
  for (int l = 0; l < n_layer; ++l)
    for (int e = 0; e < plan_.n_expert(l); ++e)
      if (experts_[key(l, e)].home.kind == HomeKind::kRam)
        node_bytes[experts_[key(l, e)].home.index] += packed_layout(extents_[l][e])[3];
  std::map<int, std::pair<std::byte*, uint64_t>> cursor;  // node -> (next free byte, used)
  for (const auto& [node, bytes] : node_bytes) {
    const int arena_node = node == placement::Home::kInterleaved ? RamArena::kAnyNode : node;
    arenas_.emplace_back(bytes, arena_node, options_.numa, hooks_.first_touch, hooks_.notice);
    cursor[node] = {arenas_.back().data(), 0};
  }
  for (int l = 0; l < n_layer; ++l) {
    for (int e = 0; e < plan_.n_expert(l); ++e) {
      Expert& x = experts_[key(l, e)];
      if (x.home.kind != HomeKind::kRam) continue;
      const auto at = packed_layout(extents_[l][e]);
      std::byte* base = cursor[x.home.index].first;
      for (int i = 0; i < 3; ++i) x.ram[i] = base + at[i];
      cursor[x.home.index].first += at[3];
    }
  }

  std::vector<std::span<std::byte>> slots;
  for (int s = 0; s < n_slots; ++s) slots.push_back({cache_->data(s), slot_bytes});
  reader_->register_buffers(slots);
  if (zreader_) zreader_->register_buffers(slots);

  load_ram_homes();
  ssd_busy_base_ = readers_busy();
}

double ExpertStore::readers_busy() const {
  return reader_->busy_seconds() + (zreader_ ? zreader_->busy_seconds() : 0.0);
}

ExpertStore::~ExpertStore() {
  // Reads and decompressions in flight land in the cache: wait for them before the memory goes.
  reader_.reset();
  zreader_.reset();
  decomp_.reset();
}

void ExpertStore::check_inputs() {
  const auto fail_plan = [&](const std::string& what) {
    fail(ErrorKind::kBadValue, "{}: placement plan does not match the model's experts: {}", path_,
         what);
  };
  if (static_cast<int>(extents_.size()) != plan_.n_layer())
    fail_plan(
        fmt::format("{} layers of extents, {} in the plan", extents_.size(), plan_.n_layer()));
  for (int l = 0; l < plan_.n_layer(); ++l) {
    if (static_cast<int>(extents_[l].size()) != plan_.n_expert(l))
      fail_plan(fmt::format("layer {} has {} experts, {} in the plan", l, extents_[l].size(),
                            plan_.n_expert(l)));
    for (int e = 0; e < plan_.n_expert(l); ++e) {
      for (int i = 0; i < 3; ++i) {
        const SliceExtent& s = extents_[l][e][i];
        const io::FilePart* part = io::part_at(reader_->parts(), s.offset);
        if (s.bytes == 0 || !part || s.offset + s.bytes > part->base + part->size ||
            s.offset + s.bytes < s.offset)
          throw FileError(path_, s.offset,
                          fmt::format("layer {} expert {} {} slice of {} bytes lies outside the "
                                      "file ({} bytes)",
                                      l, e, kSliceNames[i], s.bytes, reader_->file_size()));
      }
    }
  }
  const placement::ExpertSizes need = expert_sizes(extents_, plan_.sizes().n_expert_used);
  const placement::ExpertSizes& have = plan_.sizes();
  for (int l = 0; l < plan_.n_layer(); ++l)
    if (need.expert_bytes[l] > have.expert_bytes[l])
      fail_plan(fmt::format("layer {} experts take {} bytes, the plan counted {}", l,
                            need.expert_bytes[l], have.expert_bytes[l]));
  if (options_.sidecar) {
    const placement::ExpertSizes z =
        expert_sizes(extents_, plan_.sizes().n_expert_used, options_.sidecar);
    if (z.slot_bytes > have.slot_bytes)
      fail_plan(fmt::format("cache slots need {} bytes for the sidecar's frames, the plan has {}",
                            z.slot_bytes, have.slot_bytes));
  }
  if (need.slot_bytes > have.slot_bytes || have.slot_bytes % kDirectAlign != 0)
    fail_plan(fmt::format("cache slots need {} bytes (a multiple of 4 KiB), the plan has {}",
                          need.slot_bytes, have.slot_bytes));
}

void ExpertStore::load_ram_homes() {
  std::vector<int64_t> todo;  // RAM-homed experts in file order (sequential disk access)
  uint64_t total = 0;
  for (int64_t k = 0; k < static_cast<int64_t>(experts_.size()); ++k) {
    if (experts_[k].home.kind != HomeKind::kRam) continue;
    todo.push_back(k);
  }
  if (todo.empty()) return;
  std::sort(todo.begin(), todo.end(), [&](int64_t a, int64_t b) {
    return experts_[a].read[0].offset < experts_[b].read[0].offset;
  });
  // Layer of each key, for extents_ lookups.
  auto layer_of = [&](int64_t k) {
    return static_cast<int>(std::upper_bound(layer_begin_.begin(), layer_begin_.end(), k) -
                            layer_begin_.begin() - 1);
  };
  for (int64_t k : todo) {
    const int l = layer_of(k);
    total += packed_layout(extents_[l][k - layer_begin_[l]])[3];
  }

  // Staging: the (still empty) cache slots; without a cache, a temporary buffer for up to one
  // queue of experts, registered while it lives.
  const uint64_t slot_bytes = plan_.sizes().slot_bytes;
  RamArena temp;
  std::vector<std::byte*> staging;
  if (cache_->n_slots() > 0) {
    for (int s = 0; s < cache_->n_slots(); ++s) staging.push_back(cache_->data(s));
  } else {
    const int n = static_cast<int>(std::min<size_t>(options_.queue_depth, todo.size()));
    temp = RamArena(n * slot_bytes, RamArena::kAnyNode, NumaMode::kOff, nullptr, hooks_.notice);
    for (int s = 0; s < n; ++s) staging.push_back(temp.data() + s * slot_bytes);
    std::vector<std::span<std::byte>> regions{{temp.data(), n * slot_bytes}};
    reader_->register_buffers(regions);
  }

  const auto t0 = Clock::now();
  std::vector<int> free_staging;
  for (int s = static_cast<int>(staging.size()) - 1; s >= 0; --s) free_staging.push_back(s);
  std::vector<int64_t> staged(staging.size(), -1);  // key per staging buffer
  std::vector<int> pending(staging.size(), 0);
  size_t next = 0;
  uint64_t done_bytes = 0;
  while (next < todo.size() || free_staging.size() < staging.size()) {
    batch_.clear();
    while (next < todo.size() && !free_staging.empty()) {
      const int s = free_staging.back();
      free_staging.pop_back();
      const Expert& x = experts_[todo[next]];
      staged[s] = todo[next++];
      pending[s] = 3;
      for (int i = 0; i < 3; ++i)
        batch_.push_back(
            {x.read[i].offset, x.read[i].bytes, staging[s] + x.sub[i], static_cast<uint64_t>(s)});
    }
    reader_->submit(batch_);
    const size_t n = reader_->wait(completions_);
    for (size_t c = 0; c < n; ++c) {
      const int s = static_cast<int>(completions_[c].tag);
      counters_.ram.load_bytes += completions_[c].bytes;
      if (--pending[s] > 0) continue;
      const int64_t k = staged[s];
      const int l = layer_of(k);
      const ExpertExtents& ext = extents_[l][k - layer_begin_[l]];
      Expert& x = experts_[k];
      for (int i = 0; i < 3; ++i)
        copy_to_home(l, x, i, staging[s] + x.sub[i] + x.read[i].lead, ext[i].bytes);
      ++counters_.ram.loads;
      done_bytes += packed_layout(ext)[3];
      free_staging.push_back(s);
      if (hooks_.progress) hooks_.progress(done_bytes, total);
    }
  }
  batch_.clear();
  counters_.ram.load_seconds = seconds_since(t0);

  if (cache_->n_slots() == 0) reader_->unregister_buffers();
}

int ExpertStore::activate(int layer, int expert, bool may_block) {
  const int64_t k = key(layer, expert);
  const int found = cache_->find(k);
  const bool prefetched = found != ExpertCache::kNone && cache_->prefetched(found);
  int slot = cache_->lookup(k);
  if (slot != ExpertCache::kNone) {
    ++counters_.cache_hits;
    if (prefetched) {
      // The head start the prefetch gave this read: submit -> landed, or -> now if still going.
      ++counters_.prefetch_used;
      const auto end =
          cache_->state(slot) == ExpertCache::SlotState::kReady ? filled_at_[slot] : Clock::now();
      counters_.prefetch_head_start_seconds +=
          std::chrono::duration<double>(end - prefetch_at_[slot]).count();
    }
  } else {
    const uint64_t evictions = cache_->evictions();
    slot = cache_->begin_fill(k);
    // Slots held only by finished-but-unreaped fills (an unused prefetch) free up when reaped.
    while (slot == ExpertCache::kNone && may_block && in_flight() > 0) {
      drain(true);
      slot = cache_->begin_fill(k);
    }
    if (slot == ExpertCache::kNone) return slot;
    ++counters_.cache_misses;
    counters_.evictions += cache_->evictions() - evictions;
    sync_wasted();
    queue_reads(k, slot);
  }
  active_[layer].push_back({expert, slot});
  return slot;
}

void ExpertStore::queue_reads(int64_t k, int slot) {
  const Expert& x = experts_[k];
  std::byte* base = cache_->data(slot);
  if (x.frame) {
    pending_reads_[slot] = 1;
    zbatch_.push_back(
        {x.frame->offset, x.frame->read_bytes(), base + x.zframe_at, static_cast<uint64_t>(slot)});
  } else {
    pending_reads_[slot] = 3;
    for (int i = 0; i < 3; ++i)
      batch_.push_back(
          {x.read[i].offset, x.read[i].bytes, base + x.sub[i], static_cast<uint64_t>(slot)});
  }
}

void ExpertStore::submit_batch() {
  if (batch_.empty() && zbatch_.empty()) return;
  if (!batch_.empty()) reader_->submit(batch_);
  if (!zbatch_.empty()) zreader_->submit(zbatch_);
  batch_.clear();
  zbatch_.clear();
}

size_t ExpertStore::in_flight() const {
  return reader_->outstanding() + (zreader_ ? zreader_->outstanding() + decomp_->pending() : 0);
}

void ExpertStore::slot_filled(int slot) {
  if (cache_->prefetched(slot)) filled_at_[slot] = Clock::now();
  cache_->complete(slot);
  ++counters_.ssd.loads;
}

void ExpertStore::drain(bool block) {
  if (in_flight() == 0) return;
  // Reads of the model file (uncompressed SSD homes) and of the sidecar; a landed frame goes to
  // the decompressor, whose finished jobs complete their slots. Blocking waits on one source:
  // the readers while reads are outstanding, else the decompressor.
  const auto reap = [&](IoReader& r, bool wait) {
    const size_t n = wait ? r.wait(completions_) : r.poll(completions_);
    for (size_t c = 0; c < n; ++c) {
      const ReadCompletion& done = completions_[c];
      const int slot = static_cast<int>(done.tag);
      ++counters_.reads;
      counters_.io_service_seconds += done.service_seconds;
      counters_.ssd.load_bytes += done.bytes;
      if (--pending_reads_[slot] > 0) continue;
      const Expert& x = experts_[cache_->key(slot)];
      if (!x.frame) {
        slot_filled(slot);
        continue;
      }
      std::byte* base = cache_->data(slot);
      decomp_->submit({base + x.zframe_at, x.frame->bytes, base, x.frame->raw_bytes,
                       x.frame->stored_raw, static_cast<uint64_t>(slot), x.frame->offset});
    }
    return n;
  };
  const auto reap_frames = [&](bool wait) {
    const size_t n = wait ? decomp_->wait(zdone_) : decomp_->poll(zdone_);
    for (size_t c = 0; c < n; ++c) {
      const int slot = static_cast<int>(zdone_[c].tag);
      ++counters_.frames;
      counters_.frame_raw_bytes += experts_[cache_->key(slot)].frame->raw_bytes;
      counters_.decompress_seconds += zdone_[c].seconds;
      slot_filled(slot);
    }
    return n;
  };
  size_t got = 0;
  if (reader_->outstanding() > 0) got += reap(*reader_, false);
  if (zreader_) {
    if (zreader_->outstanding() > 0) got += reap(*zreader_, false);
    if (decomp_->pending() > 0) got += reap_frames(false);
  }
  if (block && got == 0) {
    if (reader_->outstanding() > 0)
      reap(*reader_, true);
    else if (zreader_ && zreader_->outstanding() > 0)
      reap(*zreader_, true);
    else if (decomp_ && decomp_->pending() > 0)
      reap_frames(true);
  }
  counters_.ssd.load_seconds = readers_busy() - ssd_busy_base_;
}

void ExpertStore::prepare(int layer, std::span<const int> experts) {
  STRATA_ASSERT(layer >= 0 && layer < plan_.n_layer(), "layer {}", layer);
  batch_.clear();
  zbatch_.clear();
  drain(false);
  for (int e : experts) {
    STRATA_ASSERT(e >= 0 && e < plan_.n_expert(layer), "layer {} expert {}", layer, e);
    if (experts_[key(layer, e)].home.kind != HomeKind::kSsd) continue;
    const auto& act = active_[layer];
    if (std::any_of(act.begin(), act.end(), [&](const Active& a) { return a.expert == e; }))
      continue;
    activate(layer, e, /*may_block=*/false);
  }
  submit_batch();
}

int ExpertStore::prefetch(int layer, std::span<const int> experts) {
  STRATA_ASSERT(layer >= 0 && layer < plan_.n_layer(), "layer {}", layer);
  const int n_slots = cache_->n_slots();
  if (n_slots == 0) return 0;
  batch_.clear();
  zbatch_.clear();
  drain(false);
  const int cap = std::max(1, static_cast<int>(options_.prefetch_share * n_slots));
  const uint64_t min_age = options_.prefetch_min_age >= 0
                               ? static_cast<uint64_t>(options_.prefetch_min_age)
                               : static_cast<uint64_t>(n_slots / 2);
  int issued = 0;
  for (int e : experts) {
    STRATA_ASSERT(e >= 0 && e < plan_.n_expert(layer), "layer {} expert {}", layer, e);
    const int64_t k = key(layer, e);
    if (experts_[k].home.kind != HomeKind::kSsd || cache_->find(k) != ExpertCache::kNone) continue;
    const uint64_t evictions = cache_->evictions();
    const int slot =
        cache_->prefetched_slots() < cap ? cache_->begin_prefetch(k, min_age) : ExpertCache::kNone;
    if (slot == ExpertCache::kNone) {
      ++counters_.prefetch_refused;
      break;  // the guard looks at the LRU tail only: the next one would be refused too
    }
    counters_.evictions += cache_->evictions() - evictions;
    ++counters_.prefetch_issued;
    ++issued;
    prefetch_at_[slot] = Clock::now();
    queue_reads(k, slot);
  }
  submit_batch();
  sync_wasted();
  return issued;
}

void ExpertStore::copy_to_home(int layer, Expert& x, int i, const std::byte* src, uint64_t bytes) {
  auto* dst = const_cast<std::byte*>(x.ram[i]);  // the arena is ours
  const auto& layouts = options_.ram_layouts;
  const StoreOptions::SliceLayout* sl =
      static_cast<size_t>(layer) < layouts.size() ? &layouts[layer][i] : nullptr;
  if (sl && sl->layout != kernels::WeightLayout::kRows) {
    kernels::interleave(sl->layout, src, dst, sl->n_rows, sl->n_cols);
    if (x.layout[i] == kernels::WeightLayout::kRows) repacked_bytes_ += bytes;
    x.layout[i] = sl->layout;
  } else {
    std::memcpy(dst, src, bytes);
    x.layout[i] = kernels::WeightLayout::kRows;
  }
}

bool ExpertStore::swap_homes(int pl, int pe, int dl, int de) {
  if (!move_home(pl, pe, dl, de)) return false;
  ++counters_.repin_moves;
  return true;
}

int ExpertStore::promote_homes(int layer, std::span<const std::pair<int, int>> pairs) {
  for (const auto& a : active_) STRATA_ASSERT(a.empty(), "PROMPT_PLACE while a layer is active");
  const auto t0 = Clock::now();
  const size_t group = static_cast<size_t>(std::max(1, cache_->n_slots() / 2));
  std::vector<int> held;  // slots this call pinned, until their bytes are in
  int moved = 0;
  for (size_t b = 0; b < pairs.size(); b += group) {
    const size_t n = std::min(group, pairs.size() - b);
    batch_.clear();
    zbatch_.clear();
    drain(false);
    held.clear();
    for (size_t i = b; i < b + n; ++i) {
      const int64_t k = key(layer, pairs[i].first);
      STRATA_ASSERT(experts_[k].home.kind == HomeKind::kSsd, "promote_homes wants SSD experts");
      int slot = cache_->find(k);
      if (slot != ExpertCache::kNone) {
        cache_->pin(slot);
      } else {
        slot = cache_->begin_fill(k);
        while (slot == ExpertCache::kNone && in_flight() > 0) {
          drain(true);
          slot = cache_->begin_fill(k);
        }
        if (slot == ExpertCache::kNone) continue;  // every slot pinned: this one stays on SSD
        const Expert& x = experts_[k];
        counters_.place_read_bytes +=
            x.frame ? x.frame->read_bytes() : x.read[0].bytes + x.read[1].bytes + x.read[2].bytes;
        queue_reads(k, slot);
      }
      held.push_back(slot);
    }
    submit_batch();
    for (const int slot : held) {
      while (cache_->state(slot) != ExpertCache::SlotState::kReady) drain(true);
      cache_->release(slot);
    }
    for (size_t i = b; i < b + n; ++i)
      if (move_home(layer, pairs[i].first, layer, pairs[i].second)) ++moved;
  }
  ++counters_.place_passes;
  counters_.place_moves += static_cast<uint64_t>(moved);
  counters_.place_seconds += seconds_since(t0);
  return moved;
}

bool ExpertStore::move_home(int pl, int pe, int dl, int de) {
  for (const auto& a : active_) STRATA_ASSERT(a.empty(), "REPIN while a layer is active");
  Expert& p = experts_[key(pl, pe)];
  Expert& d = experts_[key(dl, de)];
  STRATA_ASSERT(p.home.kind == HomeKind::kSsd && d.home.kind == HomeKind::kRam,
                "swap_homes wants an SSD home and a RAM home");
  const int slot = cache_->find(key(pl, pe));
  if (slot == ExpertCache::kNone || cache_->state(slot) != ExpertCache::SlotState::kReady ||
      cache_->pins(slot) > 0)
    return false;
  const auto at = packed_layout(extents_[pl][pe]);
  if (at[3] > packed_layout(extents_[dl][de])[3]) return false;
  const ExpertView v = view(pl, pe, cache_->data(slot));
  auto* base = const_cast<std::byte*>(d.ram[0]);  // the arena is ours (see load_ram_homes)
  for (int i = 0; i < 3; ++i) {
    p.ram[i] = base + at[i];
    copy_to_home(pl, p, i, v.slice[i], v.bytes[i]);
  }
  p.home = d.home;
  d.home = placement::Home::ssd();
  d.ram = {};
  for (int i = 0; i < 3; ++i)
    if (d.layout[i] != kernels::WeightLayout::kRows) repacked_bytes_ -= extents_[dl][de][i].bytes;
  d.layout = {};
  cache_->drop(slot);
  sync_wasted();
  return true;
}

void ExpertStore::swap_vram_home(int pl, int pe, int dl, int de) {
  for (const auto& a : active_) STRATA_ASSERT(a.empty(), "REPIN while a layer is active");
  Expert& p = experts_[key(pl, pe)];
  Expert& d = experts_[key(dl, de)];
  STRATA_ASSERT(p.home.kind == HomeKind::kSsd && d.home.kind == HomeKind::kVram,
                "swap_vram_home wants an SSD home and a VRAM home");
  p.home = d.home;
  d.home = placement::Home::ssd();
  const int slot = cache_->find(key(pl, pe));  // the GPU has the bytes now: free the slot
  if (slot != ExpertCache::kNone && cache_->state(slot) == ExpertCache::SlotState::kReady &&
      cache_->pins(slot) == 0) {
    cache_->drop(slot);
    sync_wasted();
  }
}

ExpertView ExpertStore::view(int layer, int expert, const std::byte* base) const {
  const Expert& x = experts_[key(layer, expert)];
  const ExpertExtents& ext = extents_[layer][expert];
  ExpertView v;
  v.home = x.home;
  for (int i = 0; i < 3; ++i) {
    v.slice[i] = !base ? x.ram[i] : x.frame ? base + x.zsub[i] : base + x.sub[i] + x.read[i].lead;
    v.bytes[i] = ext[i].bytes;
    v.layout[i] = !base ? x.layout[i] : kernels::WeightLayout::kRows;
  }
  return v;
}

ExpertView ExpertStore::get(int layer, int expert) {
  STRATA_ASSERT(layer >= 0 && layer < plan_.n_layer(), "layer {}", layer);
  STRATA_ASSERT(expert >= 0 && expert < plan_.n_expert(layer), "layer {} expert {}", layer, expert);
  const int64_t k = key(layer, expert);
  const Expert& x = experts_[k];
  if (x.home.kind == HomeKind::kRam) {
    const ExpertView v = view(layer, expert, nullptr);
    ++counters_.ram.served;
    counters_.ram.served_bytes += v.bytes[0] + v.bytes[1] + v.bytes[2];
    return v;
  }
  STRATA_ASSERT(x.home.kind == HomeKind::kSsd,
                "layer {} expert {} is homed in VRAM: the GPU lane serves it, never the store",
                layer, expert);

  drain(false);
  int slot = ExpertCache::kNone;
  for (const Active& a : active_[layer])
    if (a.expert == expert) slot = a.slot;
  if (slot == ExpertCache::kNone) {
    batch_.clear();
    zbatch_.clear();
    slot = activate(layer, expert, /*may_block=*/true);
    if (slot == ExpertCache::kNone)
      fail(ErrorKind::kOutOfMemory,
           "{}: RAM cache full: all {} slots are pinned while loading layer {} expert {} (the "
           "plan's cache is below two layers' top-k, or layers are not released)",
           path_, cache_->n_slots(), layer, expert);
    submit_batch();
  }
  if (cache_->state(slot) != ExpertCache::SlotState::kReady) {
    const auto t0 = Clock::now();
    while (cache_->state(slot) != ExpertCache::SlotState::kReady) drain(true);
    counters_.io_wait_seconds += seconds_since(t0);
  }
  const ExpertView v = view(layer, expert, cache_->data(slot));
  ++counters_.ssd.served;
  counters_.ssd.served_bytes += v.bytes[0] + v.bytes[1] + v.bytes[2];
  return v;
}

void ExpertStore::recover() {
  while (in_flight() > 0) {
    try {
      drain(true);
    } catch (const Error&) {
      // Another read of the failed batch: its slot is emptied below.
    }
  }
  if (cache_) {
    for (int s = 0; s < cache_->n_slots(); ++s) {
      if (cache_->state(s) != ExpertCache::SlotState::kFilling) continue;
      pending_reads_[s] = 0;
      cache_->abort_fill(s);
    }
  }
  for (int l = 0; l < plan_.n_layer(); ++l) release(l);
}

void ExpertStore::release(int layer) {
  STRATA_ASSERT(layer >= 0 && layer < plan_.n_layer(), "layer {}", layer);
  for (const Active& a : active_[layer]) cache_->release(a.slot);
  active_[layer].clear();
}

void ExpertStore::release(int layer, std::span<const int> experts) {
  STRATA_ASSERT(layer >= 0 && layer < plan_.n_layer(), "layer {}", layer);
  auto& act = active_[layer];
  const auto released = [&](const Active& a) {
    if (std::find(experts.begin(), experts.end(), a.expert) == experts.end()) return false;
    cache_->release(a.slot);
    return true;
  };
  act.erase(std::remove_if(act.begin(), act.end(), released), act.end());
}

void ExpertStore::sync_wasted() {
  counters_.prefetch_wasted += cache_->prefetch_wasted() - wasted_seen_;
  wasted_seen_ = cache_->prefetch_wasted();
}

void ExpertStore::reset_counters() {
  counters_ = StoreCounters{};
  ssd_busy_base_ = readers_busy();
}

uint64_t ExpertStore::ram_bytes() const {
  uint64_t total = cache_->bytes();
  for (const RamArena& a : arenas_) total += a.size();
  return total;
}

}  // namespace strata::tiers
