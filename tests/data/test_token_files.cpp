// llm.c and nanoGPT token files: files written here read back exactly, as datasets too;
// export from a keel dataset round-trips; bad headers, odd lengths and ids beyond the
// vocabulary are each refused with a message naming the file and the fault.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "core/io.h"
#include "data/file_io.h"
#include "data/prepare.h"
#include "data/token_files.h"
#include "test_util.h"

using namespace keel::data;
namespace fs = std::filesystem;

namespace {

// A nanoGPT file exactly as numpy's tofile writes it: raw little-endian uint16.
void write_raw_u16(const fs::path& p, const std::vector<uint16_t>& ids) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(2 * ids.size()));
}

std::vector<int32_t> read_all(const ShardReader& r) {
  std::vector<int32_t> out(r.size());
  r.read(0, r.size(), out.data());
  return out;
}

std::vector<int32_t> split_tokens(const fs::path& dir, const std::string& split) {
  auto s = TokenSplit::open(dir, split);
  std::vector<int32_t> t(s->size());
  s->read(0, t.size(), t.data());
  return t;
}

template <class F>
void expect_io_error(F&& f, const std::string& name, const std::string& what) {
  try {
    f();
    FAIL("no error for " << what);
  } catch (const keel::IoError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(name) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
  }
}

void patch_i32(const fs::path& p, size_t offset, int32_t v) {
  std::string data = keel::io::read_file(p, "test");
  std::memcpy(data.data() + offset, &v, 4);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(data.data(), std::streamsize(data.size()));
}

}  // namespace

TEST_CASE("llm.c: the header is 256 int32 (magic 20240520, version 1, count) then uint16 ids") {
  keel::test::TempDir dir("llmc");
  const std::vector<uint32_t> tokens = {50256, 0, 1, 65535 % 50257, 42, 50000};
  write_llmc_file(dir / "a.bin", tokens);
  const std::string bytes = keel::io::read_file(dir / "a.bin", "test");
  REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == int32_t(tokens.size()));
  for (int i = 3; i < 256; ++i) CHECK(header[i] == 0);
  uint16_t first;
  std::memcpy(&first, bytes.data() + 1024, 2);
  CHECK(first == 50256);

  const ShardReader r = open_llmc_file(dir / "a.bin");
  CHECK(read_all(r) == std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST_CASE("llm.c: malformed files are refused, one clear error each") {
  keel::test::TempDir dir("llmc-bad");
  const fs::path p = dir / "x_train_000000.bin";
  const std::vector<uint32_t> tokens = {1, 2, 3, 4};
  auto fresh = [&] { write_llmc_file(p, tokens); };

  fresh();
  patch_i32(p, 0, 12345);
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "magic 12345 is not llm.c's 20240520");
  fresh();
  patch_i32(p, 0, 20240801);
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "Llama 3");
  fresh();
  patch_i32(p, 4, 2);
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "version 2 is not supported");
  fresh();
  patch_i32(p, 8, 5);  // says 5 tokens, holds 4
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "size disagrees with the header");
  fresh();
  patch_i32(p, 8, -1);
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "token count -1");
  fresh();
  std::ofstream(p, std::ios::binary | std::ios::app).put('\0');  // an odd byte at the end
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "size disagrees with the header");
  fresh();
  fs::resize_file(p, 100);
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "truncated: 100 bytes");
  std::ofstream(p, std::ios::binary | std::ios::trunc) << "abc";
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "shorter than the header");
  write_llmc_file(p, std::vector<uint32_t>{1, 60000, 3});  // fits uint16, not GPT-2's vocabulary
  expect_io_error([&] { open_llmc_file(p); }, p.string(), "token 60000 at position 1");
  CHECK_THROWS_AS(write_llmc_file(p, std::vector<uint32_t>{70000}), keel::ValueError);
}

TEST_CASE("nanoGPT: raw uint16 train.bin/val.bin read back exactly, odd lengths and big ids refused") {
  keel::test::TempDir dir("nanogpt");
  std::vector<uint16_t> train(1000), val(100);
  for (size_t i = 0; i < train.size(); ++i) train[i] = uint16_t((i * 7919) % 50257);
  for (size_t i = 0; i < val.size(); ++i) val[i] = uint16_t(50256 - i);
  write_raw_u16(dir / "train.bin", train);
  write_raw_u16(dir / "val.bin", val);

  CHECK(detect_dataset_format(dir.path()) == DatasetFormat::nanogpt);
  const DatasetMeta meta = read_dataset_meta(dir.path());
  CHECK(meta.vocab_size == 50257);
  CHECK(meta.eot_id == 50256);
  CHECK(meta.train.tokens == 1000);
  CHECK(split_tokens(dir.path(), "train") == std::vector<int32_t>(train.begin(), train.end()));
  CHECK(split_tokens(dir.path(), "val") == std::vector<int32_t>(val.begin(), val.end()));

  std::ofstream(dir / "val.bin", std::ios::binary | std::ios::app).put('\x01');
  expect_io_error([&] { TokenSplit::open(dir.path(), "val"); }, "val.bin", "odd length");
  write_raw_u16(dir / "val.bin", {1, 2, 50257});
  expect_io_error([&] { TokenSplit::open(dir.path(), "val"); }, "val.bin",
                  "token 50257 at position 2 is not below the vocab size 50257");
}

TEST_CASE("llm.c: a directory of shards opens as a dataset, in name order") {
  keel::test::TempDir dir("llmc-dir");
  write_llmc_file(dir / "corpus_val_000000.bin", std::vector<uint32_t>{9, 8});
  write_llmc_file(dir / "corpus_train_000002.bin", std::vector<uint32_t>{5, 6});
  write_llmc_file(dir / "corpus_train_000001.bin", std::vector<uint32_t>{1, 2, 3});
  CHECK(detect_dataset_format(dir.path()) == DatasetFormat::llmc);
  CHECK(split_tokens(dir.path(), "train") == std::vector<int32_t>{1, 2, 3, 5, 6});
  CHECK(split_tokens(dir.path(), "val") == std::vector<int32_t>{9, 8});
  CHECK(TokenSplit::open(dir.path(), "train", 50257)->vocab_size() == 50257);

  fs::remove(dir / "corpus_val_000000.bin");
  expect_io_error([&] { read_dataset_meta(dir.path()); }, dir.path().string(), "no llm.c val files");
  keel::test::TempDir empty("llmc-empty");
  expect_io_error([&] { read_dataset_meta(empty.path()); }, empty.path().string(), "not a dataset");
}

TEST_CASE("convert: a keel dataset exported to llm.c reads back token for token") {
  keel::test::TempDir dir("llmc-export");
  std::ofstream(dir / "a.txt", std::ios::binary) << keel::test::austen_slice(0, 60000);
  PrepareOptions o;
  o.inputs = {dir / "a.txt"};
  o.out = dir / "ds";
  o.progress = false;
  o.shard_tokens = 4000;  // several shards per split
  o.documents = {.min_chars = 2000, .max_chars = 20000};
  prepare_dataset(o);
  const auto files = export_llmc(dir / "ds", dir / "llmc", "austen");
  CHECK(files.size() >= 3);
  CHECK(fs::exists(dir / "llmc/austen_train_000000.bin"));
  CHECK(split_tokens(dir / "llmc", "train") == split_tokens(dir / "ds", "train"));
  CHECK(split_tokens(dir / "llmc", "val") == split_tokens(dir / "ds", "val"));
  CHECK_THROWS_AS(export_llmc(dir / "ds", dir / "llmc2", "a/b"), keel::ValueError);
}
