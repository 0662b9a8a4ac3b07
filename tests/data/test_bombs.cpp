// Input that is small on disk but huge in memory: compressed files that expand past the limit
// of a whole-file read, and lines, JSON records or blank runs longer than what the streaming
// reader may hold for one document. The limits are injected small, so no test needs gigabytes;
// before the limits, each of these was read to the end, however long, into memory.
#include <doctest/doctest.h>
#include <lzma.h>
#include <zlib.h>

#include <fstream>

#include "core/error.h"
#include "data/doc_stream.h"
#include "data/file_io.h"
#include "data/prepare.h"
#include "test_util.h"

using namespace keel::data;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

void write_gz(const fs::path& p, const std::string& s) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, s.data(), static_cast<unsigned>(s.size())) == int(s.size()));
  gzclose(f);
}

void write_xz(const fs::path& p, const std::string& s) {
  std::string out(s.size() + 1024, '\0');
  size_t pos = 0;
  REQUIRE(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(s.data()),
                                  s.size(), reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()) == LZMA_OK);
  out.resize(pos);
  write_text(p, out);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const keel::IoError& e) {
    return e.what();
  }
  FAIL("no IoError");
  return {};
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every document of a file through DocumentStream holding at most max_held bytes.
std::vector<std::string> stream_all(const fs::path& p, uint64_t max_held) {
  DocumentStream ds({p, format_for(p)}, {.min_chars = 100, .max_chars = 1000}, "text", max_held);
  std::vector<std::string> out;
  for (std::string doc; ds.next(doc);) out.push_back(doc);
  return out;
}

}  // namespace

TEST_CASE("read_text_file: a compressed file expanding past the limit is refused, naming file and limit") {
  keel::test::TempDir dir("bombs");
  // 4 MB of one letter compresses to a few KB: a bomb in miniature against a 1 MB limit.
  const std::string big(4 << 20, 'a');
  write_gz(dir / "bomb.txt.gz", big);
  write_xz(dir / "bomb.txt.xz", big);
  CHECK(fs::file_size(dir / "bomb.txt.gz") < 100000);
  for (const char* name : {"bomb.txt.gz", "bomb.txt.xz"}) {
    const std::string msg = error_of([&] { read_text_file(dir / name, 1 << 20); });
    CHECK_MESSAGE(has(msg, name), msg);
    CHECK_MESSAGE(has(msg, "more than 1048576 bytes"), msg);
    CHECK_MESSAGE(has(msg, "gpt2 prepare"), msg);
  }
  // Exactly at the limit is fine, one byte more is not (also when a stream ends just past it).
  const std::string at(100000, 'b');
  write_gz(dir / "at.txt.gz", at);
  write_xz(dir / "at.txt.xz", at);
  CHECK(read_text_file(dir / "at.txt.gz", at.size()) == at);
  CHECK(read_text_file(dir / "at.txt.xz", at.size()) == at);
  CHECK(has(error_of([&] { read_text_file(dir / "at.txt.gz", at.size() - 1); }), "more than 99999 bytes"));
  CHECK(has(error_of([&] { read_text_file(dir / "at.txt.xz", at.size() - 1); }), "more than 99999 bytes"));
  // Plain text: the file itself is over the limit.
  write_text(dir / "big.txt", at);
  CHECK(has(error_of([&] { read_text_file(dir / "big.txt", 1000); }), "more than the limit of 1000"));
}

TEST_CASE("DocumentStream: a line, a record or a blank run longer than it may hold is refused") {
  keel::test::TempDir dir("long_lines");
  const uint64_t held = 1 << 20;
  // Ordinary text far longer than the bound streams through: it is cut as it goes.
  std::string book;
  for (int i = 0; book.size() < 3 * held; ++i) book += i % 10 ? "A line of an ordinary book.\n" : "\n";
  write_text(dir / "book.txt", book);
  CHECK(stream_all(dir / "book.txt", held).size() > 1000);

  // One line of 3 MB (gzip makes it a few KB on disk).
  const std::string line(3 * held, 'x');
  write_gz(dir / "line.txt.gz", "a title\n\n" + line + "\n");
  std::string msg = error_of([&] { stream_all(dir / "line.txt.gz", held); });
  CHECK_MESSAGE(has(msg, "line.txt.gz:3: a line of more than"), msg);
  CHECK_MESSAGE(has(msg, "--memory-mb"), msg);

  // A JSON Lines record of 3 MB.
  write_gz(dir / "rec.jsonl.gz", "{\"text\": \"short\"}\n{\"text\": \"" + line + "\"}\n");
  msg = error_of([&] { stream_all(dir / "rec.jsonl.gz", held); });
  CHECK_MESSAGE(has(msg, "rec.jsonl.gz:2: a record of more than"), msg);

  // 3 MB of blank lines (spaces) after some text: nothing to cut them at.
  std::string blanks = "Some text before.\n";
  while (blanks.size() < 3 * held) blanks += "        \n";
  write_gz(dir / "blank.txt.gz", blanks + "and after\n");
  msg = error_of([&] { stream_all(dir / "blank.txt.gz", held); });
  CHECK_MESSAGE(has(msg, "blank.txt.gz:"), msg);
  CHECK_MESSAGE(has(msg, "bytes of blank lines in a row"), msg);
}

TEST_CASE("prepare: the per-document bound is a quarter of --memory-mb") {
  keel::test::TempDir dir("prepare_bound");
  write_gz(dir / "line.txt.gz", std::string(6 << 20, 'y') + "\n");  // over 16 MB / 4
  PrepareOptions o;
  o.inputs = {dir / "line.txt.gz"};
  o.out = dir / "out";
  o.progress = false;
  o.memory_mb = 16;
  const std::string msg = error_of([&] { prepare_dataset(o); });
  CHECK_MESSAGE(has(msg, "line.txt.gz:1: a line of more than"), msg);
  CHECK_MESSAGE(has(msg, "4194304 bytes"), msg);
  CHECK(!fs::exists(dir / "out"));
}

TEST_CASE("DocumentStream: a .gz whose magic bytes are damaged is refused, not read as plain text") {
  keel::test::TempDir dir("stream_gz_magic");
  // zlib's transparent mode passed these through as text into the dataset before.
  write_text(dir / "a.txt.gz", std::string("\x1f\x8c\x08\x00 some words of text here\n", 29));
  CHECK(has(error_of([&] { stream_all(dir / "a.txt.gz", 1 << 20); }), "a.txt.gz: not gzip data"));
  write_text(dir / "b.jsonl.gz", "{\"text\": \"plain JSON Lines with a .gz name\"}\n");
  CHECK(has(error_of([&] { stream_all(dir / "b.jsonl.gz", 1 << 20); }), "b.jsonl.gz: not gzip data"));
}

TEST_CASE("DocumentStream: bad JSON Lines records are named without raw library messages") {
  keel::test::TempDir dir("jsonl_messages");
  write_text(dir / "deep.jsonl", "{\"text\": \"fine\"}\n{\"text\": " + std::string(100000, '[') +
                                     std::string(100000, ']') + "}\n");
  std::string msg = error_of([&] { stream_all(dir / "deep.jsonl", 1 << 20); });
  CHECK_MESSAGE(has(msg, "deep.jsonl:2: JSON nested deeper than"), msg);
  write_text(dir / "bad.jsonl", "{\"text\": \"unterminated}\n");
  msg = error_of([&] { stream_all(dir / "bad.jsonl", 1 << 20); });
  CHECK_MESSAGE(has(msg, "bad.jsonl:1: not valid JSON near byte"), msg);
  CHECK_MESSAGE(!has(msg, "json.exception"), msg);
  write_text(dir / "utf8.jsonl", "{\"text\": \"caf\xe9\"}\n");
  msg = error_of([&] { stream_all(dir / "utf8.jsonl", 1 << 20); });
  CHECK_MESSAGE(has(msg, "utf8.jsonl:1: invalid UTF-8"), msg);
  CHECK_MESSAGE(!has(msg, "json.exception"), msg);
  write_text(dir / "num.jsonl", "{\"text\": \"x\", \"n\": 1e999}\n");
  msg = error_of([&] { stream_all(dir / "num.jsonl", 1 << 20); });
  CHECK_MESSAGE(has(msg, "num.jsonl:1: not valid JSON"), msg);
  CHECK_MESSAGE(!has(msg, "json.exception"), msg);
}
