// KEEL_HD marks a small inline function that both the host and CUDA kernels call, so that one
// definition (a window's band, the AdamW update) serves both sides: under nvcc it is
// __host__ __device__, for the host compiler it is nothing.
#pragma once

#if defined(__CUDACC__)
#define KEEL_HD __host__ __device__
#else
#define KEEL_HD
#endif
