// prepare at scale: streamed documents equal the whole-text rule; any thread count and memory
// bound give the same bytes; an interrupted run resumes to the same output; JSON Lines input;
// folders, globs and stdin.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/doc_stream.h"
#include "core/io.h"
#include "data/file_io.h"
#include "data/prepare.h"
#include "test_util.h"

using namespace keel::data;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::vector<std::string> stream_docs(const fs::path& p, DocumentRule rule, const std::string& field = "text") {
  DocumentStream ds({p, format_for(p)}, rule, field);
  std::vector<std::string> out;
  for (std::string d; ds.next(d);) out.push_back(d);
  return out;
}

// Small shards, so that resuming and the thread rounds cross shard boundaries.
PrepareOptions quiet(std::vector<fs::path> inputs, fs::path out) {
  PrepareOptions o = keel::test::quiet_prepare(std::move(inputs), std::move(out));
  o.shard_tokens = 5000;
  return o;
}

// Every file of a dataset directory, name -> bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = keel::io::read_file(e.path(), "test");
  return files;
}

}  // namespace

TEST_CASE("doc stream: streamed documents are exactly split_documents() of the whole text") {
  keel::test::TempDir dir("stream");
  const std::string austen = keel::test::austen_slice(0, 3'000'000);
  // Hard cases: leading/trailing blank runs, CRLF, a run of spaces-only lines, a huge section
  // with no blank line (cut ahead of time), a form feed alone.
  const std::string odd = "\n \n\nTitle\r\n\r\n\r\nbody line\n \t\n" + std::string(70000, 'x') +
                          "\n" + std::string(30000, 'y') + "\n\n\n\f\n\n\nend\n  \n";
  for (const std::string& text : {austen, odd}) {
    write_text(dir / "a.txt", text);
    for (DocumentRule rule : {DocumentRule{}, DocumentRule{.min_chars = 100, .max_chars = 5000},
                              DocumentRule{.min_chars = 1, .max_chars = 1}}) {
      if (rule.max_chars == 1 && text.size() > 200000) continue;  // slow, and covered by `odd`
      const auto whole = split_documents(text, rule);
      const auto streamed = stream_docs(dir / "a.txt", rule);
      REQUIRE(streamed.size() == whole.size());
      for (size_t i = 0; i < whole.size(); ++i) CHECK(streamed[i] == whole[i]);
    }
  }
}

TEST_CASE("prepare: 1, 2 and 3 threads and any memory bound write the same bytes") {
  keel::test::TempDir dir("threads");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 400000));
  write_text(dir / "b.txt", keel::test::austen_slice(400000, 200000));
  std::map<std::string, std::string> first;
  for (int threads : {1, 2, 3}) {
    auto o = quiet({dir / "a.txt", dir / "b.txt"}, dir / fmt::format("out{}", threads));
    o.threads = threads;
    o.memory_mb = threads == 2 ? 16 : 1024;  // 4 MB rounds vs one round for everything
    prepare_dataset(o);
    auto files = snapshot(o.out);
    CHECK(files.size() > 4);
    if (threads == 1) first = files;
    else CHECK(files == first);
  }
}

TEST_CASE("prepare: an interrupted run resumes to the same output without redoing shards") {
  keel::test::TempDir dir("resume");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 300000));
  auto o = quiet({dir / "a.txt"}, dir / "ref");
  const PrepareResult ref = prepare_dataset(o);
  REQUIRE(ref.train_shards >= 4);

  // A child process is killed (_exit, no unwinding, as a signal would) after its 3rd shard.
  o.out = dir / "out";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int shards = 0;
    o.on_shard = [&](const std::string&) {
      if (++shards == 3) _exit(7);
    };
    try {
      prepare_dataset(o);
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 7);
  CHECK(!fs::exists(dir / "out"));
  REQUIRE(fs::exists(dir / "out.partial/state.json"));

  // A damaged state.json or shard (a bit flip, a hand edit) is not resumed from: it starts over
  // and gives the same output. Before, 1e30 was cast to an integer (undefined behaviour), a
  // truncated shard was kept, and the others escaped as raw JSON library errors.
  const nlohmann::json saved = keel::io::read_json_file(dir / "out.partial/state.json", "test");
  auto damaged = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    CAPTURE(name);
    const fs::path partial = dir / (name + ".partial");
    fs::copy(dir / "out.partial", partial, fs::copy_options::recursive);
    nlohmann::json state = saved;
    edit(state);
    write_text(partial / "state.json", state.dump());
    if (name == "truncated") fs::resize_file(partial / "train_000001.bin", fs::file_size(partial / "train_000001.bin") - 2);
    auto d = o;
    d.out = dir / name;
    d.on_shard = nullptr;
    CHECK(prepare_dataset(d).resumed_shards == 0);
    CHECK(snapshot(dir / name) == snapshot(dir / "ref"));
  };
  damaged("float_doc", [](nlohmann::json& s) { s["train"]["next_doc"] = 1e30; });
  damaged("nested_shards", [](nlohmann::json& s) { s["train"]["shards"] = nlohmann::json::parse("[[[1]]]"); });
  damaged("other_name", [](nlohmann::json& s) { s["val"]["shards"] = {"../train_000000.bin"}; });
  damaged("vocab_string", [](nlohmann::json& s) { s["vocab_ready"] = "yes"; });
  damaged("truncated", [](nlohmann::json&) {});

  std::vector<std::string> rewritten;
  o.on_shard = [&](const std::string& f) { rewritten.push_back(f); };
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.resumed_shards == 3);
  CHECK(rewritten.size() == ref.train_shards + ref.val_shards - 3);
  CHECK(r.train_shards == ref.train_shards);
  CHECK(std::find(rewritten.begin(), rewritten.end(), "train_000000.bin") == rewritten.end());
  CHECK(snapshot(dir / "out") == snapshot(dir / "ref"));
  CHECK(!fs::exists(dir / "out.partial"));

  // Different options do not pick up a stale state: they start over.
  fs::create_directories(dir / "x.partial");
  write_text(dir / "x.partial/state.json", "{\"fingerprint\": 1}");
  o.out = dir / "x";
  CHECK(prepare_dataset(o).resumed_shards == 0);
}

TEST_CASE("prepare: JSON Lines records are documents, with odd fields, blank lines and bad records") {
  keel::test::TempDir dir("jsonl");
  write_text(dir / "a.jsonl",
             "{\"id\": 1, \"text\": \"First record.\", \"meta\": {\"x\": [1, 2]}}\n"
             "\n"
             "   \n"
             "{\"text\": \"   \"}\n"  // whitespace only: skipped
             "{\"url\": \"u\", \"text\": \"Second \\u00e9 \\\"quoted\\\"\\nline two\"}\r\n"
             "{\"text\": \"Third, no newline at the end\"}");
  const auto docs = stream_docs(dir / "a.jsonl", {});
  REQUIRE(docs.size() == 3);
  CHECK(docs[0] == "First record.");
  CHECK(docs[1] == "Second \xc3\xa9 \"quoted\"\nline two");
  CHECK(docs[2] == "Third, no newline at the end");

  write_text(dir / "b.jsonl", "{\"content\": \"x\"}\n");
  CHECK(stream_docs(dir / "b.jsonl", {}, "content") == std::vector<std::string>{"x"});

  auto refused = [&](const std::string& body, const std::string& what) {
    write_text(dir / "bad.jsonl", "{\"text\": \"ok\"}\n" + body + "\n");
    try {
      stream_docs(dir / "bad.jsonl", {});
      FAIL("no error for " << what);
    } catch (const keel::IoError& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find("bad.jsonl:2") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
    }
  };
  refused("{\"body\": \"no text field\"}", "no \"text\" field");
  refused("{\"text\": 42}", "is number, not a string");
  refused("[\"text\"]", "not a JSON object");
  refused("{\"text\": \"unterminated", "not valid JSON");
  refused("{\"text\": \"bad \xff byte\"}", "invalid UTF-8");
  write_text(dir / "empty.jsonl", "\n\n{\"text\": \"\"}\n");
  CHECK_THROWS_AS(stream_docs(dir / "empty.jsonl", {}), keel::IoError);

  // Through prepare, long records are cut at max_chars, and .jsonl.gz reads the same.
  std::string jsonl;
  const std::string text = keel::test::austen_slice(0, 200000);
  for (size_t at = 0; at < text.size(); at += 5000)
    jsonl += nlohmann::json({{"text", text.substr(at, 5000)}}).dump() + "\n";
  write_text(dir / "c.jsonl", jsonl);
  gzFile gz = gzopen((dir / "c.jsonl.gz").c_str(), "wb");
  gzwrite(gz, jsonl.data(), unsigned(jsonl.size()));
  gzclose(gz);
  auto o = quiet({dir / "c.jsonl"}, dir / "plain");
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.train_documents + r.val_documents >= 40);
  o.inputs = {dir / "c.jsonl.gz"};
  o.out = dir / "gz";
  prepare_dataset(o);
  CHECK(snapshot(dir / "gz").at("train_000000.bin") == snapshot(dir / "plain").at("train_000000.bin"));
}

TEST_CASE("prepare: folders and globs expand to their corpus files in sorted order") {
  keel::test::TempDir dir("folders");
  fs::create_directories(dir / "corpus/sub");
  fs::create_directories(dir / "corpus/.hidden");
  write_text(dir / "corpus/b.txt", "bee");
  write_text(dir / "corpus/sub/a.jsonl", "{\"text\": \"a\"}");
  write_text(dir / "corpus/notes.md", "not a corpus file");
  write_text(dir / "corpus/.hidden/x.txt", "hidden");
  const auto files = expand_inputs({dir / "corpus"});
  REQUIRE(files.size() == 2);
  CHECK(files[0].path == dir / "corpus/b.txt");
  CHECK(files[1].path == dir / "corpus/sub/a.jsonl");
  CHECK(files[1].format == InputFormat::jsonl);
  const auto globbed = expand_inputs({dir / "corpus/*.txt", "-"});
  REQUIRE(globbed.size() == 2);
  CHECK(globbed[0].path == dir / "corpus/b.txt");
  CHECK(globbed[1].is_stdin());
  CHECK_THROWS_AS(expand_inputs({"-", "-"}), keel::IoError);
}

TEST_CASE("prepare: a second prepare into the same output refuses while the first runs") {
  keel::test::TempDir dir("lock");
  write_text(dir / "a.txt", keel::test::austen_slice(0, 50000));
  const fs::path lock = dir.path().string() + "/out.partial.lock";
  const int fd = open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(flock(fd, LOCK_EX | LOCK_NB) == 0);  // as a running prepare holds it
  CHECK_THROWS_WITH_AS(prepare_dataset(quiet({dir / "a.txt"}, dir / "out")),
                       doctest::Contains("another gpt2 prepare"), keel::ConfigError);
  close(fd);
  fs::remove(lock);
  CHECK(prepare_dataset(quiet({dir / "a.txt"}, dir / "out")).train_documents > 0);
  CHECK(!fs::exists(lock));
}
