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
  void update(uint64_t done);  // absolute progress, 0..total
  void finish();               // draws 100% and ends the line (idempotent)

 private:
  void draw(uint64_t done);
  std::string label_, unit_;
  uint64_t total_;
  bool active_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace keel::data
