// ExpertCache: the RAM cache for SSD-homed experts — fixed-size slots in one arena, global LRU
// over unpinned slots, pin counts so slots being filled or computed are never evicted, and guarded
// prefetch fills (begin_prefetch: only the LRU tail, only when it is empty or has not been used by
// the last min_age demand uses; pinned slots never).
// Tested by tests/test_tiers_cache.cpp (unit) and tests/test_tiers_store.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tiers/ram_arena.h"

namespace strata::tiers {

class ExpertCache {
 public:
  static constexpr int kNone = -1;
  enum class SlotState : uint8_t { kEmpty, kFilling, kReady };

  // memory holds n_slots slots of slot_bytes each (slot_bytes a multiple of 4 KiB, so every
  // slot is an O_DIRECT destination). Keys are 0 .. n_keys-1 (the store numbers experts
  // layer-major).
  ExpertCache(int n_slots, uint64_t slot_bytes, int64_t n_keys, RamArena memory);

  int n_slots() const { return static_cast<int>(slots_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t bytes() const { return memory_.size(); }  // RAM the cache occupies (counts in RAM_GB)
  std::byte* data(int slot) const { return memory_.data() + slot * slot_bytes_; }
  SlotState state(int slot) const { return slots_[slot].state; }
  int64_t key(int slot) const { return slots_[slot].key; }
  int pins(int slot) const { return slots_[slot].pins; }
  int pinned_slots() const;

  // The slot holding key (ready or filling), pinned and made most recent; kNone on a miss.
  int lookup(int64_t key);
  // A slot to read key into: an empty slot, else the least recently used unpinned one (its key is
  // evicted). The slot comes back kFilling with two pins: one held by the fill until complete(),
  // one for the caller's release(). kNone when every slot is pinned. key must not be cached.
  int begin_fill(int64_t key);
  // A prefetch fill (PREFETCH): like begin_fill, but the slot gets only the fill's pin (nobody
  // has asked for it yet) and is marked prefetched until a demand lookup() uses it. The guard: the
  // victim is the LRU tail (the slot a demand miss would evict next), and only when it is empty or
  // its last demand use is at least min_age demand uses ago (lookup hits and begin_fill count as
  // uses); a pinned slot is never on the LRU list. kNone when the guard refuses.
  int begin_prefetch(int64_t key, uint64_t min_age);
  // The fill's bytes are in place: kFilling -> kReady, the fill's pin dropped. A completed prefetch
  // goes to the head of the LRU list (it is about to be used).
  void complete(int slot);
  // Forgets the unpinned, ready slot's key (REPIN promoted the expert to a RAM home): the slot
  // becomes empty, first to be reused.
  void drop(int slot);
  // The slot holding key (ready or filling), or kNone; pins nothing.
  int find(int64_t key) const { return slot_of_key_[key]; }
  // Filled by a prefetch and not used by a demand lookup yet.
  bool prefetched(int slot) const { return slots_[slot].prefetched; }
  int prefetched_slots() const { return n_prefetched_; }
  // Demand uses since the slot's last one (its LRU age in uses).
  uint64_t age(int slot) const { return clock_ - slots_[slot].last_use; }
  // The fill failed: the slot forgets its key and becomes empty (first to be reused).
  void abort_fill(int slot);
  void pin(int slot);
  void release(int slot);  // drops one pin; at zero the slot becomes most recently used

  uint64_t evictions() const { return evictions_; }
  // Prefetched slots evicted or dropped before any demand used them (mis-predictions).
  uint64_t prefetch_wasted() const { return prefetch_wasted_; }

 private:
  struct Slot {
    int64_t key = -1;
    SlotState state = SlotState::kEmpty;
    int pins = 0;
    bool prefetched = false;  // filled by begin_prefetch, not used by lookup() yet
    uint64_t last_use = 0;    // clock_ at the last demand use (or the prefetch)
    int prev = kNone;         // LRU links, only while unpinned
    int next = kNone;
  };
  // Eviction order: a doubly linked list of unpinned slots, head = most recent, tail = the next
  // victim. Empty slots sit at the tail. A per-layer policy would replace victim() only.
  void unlink(int slot);
  void push_head(int slot);
  void push_tail(int slot);
  int victim() const { return tail_; }
  // Takes the unpinned victim s for key (evicting what it held).
  void take(int s, int64_t key, int pins);

  RamArena memory_;
  uint64_t slot_bytes_;
  std::vector<Slot> slots_;           // [n_slots]
  std::vector<int32_t> slot_of_key_;  // [n_keys] slot holding the key, or kNone
  int head_ = kNone;
  int tail_ = kNone;
  uint64_t evictions_ = 0;
  uint64_t clock_ = 0;  // demand uses so far
  int n_prefetched_ = 0;
  uint64_t prefetch_wasted_ = 0;
};

}  // namespace strata::tiers
