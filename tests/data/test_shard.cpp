// Token shards: round trips in u16 and u32, and every kind of corruption is caught.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/file_io.h"
#include "data/shard.h"
#include "test_util.h"

using namespace keel::data;

namespace {

std::vector<int32_t> read_all(const ShardReader& r) {
  std::vector<int32_t> out(r.size());
  r.read(0, r.size(), out.data());
  return out;
}

void patch(const std::filesystem::path& p, size_t offset, const void* bytes, size_t n) {
  std::string data = keel::io::read_file(p, "test");
  std::memcpy(data.data() + offset, bytes, n);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(data.data(), data.size());
}

// Checks that opening p throws IoError whose message names the file and contains `what`.
void expect_corrupt(const std::filesystem::path& p, const std::string& what) {
  try {
    ShardReader r(p);
    FAIL("no error for " << what);
  } catch (const keel::IoError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(p.string()) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
  }
}

}  // namespace

TEST_CASE("shard: u16 and u32 round trips, header fields") {
  keel::test::TempDir dir("shard");
  const std::vector<uint32_t> small = {0, 1, 50256, 65535, 7};
  write_shard(dir / "a.bin", small, 65536);
  ShardReader a(dir / "a.bin");
  CHECK(a.header().token_bytes == 2);
  CHECK(a.header().vocab_size == 65536);
  CHECK(std::filesystem::file_size(dir / "a.bin") == kShardHeaderBytes + 2 * small.size());
  CHECK(read_all(a) == std::vector<int32_t>{0, 1, 50256, 65535, 7});

  const std::vector<uint32_t> big = {70000, 3, 99999};
  write_shard(dir / "b.bin", big, 100000);
  ShardReader b(dir / "b.bin");
  CHECK(b.header().token_bytes == 4);
  CHECK(read_all(b) == std::vector<int32_t>{70000, 3, 99999});
  std::vector<int32_t> mid(1);
  b.read(1, 1, mid.data());
  CHECK(mid[0] == 3);

  write_shard(dir / "empty.bin", {}, 50257);
  CHECK(ShardReader(dir / "empty.bin").size() == 0);
}

TEST_CASE("shard: writing an id outside the vocabulary is refused") {
  keel::test::TempDir dir("shard");
  const std::vector<uint32_t> bad = {1, 50257};
  CHECK_THROWS_AS(write_shard(dir / "x.bin", bad, 50257), keel::ValueError);
  CHECK_FALSE(std::filesystem::exists(dir / "x.bin"));
}

TEST_CASE("shard: corrupt and truncated files give a clear IoError") {
  keel::test::TempDir dir("shard");
  const std::vector<uint32_t> tokens = {10, 20, 30, 40};
  auto fresh = [&](const std::string& name) {
    write_shard(dir / name, tokens, 50257);
    return dir / name;
  };
  expect_corrupt(dir / "missing.bin", "cannot open");
  {
    auto p = fresh("magic.bin");
    patch(p, 0, "NOTKEEL!", 8);
    expect_corrupt(p, "wrong magic");
  }
  {
    auto p = fresh("version.bin");
    const uint32_t v = 99;
    patch(p, 8, &v, 4);
    expect_corrupt(p, "format version 99");
  }
  {
    auto p = fresh("trunc.bin");
    std::filesystem::resize_file(p, std::filesystem::file_size(p) - 1);
    expect_corrupt(p, "size disagrees with the header");
  }
  {
    auto p = fresh("padded.bin");
    std::ofstream(p, std::ios::binary | std::ios::app).write("xx", 2);
    expect_corrupt(p, "size disagrees with the header");
  }
  {
    auto p = fresh("short.bin");
    std::filesystem::resize_file(p, 10);
    expect_corrupt(p, "truncated");
  }
  {
    auto p = fresh("count.bin");
    const uint64_t n = 1ull << 62;
    patch(p, 24, &n, 8);
    expect_corrupt(p, "size disagrees with the header");
  }
  {
    auto p = fresh("id.bin");
    const uint16_t id = 60000;  // >= vocab size 50257
    patch(p, kShardHeaderBytes + 2, &id, 2);
    expect_corrupt(p, "not below the vocab size");
  }
  {
    auto p = fresh("width.bin");
    const uint32_t tb = 4;  // disagrees with vocab size 50257 (u16)
    patch(p, 20, &tb, 4);
    expect_corrupt(p, "bytes per token");
  }
  expect_corrupt(dir.path(), "not a regular file");
}
