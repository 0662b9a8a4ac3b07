// docs/data.md, "Loaders": open a prepared dataset's train split and take one batch.
#include <doctest/doctest.h>

#include <unistd.h>

#include "data/loader.h"
#include "data/prepare.h"
#include "data/test_util.h"

TEST_CASE("docs/data.md: the loader example") {
  keel::test::TempDir dir("doc-data");
  {
    keel::data::PrepareOptions o = keel::test::quiet_prepare({dir / "text.txt"}, dir / "runs/data/austen");
    keel::io::write_file_atomic(dir / "text.txt", keel::test::austen_slice(0, 80000), "test");
    o.vocab_dir = keel::test::gpt2_vocab_dir();
    o.threads = 1;
    keel::data::prepare_dataset(o);
  }
  // The example names a path relative to the working directory, as a user's program would.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const uint32_t model_vocab_size = 50257;
  const int rank = 0, world = 1;
  // snippet-begin
  auto train = keel::data::TokenSplit::open("runs/data/austen", "train", model_vocab_size);
  keel::data::TrainLoader loader(train, {.batch_size = 8, .seq_len = 1024, .seed = 1337,
                                         .rank = rank, .world_size = world});
  keel::data::Batch b = loader.next();  // b.inputs, b.targets: B*T int32, row-major
  // snippet-end
  std::filesystem::current_path(cwd);
  CHECK(b.inputs.size() == 8 * 1024);
  CHECK(b.targets.size() == 8 * 1024);
}
