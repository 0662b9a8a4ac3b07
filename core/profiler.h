// keel's built-in profiler: what each op of a training step costs, on any device.
//
//   profiler::Session session({.device = Device::cuda(0), .gpu = "H100"});
//   for (...) { session.step_begin(); ...one step...; session.step_end(); }
//   profiler::Profile p = session.finish();
//   fmt::print("{}", profiler::table(p));     // like PyTorch's key_averages().table()
//   io::write_file(..., profiler::to_json(p).dump());          // for tools
//   io::write_file(..., profiler::chrome_trace(p).dump());     // Perfetto / chrome://tracing
//
// Ops mark themselves with a Scope (ops/*.cpp front ends, the autograd engine around each
// backward node, the optimizer); only the outermost open scope records, so an op built from
// other ops is one record and the shares of a step add up to 100%. Each record takes the
// difference of core/cuda/counters.h over its scope (launches, library calls, copies, syncs:
// a sync inside a scope is caused by that op), the FLOPs and bytes its shapes imply
// (ops/op_costs.h), and its time: wall time on the CPU, CUDA events on a GPU, and on the emulated
// GPU a prediction for a named GPU from those counts (core/profiler_predict.h), since emulated
// times mean nothing.
//
// Off (no Session alive) a Scope is one test of a global flag: no allocation, no clock, no
// counter read; numerics never change either way.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/cuda/counters.h"
#include "core/device.h"

namespace keel::profiler {

// Which part of a step an op ran in; backward records come from the autograd engine.
enum class Phase : uint8_t { forward, backward, optimizer, host };
const char* phase_name(Phase p);

// Which ceiling of the roofline bounds an op on a GPU (core/profiler_predict.h).
// The attention backward apart: its kernel runs at well under half the forward's rate.
enum class Kind : uint8_t { matmul, attention, attention_backward, memory };

// What an op's shapes say it costs: the work, not what a kernel happens to do.
struct Cost {
  double flops = 0;
  double bytes = 0;         // bytes read and written at least once
  Kind kind = Kind::memory;
  bool half = false;        // bf16/f16 operands: the tensor-core rates apply
  bool aligned = true;      // matmul dims multiples of 8 (cuBLAS's fast path; N = 50257 is not)
  std::string shape;        // "[8192,768]x[768,2304]": shown in the table, trace and JSON
  bool by_shape = false;    // records of different shapes are kept apart (matmuls)
};

namespace detail {
// Written by Session between steps; read by every op. Atomic because helper threads (gradient
// all-reduce) may run ops too; a relaxed load is a plain load on x86 and ARM.
extern std::atomic<bool> g_on;
}  // namespace detail
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }

// One op's record of one call (outermost scopes only).
struct Event {
  std::string name;
  Phase phase = Phase::forward;
  Cost cost;
  cuda::Counters counts;          // launches, library calls, copies, syncs, allocations inside
  int step = 0;                   // index among the recorded steps
  double host_start_us = 0;       // since the session began
  double host_us = 0;             // wall time on the host
  double device_us = -1;          // CUDA events (real GPU) or host wall (CPU); -1 until known
  double device_start_us = -1;    // on the device timeline, since the session began
  double predicted_us = 0;        // the GPU model's roofline (CUDA devices)
  void* ev[2] = {nullptr, nullptr};  // CUDA events, until read at step_end
};

class Scope {
 public:
  explicit Scope(const char* name) {
    if (on()) begin(name, nullptr);
  }
  Scope(const char* name, Phase phase) {
    if (on()) begin(name, &phase);
  }
  ~Scope() {
    if (open_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  // True when this scope records (profiling on, and no other scope open around it): only
  // then is a cost worth computing.
  explicit operator bool() const { return index_ >= 0; }
  void cost(Cost c);

 private:
  void begin(const char* name, const Phase* phase);
  void end();
  bool open_ = false;    // counted in the depth of open scopes
  int64_t index_ = -1;   // the record it writes, when outermost
};

// The phase of the scopes opened while it lives (Phase::forward when none is set).
class PhaseGuard {
 public:
  explicit PhaseGuard(Phase p);
  ~PhaseGuard();
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  Phase previous_;
};

struct StepRecord {
  double host_us = 0;       // step_begin to step_end on the host, before waiting for the device
  double device_us = 0;     // CUDA: first to last event of the step; CPU: = host_us
  double busy_us = 0;       // sum of the step's op times (device_us of each record)
  double predicted_us = 0;  // sum of predicted op times (CUDA devices)
  cuda::Counters counts;    // the whole step's counters
};

struct Options {
  Device device = Device::cpu();
  std::string gpu = "H100";  // the model predicted times are for (profiler_predict.h)
  // On the CPU: the FMA peak (FLOP/s) the matrix products' rates are shown as a share of, as
  // core/cpu_peak.h measures it on the threads the step runs on; 0: none shown.
  double cpu_peak_flops = 0;
};

struct Profile {
  Options options;
  bool emulated = false;          // times are predictions, not measurements
  bool events = false;            // device times are CUDA event times
  std::vector<Event> events_list;
  std::vector<StepRecord> steps;
};

// Records while it lives; one at a time per process.
class Session {
 public:
  explicit Session(Options o);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  void step_begin();
  void step_end();  // waits for the device (uncounted) to read its events
  Profile finish();  // stops recording; the profile of the completed steps

 private:
  Profile p_;
  bool open_ = false, finished_ = false;
  double step_host_start_us_ = 0;
  cuda::Counters step_counts_;
  size_t step_first_event_ = 0;
  void* step_ev_[2] = {nullptr, nullptr};
};

// One row of the table: the records of one (phase, name[, shape]) summed over the steps.
struct Row {
  std::string name, shape;
  Phase phase = Phase::forward;
  Kind kind = Kind::memory;
  int64_t calls = 0;
  double device_us = 0, host_us = 0, predicted_us = 0, flops = 0, bytes = 0;
  cuda::Counters counts;
};

struct Summary {
  std::vector<Row> rows;   // sorted by time, largest first
  int64_t steps = 0;
  double step_host_us = 0, step_device_us = 0, step_busy_us = 0, step_predicted_us = 0;  // means per step
  double flops = 0, bytes = 0;  // per step
  double product_flops = 0, product_us = 0;  // per step: the matrix products' (Kind matmul and attention)
  cuda::Counters counts;        // per step (whole step, including work outside any op), rounded down
  cuda::Counters total;         // over all the steps: a wait once in 4 steps is 1 here, 0 per step
  cuda::Counters outside;       // per step, not inside any recorded op
  bool predicted = false;       // the time column is the prediction (emulated GPU)
};
Summary summarize(const Profile& p);

std::string table(const Profile& p, size_t max_rows = 40);
nlohmann::json to_json(const Profile& p);
nlohmann::json chrome_trace(const Profile& p);

}  // namespace keel::profiler
