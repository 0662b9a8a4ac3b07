// The fused AdamW kernel: one pass over the elements of a parameter, reading grad, m, v and
// the master weight, writing m, v, master and the parameter. Memory-bound: per element it
// moves ~2 (grad) + 8 (m, v) + 4 (master) bytes in and 8 + 4 + 2 out for a bf16 parameter,
// and nothing else, which is the least any AdamW with f32 state can move.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <initializer_list>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "optim/adamw_math.h"
#include "optim/cuda/adamw.h"

namespace keel::optim::cuda {

namespace {
using ::keel::cuda::from_f32;
using ::keel::cuda::to_f32;

constexpr int kThreads = 256;



// param (N) P, grad (N) G, m, v (N) C, master (N) f32 or null. C = f64 only when P = f64.
template <typename P, typename G, typename C>
__global__ void adamw_kernel(P* __restrict__ param, const G* __restrict__ grad, C* __restrict__ m,
                             C* __restrict__ v, float* __restrict__ master, int64_t n, AdamWCoeffs<C> k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    C g, w;
    if constexpr (std::is_same_v<C, double>) {
      if constexpr (std::is_same_v<G, double>) g = grad[i];
      else g = to_f32(grad[i]);
      w = param[i];
    } else {
      g = to_f32(grad[i]);
      w = master ? master[i] : to_f32(param[i]);
    }
    C mi = m[i], vi = v[i];
    adamw_update(g, w, mi, vi, k);
    m[i] = mi;
    v[i] = vi;
    if constexpr (std::is_same_v<C, double>) {
      param[i] = static_cast<P>(w);
    } else {
      if (master) master[i] = w;
      param[i] = from_f32<P>(w);
    }
  }
}

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? b : 65535);
}
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s) {
  const int64_t n = param.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &m, &v})
    if (t->device() != param.device() || !t->is_contiguous() || t->numel() != n)
      throw DeviceError("adamw_step", "grad, m and v must be contiguous, of the parameter's size, on its device");
  if (!param.is_contiguous()) throw ValueError("adamw_step", "the parameter must be contiguous");
  if (n == 0) return;
  const bool is_f64 = param.dtype() == DType::f64;
  const DType moment = is_f64 ? DType::f64 : DType::f32;
  if (m.dtype() != moment || v.dtype() != moment)
    throw DTypeError("adamw_step", std::string("moments must be ") + dtype_name(moment));
  float* master_ptr = nullptr;
  if (master.defined()) {
    if (master.dtype() != DType::f32 || master.numel() != n || master.device() != param.device())
      throw DTypeError("adamw_step", "the master copy must be f32 with the parameter's size and device");
    master_ptr = static_cast<float*>(master.raw_data());
  }
  const int dev = param.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(param.dtype(), "adamw_step", [&]<typename P>() {
    ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(grad.dtype(), "adamw_step", [&]<typename G>() {
      using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
      keel::cuda::launch_kernel(adamw_kernel<P, G, C>, blocks_for(n), kThreads, 0, stream,
          static_cast<P*>(param.raw_data()), static_cast<const G*>(grad.raw_data()), static_cast<C*>(m.raw_data()),
          static_cast<C*>(v.raw_data()), master_ptr, n, AdamWCoeffs<C>(s));
      KEEL_CHECK_LAUNCH();
    });
  });
}

}  // namespace keel::optim::cuda
