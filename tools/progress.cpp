// Progress bar (see progress.h). Terminal mode redraws one line with '\r'; non-terminal mode
// prints only the final line, so logs and CI output stay readable.
#include "tools/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace strata::tools {

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 5) {
    bytes /= 1000.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  if (bytes < 10.0) return fmt::format("{:.2f} {}", bytes, kUnits[u]);
  if (bytes < 100.0) return fmt::format("{:.1f} {}", bytes, kUnits[u]);
  return fmt::format("{:.0f} {}", bytes, kUnits[u]);
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 10) return fmt::format("{:.1f} s", seconds);
  const auto s = static_cast<uint64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

Progress::Progress(std::string label, uint64_t total, ProgressUnit unit, std::FILE* out, int tty)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      out_(out ? out : stderr),
      tty_(tty >= 0 ? tty != 0 : ::isatty(::fileno(out_)) == 1),
      start_(Clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (!finished_) finish();
}

std::string Progress::amount(uint64_t v) const {
  return unit_ == ProgressUnit::kBytes ? human_bytes(static_cast<double>(v)) : fmt::format("{}", v);
}

std::string Progress::rate(double per_s) const {
  return unit_ == ProgressUnit::kBytes ? human_bytes(per_s) + "/s" : fmt::format("{:.1f}/s", per_s);
}

void Progress::update(uint64_t done) {
  if (finished_) return;
  done_ = done;
  if (!tty_) return;
  const auto now = Clock::now();
  // The first draw waits 0.1 s too: a job that ends sooner draws no bar, and the rate shown is
  // never taken over a few microseconds.
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void Progress::draw(bool final_line) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double per_s = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::string line;
  if (final_line) {
    line = fmt::format("{}: {} in {}", label_, amount(done_), human_duration(elapsed));
    if (elapsed > 0.05) line += fmt::format(" ({})", rate(per_s));
  } else if (total_ > 0) {
    constexpr int kWidth = 30;
    const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    const int fill = static_cast<int>(frac * kWidth);
    const double eta =
        per_s > 0 ? static_cast<double>(total_ - std::min(done_, total_)) / per_s : std::nan("");
    line = fmt::format("{} [{}{}] {:3.0f}% {}/{} {} ETA {}", label_, std::string(fill, '#'),
                       std::string(kWidth - fill, '.'), frac * 100.0, amount(done_), amount(total_),
                       rate(per_s), human_duration(eta));
  } else {
    line = fmt::format("{} {} {}", label_, amount(done_), rate(per_s));
  }
  // "\33[K" clears what a longer previous line left behind.
  if (tty_)
    std::fprintf(out_, "\r%s\33[K", line.c_str());
  else
    std::fputs(line.c_str(), out_);
  if (final_line) std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = !final_line;
}

void Progress::finish() {
  if (finished_) return;
  draw(true);
  finished_ = true;
}

void Progress::abort() {
  if (finished_) return;
  if (tty_ && drawn_) {
    std::fputs("\r\33[K", out_);
    std::fflush(out_);
  }
  finished_ = true;
}

}  // namespace strata::tools
