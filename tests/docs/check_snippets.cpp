// Every C++ snippet in README.md and docs/*.md must be code that compiles and runs: each ```cpp
// block is announced by a comment naming the test file that holds it,
//   <!-- snippet: tests/docs/snippet_nn.cpp -->
// and that file holds the same lines between `// snippet-begin` and `// snippet-end` markers (one
// or more regions, concatenated; each region's common indentation removed). The test files are
// compiled into test_doc_snippets and run, so a doc that drifts from the API fails here. A block
// announced as a tutorial step instead (`<!-- tutorial: new ops/silu.h -->`, docs/ops.md) is
// compiled and run by the tutorial's own check, tests/docs/op_tutorial.sh.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The lines of `code` between the snippet markers, each region dedented by its common indent.
std::vector<std::string> marked_regions(const std::vector<std::string>& code) {
  std::vector<std::string> out, region;
  bool inside = false;
  auto flush = [&] {
    size_t indent = std::string::npos;
    for (const auto& l : region)
      if (!trim_right(l).empty()) indent = std::min(indent, l.find_first_not_of(' '));
    for (const auto& l : region) out.push_back(trim_right(l).empty() ? "" : trim_right(l.substr(indent)));
    region.clear();
  };
  for (const auto& l : code) {
    const std::string t = trim_right(l);
    if (t.find("// snippet-begin") != std::string::npos) {
      inside = true;
    } else if (t.find("// snippet-end") != std::string::npos) {
      inside = false;
      flush();
    } else if (inside) {
      region.push_back(l);
    }
  }
  return out;
}

struct Snippet {
  std::string doc, test_file;
  bool tutorial = false;  // a step of a tutorial, which tests/docs/op_tutorial.sh applies and tests
  size_t line = 0;  // the fence's line number in the doc, from 1
  std::vector<std::string> body;
};

std::vector<Snippet> cpp_snippets(const fs::path& root, const std::string& doc) {
  const auto lines = read_lines(root / doc);
  std::vector<Snippet> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (trim_right(lines[i]) != "```cpp") continue;
    Snippet s{doc, "", false, i + 1, {}};
    const std::string tag = "<!-- snippet: ";
    if (i > 0 && lines[i - 1].rfind(tag, 0) == 0) {
      const std::string rest = lines[i - 1].substr(tag.size());
      s.test_file = rest.substr(0, rest.find(' '));
    }
    s.tutorial = i > 0 && lines[i - 1].rfind("<!-- tutorial: ", 0) == 0;
    for (++i; i < lines.size() && trim_right(lines[i]) != "```"; ++i) s.body.push_back(trim_right(lines[i]));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

TEST_CASE("every C++ snippet in the README and docs/ is the code of a compiled test") {
  const fs::path root = KEEL_SOURCE_DIR;
  std::vector<std::string> docs{"README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") docs.push_back("docs/" + e.path().filename().string());
  std::sort(docs.begin(), docs.end());
  int checked = 0;
  for (const auto& doc : docs) {
    for (const Snippet& s : cpp_snippets(root, doc)) {
      INFO(s.doc << ":" << s.line);
      if (s.tutorial) continue;
      REQUIRE_MESSAGE(!s.test_file.empty(), "a ```cpp block without a `<!-- snippet: tests/docs/FILE.cpp -->` line "
                                            "above it: put its code in a compiled test and name it there");
      const auto regions = marked_regions(read_lines(root / s.test_file));
      CHECK_MESSAGE(regions == s.body, "the snippet differs from the marked code in " << s.test_file
                                                                                      << ": copy one into the other");
      ++checked;
    }
  }
  CHECK(checked >= 4);  // README, nn, data and optim hold one each
}

TEST_CASE("the snippet check sees a difference") {
  // The checker itself: a region is dedented and compared line by line.
  const std::vector<std::string> code{"x", "  // snippet-begin", "  int a = 1;", "    f(a);", "  // snippet-end", "y"};
  CHECK(marked_regions(code) == std::vector<std::string>{"int a = 1;", "  f(a);"});
  CHECK(marked_regions(code) != std::vector<std::string>{"int a = 2;", "  f(a);"});
}
