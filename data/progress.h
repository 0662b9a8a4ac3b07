// A one-line progress bar on stderr, drawn only when stderr is a terminal (so logs and pipes
// stay clean), at most ~10 times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace keel::data {

class ProgressBar {
 public:
  // enabled = false forces it off; otherwise it is on only when stderr is a tty.
  ProgressBar(std::string label, uint64_t total, std::string unit = "", bool enabled = true);
  ~ProgressBar();
  // Absolute progress, 0..total; note (e.g. "12.3 M tokens, 8.1 MB/s") is shown after it.
  void update(uint64_t done, const std::string& note = {});
  void finish();               // draws 100% and ends the line (idempotent)

 private:
  void draw(uint64_t done);
  std::string label_, unit_, note_;
  uint64_t total_;
  bool active_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace keel::data
