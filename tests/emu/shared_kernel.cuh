// A kernel with both kinds of shared memory, for the tests and the planted bug that check how
// static and dynamic bytes count together against a kernel's limit.
#pragma once

#include "core/cuda/launch.cuh"

namespace keel::emu_test {

// out[0] = stats[15] + buf[n - 1] (0 when n is 0): 64 bytes of static shared memory and n floats
// of dynamic, both written and read.
__global__ void shared_kernel(float* out, int n) {
  KEEL_SHARED(float[16], stats);
  KEEL_DYNAMIC_SHARED(float, buf, 16);
  if (threadIdx.x < 16) stats[threadIdx.x] = 1.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = stats[15] + (n ? buf[n - 1] : 0.0f);
}

}  // namespace keel::emu_test
