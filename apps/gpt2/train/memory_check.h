// A model too large for the machine is refused before anything is allocated: allocating a
// million layers one by one took over a minute and then blamed the batch size.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "nn/config.h"

namespace keel::app {

// Parameters of a GPT-2 with config m (an estimate exact to within the LayerNorms and biases).
double estimated_parameters(const nn::GPT2Config& m);

// ConfigError naming --n-layer / --n-embd when training m needs more memory than `device`
// has: weights, gradients and two AdamW moments, 16 bytes per parameter in f32 (a lower bound:
// activations come on top). On the CPU it is compared with the physical memory; on a GPU with
// the memory free on that device now (cudaMemGetInfo), before anything is allocated.
void check_model_fits(const nn::GPT2Config& m, Device device);

// The comparison itself, for `have` bytes described in the message as have_text (e.g. "the
// 80 GB free on cuda:0").
void check_model_fits(const nn::GPT2Config& m, double have, const std::string& have_text);

}  // namespace keel::app
