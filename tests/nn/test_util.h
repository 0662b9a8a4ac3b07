// Helpers shared by the nn tests: scratch directories and small configs.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "nn/config.h"

namespace keel::nn::testing {

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("keel_nn_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// A model small enough for finite differences: 2 layers, 2 heads of 4, T 6, vocab 11.
inline GPT2Config micro_config() {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.vocab_size = 11;
  c.ls_local_heads = 1, c.ls_window = 2;
  c.init_std = 0.3;  // large weights so that every path carries a visible gradient
  return c;
}

}  // namespace keel::nn::testing
