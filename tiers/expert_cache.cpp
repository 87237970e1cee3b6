// ExpertCache: slot table, key index and the LRU list of unpinned slots.
// Tested by tests/test_tiers_cache.cpp.
#include "tiers/expert_cache.h"

#include <algorithm>

#include "io/check.h"
#include "tiers/io_reader.h"

namespace strata::tiers {

ExpertCache::ExpertCache(int n_slots, uint64_t slot_bytes, int64_t n_keys, RamArena memory)
    : memory_(std::move(memory)),
      slot_bytes_(slot_bytes),
      slots_(n_slots),
      slot_of_key_(n_keys, kNone) {
  STRATA_ASSERT(n_slots >= 0 && n_keys >= 0, "n_slots {} n_keys {}", n_slots, n_keys);
  STRATA_ASSERT(n_slots == 0 || (slot_bytes > 0 && slot_bytes % kDirectAlign == 0),
                "cache slot of {} bytes is not a multiple of 4 KiB", slot_bytes);
  STRATA_ASSERT(memory_.size() >= static_cast<uint64_t>(n_slots) * slot_bytes,
                "cache memory {} < {} slots x {}", memory_.size(), n_slots, slot_bytes);
  for (int s = 0; s < n_slots; ++s) push_tail(s);
}

int ExpertCache::pinned_slots() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pins > 0; }));
}

void ExpertCache::unlink(int s) {
  Slot& x = slots_[s];
  if (x.prev != kNone)
    slots_[x.prev].next = x.next;
  else
    head_ = x.next;
  if (x.next != kNone)
    slots_[x.next].prev = x.prev;
  else
    tail_ = x.prev;
  x.prev = x.next = kNone;
}

void ExpertCache::push_head(int s) {
  Slot& x = slots_[s];
  x.prev = kNone;
  x.next = head_;
  if (head_ != kNone)
    slots_[head_].prev = s;
  else
    tail_ = s;
  head_ = s;
}

void ExpertCache::push_tail(int s) {
  Slot& x = slots_[s];
  x.next = kNone;
  x.prev = tail_;
  if (tail_ != kNone)
    slots_[tail_].next = s;
  else
    head_ = s;
  tail_ = s;
}

int ExpertCache::lookup(int64_t key) {
  STRATA_ASSERT(key >= 0 && key < static_cast<int64_t>(slot_of_key_.size()), "key {}", key);
  const int s = slot_of_key_[key];
  if (s == kNone) return kNone;
  pin(s);
  Slot& x = slots_[s];
  x.last_use = ++clock_;
  if (x.prefetched) {
    x.prefetched = false;
    --n_prefetched_;
  }
  return s;
}

void ExpertCache::take(int s, int64_t key, int pins) {
  Slot& x = slots_[s];
  STRATA_ASSERT(x.pins == 0 && x.state != SlotState::kFilling, "victim slot {} is busy", s);
  if (x.key >= 0) {
    slot_of_key_[x.key] = kNone;
    ++evictions_;
  }
  if (x.prefetched) {
    x.prefetched = false;
    --n_prefetched_;
    ++prefetch_wasted_;
  }
  unlink(s);
  x.key = key;
  x.state = SlotState::kFilling;
  x.pins = pins;
  slot_of_key_[key] = s;
}

int ExpertCache::begin_prefetch(int64_t key, uint64_t min_age) {
  STRATA_ASSERT(key >= 0 && key < static_cast<int64_t>(slot_of_key_.size()), "key {}", key);
  STRATA_ASSERT(slot_of_key_[key] == kNone, "key {} is already cached", key);
  const int s = victim();
  if (s == kNone) return kNone;
  if (slots_[s].state != SlotState::kEmpty && clock_ - slots_[s].last_use < min_age) return kNone;
  take(s, key, 1);
  slots_[s].prefetched = true;
  slots_[s].last_use = clock_;
  ++n_prefetched_;
  return s;
}

void ExpertCache::drop(int s) {
  Slot& x = slots_[s];
  STRATA_ASSERT(x.pins == 0 && x.state == SlotState::kReady, "slot {} is busy", s);
  if (x.prefetched) {
    x.prefetched = false;
    --n_prefetched_;
    ++prefetch_wasted_;
  }
  slot_of_key_[x.key] = kNone;
  x.key = -1;
  x.state = SlotState::kEmpty;
  unlink(s);
  push_tail(s);
}

int ExpertCache::begin_fill(int64_t key) {
  STRATA_ASSERT(key >= 0 && key < static_cast<int64_t>(slot_of_key_.size()), "key {}", key);
  STRATA_ASSERT(slot_of_key_[key] == kNone, "key {} is already cached", key);
  const int s = victim();
  if (s == kNone) return kNone;
  take(s, key, 2);
  slots_[s].last_use = ++clock_;
  return s;
}

void ExpertCache::complete(int s) {
  STRATA_ASSERT(slots_[s].state == SlotState::kFilling, "slot {} is not filling", s);
  slots_[s].state = SlotState::kReady;
  release(s);
}

void ExpertCache::abort_fill(int s) {
  Slot& x = slots_[s];
  STRATA_ASSERT(x.state == SlotState::kFilling, "slot {} is not filling", s);
  slot_of_key_[x.key] = kNone;
  x.key = -1;
  x.state = SlotState::kEmpty;
  if (x.prefetched) {
    x.prefetched = false;
    --n_prefetched_;
  }
  release(s);
}

void ExpertCache::pin(int s) {
  if (slots_[s].pins++ == 0) unlink(s);
}

void ExpertCache::release(int s) {
  Slot& x = slots_[s];
  STRATA_ASSERT(x.pins > 0, "slot {} released more often than pinned", s);
  if (--x.pins > 0) return;
  if (x.state == SlotState::kEmpty)
    push_tail(s);
  else
    push_head(s);
}

}  // namespace strata::tiers
