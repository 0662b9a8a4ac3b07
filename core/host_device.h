// KEEL_HD marks a small inline function that both the host and CUDA kernels call, so that one
// definition (a window's band, the AdamW update) serves both sides: under nvcc it is
// __host__ __device__, for the host compiler it is nothing.
//
// KEEL_DEVICE_CODE is 1 where code is compiled as device code: nvcc's device pass (where
// __CUDA_ARCH__ is defined) and, on the emulated GPU, every .cu file (core/cuda/emu/cuda_emu.h
// defines KEEL_EMULATED_DEVICE_CODE there), whose kernels are host functions but device code all
// the same. A branch on it is how device code rounds or computes differently from host code, and
// the emulated GPU runs the device side (docs/emulation.md, "Device-only code"). An inline
// function whose body depends on it goes between KEEL_BEGIN_DEVICE_VARIANT and
// KEEL_END_DEVICE_VARIANT: the emulated build links both compilations into one program, where the
// two bodies must be two functions (nvcc's two passes never meet).
#pragma once

#if defined(__CUDACC__)
#define KEEL_HD __host__ __device__
#else
#define KEEL_HD
#endif

#if defined(__CUDA_ARCH__) || defined(KEEL_EMULATED_DEVICE_CODE)
#define KEEL_DEVICE_CODE 1
#else
#define KEEL_DEVICE_CODE 0
#endif

#if defined(KEEL_EMULATED_DEVICE_CODE)
#define KEEL_BEGIN_DEVICE_VARIANT inline namespace emulated_device {
#define KEEL_END_DEVICE_VARIANT }
#else
#define KEEL_BEGIN_DEVICE_VARIANT
#define KEEL_END_DEVICE_VARIANT
#endif
