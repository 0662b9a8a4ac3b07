// Bad input at the library level: each case throws the typed error, names the file and the
// problem, and leaves an existing prepared dataset untouched.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/file_io.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/prepare.h"
#include "data/tokenizer/vocab.h"
#include "test_util.h"

using namespace keel::data;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// Runs f, expects exception E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, std::vector<std::string> parts) {
  try {
    f();
    FAIL("expected an error mentioning " << parts.front());
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, msg);
  }
}

// A copy of GPT-2's vocabulary directory to damage.
fs::path vocab_copy(const keel::test::TempDir& dir) {
  fs::create_directories(dir / "vocab");
  for (const char* f : {"encoder.json", "vocab.bpe"})
    fs::copy_file(keel::test::gpt2_vocab_dir() / f, dir / "vocab" / f);
  return dir / "vocab";
}

PrepareOptions quiet(std::vector<fs::path> inputs, fs::path out) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out = std::move(out);
  o.progress = false;
  o.documents = {.min_chars = 1000, .max_chars = 20000};
  return o;
}

// A good dataset in dir/out, and its meta.json to compare against after a failed run.
std::string good_dataset(const keel::test::TempDir& dir) {
  write_text(dir / "good.txt", keel::test::austen_slice(0, 40000));
  prepare_dataset(quiet({dir / "good.txt"}, dir / "out"));
  return keel::io::read_file(dir / "out/meta.json", "test");
}

}  // namespace

TEST_CASE("bad input: vocabulary directory missing, or missing a file") {
  keel::test::TempDir dir("bad");
  expect_error<keel::IoError>([&] { load_vocab(dir / "nope"); }, {"nope", "not found"});
  const auto v = vocab_copy(dir);
  fs::remove(v / "vocab.bpe");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {(v / "vocab.bpe").string(), "not found"});
  fs::remove(v / "encoder.json");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {"encoder.json", "not found"});
}

TEST_CASE("bad input: malformed encoder.json") {
  keel::test::TempDir dir("bad");
  const auto v = vocab_copy(dir);
  const auto enc = v / "encoder.json";
  const std::string good = keel::io::read_file(enc, "test");
  write_text(enc, good.substr(0, good.size() / 2));  // truncated
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "malformed JSON"});
  write_text(enc, "[1, 2, 3]");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "JSON object"});
  write_text(enc, "{\"a\": 0, \"b\": 5}");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "ids must be"});
  write_text(enc, "{\"a\": \"x\"}");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "non-integer"});
  write_text(enc, "{\"a b\": 0}");  // a raw space is not in GPT-2's alphabet
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "alphabet"});
  write_text(enc, "{\"a\": 0}");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {enc.string(), "has no token"});
}

TEST_CASE("bad input: malformed vocab.bpe") {
  keel::test::TempDir dir("bad");
  const auto v = vocab_copy(dir);
  const auto bpe = v / "vocab.bpe";
  write_text(bpe, "#version: 0.2\nĠ t\nthisline\n");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {bpe.string() + ":3", "left right"});
  write_text(bpe, "#version: 0.2\nĠ t\nzzzq xxxq\n");
  expect_error<keel::IoError>([&] { load_vocab(v); }, {bpe.string() + ":3", "missing from"});
}

TEST_CASE("bad input: prepare with missing, empty or corrupt inputs leaves the output alone") {
  keel::test::TempDir dir("bad");
  const std::string meta = good_dataset(dir);
  auto run = [&](std::vector<fs::path> in) { prepare_dataset(quiet(std::move(in), dir / "out")); };

  expect_error<keel::IoError>([&] { run({dir / "good.txt", dir / "missing.txt"}); },
                              {"missing.txt", "not found"});
  write_text(dir / "empty.txt", "");
  expect_error<keel::IoError>([&] { run({dir / "empty.txt"}); }, {"empty.txt", "is empty"});
  write_text(dir / "blank.txt", "\n\n  \n");
  expect_error<keel::IoError>([&] { run({dir / "blank.txt"}); }, {"blank.txt", "only whitespace"});
  write_text(dir / "bad.txt.xz", "this is not xz data");
  expect_error<keel::IoError>([&] { run({dir / "bad.txt.xz"}); }, {"bad.txt.xz", "corrupt"});
  write_text(dir / "bad.txt.gz", std::string("\x1f\x8b\x08\x00garbage", 12));
  expect_error<keel::IoError>([&] { run({dir / "bad.txt.gz"}); }, {"bad.txt.gz", "corrupt"});
  fs::create_directories(dir / "no_text");
  expect_error<keel::IoError>([&] { run({dir / "no_text"}); }, {"no_text", "no corpus files"});
  expect_error<keel::IoError>([&] { run({dir / "nothing*.txt"}); }, {"nothing*.txt", "no file matches"});

  CHECK(keel::io::read_file(dir / "out/meta.json", "test") == meta);
  for (const auto& e : fs::directory_iterator(dir.path()))
    CHECK((e.path().filename().string().find(".tmp-") == std::string::npos &&
           e.path().filename().string().find(".partial") == std::string::npos));
}

TEST_CASE("bad input: prepare with bad options or vocabulary leaves the output alone") {
  keel::test::TempDir dir("bad");
  const std::string meta = good_dataset(dir);
  auto o = quiet({dir / "good.txt"}, dir / "out");

  auto bad_vocab = o;
  bad_vocab.vocab_dir = vocab_copy(dir);
  write_text(bad_vocab.vocab_dir / "encoder.json", "{oops");
  expect_error<keel::IoError>([&] { prepare_dataset(bad_vocab); }, {"encoder.json", "malformed"});
  auto both = o;
  both.vocab_dir = dir / "vocab";
  both.train_vocab = 1000;
  expect_error<keel::ConfigError>([&] { prepare_dataset(both); }, {"--train-vocab"});
  auto small = o;
  small.train_vocab = 100;
  expect_error<keel::ValueError>([&] { prepare_dataset(small); }, {"too small"});
  auto huge = o;
  huge.memory_mb = uint64_t{1} << 50;  // overflowed 64 bits when turned into bytes
  expect_error<keel::ValueError>([&] { prepare_dataset(huge); }, {"--memory-mb"});
  auto frac = o;
  frac.val_fraction = 1.0;
  expect_error<keel::ValueError>([&] { prepare_dataset(frac); }, {"outside [0, 1)"});
  write_text(dir / "tiny.txt", "one short document");
  auto tiny = quiet({dir / "tiny.txt"}, dir / "out");
  expect_error<keel::ConfigError>([&] { prepare_dataset(tiny); }, {"1 document", "--val-fraction"});

  CHECK(keel::io::read_file(dir / "out/meta.json", "test") == meta);
  tiny.val_fraction = 0;  // no validation split: fine
  CHECK(prepare_dataset(tiny).val_documents == 0);
}

TEST_CASE("bad input: prepare refuses to replace a directory that is not a dataset") {
  keel::test::TempDir dir("bad");
  write_text(dir / "good.txt", keel::test::austen_slice(0, 10000));
  fs::create_directories(dir / "home");
  write_text(dir / "home/precious.txt", "keep me");
  expect_error<keel::ConfigError>([&] { prepare_dataset(quiet({dir / "good.txt"}, dir / "home")); },
                                  {"home", "refusing to overwrite"});
  CHECK(keel::io::read_file(dir / "home/precious.txt", "test") == "keep me");
  expect_error<keel::ConfigError>(
      [&] { prepare_dataset(quiet({dir / "good.txt"}, dir / "home/precious.txt")); },
      {"not a directory"});
}

TEST_CASE("bad input: damaged dataset directories") {
  keel::test::TempDir dir("bad");
  good_dataset(dir);
  const auto out = dir / "out";
  expect_error<keel::IoError>([&] { TokenSplit::open(dir / "nothing", "train"); }, {"not found"});
  expect_error<keel::ValueError>([&] { TokenSplit::open(out, "test"); }, {"unknown split"});
  expect_error<keel::ConfigError>([&] { TokenSplit::open(out, "train", 10000); },
                                  {"50257", "10000"});

  const std::string meta = keel::io::read_file(out / "meta.json", "test");
  write_text(out / "meta.json", "{\"format\": \"keel-token-shards\"");
  expect_error<keel::IoError>([&] { TokenSplit::open(out, "train"); }, {"meta.json", "malformed"});
  write_text(out / "meta.json", "{\"format\": \"other\", \"version\": 1}");
  expect_error<keel::IoError>([&] { TokenSplit::open(out, "train"); }, {"not a keel dataset"});
  write_text(out / "meta.json", meta);

  fs::resize_file(out / "train_000000.bin", fs::file_size(out / "train_000000.bin") - 2);
  expect_error<keel::IoError>([&] { TokenSplit::open(out, "train"); },
                              {"train_000000.bin", "size disagrees"});
  fs::remove(out / "train_000000.bin");
  expect_error<keel::IoError>([&] { TokenSplit::open(out, "train"); },
                              {"train_000000.bin", "cannot open"});
  fs::remove(out / "meta.json");
  expect_error<keel::IoError>([&] { TokenSplit::open(out, "val"); }, {"meta.json", "not found"});
}

TEST_CASE("bad input: a .gz file with a damaged magic byte is refused, not read as text") {
  keel::test::TempDir dir("gzmagic");
  // zlib's transparent mode would pass these bytes through as if they were plain text.
  write_text(dir / "a.txt.gz", std::string("\x1f\x8c\x08\x00 some words of text here", 28));
  expect_error<keel::IoError>([&] { read_text_file(dir / "a.txt.gz"); }, {"a.txt.gz", "not gzip data"});
  write_text(dir / "b.txt.gz", "plain text with a .gz name");
  expect_error<keel::IoError>([&] { read_text_file(dir / "b.txt.gz"); }, {"b.txt.gz", "not gzip data"});
}

TEST_CASE("bad input: FIFOs where files are expected fail at once instead of blocking") {
  keel::test::TempDir dir("fifo");
  REQUIRE(::mkfifo((dir / "corpus.txt").c_str(), 0600) == 0);
  expect_error<keel::IoError>([&] { read_text_file(dir / "corpus.txt"); }, {"corpus.txt", "FIFO"});
  fs::create_directories(dir / "ds");
  REQUIRE(::mkfifo((dir / "ds/meta.json").c_str(), 0600) == 0);
  expect_error<keel::IoError>([&] { read_dataset_meta(dir / "ds"); }, {"meta.json", "FIFO"});
  REQUIRE(::mkfifo((dir / "shard.bin").c_str(), 0600) == 0);
  expect_error<keel::IoError>([&] { ShardReader r(dir / "shard.bin"); }, {"shard.bin", "not a regular file"});
  fs::create_directories(dir / "vocab");
  REQUIRE(::mkfifo((dir / "vocab/encoder.json").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((dir / "vocab/vocab.bpe").c_str(), 0600) == 0);
  expect_error<keel::IoError>([&] { load_vocab(dir / "vocab"); }, {"encoder.json", "FIFO"});
}

namespace {
// prepare_dataset(o) must fail within seconds with an IoError naming every one of `parts`. A run
// blocked opening `fifo` is freed (a writer opens and closes it, so it reads an empty file) and
// the case fails, rather than the test binary hanging.
void expect_prepare_error_soon(const PrepareOptions& o, const fs::path& fifo, std::vector<std::string> parts) {
  auto run = std::async(std::launch::async, [&] { prepare_dataset(o); });
  if (run.wait_for(std::chrono::seconds(20)) == std::future_status::timeout) {
    FAIL_CHECK("prepare blocked on the FIFO " << fifo);
    while (run.wait_for(std::chrono::milliseconds(10)) == std::future_status::timeout) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  expect_error<keel::IoError>([&] { run.get(); }, std::move(parts));
}
}  // namespace

TEST_CASE("bad input: prepare refuses a FIFO input at once, named, in a folder or matched by a glob") {
  keel::test::TempDir dir("fifo_input");
  REQUIRE(::mkfifo((dir / "pipe.txt").c_str(), 0600) == 0);
  expect_prepare_error_soon(quiet({dir / "pipe.txt"}, dir / "out"), dir / "pipe.txt",
                            {(dir / "pipe.txt").string(), "is a FIFO"});
  // Beside a good file, a FIFO was skipped without a word: its text silently left out.
  fs::create_directories(dir / "corpus");
  write_text(dir / "corpus/good.txt", keel::test::austen_slice(0, 10000));
  REQUIRE(::mkfifo((dir / "corpus/more.txt").c_str(), 0600) == 0);
  expect_prepare_error_soon(quiet({dir / "corpus"}, dir / "out"), dir / "corpus/more.txt",
                            {(dir / "corpus/more.txt").string(), "is a FIFO"});
  expect_prepare_error_soon(quiet({dir / "corpus/*.txt"}, dir / "out"), dir / "corpus/more.txt",
                            {(dir / "corpus/more.txt").string(), "is a FIFO"});
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("bad input: meta.json numbers that would wrap or overflow a cast") {
  keel::test::TempDir dir("meta_ranges");
  const std::string meta = good_dataset(dir);
  const fs::path out = dir / "out";
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(meta);
    j[key] = v;
    write_text(out / "meta.json", j.dump());
  };
  with("vocab_size", 4294967616ull);  // 2^32 + 320: read as 320 before
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "vocab_size"});
  with("vocab_size", 1e30);  // a float-to-integer overflow before
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "vocab_size"});
  with("version", 1e30);
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "version"});
  with("eot_id", -7);
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "eot_id"});
  write_text(out / "meta.json", std::string(100000, '[') + std::string(100000, ']'));
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "nested deeper"});
  write_text(out / "meta.json", "{\"format\": 1");
  expect_error<keel::IoError>([&] { read_dataset_meta(out); }, {"meta.json", "malformed JSON"});
}

TEST_CASE("bad input: deeply nested encoder.json and a loader state with wrapped numbers") {
  keel::test::TempDir dir("deep_vocab");
  const fs::path v = vocab_copy(dir);
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  write_text(v / "encoder.json", deep + "1" + std::string(100000, '}'));
  expect_error<keel::IoError>([&] { load_vocab(v); }, {"encoder.json", "nested deeper"});
  expect_error<keel::IoError>([] { LoaderState::from_json(R"({"seed":1,"step":1e30,"batch_size":1,"seq_len":1,
      "world_size":1,"split_tokens":1})"); }, {"step"});
  expect_error<keel::IoError>([] { LoaderState::from_json(R"({"seed":-1,"step":1,"batch_size":1,"seq_len":1,
      "world_size":1,"split_tokens":1})"); }, {"seed"});
}
