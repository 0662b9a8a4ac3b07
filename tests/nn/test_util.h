// Helpers shared by the nn tests: small configs (scratch directories: tests/temp_dir.h).
#pragma once

#include <doctest/doctest.h>

#include "nn/config.h"

namespace keel::nn::testing {

// A model small enough for finite differences: 2 layers, 2 heads of 4, T 6, vocab 11.
inline GPT2Config micro_config() {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.vocab_size = 11;
  c.ls_local_heads = 1, c.ls_window = 2;
  c.init_std = 0.3;  // large weights so that every path carries a visible gradient
  return c;
}

}  // namespace keel::nn::testing
