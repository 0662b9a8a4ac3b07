// CPU kernel of dropout: the mask, element by element from the Philox stream, as the CUDA
// kernel draws it, so a run gives the same mask on either device.
#include "ops/cpu/dropout.h"

#include "core/random.h"

namespace keel::cpu {

// mask (N) contiguous <- keep_scale where philox_uniform(key, base, i) > p, else 0
void dropout_mask(Tensor& mask, uint64_t key, uint64_t base, float p, double keep_scale) {
  visit_dtype<CpuFloat>(mask.dtype(), "dropout", [&]<typename T>() {
    T* m = mask.data<T>();
    const T keep = static_cast<T>(keep_scale);
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = philox_uniform(key, base, i) > p ? keep : T(0);
  });
}

}  // namespace keel::cpu
