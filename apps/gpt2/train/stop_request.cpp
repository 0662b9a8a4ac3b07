#include "apps/gpt2/train/stop_request.h"

#include <atomic>

namespace keel::app {

namespace {
// A lock-free atomic is what a signal handler may write.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);
extern "C" void on_signal(int) { g_stop = true; }
}  // namespace

StopRequest::StopRequest() {
  g_stop = false;
  old_int_ = std::signal(SIGINT, on_signal);
  old_term_ = std::signal(SIGTERM, on_signal);
  old_usr1_ = std::signal(SIGUSR1, on_signal);
}

StopRequest::~StopRequest() {
  std::signal(SIGINT, old_int_);
  std::signal(SIGTERM, old_term_);
  std::signal(SIGUSR1, old_usr1_);
}

bool StopRequest::requested() const { return g_stop.load(); }

}  // namespace keel::app
