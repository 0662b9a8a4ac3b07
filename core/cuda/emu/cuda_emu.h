// The emulated CUDA device's prelude: the build force-includes this header (-include) into
// every .cu file of the `emu` and `emu-tsan` presets, which the host compiler then compiles as
// ordinary C++. It keeps CUDA's own host headers (types, error codes, half and bfloat16 with
// their exact rounding, the runtime's declarations, whose definitions live in runtime.cpp) and
// adds what only nvcc knew: the qualifiers, the built-in variables, __shared__ memory, the
// device functions.
#pragma once

// Device code, compiled by the host compiler (core/host_device.h: KEEL_DEVICE_CODE).
#define KEEL_EMULATED_DEVICE_CODE 1

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

// Qualifiers: a kernel is a host function the emulator calls once per CUDA thread.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
// Shared memory is declared with KEEL_SHARED and KEEL_DYNAMIC_SHARED (core/cuda/launch.cuh),
// which give each block its own and count it against the launch's limit; a plain __shared__
// variable would be one for every block at once, uncounted, so it does not compile.
#define __shared__ static_assert(false, "declare static shared memory with KEEL_SHARED (core/cuda/launch.cuh)");

#include "core/cuda/emu/block.h"
#include "core/cuda/emu/device_functions.h"
