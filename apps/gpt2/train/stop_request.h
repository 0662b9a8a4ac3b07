// SIGINT, SIGTERM and SIGUSR1 (what mpirun forwards) ask a training run to stop after the current
// step, checkpoint and exit 0, so that Ctrl-C never loses work. A StopRequest catches the three
// signals for its lifetime and puts the previous handlers back after.
#pragma once

#include <csignal>

namespace keel::app {

class StopRequest {
 public:
  StopRequest();  // clears any earlier request
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // Whether one of the signals arrived since construction (async-signal-safe to set).
  bool requested() const;

 private:
  using Handler = void (*)(int);
  Handler old_int_, old_term_, old_usr1_;
};

}  // namespace keel::app
