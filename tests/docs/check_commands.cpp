// Every `gpt2 SUBCOMMAND --flag` written in the README, docs/*.md and .ci/demo names a flag the
// subcommand defines (an option line of its --help, `  --name TYPE  help` or `  -n,--name ...`;
// a flag that only appears in another option's help text does not count), so a renamed or
// removed flag cannot leave a recipe that fails on a reader's machine.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string help_of(const std::string& sub) {
  const std::string cmd = std::string(KEEL_GPT2_BIN) + " " + sub + " --help 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// The flags a --help text defines: the long name of each option line.
std::set<std::string> defined_flags(const std::string& help) {
  static const std::regex option_line(R"(^\s+(?:-\w,)?(--[a-z][a-z0-9-]*))");
  std::set<std::string> flags;
  std::istringstream in(help);
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, option_line)) flags.insert(m[1]);
  return flags;
}

}  // namespace

TEST_CASE("a flag named only in another option's help text is not defined") {
  const std::string help = "Options:\n  -h,--help   Print this\n  --seq-len INT   length (see --batch-size)\n";
  CHECK(defined_flags(help) == std::set<std::string>{"--help", "--seq-len"});
}

TEST_CASE("the gpt2 flags written in the docs exist") {
  const fs::path root = KEEL_SOURCE_DIR;
  std::vector<fs::path> files{root / "README.md", root / ".ci/demo"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") files.push_back(e.path());
  const std::regex command(
      R"(gpt2 (lab dof|attention-map|attention-stats|bench-sample|prepare|tokenize|train|eval|sample|compare|export|convert)\b([^`|;]*))");
  const std::regex flag(R"((^|[^\w-])(--[a-z][a-z0-9-]*))");
  std::map<std::string, std::set<std::string>> defined;
  int flags_checked = 0;
  for (const auto& f : files) {
    std::ifstream in(f);
    REQUIRE_MESSAGE(in.good(), "cannot read " << f.string());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      for (std::sregex_iterator c(line.begin(), line.end(), command), end; c != end; ++c) {
        const std::string sub = (*c)[1], rest = (*c)[2];
        if (!defined.count(sub)) defined[sub] = defined_flags(help_of(sub));
        for (std::sregex_iterator m(rest.begin(), rest.end(), flag); m != end; ++m) {
          const std::string name = (*m)[2];
          INFO(f.filename().string() << ":" << n << ": " << line);
          CHECK_MESSAGE(defined[sub].count(name) == 1, "gpt2 " << sub << " defines no " << name);
          ++flags_checked;
        }
      }
    }
  }
  CHECK(flags_checked > 50);  // the README alone names dozens
}
