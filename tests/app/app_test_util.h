// Helpers shared by the app tests: scratch directories (temp_dir.h), file writing, error expectations.
#pragma once

#include "temp_dir.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace keel::test {

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs f, expects exception E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("expected an error mentioning " << parts.front());
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, msg);
  }
}

}  // namespace keel::test
