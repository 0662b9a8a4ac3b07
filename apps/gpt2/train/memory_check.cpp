#include "apps/gpt2/train/memory_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include "core/cuda/runtime.h"
#include "core/error.h"

namespace keel::app {

double estimated_parameters(const nn::GPT2Config& m) {
  const double C = double(m.n_embd), L = double(m.n_layer);
  // Per layer: qkv (3 C^2), projection (C^2), MLP (8 C^2); embeddings: tokens and positions.
  double p = L * 12 * C * C + (double(m.vocab_size) + double(m.block_size)) * C;
  if (!m.tie_embeddings) p += double(m.vocab_size) * C;
  return p;
}

void check_model_fits(const nn::GPT2Config& m, double have, const std::string& have_text) {
  const double params = estimated_parameters(m);
  const double need = 16 * params;
  if (need > have)
    throw ConfigError("train",
                      fmt::format("--n-layer {} --n-embd {}: the model has about {:.3g} parameters and needs about "
                                  "{:.3g} GB to train, more than {}",
                                  m.n_layer, m.n_embd, params, need / 1e9, have_text),
                      "use fewer layers (--n-layer) or a smaller width (--n-embd)");
}

void check_model_fits(const nn::GPT2Config& m, Device device) {
  if (device.is_cuda()) {
    // The free memory, not the total: another process may hold part of the GPU. Asked before
    // the model exists, so none of it is ours yet.
    const double free = double(cuda::free_memory(device.index));
    check_model_fits(m, free, fmt::format("the {:.3g} GB free on {} ({})", free / 1e9, device.str(),
                                          cuda::device_info(device.index).name));
    return;
  }
  const double have = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  if (have > 0) check_model_fits(m, have, fmt::format("this machine's {:.3g} GB", have / 1e9));
}

}  // namespace keel::app
