// What a profile says (core/profiler.h): rows per op, the terminal table, JSON, and the
// Chrome trace format that Perfetto and chrome://tracing open (PyTorch's profiler exports it too).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/profiler.h"
#include "core/profiler_predict.h"

namespace keel::profiler {

namespace {

cuda::Counters add(cuda::Counters a, const cuda::Counters& b) {
  a.launches += b.launches, a.library_calls += b.library_calls, a.copies += b.copies;
  a.syncs += b.syncs, a.allocations += b.allocations, a.device_mallocs += b.device_mallocs;
  return a;
}

// Counts per step from totals over n steps (exact when every step does the same work).
cuda::Counters per_step(cuda::Counters c, int64_t n) {
  if (n <= 0) return c;
  const uint64_t d = uint64_t(n);
  return {c.launches / d, c.library_calls / d, c.copies / d, c.syncs / d, c.allocations / d, c.device_mallocs / d};
}

std::string si(double v, const char* unit) {
  const char* prefix[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) v /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", v, prefix[i], unit);
}

std::string ms(double us) { return fmt::format("{:.3f}", us / 1000); }

// Products are bound by the FMA units (the CPU's peak applies); the rest by memory.
bool is_product(Kind k) { return k != Kind::memory; }

// A CPU row's rate as a share of the FMA peak, or "" where none applies; flops and us per step.
std::string peak_share(const Profile& p, const Row& r, double flops, double us) {
  if (p.options.cpu_peak_flops <= 0 || !is_product(r.kind) || us <= 0) return "";
  return fmt::format("{:.0f}%", 100 * flops / (us / 1e6) / p.options.cpu_peak_flops);
}

// The step and its products against the CPU's FMA peak.
std::string cpu_peak_line(double peak, const Summary& s) {
  const double step = s.flops / (s.step_host_us / 1e6), products = s.product_flops / (s.product_us / 1e6);
  return fmt::format(
      "CPU FMA peak {:.1f} GFLOP/s (measured): the step {:.1f} GFLOP/s, {:.0f}% of it; its matrix products "
      "({} FLOP, {} ms) {:.1f} GFLOP/s, {:.0f}%\n",
      peak / 1e9, step / 1e9, 100 * step / peak, si(s.product_flops, "F"), ms(s.product_us), products / 1e9,
      100 * products / peak);
}

}  // namespace

Summary summarize(const Profile& p) {
  Summary s;
  s.steps = int64_t(p.steps.size());
  s.predicted = p.emulated;
  std::map<std::tuple<int, std::string, std::string>, Row> rows;
  cuda::Counters inside;
  for (const Event& e : p.events_list) {
    const std::string shape = e.cost.by_shape ? e.cost.shape : "";
    Row& r = rows[{int(e.phase), e.name, shape}];
    r.name = e.name, r.phase = e.phase, r.shape = shape, r.kind = e.cost.kind;
    ++r.calls;
    r.device_us += e.device_us, r.host_us += e.host_us, r.predicted_us += e.predicted_us;
    r.flops += e.cost.flops, r.bytes += e.cost.bytes;
    r.counts = add(r.counts, e.counts);
    s.flops += e.cost.flops, s.bytes += e.cost.bytes;
    if (is_product(e.cost.kind)) s.product_flops += e.cost.flops, s.product_us += e.device_us;
    inside = add(inside, e.counts);
  }
  cuda::Counters total;
  for (const StepRecord& st : p.steps) {
    s.step_host_us += st.host_us, s.step_device_us += st.device_us, s.step_busy_us += st.busy_us;
    s.step_predicted_us += st.predicted_us;
    total = add(total, st.counts);
  }
  const double n = s.steps > 0 ? double(s.steps) : 1.0;
  s.step_host_us /= n, s.step_device_us /= n, s.step_busy_us /= n, s.step_predicted_us /= n;
  s.flops /= n, s.bytes /= n, s.product_flops /= n, s.product_us /= n;
  s.counts = per_step(total, s.steps);
  s.total = total;
  s.outside = per_step(total - inside, s.steps);
  for (auto& [_, r] : rows) s.rows.push_back(r);
  const bool pred = s.predicted;
  std::stable_sort(s.rows.begin(), s.rows.end(), [pred](const Row& a, const Row& b) {
    return (pred ? a.predicted_us : a.device_us) > (pred ? b.predicted_us : b.device_us);
  });
  return s;
}

std::string table(const Profile& p, size_t max_rows) {
  const Summary s = summarize(p);
  const double n = s.steps > 0 ? double(s.steps) : 1.0;
  const bool cuda = p.options.device.is_cuda();
  const double step_time = s.predicted ? s.step_predicted_us : s.step_busy_us;
  std::string out;
  const std::string time_name = s.predicted ? "pred ms" : (p.events ? "device ms" : "time ms");
  out += fmt::format("profile: {} step(s) on {}{}; per step:\n", s.steps, p.options.device.str(),
                     s.predicted ? fmt::format(" (emulated: times predicted for an {})", p.options.gpu) : "");
  const bool peak = p.options.cpu_peak_flops > 0;
  out += fmt::format("{:<24} {:<9} {:<26} {:>6} {:>10} {:>6} {:>10} {:>10} {:>8} {:>8} {:>6} {:>5}{}\n", "op", "phase",
                     "shape", "calls", time_name, "share", "FLOP", "bytes", "TFLOP/s", "GB/s", "launch", "sync",
                     peak ? "  peak" : "");
  size_t shown = 0;
  double rest_us = 0;
  for (const Row& r : s.rows) {
    const double t = (s.predicted ? r.predicted_us : r.device_us) / n;
    if (shown++ >= max_rows) {
      rest_us += t;
      continue;
    }
    const double sec = t / 1e6;
    out += fmt::format("{:<24} {:<9} {:<26} {:>6} {:>10} {:>5.1f}% {:>10} {:>10} {:>8.2f} {:>8.1f} {:>6} {:>5}{}\n",
                       r.name.substr(0, 24), phase_name(r.phase), r.shape.substr(0, 26), double(r.calls) / n,
                       ms(t), step_time > 0 ? 100 * t / step_time : 0.0, si(r.flops / n, "F"), si(r.bytes / n, "B"),
                       sec > 0 ? r.flops / n / sec / 1e12 : 0.0, sec > 0 ? r.bytes / n / sec / 1e9 : 0.0,
                       (r.counts.launches + r.counts.library_calls + r.counts.copies) / uint64_t(n),
                       r.counts.syncs / uint64_t(n), peak ? fmt::format(" {:>5}", peak_share(p, r, r.flops / n, r.device_us / n)) : "");
  }
  if (rest_us > 0) out += fmt::format("{:<24} {:>55} {:>5.1f}%\n", "(other ops)", ms(rest_us), 100 * rest_us / step_time);
  out += fmt::format("step: {} FLOP, {} moved{}\n", si(s.flops, "F"), si(s.bytes, "B"),
                     cuda ? "; " + s.counts.summary() : std::string());
  if (s.outside.operations() + s.outside.syncs > 0)
    out += fmt::format("outside any op: {}\n", s.outside.summary());
  // Host syncs and the ops that caused them: each one stalls the host until the GPU drains.
  std::string causes;
  for (const Row& r : s.rows)
    if (r.counts.syncs > 0)  // per step, as a fraction where the op waits on some steps only
      causes += fmt::format("{}{:.3g} {} ({})", causes.empty() ? "" : ", ", double(r.counts.syncs) / n, r.name,
                            phase_name(r.phase));
  if (!causes.empty()) out += "host syncs by cause: " + causes + "\n";
  if (s.predicted) {
    // The host issues each operation in about host_op_us: past the device time, the GPU waits.
    const GpuModel& g = gpu_model(p.options.gpu);
    const double host_us = double(s.counts.operations()) * g.host_op_us;
    out += fmt::format("predicted {} step: device {} ms; host issues {} operations at ~{} us: {} ms: {}\n",
                       g.name, ms(s.step_predicted_us), s.counts.operations(), g.host_op_us, ms(host_us),
                       host_us > s.step_predicted_us ? "launch-bound" : "device-bound");
  } else if (cuda) {
    out += fmt::format("step: host {} ms, device {} ms (ops busy {} ms): {}\n", ms(s.step_host_us),
                       ms(s.step_device_us), ms(s.step_busy_us),
                       s.step_host_us > s.step_busy_us ? "launch-bound (the GPU waits for the host)"
                                                       : "device-bound");
    // What the emulated GPU would have predicted for this step: how far the roofline is off here.
    if (s.step_predicted_us > 0)
      out += fmt::format("predicted {} step: device {} ms, {:.2f}x the measured ops' {} ms\n",
                         gpu_model(p.options.gpu).name, ms(s.step_predicted_us),
                         s.step_predicted_us / std::max(s.step_busy_us, 1e-9), ms(s.step_busy_us));
  } else {
    out += fmt::format("step: {} ms wall, of which {} ms in recorded ops\n", ms(s.step_host_us), ms(s.step_busy_us));
    if (peak) out += cpu_peak_line(p.options.cpu_peak_flops, s);
  }
  return out;
}

nlohmann::json to_json(const Profile& p) {
  const Summary s = summarize(p);
  const double n = s.steps > 0 ? double(s.steps) : 1.0;
  auto counts = [](const cuda::Counters& c) {
    return nlohmann::json{{"launches", c.launches}, {"library_calls", c.library_calls}, {"copies", c.copies},
                          {"syncs", c.syncs},       {"allocations", c.allocations}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& r : s.rows)
    rows.push_back({{"name", r.name}, {"phase", phase_name(r.phase)}, {"shape", r.shape},
                    {"calls_per_step", double(r.calls) / n}, {"time_ms_per_step", r.device_us / n / 1000},
                    {"predicted_ms_per_step", r.predicted_us / n / 1000}, {"flops_per_step", r.flops / n},
                    {"bytes_per_step", r.bytes / n}, {"counts_per_step", counts(per_step(r.counts, s.steps))},
                    {"counts_total", counts(r.counts)}});
  return {{"device", p.options.device.str()},
          {"emulated", p.emulated},
          {"timing", p.emulated ? "predicted" : p.events ? "cuda_events" : "wall"},
          {"gpu_model", p.options.device.is_cuda() ? p.options.gpu : ""},
          {"cpu_peak_flops", p.options.cpu_peak_flops},
          {"steps", s.steps},
          {"step", {{"host_ms", s.step_host_us / 1000},
                    {"device_ms", s.step_device_us / 1000},
                    {"busy_ms", s.step_busy_us / 1000},
                    {"predicted_ms", s.step_predicted_us / 1000},
                    {"flops", s.flops},
                    {"bytes", s.bytes},
                    {"product_flops", s.product_flops},
                    {"product_ms", s.product_us / 1000},
                    {"counts", counts(s.counts)},
                    {"counts_total", counts(s.total)},
                    {"outside_ops", counts(s.outside)}}},
          {"ops", rows}};
}

nlohmann::json chrome_trace(const Profile& p) {
  // Thread 1: the host issuing ops; thread 2: the device (CUDA events), or on the emulated GPU
  // the predicted device timeline, the ops laid end to end from each step's start.
  nlohmann::json ev = nlohmann::json::array();
  const bool device_track = p.events || p.emulated;
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "host"}}}});
  if (device_track)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2},
                  {"args", {{"name", p.emulated ? "predicted " + p.options.gpu : "device"}}}});
  int step = -1;
  double cursor = 0;
  for (const Event& e : p.events_list) {
    if (e.step != step) step = e.step, cursor = e.host_start_us;
    nlohmann::json args{{"phase", phase_name(e.phase)}, {"shape", e.cost.shape}, {"flops", e.cost.flops},
                        {"bytes", e.cost.bytes},        {"launches", e.counts.launches},
                        {"library_calls", e.counts.library_calls}, {"copies", e.counts.copies},
                        {"syncs", e.counts.syncs},      {"step", e.step}};
    if (p.emulated) args["predicted_us"] = e.predicted_us;
    ev.push_back({{"name", e.name}, {"cat", phase_name(e.phase)}, {"ph", "X"}, {"pid", 1}, {"tid", 1},
                  {"ts", e.host_start_us}, {"dur", e.host_us}, {"args", args}});
    if (p.events)
      ev.push_back({{"name", e.name}, {"cat", phase_name(e.phase)}, {"ph", "X"}, {"pid", 1}, {"tid", 2},
                    {"ts", e.device_start_us}, {"dur", e.device_us}, {"args", args}});
    else if (p.emulated) {
      ev.push_back({{"name", e.name}, {"cat", phase_name(e.phase)}, {"ph", "X"}, {"pid", 1}, {"tid", 2},
                    {"ts", cursor}, {"dur", e.predicted_us}, {"args", args}});
      cursor += e.predicted_us;
    }
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
}

}  // namespace keel::profiler
