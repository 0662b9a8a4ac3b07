// char_mlp: a two-layer MLP language model on characters (Bengio et al. 2003), trained with
// keel's autodiff on the CPU. The smallest end-to-end use of the library: embedding, linear,
// GELU, cross-entropy, backward, and a hand-written SGD step.
//
//   char_mlp [--steps N] [--corpus FILE]
//
// Each example is `kContext` characters; their embeddings are concatenated, go through a
// hidden layer, and predict the next character. The loss starts near ln(vocab) and falls.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/factory.h"
#include "data/file_io.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/matmul.h"
#include "ops/shape.h"

using namespace keel;

namespace {
constexpr int64_t kContext = 8, kEmbed = 24, kHidden = 256, kBatch = 128;

struct Args {
  int steps = 1500;
  std::string corpus = KEEL_DEMO_CORPUS;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--steps" && i + 1 < argc) {
      a.steps = std::stoi(argv[++i]);
      if (a.steps <= 0) throw ConfigError("char_mlp", "--steps must be positive");
    } else if (s == "--corpus" && i + 1 < argc) {
      a.corpus = argv[++i];
    } else {
      throw ConfigError("char_mlp", "unknown argument '" + s + "'", "usage: char_mlp [--steps N] [--corpus FILE]");
    }
  }
  return a;
}

// A parameter: a leaf that requires grad, initialised N(0, std).
Tensor param(const Shape& shape, Generator& gen, double std) {
  Tensor t = randn(shape, gen, {}, 0.0, std);
  t.set_requires_grad(true);
  return t;
}

// p -= lr * p.grad, in place, then clear the gradient.
void sgd_step(Tensor& p, float lr) {
  float* w = p.data<float>();
  const float* g = p.grad().data<float>();
  for (int64_t i = 0; i < p.numel(); ++i) w[i] -= lr * g[i];
  p.zero_grad();
}

int run(int argc, char** argv) {
  Args args = parse(argc, argv);
  std::string text = data::read_text_file(args.corpus);
  // Characters are bytes; the vocabulary is the bytes that occur.
  std::vector<int32_t> id_of(256, -1);
  int32_t vocab = 0;
  for (unsigned char c : text)
    if (id_of[c] < 0) id_of[c] = vocab++;
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = id_of[static_cast<unsigned char>(text[i])];
  std::printf("corpus %s: %zu characters, vocabulary %d\n", args.corpus.c_str(), text.size(), vocab);

  Generator gen(1337);
  Tensor emb = param({vocab, kEmbed}, gen, 1.0);
  Tensor w1 = param({kHidden, kContext * kEmbed}, gen, 1.0 / std::sqrt(double(kContext * kEmbed)));
  Tensor b1 = param({kHidden}, gen, 0.0);
  Tensor w2 = param({vocab, kHidden}, gen, 0.1 / std::sqrt(double(kHidden)));
  Tensor b2 = param({vocab}, gen, 0.0);
  std::vector<Tensor*> params{&emb, &w1, &b1, &w2, &b2};

  Generator sampler(7);
  auto t0 = std::chrono::steady_clock::now();
  double smoothed = 0;
  for (int step = 0; step < args.steps; ++step) {
    // A batch of random windows: kContext characters in, the next one as the target.
    std::vector<int32_t> x(kBatch * kContext), y(kBatch);
    uint64_t base = sampler.advance(4 * kBatch);  // one Philox block (4 draws) per example
    for (int64_t b = 0; b < kBatch; ++b) {
      auto r = philox4x32(base + b, sampler.seed());
      size_t start = r[0] % (ids.size() - kContext - 1);
      for (int64_t t = 0; t < kContext; ++t) x[b * kContext + t] = ids[start + t];
      y[b] = ids[start + kContext];
    }
    Tensor xb = from_vector(x, {kBatch, kContext}), yb = from_vector(y, {kBatch});

    Tensor h = reshape(embedding(emb, xb), {kBatch, kContext * kEmbed});  // (B, 8*E)
    h = gelu(linear(h, w1, b1));                                          // (B, H)
    Tensor logits = linear(h, w2, b2);                                    // (B, V)
    Tensor loss = cross_entropy(logits, yb);
    loss.backward();

    float lr = step < args.steps * 3 / 4 ? 0.5f : 0.05f;
    for (Tensor* p : params) sgd_step(*p, lr);

    double l = loss.item();
    smoothed = step == 0 ? l : 0.95 * smoothed + 0.05 * l;
    if (step % 100 == 0 || step == args.steps - 1)
      std::printf("step %5d  loss %.4f  (smoothed %.4f)\n", step, l, smoothed);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained %d steps in %.1f s (%.0f examples/s); ln(vocab) = %.3f\n", args.steps, secs,
              args.steps * kBatch / secs, std::log(double(vocab)));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const keel::Error& e) {
    std::fprintf(stderr, "char_mlp: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_mlp: unexpected error: %s\n", e.what());
    return 1;
  }
}
