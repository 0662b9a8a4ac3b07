// The report's "Where a step's time goes" section: drawn from the profile.json that the real
// profiler writes (so the section and core/profiler_report.cpp cannot drift apart), absent for
// runs without one, and a clean IoError naming the file for a hostile one.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "app_test_util.h"
#include "apps/gpt2/report/profile_section.h"
#include "apps/gpt2/report/report.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "synthetic_runs.h"

using namespace keel;
using namespace keel::app;
using keel::test::expect_error;
using keel::test::make_run;
using keel::test::read_text;
using keel::test::TempDir;
using keel::test::write_text;

namespace {

// Two CPU steps of sum(a b) with its backward, as `gpt2 train --profile 2` records a step.
nlohmann::json cpu_profile_json() {
  Tensor a = full({6, 8}, 0.5), b = full({8, 5}, 0.25);
  a.set_requires_grad(true), b.set_requires_grad(true);
  profiler::Session session({Device::cpu(), "H100"});
  for (int step = 0; step < 2; ++step) {
    session.step_begin();
    sum(matmul(a, b)).backward();
    session.step_end();
  }
  return profiler::to_json(session.finish());
}

}  // namespace

TEST_CASE("report: a profiled run gets the step's split by phase and its costliest ops") {
  TempDir dir("report-profile");
  make_run(dir / "mhsa", {.name = "mhsa", .steps = 20, .layers = 1, .heads = 2});
  make_run(dir / "ls", {.name = "ls", .steps = 20, .layers = 1, .heads = 2});
  write_text(dir / "mhsa" / "profile.json", cpu_profile_json().dump());

  const std::optional<RunProfile> p = read_profile(dir / "mhsa");
  REQUIRE(p.has_value());
  CHECK(p->steps == 2);
  CHECK(p->timing == "wall");
  REQUIRE(p->ops.size() >= 2);
  for (size_t i = 1; i < p->ops.size(); ++i) CHECK(p->ops[i - 1].ms >= p->ops[i].ms);  // costliest first
  CHECK_FALSE(read_profile(dir / "ls").has_value());

  write_report({(dir / "mhsa").string(), (dir / "ls").string()}, (dir / "r.html").string(), "t");
  const std::string html = read_text(dir / "r.html");
  const size_t section = html.find("Where a step's time goes");
  REQUIRE(section != std::string::npos);
  const std::string tail = html.substr(section);
  CHECK(tail.find("matmul") != std::string::npos);
  CHECK(tail.find("MatmulBackward") != std::string::npos);
  CHECK(tail.find("backward") != std::string::npos);  // a phase of the bar
  CHECK(tail.find(">mhsa</h3>") != std::string::npos);
  CHECK(tail.find(">ls</h3>") == std::string::npos);  // not profiled: no block of its own

  // No run profiled: no section at all.
  write_report({(dir / "ls").string()}, (dir / "r2.html").string(), "t");
  CHECK(read_text(dir / "r2.html").find("Where a step's time goes") == std::string::npos);
}

TEST_CASE("report: a hostile profile.json is an IoError naming the file and the field") {
  TempDir dir("report-profile-bad");
  make_run(dir / "run", {.name = "run", .steps = 5, .layers = 1, .heads = 1});
  const auto path = dir / "run" / "profile.json";
  const std::string run = (dir / "run").string(), out = (dir / "r.html").string();
  const auto good = cpu_profile_json();

  write_text(path, good.dump().substr(0, 40));  // truncated
  expect_error<IoError>([&] { write_report({run}, out, "t"); }, {"profile.json"});

  nlohmann::json j = good;
  j.erase("ops");
  write_text(path, j.dump());
  expect_error<IoError>([&] { write_report({run}, out, "t"); }, {"profile.json", "\"ops\""});

  j = good;
  j["steps"] = "two";
  write_text(path, j.dump());
  expect_error<IoError>([&] { write_report({run}, out, "t"); }, {"profile.json", "\"steps\""});

  j = good;
  j["ops"][0]["time_ms_per_step"] = -1;
  write_text(path, j.dump());
  expect_error<IoError>([&] { write_report({run}, out, "t"); }, {"profile.json", "time_ms_per_step"});

  j = good;
  j["steps"] = 1e300;
  write_text(path, j.dump());
  expect_error<IoError>([&] { write_report({run}, out, "t"); }, {"profile.json", "\"steps\""});
  CHECK_FALSE(std::filesystem::exists(out));  // nothing half-written
}
