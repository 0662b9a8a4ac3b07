// The optimisation hyperparameters of GPT-2 training as the paper (arXiv 2505.15548), nanoGPT
// and llm.c set them, written once: AdamWOptions, CosineSchedule, the gradient all-reduce and
// `gpt2 train` take their defaults from here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::optim {

inline constexpr double kDefaultLr = 6e-4;       // peak learning rate
inline constexpr double kDefaultMinLr = 6e-5;    // the cosine decay's floor, lr / 10
inline constexpr double kDefaultBeta1 = 0.9;
inline constexpr double kDefaultBeta2 = 0.95;    // GPT-2 practice (PyTorch's default is 0.999)
inline constexpr double kDefaultEps = 1e-8;
inline constexpr double kDefaultWeightDecay = 0.1;
inline constexpr double kDefaultGradClip = 1.0;  // max global gradient norm
// Data parallelism: gradients are all-reduced in buckets of this size (PyTorch DDP's 25 MB).
inline constexpr size_t kDefaultBucketBytes = size_t{25} << 20;
// The paper's run length. `gpt2 train` defaults to a short demo run instead (train_config.h).
inline constexpr int64_t kPaperWarmupSteps = 2000;
inline constexpr int64_t kPaperMaxSteps = 50000;

}  // namespace keel::optim
