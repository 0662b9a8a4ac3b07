// core/io: regular files only, size limits, bounded JSON, range-checked integers, atomic writes.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "core/io.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace keel;

namespace {
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no error");
  return {};
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string nested(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }
}  // namespace

TEST_CASE("io::read_file: regular files only, never blocking on a FIFO") {
  test::TempDir dir("io");
  std::ofstream(dir / "a.txt") << "hello";
  CHECK(io::read_file(dir / "a.txt", "test") == "hello");
  CHECK(has(error_of<IoError>([&] { io::read_file(dir / "missing", "test"); }), "file not found"));
  CHECK(has(error_of<IoError>([&] { io::read_file(dir.path(), "test"); }), "is a directory"));
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  // Before the fix this blocked forever in open().
  const std::string msg = error_of<IoError>([&] { io::read_file(dir / "fifo", "--config"); });
  CHECK(has(msg, "fifo"));
  CHECK(has(msg, "a FIFO"));
  CHECK(has(error_of<IoError>([&] { io::read_file(dir / "a.txt", "test", 3); }), "more than the limit"));
}

TEST_CASE("io::read_fd: a stream is read to its end, but never past the limit") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string chunk(1000, 'z');
  REQUIRE(::write(fds[1], chunk.data(), chunk.size()) == 1000);
  ::close(fds[1]);
  CHECK(io::read_fd(fds[0], "stdin", "test", 1000, "") == chunk);  // exactly the limit
  ::close(fds[0]);
  REQUIRE(::pipe(fds) == 0);
  REQUIRE(::write(fds[1], chunk.data(), chunk.size()) == 1000);
  // The writer stays open: the reader must stop at the limit, not wait for the end.
  const std::string msg = error_of<IoError>([&] { io::read_fd(fds[0], "stdin", "test", 999, "use prepare"); });
  CHECK(has(msg, "stdin: more than 999 bytes"));
  CHECK(has(msg, "use prepare"));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("io::parse_json: deep nesting is an error naming the source, not a stack overflow") {
  CHECK(io::parse_json(nested(10), "x.json", "test").is_array());
  const std::string msg = error_of<IoError>([] { io::parse_json(nested(200000), "config.json", "test"); });
  CHECK(has(msg, "config.json"));
  CHECK(has(msg, "nested deeper than"));
  // An object nest too, and ordered_json (used for model configs).
  std::string obj;
  for (int i = 0; i < 1000; ++i) obj += "{\"a\":";
  obj += "1" + std::string(1000, '}');
  CHECK_THROWS_AS(io::parse_json<nlohmann::ordered_json>(obj, "c", "test"), IoError);
}

TEST_CASE("io::parse_json: malformed JSON names the source and quotes no raw library message") {
  const std::string msg = error_of<IoError>([] { io::parse_json("{\"a\": [1, 2", "meta.json", "test"); });
  CHECK(has(msg, "meta.json: malformed JSON near byte"));
  CHECK(!has(msg, "[json.exception"));
  // nlohmann reports this as out_of_range, not parse_error: it must not escape either.
  CHECK(has(error_of<IoError>([] { io::parse_json("[1e999]", "m.json", "test"); }), "m.json: malformed JSON"));
}

TEST_CASE("io::quote_json never dumps a container and cuts long scalars") {
  CHECK(io::quote_json(nlohmann::json::parse("[1,[2,[3]]]")) == "an array of 2 elements");
  CHECK(io::quote_json(nlohmann::json::parse("{\"a\":1}")) == "an object of 1 keys");
  CHECK(io::quote_json(nlohmann::json(std::string(1000, 'x'))).size() < 50);
  CHECK(io::quote(std::string("a\nb\"")) == "\"a\\x0ab\\x22\"");
}

TEST_CASE("io::get_int: no wrap, no float-to-integer cast") {
  using nlohmann::json;
  CHECK(io::get_int(json(5), 0, 10, "v") == 5);
  CHECK(io::get_int(json(-1), -1, 10, "v") == -1);
  // 2^32 + 320 must not come back as 320; 2^64 - 1 must not come back as -1.
  CHECK(has(error_of<ConfigError>([] { io::get_int(json(4294967616ull), 0, UINT32_MAX, "vocab_size"); }), "vocab_size"));
  CHECK_THROWS_AS(io::get_int(json(18446744073709551615ull), -1, INT64_MAX, "v"), ConfigError);
  CHECK_THROWS_AS(io::get_int(json(1e30), 0, INT64_MAX, "v"), ConfigError);
  CHECK_THROWS_AS(io::get_int(json(2.0), 0, 10, "v"), ConfigError);
  CHECK_THROWS_AS(io::get_int(json("7"), 0, 10, "v"), ConfigError);
}

TEST_CASE("io::parse_int: digits only, in range, no overflow") {
  int64_t v = 0;
  CHECK(io::parse_int("123", 0, 1000, v));
  CHECK(v == 123);
  CHECK(io::parse_int("-3", -5, 5, v));
  CHECK_FALSE(io::parse_int("99999999999999999999", 0, INT64_MAX, v));
  CHECK_FALSE(io::parse_int("-1", 0, INT64_MAX, v));
  CHECK_FALSE(io::parse_int("+1", 0, 10, v));
  CHECK_FALSE(io::parse_int("1x", 0, 10, v));
  CHECK_FALSE(io::parse_int("", 0, 10, v));
}

TEST_CASE("io::write_file_atomic replaces whole and leaves no temporary on failure") {
  test::TempDir dir("io");
  io::write_file_atomic(dir / "f", "one", "test");
  io::write_file_atomic(dir / "f", "two", "test");
  CHECK(io::read_file(dir / "f", "test") == "two");
  {
    io::AtomicWriter w(dir / "f", "test");
    w.write("half");
  }  // never committed
  CHECK(io::read_file(dir / "f", "test") == "two");
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
}

TEST_CASE("io::rename, io::remove_all, io::list_directory: a failure is an IoError naming the path and the op") {
  test::TempDir dir("io");
  fs::create_directories(dir / "ro" / "a" / "inner");
  std::ofstream(dir / "ro" / "a" / "inner" / "f") << "x";
  std::ofstream(dir / "file") << "x";
  io::rename(dir / "ro" / "a", dir / "ro" / "b", "test-op");  // the success path
  CHECK(fs::is_directory(dir / "ro" / "b"));
  CHECK(io::list_directory(dir / "ro", "test-op") == std::vector<fs::path>{dir / "ro" / "b"});
  io::remove_all(dir / "nowhere", "test-op");  // nothing to remove is not an error

  const std::string listed = error_of<IoError>([&] { io::list_directory(dir / "file", "test-op"); });
  CHECK(has(listed, "IoError in test-op"));
  CHECK(has(listed, (dir / "file").string() + ": cannot list the directory"));

  test::ReadOnlyDir ro(dir / "ro");
  REQUIRE_MESSAGE(ro.engaged(), "cannot make a directory read-only here");
  const std::string renamed = error_of<IoError>([&] { io::rename(dir / "ro" / "b", dir / "ro" / "c", "test-op"); });
  CHECK(has(renamed, "IoError in test-op"));
  CHECK(has(renamed, (dir / "ro" / "b").string() + ": cannot rename to " + (dir / "ro" / "c").string()));
  const std::string removed = error_of<IoError>([&] { io::remove_all(dir / "ro" / "b", "test-op"); });
  CHECK(has(removed, "IoError in test-op"));
  CHECK(has(removed, (dir / "ro" / "b").string() + ": cannot remove"));
  CHECK_FALSE(has(renamed + removed, "filesystem error"));  // no raw library message
}

TEST_CASE("io::write_file_atomic creates the target's missing parent directories") {
  test::TempDir dir("io");
  io::write_file_atomic(dir / "a" / "b" / "f.svg", "<svg/>", "test");
  CHECK(io::read_file(dir / "a" / "b" / "f.svg", "test") == "<svg/>");
  std::ofstream(dir / "file") << "x";
  const std::string e = error_of<IoError>([&] { io::write_file_atomic(dir / "file" / "f.svg", "x", "test-op"); });
  CHECK(has(e, "IoError in test-op"));
  CHECK(has(e, (dir / "file").string() + " is a file, not a directory"));
}
