// The profiler (core/profiler.h) on the CPU: off it records nothing, on it records each op once
// (outermost scope), its FLOPs are the shapes' (ops/op_costs.h), the rows add up to the step,
// and its Chrome trace is what Perfetto and chrome://tracing read.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "core/profiler.h"
#include "ops/arith.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/reduce.h"

using namespace keel;

namespace {
const profiler::Row* find_row(const profiler::Summary& s, const std::string& name, profiler::Phase phase) {
  for (const profiler::Row& r : s.rows)
    if (r.name == name && r.phase == phase) return &r;
  return nullptr;
}

// Two steps of a small graph: matmul (6 x 8) x (8 x 5), layernorm, sum, backward.
profiler::Profile profile_small_graph() {
  Tensor a = full({6, 8}, 0.5), b = full({8, 5}, 0.25), w = ones({5}), bias = zeros({5});
  a.set_requires_grad(true), b.set_requires_grad(true);
  profiler::Session session({Device::cpu(), "H100"});
  for (int step = 0; step < 2; ++step) {
    session.step_begin();
    Tensor loss = sum(layernorm(matmul(a, b), w, bias, 1e-5));
    loss.backward();
    session.step_end();
  }
  return session.finish();
}
}  // namespace

TEST_CASE("profiler: off, a scope records nothing and computes no cost") {
  CHECK_FALSE(profiler::on());
  profiler::Scope s("matmul");
  CHECK_FALSE(bool(s));
}

TEST_CASE("profiler: each op once per step, FLOPs from its shapes, rows that add up to the step") {
  const profiler::Profile p = profile_small_graph();
  const profiler::Summary s = profiler::summarize(p);
  REQUIRE(s.steps == 2);
  const profiler::Row* mm = find_row(s, "matmul", profiler::Phase::forward);
  REQUIRE(mm != nullptr);
  CHECK(mm->calls == 2);                           // one per step
  CHECK(mm->flops == doctest::Approx(2 * 2.0 * 6 * 5 * 8));  // 2 M N K, two steps
  CHECK(mm->bytes == doctest::Approx(2 * 4.0 * (6 * 8 + 8 * 5 + 6 * 5)));
  CHECK(mm->shape == "[6, 8]x[8, 5]");
  const profiler::Row* mmb = find_row(s, "MatmulBackward", profiler::Phase::backward);
  REQUIRE(mmb != nullptr);
  CHECK(mmb->flops == doctest::Approx(2 * 2 * (2.0 * 6 * 5 * 8)));  // da and db, two steps
  REQUIRE(find_row(s, "LayerNormBackward", profiler::Phase::backward) != nullptr);
  // layernorm's own copies (contiguous()) are inside its record, not rows of their own.
  CHECK(find_row(s, "copy", profiler::Phase::forward) == nullptr);
  // The ops' times sum to what the step spent in them, which the step's wall time bounds.
  double rows_us = 0;
  for (const profiler::Row& r : s.rows) {
    rows_us += r.device_us;
    CHECK(r.device_us >= 0);
  }
  CHECK(rows_us / 2 == doctest::Approx(s.step_busy_us));
  CHECK(s.step_busy_us <= s.step_host_us);
  CHECK(s.step_busy_us > 0);
  const std::string t = profiler::table(p);
  CHECK(t.find("matmul") != std::string::npos);
  CHECK(t.find("MatmulBackward") != std::string::npos);
  CHECK(!profiler::on());  // finish() turned it off
}

TEST_CASE("profiler: nested scopes are one record, the outermost") {
  profiler::Session session({Device::cpu(), "H100"});
  session.step_begin();
  {
    profiler::Scope outer("outer_op");
    CHECK(bool(outer));
    profiler::Scope inner("inner_op");
    CHECK_FALSE(bool(inner));
    Tensor x = matmul(ones({2, 2}), ones({2, 2}));  // a front end inside: absorbed too
  }
  session.step_end();
  const profiler::Profile p = session.finish();
  REQUIRE(p.events_list.size() == 1);
  CHECK(p.events_list[0].name == "outer_op");
}

TEST_CASE("profiler: the Chrome trace has complete events with times, names and costs") {
  const nlohmann::json trace = nlohmann::json::parse(profiler::chrome_trace(profile_small_graph()).dump());
  REQUIRE(trace.contains("traceEvents"));
  int complete = 0;
  bool matmul = false;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    if (e["ph"] != "X") continue;
    ++complete;
    CHECK(e["name"].is_string());
    CHECK(e["ts"].get<double>() >= 0);
    CHECK(e["dur"].get<double>() >= 0);
    CHECK(e["args"].contains("flops"));
    if (e["name"] == "matmul") {
      matmul = true;
      CHECK(e["args"]["flops"].get<double>() == 2.0 * 6 * 5 * 8);
    }
  }
  CHECK(matmul);
  CHECK(complete >= 2 * 5);  // matmul, layernorm, sum and their backward nodes, twice
  const nlohmann::json j = profiler::to_json(profile_small_graph());
  CHECK(j["timing"] == "wall");
  CHECK(j["steps"] == 2);
  CHECK(j["ops"].size() >= 5);
}
