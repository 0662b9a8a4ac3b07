#include "apps/gpt2/run/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "core/io.h"

namespace keel::app {

namespace fs = std::filesystem;
using nlohmann::json;

// ordered_json so every line starts with kind and step, which is what a human scans for.
nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::ordered_json logits_json(const std::vector<std::vector<double>>& m) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& layer : m) {
    auto row = nlohmann::ordered_json::array();
    for (double v : layer) row.push_back(json_number(v));
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

const char* kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Train: return "train";
    case RecordKind::Val: return "val";
    case RecordKind::Event: return "event";
  }
  return "?";
}

// Where a line came from, for error messages: "run/metrics.jsonl:12".
struct LineRef {
  const fs::path& path;
  size_t line;
  std::string where() const { return fmt::format("{}:{}", path.string(), line); }
};

[[noreturn]] void bad_line(const LineRef& at, const std::string& what) {
  throw IoError("read_metrics", fmt::format("{}: {}", at.where(), what),
                "the metrics log is corrupt; fix or delete that line");
}

double num_value(const json& v, const char* key, const LineRef& at) {
  if (v.is_null()) return MetricsRecord::kMissing;
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan" || s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  bad_line(at, fmt::format("field \"{}\" is not a number: {}", key, io::quote_json(v)));
}

double get_num(const json& obj, const char* key, const LineRef& at) {
  auto it = obj.find(key);
  return it == obj.end() ? MetricsRecord::kMissing : num_value(*it, key, at);
}

std::string get_str(const json& obj, const char* key, const LineRef& at) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (!it->is_string()) bad_line(at, fmt::format("field \"{}\" is not a string", key));
  return it->get<std::string>();
}

// A [layer][head] statistic: "max_logit" or "max_range".
std::vector<std::vector<double>> get_logits(const json& obj, const char* key, const LineRef& at) {
  std::vector<std::vector<double>> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  const std::string msg = fmt::format("field \"{}\" is not an array of arrays of numbers", key);
  if (!it->is_array()) bad_line(at, msg);
  for (const auto& layer : *it) {
    if (!layer.is_array()) bad_line(at, msg);
    auto& row = out.emplace_back();
    for (const auto& v : layer) row.push_back(num_value(v, key, at));
  }
  return out;
}

// One non-empty line: its text, its step, and the record (none for an unknown kind).
struct ParsedLine {
  std::string_view text;
  int64_t step = 0;
  std::optional<MetricsRecord> record;
};

// Parses a line, or returns nullopt when it is not JSON at all (the caller decides whether
// that is a cut-short last line or corruption). Valid JSON that breaks the schema throws.
std::optional<ParsedLine> parse_line(std::string_view text, const LineRef& at) {
  json j;
  try {
    j = json::parse(text, io::json_depth_limit<json>(), /*allow_exceptions=*/false);
  } catch (const io::JsonTooDeep&) {
    bad_line(at, fmt::format("nested deeper than {} levels", io::kMaxJsonDepth));
  }
  if (j.is_discarded()) return std::nullopt;
  if (!j.is_object()) bad_line(at, "not a JSON object");
  ParsedLine p{text, 0, std::nullopt};
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer())
    bad_line(at, "missing or non-integer \"step\"");
  p.step = step->get<int64_t>();
  const std::string kind = get_str(j, "kind", at);
  MetricsRecord r;
  r.step = p.step;
  if (kind == "train") {
    r.kind = RecordKind::Train;
    r.loss = get_num(j, "loss", at);
    r.lr = get_num(j, "lr", at);
    r.grad_norm = get_num(j, "grad_norm", at);
    r.tokens_per_s = get_num(j, "tokens_per_s", at);
    r.mfu = get_num(j, "mfu", at);
    r.loss_scale = get_num(j, "loss_scale", at);
    r.elapsed_s = get_num(j, "elapsed_s", at);
    if (auto m = j.find("mem_bytes"); m != j.end() && !m->is_null()) {
      if (!m->is_number_integer()) bad_line(at, "field \"mem_bytes\" is not an integer");
      r.mem_bytes = m->get<int64_t>();
    }
    if (auto s = j.find("skipped"); s != j.end() && !s->is_null()) {
      if (!s->is_boolean()) bad_line(at, "field \"skipped\" is not true/false");
      r.skipped = s->get<bool>();
    }
    r.max_logit = get_logits(j, "max_logit", at);
    r.max_range = get_logits(j, "max_range", at);
    r.log_z_mean = get_num(j, "log_z_mean", at);
    r.log_z_max = get_num(j, "log_z_max", at);
  } else if (kind == "val") {
    r.kind = RecordKind::Val;
    r.val_loss = get_num(j, "val_loss", at);
    r.val_ppl = get_num(j, "val_ppl", at);
    r.max_logit = get_logits(j, "max_logit", at);
    r.max_range = get_logits(j, "max_range", at);
  } else if (kind == "event") {
    r.kind = RecordKind::Event;
    r.event = get_str(j, "event", at);
    r.message = get_str(j, "message", at);
  } else if (kind.empty()) {
    bad_line(at, "missing \"kind\"");
  } else {
    return p;  // a newer kind: keep its step (for truncation) but no record
  }
  p.record = std::move(r);
  return p;
}

// Splits a log into parsed lines. A non-JSON last line without a trailing newline is a write
// cut short by a crash and is dropped; anywhere else it is corruption.
std::vector<ParsedLine> parse_log(const std::string& data, const fs::path& path) {
  std::vector<ParsedLine> lines;
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    ++line_no;
    size_t end = data.find('\n', pos);
    const bool last_unterminated = end == std::string::npos;
    if (last_unterminated) end = data.size();
    std::string_view text(data.data() + pos, end - pos);
    pos = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    LineRef at{path, line_no};
    auto p = parse_line(text, at);
    if (!p) {
      if (last_unterminated) break;
      bad_line(at, "malformed JSON");
    }
    lines.push_back(std::move(*p));
  }
  return lines;
}

}  // namespace

fs::path metrics_path(const fs::path& run_dir) { return run_dir / "metrics.jsonl"; }

std::string to_json_line(const MetricsRecord& r) {
  nlohmann::ordered_json j;
  j["kind"] = kind_name(r.kind);
  j["step"] = r.step;
  switch (r.kind) {
    case RecordKind::Train:
      j["loss"] = json_number(r.loss);
      j["lr"] = json_number(r.lr);
      j["grad_norm"] = json_number(r.grad_norm);
      j["max_logit"] = logits_json(r.max_logit);
      j["max_range"] = logits_json(r.max_range);
      j["log_z_mean"] = json_number(r.log_z_mean);
      j["log_z_max"] = json_number(r.log_z_max);
      j["tokens_per_s"] = json_number(r.tokens_per_s);
      j["mfu"] = json_number(r.mfu);
      j["mem_bytes"] = r.mem_bytes;
      j["loss_scale"] = json_number(r.loss_scale);
      j["skipped"] = r.skipped;
      j["elapsed_s"] = json_number(r.elapsed_s);
      break;
    case RecordKind::Val:
      j["val_loss"] = json_number(r.val_loss);
      j["val_ppl"] = json_number(r.val_ppl);
      j["max_logit"] = logits_json(r.max_logit);
      j["max_range"] = logits_json(r.max_range);
      break;
    case RecordKind::Event:
      j["event"] = r.event;
      j["message"] = r.message;
      break;
  }
  // replace: a message quoting a bad byte sequence must not make the log unwritable.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void truncate_after(const fs::path& path, int64_t step) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  const std::string data = io::read_file(path, "read_metrics");
  std::string kept;
  kept.reserve(data.size());
  for (const auto& line : parse_log(data, path)) {
    if (line.step > step) continue;
    kept.append(line.text);
    kept.push_back('\n');
  }
  if (kept.size() != data.size()) io::write_file_atomic(path, kept, "MetricsLog");
}

MetricsLog::MetricsLog(const fs::path& run_dir, std::optional<int64_t> resume_step)
    : path_(metrics_path(run_dir)) {
  io::create_directories(run_dir, "MetricsLog");
  if (resume_step) {
    truncate_after(path_, *resume_step);
  } else if (!std::ofstream(path_, std::ios::binary | std::ios::trunc)) {
    throw IoError("MetricsLog", fmt::format("{}: cannot create: {}", path_.string(),
                                            std::strerror(errno)));
  }
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_)
    throw IoError("MetricsLog",
                  fmt::format("{}: cannot open for writing: {}", path_.string(), std::strerror(errno)));
}

void MetricsLog::write(const MetricsRecord& record) {
  if (record.kind == RecordKind::Event &&
      std::none_of(std::begin(kEventNames), std::end(kEventNames),
                   [&](const char* n) { return record.event == n; }))
    throw ValueError("MetricsLog::write", fmt::format("unknown event \"{}\"", record.event),
                     "use one of spike, nonfinite, checkpoint, resume, stop");
  // One write per line, then flush: a crash can cut only this line, which the reader tolerates.
  std::string line = to_json_line(record);
  line.push_back('\n');
  out_.write(line.data(), static_cast<std::streamsize>(line.size()));
  out_.flush();
  if (!out_)
    throw IoError("MetricsLog::write", fmt::format("{}: write failed: {}", path_.string(),
                                                   std::strerror(errno)),
                  "is the disk full?");
}

std::vector<MetricsRecord> read_metrics(const fs::path& path) {
  const std::string data = io::read_file(path, "read_metrics");
  std::vector<MetricsRecord> out;
  for (auto& line : parse_log(data, path))
    if (line.record) out.push_back(std::move(*line.record));
  return out;
}

}  // namespace keel::app
