// A progress bar on stderr for long CLI jobs (`strata synth`, later downloads/replays): redraws
// one line with percent, rate and ETA when stderr is a terminal; otherwise stays quiet and prints
// only the final summary line. Exercised by tests/test_synth.cpp (non-TTY path) and by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata::tools {

enum class ProgressUnit { kBytes, kItems };

class Progress {
 public:
  // total = 0 means unknown (no percent or ETA). out defaults to stderr; tty forces the mode
  // (tests) and otherwise follows isatty(fileno(out)).
  Progress(std::string label, uint64_t total, ProgressUnit unit = ProgressUnit::kBytes,
           std::FILE* out = nullptr, int tty = -1);
  ~Progress();  // finishes if finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // done = units completed so far. Redraws at most ~10 times a second, the first time 0.1 s after
  // the start (terminal only).
  void update(uint64_t done);
  // Prints the final line ("label: 17.3 GB in 12.0 s (1.44 GB/s)") once, in both modes.
  void finish();
  // Abandons the bar: clears a drawn line and prints nothing more (an error message follows).
  void abort();

  bool is_tty() const { return tty_; }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(bool final_line);
  std::string amount(uint64_t v) const;
  std::string rate(double per_s) const;

  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  ProgressUnit unit_;
  std::FILE* out_;
  bool tty_;
  bool finished_ = false;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

// "17.3 GB", "512 KB", "999 B" (decimal units, as disks are sold).
std::string human_bytes(double bytes);
// "12 s", "3m05s", "1h02m".
std::string human_duration(double seconds);

}  // namespace strata::tools
