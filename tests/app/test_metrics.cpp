// The metrics log: records survive a write/read round trip (non-finite numbers included), a
// crash's cut-short last line is tolerated, corruption is reported with file and line, and a
// resumed run's log reads like an uninterrupted one.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "app_test_util.h"
#include "apps/gpt2/run/metrics.h"
#include "core/error.h"

using namespace keel::app;
using keel::test::TempDir;
using keel::test::expect_error;
using keel::test::read_text;
using keel::test::write_text;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

MetricsRecord train(int64_t step, double loss) {
  MetricsRecord r;
  r.kind = RecordKind::Train;
  r.step = step;
  r.loss = loss;
  r.lr = 6e-4;
  r.grad_norm = 0.75;
  r.max_logit = {{1.5, 2.25}, {3.0, 0.1}};
  r.max_range = {{1.0, 2.5}, {0.75, 0.0}};
  r.tokens_per_s = 12345.5;
  r.mfu = 0.41;
  r.mem_bytes = int64_t{3} << 33;
  r.loss_scale = 65536;
  r.elapsed_s = 1.0 * static_cast<double>(step);
  return r;
}

MetricsRecord event(int64_t step, const char* name, const char* msg) {
  MetricsRecord r;
  r.kind = RecordKind::Event;
  r.step = step;
  r.event = name;
  r.message = msg;
  return r;
}

}  // namespace

TEST_CASE("metrics round trip keeps every field, NaN and infinity included") {
  TempDir dir("metrics-rt");
  MetricsRecord t = train(7, kNaN);
  t.grad_norm = kInf;
  t.max_logit[1][0] = -kInf;
  t.max_range[0][1] = kNaN;
  t.skipped = true;
  MetricsRecord v;
  v.kind = RecordKind::Val;
  v.step = 7;
  v.val_loss = 3.25;
  v.val_ppl = std::exp(3.25);
  v.max_logit = {{kNaN, 4.0}};
  v.max_range = {{kInf, 3.5}};
  {
    MetricsLog log(dir.path());
    log.write(train(6, 2.5));
    log.write(t);
    log.write(v);
    log.write(event(7, "nonfinite", "loss is nan \"quoted\" <b>"));
  }
  const std::string text = read_text(dir / "metrics.jsonl");
  // JSON has no NaN: the writer spells non-finite numbers as strings.
  CHECK(text.find("\"loss\":\"nan\"") != std::string::npos);
  CHECK(text.find("\"grad_norm\":\"inf\"") != std::string::npos);
  CHECK(text.find("\"-inf\"") != std::string::npos);
  CHECK(text.find("NaN") == std::string::npos);

  const auto recs = read_metrics(dir / "metrics.jsonl");
  REQUIRE(recs.size() == 4);
  const auto& a = recs[0];
  const MetricsRecord want = train(6, 2.5);
  CHECK(a.kind == RecordKind::Train);
  CHECK(a.step == 6);
  CHECK(a.loss == want.loss);
  CHECK(a.lr == want.lr);
  CHECK(a.grad_norm == want.grad_norm);
  CHECK(a.tokens_per_s == want.tokens_per_s);
  CHECK(a.mfu == want.mfu);
  CHECK(a.mem_bytes == want.mem_bytes);
  CHECK(a.loss_scale == want.loss_scale);
  CHECK(a.elapsed_s == want.elapsed_s);
  CHECK_FALSE(a.skipped);
  CHECK(a.max_logit == want.max_logit);
  CHECK(a.max_range == want.max_range);

  const auto& b = recs[1];
  CHECK(std::isnan(b.loss));
  CHECK((std::isinf(b.grad_norm) && b.grad_norm > 0));
  CHECK((std::isinf(b.max_logit[1][0]) && b.max_logit[1][0] < 0));
  CHECK(std::isnan(b.max_range[0][1]));
  CHECK(b.max_range[1][0] == 0.75);
  CHECK(b.skipped);

  const auto& c = recs[2];
  CHECK(c.kind == RecordKind::Val);
  CHECK(c.val_loss == 3.25);
  CHECK(c.val_ppl == std::exp(3.25));
  REQUIRE(c.max_logit.size() == 1);
  CHECK(std::isnan(c.max_logit[0][0]));
  CHECK(c.max_logit[0][1] == 4.0);
  REQUIRE(c.max_range.size() == 1);
  CHECK(std::isinf(c.max_range[0][0]));
  CHECK(c.max_range[0][1] == 3.5);

  CHECK(recs[3].kind == RecordKind::Event);
  CHECK(recs[3].event == "nonfinite");
  CHECK(recs[3].message == "loss is nan \"quoted\" <b>");
}

TEST_CASE("metrics fields a writer leaves out read back as missing") {
  TempDir dir("metrics-missing");
  write_text(dir / "m.jsonl",
             "{\"kind\":\"train\",\"step\":3,\"loss\":2.5,\"mfu\":null}\n"
             "\n"
             "{\"kind\":\"val\",\"step\":3,\"val_ppl\":\"inf\"}\n");
  const auto recs = read_metrics(dir / "m.jsonl");
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].loss == 2.5);
  CHECK(std::isnan(recs[0].lr));
  CHECK(std::isnan(recs[0].mfu));
  CHECK(recs[0].mem_bytes == -1);
  CHECK_FALSE(recs[0].skipped);
  CHECK(recs[0].max_logit.empty());
  CHECK(recs[0].max_range.empty());  // a log from before max_range existed
  CHECK(std::isnan(recs[1].val_loss));
  CHECK(std::isinf(recs[1].val_ppl));
}

TEST_CASE("metrics reader skips a cut-short last line and unknown kinds") {
  TempDir dir("metrics-trunc");
  {
    MetricsLog log(dir.path());
    log.write(train(1, 3.0));
    log.write(train(2, 2.9));
  }
  std::ofstream(dir / "metrics.jsonl", std::ios::app)
      << "{\"kind\":\"sample\",\"step\":2,\"text\":\"hi\"}\n{\"kind\":\"train\",\"step\":3,\"lo";
  const auto recs = read_metrics(dir / "metrics.jsonl");
  REQUIRE(recs.size() == 2);
  CHECK(recs[1].step == 2);
}

TEST_CASE("metrics reader reports a corrupt line with file and line number") {
  TempDir dir("metrics-bad");
  const auto p = dir / "metrics.jsonl";
  write_text(p, "{\"kind\":\"train\",\"step\":1,\"loss\":3}\n{\"kind\":\"tr\n"
                "{\"kind\":\"train\",\"step\":2,\"loss\":3}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {p.string() + ":2", "malformed JSON"});

  // A broken last line that does end in a newline was not cut short by a crash.
  write_text(p, "{\"kind\":\"train\",\"step\":1,\"loss\":3}\n{\"kind\":\"tr\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {p.string() + ":2"});

  write_text(p, "{\"kind\":\"train\",\"step\":1,\"loss\":\"low\"}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {p.string() + ":1", "\"loss\""});

  write_text(p, "{\"kind\":\"train\",\"loss\":1}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {":1", "\"step\""});

  write_text(p, "{\"kind\":\"val\",\"step\":1,\"max_range\":[1,2]}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {":1", "\"max_range\" is not an array of arrays"});

  write_text(p, "[1,2]\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {":1", "not a JSON object"});

  expect_error<keel::IoError>([&] { read_metrics(dir / "nope.jsonl"); },
                              {(dir / "nope.jsonl").string(), "not found"});
}

TEST_CASE("truncate_after keeps steps up to the resume step and drops a cut-short line") {
  TempDir dir("metrics-resume");
  TempDir ref("metrics-ref");
  const auto run = [](MetricsLog& log, int64_t from, int64_t to) {
    for (int64_t s = from; s <= to; ++s) {
      log.write(train(s, 3.0 - 0.01 * static_cast<double>(s)));
      if (s % 4 == 0) log.write(event(s, "checkpoint", "saved"));
    }
  };
  {
    MetricsLog log(ref.path());
    run(log, 1, 12);
  }
  {
    MetricsLog log(dir.path());
    run(log, 1, 10);
  }
  // A crash in the middle of step 11's line.
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << "{\"kind\":\"train\",\"step\":11,";
  {
    MetricsLog log(dir.path(), int64_t{8});  // resume from the step-8 checkpoint
    const auto kept = read_metrics(log.path());
    REQUIRE_FALSE(kept.empty());
    CHECK(kept.back().step == 8);
    CHECK(kept.back().event == "checkpoint");
    run(log, 9, 12);
  }
  CHECK(read_text(dir / "metrics.jsonl") == read_text(ref / "metrics.jsonl"));

  truncate_after(dir / "metrics.jsonl", 0);
  CHECK(read_text(dir / "metrics.jsonl").empty());
  truncate_after(dir / "absent.jsonl", 3);  // nothing to do, no error
  CHECK_FALSE(std::filesystem::exists(dir / "absent.jsonl"));
}

TEST_CASE("a fresh MetricsLog replaces an old log and rejects unknown events") {
  TempDir dir("metrics-fresh");
  write_text(dir / "metrics.jsonl", "{\"kind\":\"train\",\"step\":99,\"loss\":1}\n");
  MetricsLog log(dir / "sub");  // creates the run directory
  log.write(train(1, 2.0));
  CHECK(read_metrics(dir / "sub" / "metrics.jsonl").size() == 1);
  MetricsLog again(dir.path());
  CHECK(read_text(dir / "metrics.jsonl").empty());
  expect_error<keel::ValueError>([&] { again.write(event(1, "oops", "")); }, {"oops"});
}

TEST_CASE("metrics reader refuses deep nesting and never dumps a nested value into a message") {
  TempDir dir("metrics-deep");
  const auto p = dir / "metrics.jsonl";
  // Before: a stack overflow when the value was dumped into the error message.
  write_text(p, "{\"kind\":\"train\",\"step\":1,\"loss\":" + std::string(200000, '[') + std::string(200000, ']') +
                    "}\n{\"kind\":\"train\",\"step\":2,\"loss\":3}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {p.string() + ":1", "nested deeper"});
  write_text(p, "{\"kind\":\"train\",\"step\":1,\"loss\":[[[1]]]}\n");
  expect_error<keel::IoError>([&] { read_metrics(p); }, {p.string() + ":1", "an array of 1 elements"});
}
