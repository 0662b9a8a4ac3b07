// Checked CUDA, cuBLAS and NCCL calls, for .cu and CUDA-aware .cpp files only.
// Every call into those libraries goes through one of these macros, so a failure reports the
// statement, the file and the line, as a keel::CudaError (or OutOfMemoryError).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace keel::cuda::detail {
[[noreturn]] void throw_cuda(cudaError_t err, const char* stmt, const char* file, int line);
[[noreturn]] void throw_library(const char* lib, int status, const char* what, const char* stmt, const char* file,
                                int line);
cudaStream_t stream(int device);  // the one compute stream of a device
}  // namespace keel::cuda::detail

#define KEEL_CHECK_CUDA(stmt)                                                              \
  do {                                                                                     \
    cudaError_t keel_err_ = (stmt);                                                        \
    if (keel_err_ != cudaSuccess) ::keel::cuda::detail::throw_cuda(keel_err_, #stmt, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site.
#define KEEL_CHECK_LAUNCH() KEEL_CHECK_CUDA(cudaGetLastError())

#define KEEL_CHECK_CUBLAS(stmt)                                                            \
  do {                                                                                     \
    int keel_st_ = static_cast<int>(stmt);                                                 \
    if (keel_st_ != 0) ::keel::cuda::detail::throw_library("cuBLAS", keel_st_, "", #stmt, __FILE__, __LINE__); \
  } while (0)

#define KEEL_CHECK_NCCL(stmt)                                                              \
  do {                                                                                     \
    ncclResult_t keel_st_ = (stmt);                                                        \
    if (keel_st_ != ncclSuccess)                                                           \
      ::keel::cuda::detail::throw_library("NCCL", static_cast<int>(keel_st_), ncclGetErrorString(keel_st_), #stmt, \
                                          __FILE__, __LINE__);                             \
  } while (0)
