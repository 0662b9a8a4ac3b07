// Shared by the libFuzzer targets: a scratch file per process, and the rule that decides what
// counts as a finding. keel's typed errors (keel::Error) are the expected answer to bad input;
// anything else that escapes (a raw library exception, a crash, a sanitizer report, a hang) is
// a bug.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace keel::fuzz {

// A directory private to this process, under $TMPDIR, created once.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("keel-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_file(const std::string& name, std::string_view data) {
  auto p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
  return p;
}

// Runs f on the input. A keel::Error is fine; any other exception aborts, which libFuzzer
// records as a crash with the input that caused it.
template <class F>
int run(F&& f) {
  try {
    f();
  } catch (const keel::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keel fuzz: a non-keel exception escaped: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace keel::fuzz
