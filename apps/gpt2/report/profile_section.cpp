#include "apps/gpt2/report/profile_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "apps/gpt2/report/svg_chart.h"
#include "core/error.h"
#include "core/io.h"

namespace keel::app {

namespace {

constexpr const char* kOp = "report (profile.json)";
constexpr size_t kMaxOps = 15;  // the table's rows; the rest is one "(other ops)" row

// A field of a profile.json object, or an IoError that names the file and the field: the file
// may be hand-edited or truncated, and the report must say which value it could not use.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::filesystem::path& path) {
  if (!j.is_object() || !j.contains(key))
    throw IoError(kOp, fmt::format("{}: missing field \"{}\"", path.string(), key),
                  "write it again with `gpt2 train --profile N`, or delete it");
  return j[key];
}
double number(const nlohmann::json& j, const char* key, const std::filesystem::path& path) {
  const nlohmann::json& v = field(j, key, path);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw IoError(kOp, fmt::format("{}: \"{}\" is {}, expected a non-negative number", path.string(), key,
                                   io::quote_json(v)),
                  "write it again with `gpt2 train --profile N`, or delete it");
  return v.get<double>();
}
std::string text(const nlohmann::json& j, const char* key, const std::filesystem::path& path) {
  const nlohmann::json& v = field(j, key, path);
  if (!v.is_string())
    throw IoError(kOp, fmt::format("{}: \"{}\" is {}, expected a string", path.string(), key, io::quote_json(v)),
                  "write it again with `gpt2 train --profile N`, or delete it");
  return v.get<std::string>();
}

std::string ms(double v) { return fmt::format("{:.3f}", v); }

// The step split by phase as one stacked bar; phases in the order a step runs them.
std::string phase_bar(const RunProfile& p) {
  constexpr std::array<std::pair<const char*, const char*>, 4> kPhases = {
      {{"forward", "#4e79a7"}, {"backward", "#f28e2b"}, {"optimizer", "#59a14f"}, {"host", "#e15759"}}};
  double total = 0;
  for (const ProfileOp& op : p.ops) total += op.ms;
  if (!(total > 0)) return "";
  std::string bar = "<div class=\"pbar\">", legend = "<div class=\"plegend\">";
  for (const auto& [phase, color] : kPhases) {
    double t = 0;
    for (const ProfileOp& op : p.ops) t += op.phase == phase ? op.ms : 0;
    if (t <= 0) continue;
    const double share = 100 * t / total;
    bar += fmt::format("<span style=\"width:{:.2f}%;background:{}\" title=\"{} {:.1f}%\"></span>", share, color,
                       phase, share);
    legend += fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>{} {:.1f}% ({} ms) ", color, phase,
                          share, ms(t));
  }
  return bar + "</div>" + legend + "</div>\n";
}

std::string ops_table(const RunProfile& p) {
  const std::string time_name = p.timing == "predicted" ? "predicted ms" : "ms";
  std::string s = fmt::format(
      "<table><tr><th>op</th><th>phase</th><th>shape</th><th>calls</th><th>{}</th><th>share</th>"
      "<th>TFLOP/s</th><th>GB/s</th><th>launches</th><th>syncs</th></tr>\n",
      time_name);
  double rest = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProfileOp& op = p.ops[i];
    if (i >= kMaxOps) {
      rest += op.ms;
      continue;
    }
    const double share = p.step_ms > 0 ? 100 * op.ms / p.step_ms : 0, sec = op.ms / 1e3;
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{:g}</td><td class=\"num\">{}</td>"
        "<td class=\"share\"><span style=\"width:{:.1f}%\"></span>{:.1f}%</td><td class=\"num\">{:.2f}</td>"
        "<td class=\"num\">{:.1f}</td><td class=\"num\">{:g}</td><td class=\"num\">{:g}</td></tr>\n",
        svg::escape(op.name), svg::escape(op.phase), svg::escape(op.shape), op.calls, ms(op.ms),
        std::min(share, 100.0), share, sec > 0 ? op.flops / sec / 1e12 : 0.0, sec > 0 ? op.bytes / sec / 1e9 : 0.0,
        op.launches, op.syncs);
  }
  if (rest > 0)
    s += fmt::format("<tr><td>(other ops)</td><td></td><td></td><td></td><td class=\"num\">{}</td>"
                     "<td class=\"num\">{:.1f}%</td><td></td><td></td><td></td><td></td></tr>\n",
                     ms(rest), p.step_ms > 0 ? 100 * rest / p.step_ms : 0.0);
  return s + "</table>\n";
}

std::string headline(const RunProfile& p) {
  std::string how;
  if (p.timing == "predicted")
    how = fmt::format("times <b>predicted</b> for an {} from the ops' counts, FLOPs and bytes (an emulated GPU "
                      "measures nothing)",
                      svg::escape(p.gpu_model));
  else if (p.timing == "cuda_events")
    how = "device times measured with CUDA events";
  else
    how = "wall times";
  std::string s = fmt::format("<p>{} step{} on {}; {}. Per step: <b>{} ms</b>", p.steps, p.steps == 1 ? "" : "s",
                              svg::escape(p.device), how, ms(p.step_ms));
  if (p.timing == "cuda_events")
    s += fmt::format(" on the device, {} ms on the host ({})", ms(p.host_ms),
                     p.host_ms > p.step_ms ? "launch-bound: the GPU waits for the host" : "device-bound");
  s += fmt::format(", {} FLOP", svg::short_number(p.flops));
  if (p.device.rfind("cuda", 0) == 0)
    s += fmt::format(", {:g} launches and library calls, {:g} host syncs, {:g} allocations", p.launches, p.syncs,
                     p.allocations);
  return s + ".</p>\n";
}

}  // namespace

std::optional<RunProfile> read_profile(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / "profile.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const nlohmann::json j = io::read_json_file(path, kOp);
  RunProfile p;
  p.device = text(j, "device", path);
  p.timing = text(j, "timing", path);
  p.gpu_model = text(j, "gpu_model", path);
  const double steps = number(j, "steps", path);
  if (steps > 1e9)  // a count of recorded steps; larger is a corrupt file, not a profile
    throw IoError(kOp, fmt::format("{}: \"steps\" is {:g}, expected a step count", path.string(), steps),
                  "write it again with `gpt2 train --profile N`, or delete it");
  p.steps = static_cast<int64_t>(steps);
  const nlohmann::json& step = field(j, "step", path);
  const nlohmann::json& counts = field(step, "counts", path);
  p.host_ms = number(step, "host_ms", path);
  p.step_ms = number(step, p.timing == "predicted" ? "predicted_ms" : "busy_ms", path);
  p.flops = number(step, "flops", path);
  p.launches = number(counts, "launches", path) + number(counts, "library_calls", path);
  p.syncs = number(counts, "syncs", path);
  p.allocations = number(counts, "allocations", path);
  const nlohmann::json& ops = field(j, "ops", path);
  if (!ops.is_array())
    throw IoError(kOp, fmt::format("{}: \"ops\" is {}, expected an array", path.string(), io::quote_json(ops)),
                  "write it again with `gpt2 train --profile N`, or delete it");
  for (const nlohmann::json& o : ops) {
    ProfileOp op;
    op.name = text(o, "name", path);
    op.phase = text(o, "phase", path);
    op.shape = text(o, "shape", path);
    op.calls = number(o, "calls_per_step", path);
    op.ms = number(o, p.timing == "predicted" ? "predicted_ms_per_step" : "time_ms_per_step", path);
    op.flops = number(o, "flops_per_step", path);
    op.bytes = number(o, "bytes_per_step", path);
    const nlohmann::json& c = field(o, "counts_per_step", path);
    op.launches = number(c, "launches", path) + number(c, "library_calls", path) + number(c, "copies", path);
    op.syncs = number(c, "syncs", path);
    p.ops.push_back(std::move(op));
  }
  std::stable_sort(p.ops.begin(), p.ops.end(), [](const ProfileOp& a, const ProfileOp& b) { return a.ms > b.ms; });
  return p;
}

std::string profile_section(const std::vector<ProfiledRun>& runs) {
  std::string body;
  for (const ProfiledRun& r : runs) {
    if (!r.profile) continue;
    body += fmt::format("<h3><span class=\"swatch\" style=\"background:{}\"></span>{}</h3>\n", r.color,
                        svg::escape(r.name));
    body += headline(*r.profile) + phase_bar(*r.profile) + ops_table(*r.profile);
  }
  if (body.empty()) return "";
  return "<h2>Where a step's time goes</h2>\n<p>From each run's <code>profile.json</code> (<code>gpt2 train "
         "--profile N</code>, docs/training.md): the step split by phase, then the costliest ops per step. "
         "An op's share is of the time spent in recorded ops; TFLOP/s and GB/s are what its shapes imply over "
         "its time, so a memory-bound op shows a high GB/s and a low TFLOP/s.</p>\n" +
         body;
}

// The section's CSS, for the page's <style>.
const char* const kProfileStyle =
    ".pbar{display:flex;width:100%;max-width:900px;height:18px;border:1px solid #ccc}.pbar span{height:100%}"
    ".plegend{font-size:13px;margin:4px 0 8px}"
    "td.share{position:relative;min-width:90px;text-align:right}"
    "td.share span{position:absolute;left:0;top:2px;bottom:2px;background:#dce6f2;z-index:-1}"
    "td.share{z-index:0}";

}  // namespace keel::app
