// Terminal progress bar (see progress.h).
#include "data/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace keel::data {

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total),
      active_(enabled && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

ProgressBar::~ProgressBar() {
  if (active_ && !finished_) fmt::print(stderr, "\n");  // leave the cursor on a fresh line
}

void ProgressBar::update(uint64_t done, const std::string& note) {
  if (!active_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  note_ = note;
  draw(done);
}

void ProgressBar::finish() {
  if (!active_ || finished_) return;
  draw(total_);
  fmt::print(stderr, "\n");
  finished_ = true;
}

void ProgressBar::draw(uint64_t done) {
  constexpr int kWidth = 30;
  const double frac = total_ ? std::min(1.0, double(done) / double(total_)) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string eta;
  if (frac > 0 && frac < 1) eta = fmt::format(" eta {:.0f}s", secs * (1 - frac) / frac);
  fmt::print(stderr, "\r{} [{}{}] {:3.0f}% {}/{}{}{}{} {:.1f}s{}\x1b[K", label_,
             std::string(filled, '#'), std::string(kWidth - filled, '.'), frac * 100, done,
             total_, unit_, note_.empty() ? "" : ", ", note_, secs, eta);
  std::fflush(stderr);
}

}  // namespace keel::data
