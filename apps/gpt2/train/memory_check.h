// A model too large for the machine is refused before anything is allocated: allocating a
// million layers one by one took over a minute and then blamed the batch size.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "nn/config.h"

namespace keel::app {

// Parameters of a GPT-2 with config m (an estimate exact to within the LayerNorms and biases).
double estimated_parameters(const nn::GPT2Config& m);

// ConfigError naming --n-layer / --n-embd when training m needs more memory than the machine
// has: weights, gradients and two AdamW moments, 16 bytes per parameter in f32. Only checked
// on the CPU, where the physical memory is known and allocation does not fail fast.
void check_model_fits(const nn::GPT2Config& m, Device device);

}  // namespace keel::app
