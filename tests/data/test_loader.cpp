// Loaders: determinism from (seed, step), rank disjointness, resume, validation coverage.
#include <doctest/doctest.h>

#include <numeric>
#include <set>

#include "core/error.h"
#include "data/loader.h"

using namespace keel::data;

namespace {

// A split whose token at position i is i (mod vocab): windows reveal where they came from.
std::shared_ptr<const TokenSplit> counting_split(int32_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return TokenSplit::from_tokens(std::move(t), n);
}

LoaderOptions opts(int64_t B, int64_t T, uint64_t seed, int64_t rank = 0, int64_t world = 1) {
  return {.batch_size = B, .seq_len = T, .seed = seed, .rank = rank, .world_size = world};
}

}  // namespace

TEST_CASE("loader: batches are windows of the split, targets shifted by one") {
  TrainLoader l(counting_split(10000), opts(4, 16, 1));
  const Batch b = l.next();
  CHECK(b.inputs.size() == 64);
  CHECK(b.valid_targets == 64);
  for (int r = 0; r < 4; ++r) {
    const int32_t start = b.inputs[r * 16];
    CHECK(static_cast<uint64_t>(start) == l.window_start(0, r));
    for (int t = 0; t < 16; ++t) {
      CHECK(b.inputs[r * 16 + t] == start + t);
      CHECK(b.targets[r * 16 + t] == start + t + 1);
    }
  }
}

TEST_CASE("loader: deterministic in (seed, step), and next() equals batch_at(step)") {
  auto split = counting_split(20000);
  TrainLoader a(split, opts(4, 32, 7)), b(split, opts(4, 32, 7)), c(split, opts(4, 32, 8));
  for (uint64_t s = 0; s < 5; ++s) CHECK(a.next().inputs == b.batch_at(s).inputs);
  CHECK(a.batch_at(123).inputs == b.batch_at(123).inputs);  // any step, no replay
  CHECK(a.batch_at(0).inputs != c.batch_at(0).inputs);      // the seed matters
  CHECK(a.batch_at(0).inputs != a.batch_at(1).inputs);
}

TEST_CASE("loader: an epoch visits every window once, and ranks never share one") {
  auto split = counting_split(5000);
  const int64_t T = 8, B = 3, R = 4;
  std::vector<TrainLoader> ranks;
  for (int64_t r = 0; r < R; ++r) ranks.emplace_back(split, opts(B, T, 42, r, R));
  const uint64_t W = ranks[0].windows_per_epoch();
  CHECK(W == (5000 - T) / (T + 1));
  const uint64_t steps = W / (B * R);
  std::set<uint64_t> starts;
  for (uint64_t s = 0; s < steps; ++s)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t b = 0; b < B; ++b) starts.insert(ranks[r].window_start(s, b));
  CHECK(starts.size() == steps * B * R);  // all distinct
  // Disjoint as token ranges too: consecutive starts are at least T+1 apart.
  for (auto it = starts.begin(); std::next(it) != starts.end(); ++it)
    CHECK(*std::next(it) - *it >= static_cast<uint64_t>(T + 1));
  CHECK(*starts.rbegin() + T + 1 <= 5000);
}

TEST_CASE("loader: R ranks of batch B see the windows of one rank with batch R*B") {
  auto split = counting_split(8000);
  TrainLoader one(split, opts(8, 16, 3));
  TrainLoader r0(split, opts(4, 16, 3, 0, 2)), r1(split, opts(4, 16, 3, 1, 2));
  for (uint64_t s = 0; s < 3; ++s) {
    auto all = one.batch_at(s).inputs;
    auto a = r0.batch_at(s).inputs, b = r1.batch_at(s).inputs;
    a.insert(a.end(), b.begin(), b.end());
    CHECK(a == all);
  }
}

TEST_CASE("loader: save and restore the position, and refuse mismatched settings") {
  auto split = counting_split(20000);
  TrainLoader a(split, opts(2, 32, 5));
  for (int i = 0; i < 7; ++i) a.next();
  const std::string saved = a.state().to_json();
  TrainLoader b(split, opts(2, 32, 5));
  b.restore(LoaderState::from_json(saved));
  CHECK(b.step() == 7);
  for (int i = 0; i < 3; ++i) CHECK(a.next().inputs == b.next().inputs);

  TrainLoader other_seed(split, opts(2, 32, 6)), other_batch(split, opts(4, 32, 5));
  CHECK_THROWS_AS(other_seed.restore(LoaderState::from_json(saved)), keel::ConfigError);
  CHECK_THROWS_AS(other_batch.restore(LoaderState::from_json(saved)), keel::ConfigError);
  TrainLoader other_data(counting_split(20001), opts(2, 32, 5));
  CHECK_THROWS_AS(other_data.restore(LoaderState::from_json(saved)), keel::ConfigError);
  CHECK_THROWS_AS(LoaderState::from_json("{\"seed\": 1}"), keel::IoError);
  CHECK_THROWS_AS(LoaderState::from_json("not json"), keel::IoError);
}

TEST_CASE("loader: later epochs reshuffle") {
  auto split = counting_split(1000);
  TrainLoader l(split, opts(1, 9, 11));
  const uint64_t W = l.windows_per_epoch();
  std::vector<uint64_t> e0, e1;
  for (uint64_t s = 0; s < W; ++s) e0.push_back(l.window_start(s, 0));
  for (uint64_t s = W; s < 2 * W; ++s) e1.push_back(l.window_start(s, 0));
  CHECK(e0 != e1);
  CHECK(std::set<uint64_t>(e1.begin(), e1.end()).size() == W);
}

TEST_CASE("loader: too little data for one global batch is a ConfigError") {
  CHECK_THROWS_AS(TrainLoader(counting_split(100), opts(8, 16, 0)), keel::ConfigError);
  CHECK_THROWS_AS(TrainLoader(counting_split(100), opts(0, 16, 0)), keel::ValueError);
  CHECK_THROWS_AS(TrainLoader(counting_split(100), opts(1, 4, 0, 2, 2)), keel::ValueError);
}

TEST_CASE("loader: evaluation covers every target exactly once, over all ranks") {
  for (int32_t n : {2, 17, 100, 1001}) {
    for (int64_t R : {1, 3}) {
      auto split = counting_split(n);
      std::vector<int> seen(n, 0);
      uint64_t batches = 0;
      for (int64_t r = 0; r < R; ++r) {
        EvalLoader e(split, opts(2, 8, 0, r, R));
        if (r == 0) batches = e.num_batches();
        CHECK(e.num_batches() == batches);  // every rank runs the same number of steps
        Batch b;
        while (e.next(b)) {
          int64_t valid = 0;
          for (size_t i = 0; i < b.targets.size(); ++i) {
            if (b.targets[i] == kIgnoreTarget) continue;
            REQUIRE(b.targets[i] >= 0);
            ++seen[b.targets[i]];
            ++valid;
            CHECK(b.inputs[i] == b.targets[i] - 1);
          }
          CHECK(valid == b.valid_targets);
        }
        e.reset();
        CHECK(e.next(b));
      }
      CHECK(seen[0] == 0);
      for (int32_t i = 1; i < n; ++i) CHECK_MESSAGE(seen[i] == 1, "n=" << n << " R=" << R << " i=" << i);
    }
  }
}

TEST_CASE("loader: padded evaluation positions have target -100 (Hugging Face's ignore index) and input 0") {
  static_assert(kIgnoreTarget == -100);
  // 12 tokens at T = 8: window 0 has 8 targets, window 1 only 3 (tokens 9..11), then padding.
  EvalLoader e(counting_split(12), opts(2, 8, 0));
  Batch b;
  REQUIRE(e.next(b));
  CHECK(b.valid_targets == 11);
  for (int64_t t = 0; t < 8; ++t) CHECK(b.targets[t] == t + 1);
  for (int64_t t = 0; t < 3; ++t) CHECK(b.targets[8 + t] == 9 + t);
  for (int64_t t = 3; t < 8; ++t) {
    CHECK(b.targets[8 + t] == -100);
    CHECK(b.inputs[8 + t] == 0);
  }
  CHECK_FALSE(e.next(b));
}
