// Attention maps: the probabilities one head of a trained model puts on each earlier token of a
// passage, drawn as a T x T picture (rows are queries, columns keys), so a student can see a
// local head's band next to a global head's sparse pattern.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt2.h"

namespace keel::app {

// ids (T) through the model up to `layer` -> (H, T, T) f32 on the CPU: row i is query i's
// attention over keys 0..T-1 (rows sum to 1; zero where the head may not look). Runs without
// gradients on the model's device. ConfigError for a layer out of range or an empty passage,
// ShapeError when T exceeds the model's context.
Tensor attention_probabilities(nn::GPT2& model, const std::vector<int32_t>& ids, int64_t layer);

// probs: row-major (T, T), one head; labels: T token strings. -> an <svg> document: one cell per
// (query, key) shaded by probability (white 0 .. dark 1), tokens along both axes, and each cell's
// <title> "query i -> key j: p" (hover text, and what tests read back).
std::string attention_map_svg(const std::vector<float>& probs, const std::vector<std::string>& labels,
                              const std::string& title);

}  // namespace keel::app
