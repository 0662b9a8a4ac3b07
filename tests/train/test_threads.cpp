// A CPU training run does not depend on the thread count: every kernel cuts its work into
// chunks from the problem's size alone and adds partial results in chunk order
// (core/parallel.h), so 1, 2 and 3 threads log the same bits. The model is sized so that each
// kind of loop (products, layernorm, GELU, cross-entropy, AdamW) runs as several chunks.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/trainer.h"
#include "core/parallel.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;

namespace {

// Each thread count's run of the same configuration -> its train records.
std::vector<MetricsRecord> run_on(int threads) {
  TrainConfig c = testing::tiny_config("threads_" + std::to_string(threads));
  c.model.n_embd = 128;  // 4 heads of 32
  c.seq_len = 64;
  c.batch_size = 8;      // 512 rows: the products, layernorms and the loss split into chunks
  c.max_steps = 3;
  c.val_every = 0;
  c.ckpt_every = 0;
  parallel::ThreadsGuard guard(threads);
  const bool load_aware = parallel::load_aware();
  parallel::set_load_aware(false);  // every thread takes chunks, whatever else the machine runs
  train(c);
  parallel::set_load_aware(load_aware);
  return testing::train_records(c.run_dir);
}

}  // namespace

TEST_CASE("a CPU training run logs the same bits on 1, 2 and 3 threads") {
  const auto one = run_on(1);
  REQUIRE(one.size() == 3);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    const auto many = run_on(threads);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(many[i].loss == one[i].loss);
      CHECK(many[i].grad_norm == one[i].grad_norm);
      CHECK(many[i].log_z_mean == one[i].log_z_mean);
      CHECK(many[i].max_logit == one[i].max_logit);
      CHECK(many[i].max_range == one[i].max_range);
    }
  }
}
