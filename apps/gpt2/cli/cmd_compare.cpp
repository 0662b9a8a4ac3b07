// `gpt2 compare`: the experiment of this project. One training run per attention variant with
// the same seed, data, model size and step budget, then a table and a self-contained HTML
// report (loss, validation perplexity, max attention logit per layer over steps).
//
// --sweep KEY=V1,V2,... turns it into a class exercise: one run per variant and value, and a report
// with the sweep's charts (report/sweep_section.h). Several --sweep flags of equal length vary
// together (the i-th values form the i-th run), e.g. seq-len and batch-size so that every run sees
// the same tokens per step. --sweep lr=... crosses the others instead: every learning rate at every
// point of them (a model size, say), and the report opens with the learning-rate sensitivity
// figure (report/lr_section.h). A variant whose model and training the swept keys do not change
// (MHSA under an ls-window sweep) runs once. A variant may carry train flags of its own,
// "mhsa:z-loss=1e-4". A run that diverges is a result of the comparison, not its end.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/cli/train_flags.h"
#include "apps/gpt2/report/reading.h"
#include "apps/gpt2/report/report.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/train/trainer.h"
#include "nn/config.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// A train flag and its value, as a sweep or a variant sets it: ("--ls-window", "16").
using Flags = std::vector<std::pair<std::string, std::string>>;

// One --sweep flag: the TrainConfig field (as a flag, --ls-window) and its values.
struct SweepAxis {
  std::string flag;  // "--ls-window"
  std::vector<std::string> values;
};

// "ls_window" or "--ls-window" -> "ls-window"; ConfigError for a key that names the run rather
// than its training (`what`: where it was given, for the message).
std::string flag_key(std::string key, const std::string& what, const std::string& spec) {
  if (key.rfind("--", 0) == 0) key = key.substr(2);
  std::replace(key.begin(), key.end(), '_', '-');
  for (const char* fixed : {"attention", "run-dir", "name", "data", "config", "resume", "nproc"})
    if (key == fixed)
      throw ConfigError("compare", what + " " + spec + ": --" + key + " cannot be " +
                                       (what == "--sweep" ? "swept" : "set per variant"),
                        key == std::string("attention") ? "list the variants with --variants instead"
                                                        : "set a model, data or training setting");
  return key;
}

// --sweep flags: those other than lr vary together and need as many values each; lr crosses them
// (sweep_points).
std::vector<SweepAxis> parse_sweeps(const std::vector<std::string>& specs) {
  std::vector<SweepAxis> axes;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    const std::string key = flag_key(eq == std::string::npos ? spec : spec.substr(0, eq), "--sweep", spec);
    SweepAxis a{"--" + key, eq == std::string::npos ? std::vector<std::string>{} : split_list(spec.substr(eq + 1))};
    if (key.empty() || a.values.empty())
      throw ConfigError("compare", "--sweep " + spec + ": expected KEY=V1,V2,...",
                        "e.g. --sweep ls-window=16,32,64,128");
    for (const SweepAxis& b : axes)
      if (b.flag == a.flag) throw ConfigError("compare", "--sweep " + spec + ": " + a.flag + " is swept twice");
    const auto first = std::find_if(axes.begin(), axes.end(), [](const SweepAxis& x) { return x.flag != "--lr"; });
    if (first != axes.end() && key != "lr" && a.values.size() != first->values.size())
      throw ConfigError("compare",
                        fmt::format("--sweep {}: {} values, but {} has {}", spec, a.values.size(), first->flag,
                                    first->values.size()),
                        "several --sweep flags vary together and need the same number of values (lr crosses them)");
    axes.push_back(std::move(a));
  }
  return axes;
}

// The sweep's runs, each as its flags: the i-th values of the axes other than --lr together, and
// every --lr value with each of them (a learning-rate sweep at every model size, say).
std::vector<Flags> sweep_points(const std::vector<SweepAxis>& axes) {
  const auto lr = std::find_if(axes.begin(), axes.end(), [](const SweepAxis& a) { return a.flag == "--lr"; });
  const auto other = std::find_if(axes.begin(), axes.end(), [](const SweepAxis& a) { return a.flag != "--lr"; });
  std::vector<Flags> points;
  const size_t n = other == axes.end() ? 1 : other->values.size();
  for (size_t i = 0; i < n; ++i) {
    Flags together;
    for (const SweepAxis& a : axes)
      if (a.flag != "--lr") together.emplace_back(a.flag, a.values[i]);
    if (lr == axes.end()) {
      points.push_back(together);
      continue;
    }
    for (const std::string& v : lr->values) {
      points.push_back(together);
      points.back().emplace_back("--lr", v);
    }
  }
  return points;
}

// base with `flags` applied, parsed as the train flags are (the same types, ranges and
// messages), then validated. what: "--sweep" or "--variants", for the messages.
TrainConfig apply_flags(const TrainConfig& base, const Flags& flags, const std::string& what) {
  TrainConfig cfg = base;
  std::string unused;
  CLI::App parser;
  add_train_flags(parser, &cfg, &unused);
  std::vector<std::string> args;  // CLI11 reads a vector from the back
  for (auto f = flags.rbegin(); f != flags.rend(); ++f) args.insert(args.end(), {f->second, f->first});
  try {
    parser.parse(args);
  } catch (const CLI::ParseError& e) {
    throw ConfigError("compare", fmt::format("{}: {}", what, e.what()), "give a flag of `gpt2 train --help`");
  }
  cfg.validate();
  return cfg;
}

// "ls-window=16 seq-len=128" and "ls-window-16_seq-len-128" for the flags of one run.
std::pair<std::string, std::string> flags_label(const Flags& flags) {
  std::string name, dir;
  for (const auto& [flag, value] : flags) {
    std::string v = value;
    for (char& c : v)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
    name += (name.empty() ? "" : " ") + flag.substr(2) + "=" + value;
    dir += (dir.empty() ? "" : "_") + flag.substr(2) + "-" + v;
  }
  return {name, dir};
}

// One entry of --variants: an attention variant, with train flags of its own after colons
// ("mhsa:z-loss=1e-4" is MHSA with a z-loss), named and placed by them.
struct Variant {
  std::string attention;
  Flags flags;
  std::string name, dir;  // "mhsa z-loss=1e-4", "mhsa_z-loss-1e-4"
};

// The variants named in --variants, each checked before the first run starts.
std::vector<Variant> parse_variants(const std::string& variants) {
  std::vector<Variant> out;
  for (const std::string& spec : split_list(variants)) {
    std::stringstream ss(spec);
    Variant v;
    std::getline(ss, v.attention, ':');
    try {
      nn::parse_attention_kind(v.attention);
    } catch (const ConfigError& e) {
      throw ConfigError("compare", "--variants: " + e.message(), e.hint());
    }
    for (std::string kv; std::getline(ss, kv, ':');) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        throw ConfigError("compare", "--variants " + spec + ": expected ATTENTION:KEY=VALUE, got '" + kv + "'",
                          "e.g. --variants mhsa,mhsa:z-loss=1e-4");
      v.flags.emplace_back("--" + flag_key(kv.substr(0, eq), "--variants", spec), kv.substr(eq + 1));
    }
    const auto [name, dir] = flags_label(v.flags);
    v.name = name.empty() ? v.attention : v.attention + " " + name;
    v.dir = dir.empty() ? v.attention : v.attention + "_" + dir;
    out.push_back(std::move(v));
  }
  if (out.empty()) throw ConfigError("compare", "--variants is empty", "e.g. --variants mhsa,ls");
  return out;
}

// The runs of variant v: one in OUT/v, or with a sweep one per point in OUT/v/KEY-V (one in OUT/v
// when the sweep does not change this variant).
std::vector<TrainConfig> variant_runs(const TrainConfig& base, const Variant& v, const std::vector<SweepAxis>& axes,
                                      const std::string& out) {
  TrainConfig cfg = base;
  cfg.model.attention = v.attention;
  cfg.name = v.name;
  cfg.run_dir = (fs::path(out) / v.dir).string();
  cfg = apply_flags(cfg, v.flags, "--variants " + v.name);
  if (axes.empty()) return {cfg};
  std::vector<TrainConfig> runs;
  std::set<std::string> identities;
  for (const Flags& point : sweep_points(axes)) {
    TrainConfig r = apply_flags(cfg, point, "--sweep");
    identities.insert(identity_of(r).dump());
    const auto [name, dir] = flags_label(point);
    r.name = v.name + " " + name;
    r.run_dir = (fs::path(out) / v.dir / dir).string();
    runs.push_back(r);
  }
  if (identities.size() == 1) {  // the sweep does not touch this variant: one run is enough
    runs.front().name = v.name;
    runs.front().run_dir = cfg.run_dir;
    runs.resize(1);
  }
  return runs;
}

// Every planned model checked too (a swept window as long as the context, say), so that a bad
// value fails now and not after the runs before it have trained.
void check_models(const TrainConfig& base, const std::vector<TrainConfig>& plan) {
  if (!base.init_from.empty()) return;
  const uint32_t vocab = data::read_dataset_meta(base.data).vocab_size;
  for (const TrainConfig& cfg : plan) {
    try {
      cfg.validate();
      model_config(cfg, vocab);
    } catch (const ConfigError& e) {
      throw ConfigError("compare", cfg.name + ": " + e.message(), e.hint());
    }
  }
}

// Trains the planned runs in order, reusing those a previous compare finished. false when a run
// was interrupted (the comparison continues with the same command and --resume).
bool train_runs(const std::vector<TrainConfig>& plan, bool resume) {
  for (TrainConfig cfg : plan) {
    const std::string v = cfg.name;
    auto latest = latest_checkpoint(cfg.run_dir);
    if (latest && load_checkpoint(*latest).trainer.value("step", int64_t(0)) >= cfg.max_steps) {
      fmt::print("gpt2 compare: {} already finished in {}, reusing it\n", v, cfg.run_dir);
      continue;
    }
    cfg.resume = latest.has_value() && resume;
    fmt::print("\n=== {} ===\n", v);
    try {
      TrainResult r = train(cfg);
      if (r.interrupted) {
        fmt::print("gpt2 compare: interrupted; continue with the same command and --resume\n");
        return false;
      }
    } catch (const ValueError& e) {
      // A diverged run is a result of the experiment, not a failure of the comparison.
      fmt::print("gpt2 compare: {} stopped: {}\n", v, e.message());
    }
  }
  return true;
}

// The table of the runs in dirs and how to read it (each run's n/d, and what to look at), printed,
// and OUT/report.html, which opens with the same reading.
void report_runs(const std::vector<std::string>& dirs, const std::string& out, const std::vector<SweepAxis>& axes) {
  std::vector<std::pair<RunSummary, std::vector<MetricsRecord>>> runs;
  for (const auto& d : dirs) runs.push_back(load_run(d));
  std::vector<RunSummary> summaries;
  std::vector<ReadingRun> reading_runs;
  for (const auto& [summary, records] : runs) {
    summaries.push_back(summary);
    reading_runs.push_back({&summary, &records});
  }
  fmt::print("\n{}\n{}\n", compare_table(summaries), reading_text(reading(reading_runs)));
  fs::path html = fs::path(out) / "report.html";
  // A learning-rate sweep opens with its own figure (report/lr_section.h), whatever else it varies.
  const bool lr = std::any_of(axes.begin(), axes.end(), [](const SweepAxis& a) { return a.flag == "--lr"; });
  std::string sweep_key = lr ? "lr" : axes.empty() ? "" : axes.front().flag.substr(2);
  std::replace(sweep_key.begin(), sweep_key.end(), '-', '_');
  write_report(dirs, html.string(),
               lr              ? "keel: learning-rate sensitivity"
               : axes.empty()  ? "keel: attention variants compared"
                               : "keel: a sweep over " + axes.front().flag,
               sweep_key);
  fmt::print("gpt2 compare: report written to {}\n", html.string());
}

void run_compare(CLI::App& cmd, const TrainConfig& flags, const std::string& config_file, const std::string& out,
                 const std::string& variants, const std::string& include, const std::vector<std::string>& sweeps) {
  if (out.empty()) throw ConfigError("compare", "--out is required", "e.g. --out runs/compare");
  const std::vector<Variant> names = parse_variants(variants);
  const TrainConfig base = resolve_train_config(cmd, flags, config_file);
  const std::vector<SweepAxis> axes = parse_sweeps(sweeps);
  // Every run planned (and every sweep value checked) before the first one starts.
  std::vector<TrainConfig> plan;
  for (const Variant& v : names) {
    const std::vector<TrainConfig> runs = variant_runs(base, v, axes, out);
    plan.insert(plan.end(), runs.begin(), runs.end());
  }
  check_models(base, plan);
  if (!train_runs(plan, base.resume)) return;
  std::vector<std::string> dirs;
  for (const TrainConfig& cfg : plan) dirs.push_back(cfg.run_dir);
  // Runs made elsewhere (an ablation trained with `gpt2 train`) join the table and the report.
  for (const std::string& d : split_list(include)) dirs.push_back(d);
  report_runs(dirs, out, axes);
}
}  // namespace

void add_compare_command(CLI::App& app) {
  auto flags = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto variants = std::make_shared<std::string>("mhsa,ls");
  auto include = std::make_shared<std::string>();
  auto sweeps = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train one run per attention variant under the same budget; print a table, write report.html");
  cmd->add_option("--out", *out, "directory for the runs (OUT/<variant>) and OUT/report.html");
  cmd->add_option("--variants", *variants,
                  "comma-separated attention variants: " + nn::attention_kind_names() +
                      "; train flags of one variant follow it after colons, e.g. mhsa:z-loss=1e-4");
  cmd->add_option("--include", *include,
                  "comma-separated run directories trained elsewhere to add to the table and report");
  cmd->add_option("--sweep", *sweeps,
                  "KEY=V1,V2,...: one run per variant and value of the train flag KEY (e.g. ls-window=16,32,64,128, "
                  "seq-len=64,128,256); repeat it to vary several flags together; lr=... crosses the others "
                  "(every learning rate at each of their points) and opens the report with LR sensitivity; runs go "
                  "to OUT/<variant>/KEY-V")
      ->allow_extra_args(false);
  add_train_flags(*cmd, flags.get(), config_file.get());
  cmd->callback([cmd, flags, config_file, out, variants, include, sweeps] {
    run_compare(*cmd, *flags, *config_file, *out, *variants, *include, *sweeps);
  });
}

}  // namespace keel::app
