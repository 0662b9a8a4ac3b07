// tiny_gpt: a program outside keel's tree that trains a tiny byte-level GPT-2 with the installed
// library: model (keel::nn), AdamW (keel::optim), autodiff (keel::core). It learns to continue
// one sentence, prints the loss every 10 steps, and exits 1 unless the loss fell by half, so a
// build that links but computes nonsense fails.
//
//   tiny_gpt [steps]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"

int main(int argc, char** argv) try {
  using namespace keel;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  const std::string text = "the quick brown fox jumps over the lazy dog. ";

  // Bytes are the tokens: vocabulary 256, no tokenizer needed.
  nn::GPT2Config cfg = nn::GPT2Config::preset("tiny");
  cfg.vocab_size = 256;
  cfg.block_size = 32;
  nn::GPT2 model(cfg, /*seed=*/1);
  optim::AdamW opt(model.named_parameters(), {.lr = 3e-3, .weight_decay = 0.0});

  // One batch of 4 windows (B = 4, T = 32) over the repeated sentence; targets are the next byte.
  const int64_t B = 4, T = cfg.block_size;
  std::vector<int32_t> x(B * T), y(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * 7 + t);
      x[b * T + t] = static_cast<unsigned char>(text[i % text.size()]);
      y[b * T + t] = static_cast<unsigned char>(text[(i + 1) % text.size()]);
    }
  const Tensor ids = from_vector(x, {B, T}), targets = from_vector(y, {B, T});

  double first = 0, last = 0;
  for (int step = 1; step <= steps; ++step) {
    opt.zero_grad();
    Tensor loss = model.forward(ids, targets).loss;
    loss.backward();
    opt.step();
    last = loss.item();
    if (step == 1) first = last;
    if (step == 1 || step % 10 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tiny_gpt: %s\n", e.what());
  return 1;
}
