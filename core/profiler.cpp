// Recording: scopes, phases and the session (core/profiler.h). Summaries and the output
// formats are in profiler_report.cpp, the GPU models in profiler_predict.cpp.
#include "core/profiler.h"

#include <chrono>
#include <mutex>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/profiler_predict.h"

namespace keel::profiler {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

// The recording state: one session at a time. Scopes open on the thread that runs the step;
// the mutex covers helper threads (a CPU communicator's) that may open one too.
struct State {
  std::mutex mu;
  Profile* profile = nullptr;
  std::chrono::steady_clock::time_point t0;
  int step = 0;
  bool cuda = false;
  int device = 0;
  const GpuModel* gpu = nullptr;
};
State g_state;

thread_local int t_depth = 0;  // scopes open on this thread, recording or not
thread_local Phase t_phase = Phase::forward;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - g_state.t0).count();
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::host: return "host";
  }
  return "?";
}

PhaseGuard::PhaseGuard(Phase p) : previous_(t_phase) { t_phase = p; }
PhaseGuard::~PhaseGuard() { t_phase = previous_; }

void Scope::begin(const char* name, const Phase* phase) {
  // Only the outermost scope records: an op made of ops is one record, and nothing is counted twice.
  open_ = true;
  if (t_depth++ > 0) return;
  std::lock_guard<std::mutex> lock(g_state.mu);
  Profile* p = g_state.profile;
  if (!p) return;
  Event e;
  e.name = name;
  e.phase = phase ? *phase : t_phase;
  e.step = g_state.step;
  e.counts = cuda::counters();
  if (g_state.cuda) {
    cuda::nvtx_push(name);
    e.ev[0] = cuda::event_record(g_state.device);
  }
  e.host_start_us = now_us();  // last: the clock starts when the op's own work does
  index_ = int64_t(p->events_list.size());
  p->events_list.push_back(std::move(e));
}

void Scope::end() {
  --t_depth;
  open_ = false;
  if (index_ < 0) return;
  std::lock_guard<std::mutex> lock(g_state.mu);
  Profile* p = g_state.profile;
  if (!p || size_t(index_) >= p->events_list.size()) {  // the session ended while this scope was open
    index_ = -1;
    return;
  }
  Event& e = p->events_list[size_t(index_)];
  e.host_us = now_us() - e.host_start_us;  // first: the clock stops when the op's work does
  if (g_state.cuda) {
    e.ev[1] = cuda::event_record(g_state.device);
    cuda::nvtx_pop();
  }
  e.counts = cuda::counters() - e.counts;
  if (g_state.gpu) e.predicted_us = predict_us(*g_state.gpu, e.cost, e.counts);
  index_ = -1;
}

void Scope::cost(Cost c) {
  if (index_ < 0) return;
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (Profile* p = g_state.profile; p && size_t(index_) < p->events_list.size())
    p->events_list[size_t(index_)].cost = std::move(c);
}

Session::Session(Options o) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (g_state.profile) throw ValueError("profiler::Session", "a profiling session is already running");
  p_.options = std::move(o);
  const Device d = p_.options.device;
  g_state.cuda = d.is_cuda();
  g_state.device = d.is_cuda() ? d.index : 0;
#if defined(KEEL_CUDA_EMULATED)
  p_.emulated = g_state.cuda;
#endif
  p_.events = g_state.cuda && !p_.emulated;
  g_state.gpu = g_state.cuda ? &gpu_model(p_.options.gpu) : nullptr;  // throws for an unknown GPU
  g_state.profile = &p_;
  g_state.t0 = std::chrono::steady_clock::now();
  g_state.step = 0;
}

Session::~Session() {
  if (!finished_) {
    try {
      (void)finish();
    } catch (...) {  // a destructor during unwinding must not throw
    }
  }
}

void Session::step_begin() {
  if (finished_) return;
  open_ = true;
  step_first_event_ = p_.events_list.size();
  step_counts_ = cuda::counters();
  if (g_state.cuda) step_ev_[0] = cuda::event_record(g_state.device);
  step_host_start_us_ = now_us();
  detail::g_on = true;
}

void Session::step_end() {
  if (!open_) return;
  detail::g_on = false;
  open_ = false;
  std::lock_guard<std::mutex> lock(g_state.mu);  // a helper thread's scope may still be ending
  StepRecord s;
  s.host_us = now_us() - step_host_start_us_;
  s.counts = cuda::counters() - step_counts_;
  if (g_state.cuda) step_ev_[1] = cuda::event_record(g_state.device);
  if (p_.events) {
    // Reads every event of the step; waits once for the last, which precedes them all on the stream.
    s.device_us = 1000.0 * cuda::event_elapsed_ms(step_ev_[0], step_ev_[1]);
    for (size_t i = step_first_event_; i < p_.events_list.size(); ++i) {
      Event& e = p_.events_list[i];
      e.device_us = 1000.0 * cuda::event_elapsed_ms(e.ev[0], e.ev[1]);
      e.device_start_us = step_host_start_us_ + 1000.0 * cuda::event_elapsed_ms(step_ev_[0], e.ev[0]);
    }
  } else {
    s.device_us = s.host_us;  // CPU: the host is the device; emulated: meaningless, but defined
    for (size_t i = step_first_event_; i < p_.events_list.size(); ++i) {
      Event& e = p_.events_list[i];
      e.device_us = e.host_us, e.device_start_us = e.host_start_us;
    }
  }
  for (size_t i = step_first_event_; i < p_.events_list.size(); ++i) {
    Event& e = p_.events_list[i];
    for (void*& ev : e.ev) cuda::event_destroy(ev), ev = nullptr;
    s.busy_us += e.device_us;
    s.predicted_us += e.predicted_us;
  }
  for (void*& ev : step_ev_) cuda::event_destroy(ev), ev = nullptr;
  p_.steps.push_back(s);
  ++g_state.step;
}

Profile Session::finish() {
  if (open_) step_end();
  std::lock_guard<std::mutex> lock(g_state.mu);
  // Records of a step that never ended (an exception inside it) are dropped.
  size_t kept = 0;
  for (const Event& e : p_.events_list) kept += e.step < int(p_.steps.size()) ? 1 : 0;
  for (size_t i = kept; i < p_.events_list.size(); ++i)
    for (void*& ev : p_.events_list[i].ev) cuda::event_destroy(ev), ev = nullptr;
  p_.events_list.resize(kept);
  detail::g_on = false;
  g_state.profile = nullptr;
  g_state.gpu = nullptr;
  finished_ = true;
  return std::move(p_);
}

}  // namespace keel::profiler
