// What the sections of bench_cpu share (apps/bench/bench_cpu.cpp, bench_cpu_ops.cpp).
#pragma once

#include <functional>

#include "core/cpu_peak.h"

namespace keel::bench {

// The machine's measured ceilings on the N threads of the run.
struct Context {
  double peak = 0;  // FLOP/s
  cpu_peak::Bandwidth bandwidth;
};

// The median of `reps` timed runs of f after three untimed ones; reps = 0: one cold run, timed.
double median_seconds(int reps, const std::function<void()>& f);

// The break-even sizes of the kernels' chunks on 1 and n threads (bench_cpu_ops.cpp).
void ops(int n, int reps);

}  // namespace keel::bench
