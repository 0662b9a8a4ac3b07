// safetensors: round trip of every dtype, the exact byte layout, and every bad-file case.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "nn/safetensors.h"
#include "temp_dir.h"

using namespace keel;
using namespace keel::nn;
namespace fs = std::filesystem;

namespace {

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with `header` as its JSON and `data_bytes` zero bytes of data.
std::string file_with(const std::string& header, size_t data_bytes) {
  uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  return s + header + std::string(data_bytes, '\0');
}

// Loads `bytes` from a file and returns the IoError's text ("" when none was thrown).
std::string load_error(const test::TempDir& dir, const std::string& bytes) {
  fs::path p = dir.path() / "bad.safetensors";
  write_bytes(p, bytes);
  try {
    load_safetensors(p);
  } catch (const IoError& e) {
    std::string what = e.what();
    CHECK(what.find(p.string()) != std::string::npos);  // every error names the file
    return what;
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("safetensors round trip: every dtype, views, scalars, empty tensors, metadata") {
  test::TempDir dir("st");
  Generator gen(1);
  Tensor f32 = randn({3, 4}, gen);
  NamedTensors in = {
      {"a.f32", f32},
      {"b.f64", randn({5}, gen, {DType::f64})},
      {"c.bf16", randn({2, 3}, gen, {DType::bf16})},
      {"d.f16", randn({7}, gen, {DType::f16})},
      {"e.i32", from_vector<int32_t>({1, -2, 3}, {3})},
      {"f.i64", from_vector<int64_t>({int64_t{1} << 40, -5}, {2, 1})},
      {"g.transposed", f32.as_strided({4, 3}, {1, 4}, 0)},
      {"h.scalar", scalar(2.5)},
      {"i.empty", zeros({0, 3})},
  };
  fs::path p = dir.path() / "x.safetensors";
  save_safetensors(p, in, {{"format", "pt"}, {"step", "12"}});
  SafetensorsFile f = load_safetensors(p);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}});
  REQUIRE(f.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    CAPTURE(name);
    Tensor r = f.find(name);
    REQUIRE(r.defined());
    CHECK(r.dtype() == t.dtype());
    CHECK(r.shape() == t.shape());
    if (is_floating(t.dtype()))
      CHECK(r.to_vector<double>() == t.to_vector<double>());
    else
      CHECK(r.to_vector<int64_t>() == t.to_vector<int64_t>());
  }
  CHECK_FALSE(f.find("nope").defined());
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename() == "x.safetensors");  // no temp left
}

TEST_CASE("safetensors layout: u64 header length, 8-aligned JSON header, offsets, raw data") {
  test::TempDir dir("st_layout");
  fs::path p = dir.path() / "y.safetensors";
  save_safetensors(p, {{"w", from_vector<float>({1.0f, 2.0f}, {2})}, {"v", from_vector<int64_t>({7}, {1})}});
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 16);
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(h["w"]["dtype"] == "F32");
  CHECK(h["w"]["shape"] == nlohmann::json::array({2}));
  CHECK(h["w"]["data_offsets"] == nlohmann::json::array({0, 8}));
  CHECK(h["v"]["data_offsets"] == nlohmann::json::array({8, 16}));
  float w[2];
  std::memcpy(w, bytes.data() + 8 + n, 8);
  CHECK(w[0] == 1.0f);
  CHECK(w[1] == 2.0f);
}

TEST_CASE("safetensors writes refuse bad names and leave no file behind") {
  test::TempDir dir("st_wbad");
  Tensor t = zeros({2});
  CHECK_THROWS_AS(save_safetensors(dir.path() / "a.safetensors", {{"x", t}, {"x", t}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(dir.path() / "a.safetensors", {{"__metadata__", t}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(dir.path() / "a.safetensors", {{"", t}}), ValueError);
  CHECK(fs::is_empty(dir.path()));
  // A folder that cannot be made (a file in its way) is an IoError and leaves nothing; a missing
  // one is made, as for every output file (core/io.h).
  std::ofstream(dir.path() / "file") << "x";
  CHECK_THROWS_AS(save_safetensors(dir.path() / "file" / "a.safetensors", {{"x", t}}), IoError);
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}) == 1);
  save_safetensors(dir.path() / "new" / "a.safetensors", {{"x", t}});
  CHECK(fs::exists(dir.path() / "new" / "a.safetensors"));
}

TEST_CASE("safetensors reads reject every kind of bad file, naming the file and the tensor") {
  test::TempDir dir("st_bad");
  CHECK_THROWS_AS(load_safetensors(dir.path() / "missing.safetensors"), IoError);
  CHECK(contains(load_error(dir, ""), "shorter than the 8-byte"));
  CHECK(contains(load_error(dir, "abc"), "shorter than the 8-byte"));
  {
    uint64_t n = 1000;
    std::string s(reinterpret_cast<const char*>(&n), 8);
    CHECK(contains(load_error(dir, s + "{}"), "past the end of the file"));
  }
  CHECK(contains(load_error(dir, file_with("{\"a\": ", 0)), "malformed JSON"));
  CHECK(contains(load_error(dir, file_with("[1, 2, 3]", 0)), "not a JSON object"));
  const std::string ok = R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  CHECK(load_error(dir, file_with(ok, 8)).empty());
  std::string e = load_error(dir, file_with(R"({"t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 2));
  CHECK(contains(e, "unsupported dtype 'U8'"));
  CHECK(contains(e, "'t'"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [2]}})", 8)), "needs dtype, shape"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)),
                 "non-integer or negative"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8)),
                 "outside the data region"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 4]}})", 8)),
                 "outside the data region"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
                 "needs 12"));
  CHECK(contains(load_error(dir, file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8)),
                 "two non-negative integers"));
  e = load_error(dir, file_with(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                   "b": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]}})",
                                12));
  CHECK(contains(e, "overlap"));
  CHECK(contains(load_error(dir, file_with(R"({"__metadata__": {"k": 1}})", 0)), "not a string"));
  // A file cut short: the header promises more data than is there.
  CHECK(contains(load_error(dir, file_with(ok, 4)), "outside the data region"));
  CHECK_THROWS_AS(load_safetensors(dir.path()), IoError);  // a directory
}

TEST_CASE("safetensors: a deeply nested header is an error naming the file, not a stack overflow") {
  test::TempDir dir("st_deep");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK(contains(load_error(dir, file_with(deep, 0)), "nested deeper"));
  // A bad shape quotes its size, never the (possibly huge, nested) value itself.
  const std::string nested_shape = R"({"t": {"dtype": "F32", "shape": [[[[1]]]], "data_offsets": [0, 4]}})";
  const std::string msg = load_error(dir, file_with(nested_shape, 4));
  CHECK(contains(msg, "an array of 1 elements"));
  CHECK_FALSE(contains(msg, "[[["));
}
