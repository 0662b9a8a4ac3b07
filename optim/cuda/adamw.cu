// The fused AdamW kernel: one pass over the elements of a parameter, reading grad, m, v and
// the master weight, writing m, v, master and the parameter. Memory-bound: per element it
// moves ~2 (grad) + 8 (m, v) + 4 (master) bytes in and 8 + 4 + 2 out for a bf16 parameter,
// and nothing else, which is the least any AdamW with f32 state can move.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "optim/adamw_math.h"
#include "optim/cuda/adamw.h"
#include "optim/cuda/multi_tensor.cuh"

namespace keel::optim::cuda {

namespace {
using ::keel::cuda::from_f32;
using ::keel::cuda::to_f32;

constexpr int kThreads = 256;



// Element i of one parameter: param (N) P, grad (N) G, m, v (N) C, master (N) f32 or null. C =
// f64 only when P = f64. The one body of both kernels below, so the multi-tensor step is the
// per-tensor one's bits.
template <typename P, typename G, typename C>
__device__ void adamw_element(P* __restrict__ param, const G* __restrict__ grad, C* __restrict__ m,
                              C* __restrict__ v, float* __restrict__ master, int64_t i, const AdamWCoeffs<C>& k) {
  G gi;  // times the clip's factor, as scale_kernel would have left it (optim/cuda/grad_math.cu)
  if constexpr (std::is_same_v<G, double>) gi = grad[i] * k.grad_scale64;
  else gi = from_f32<G>(to_f32(grad[i]) * k.grad_scale32);
  C g, w;
  if constexpr (std::is_same_v<C, double>) {
    if constexpr (std::is_same_v<G, double>) g = gi;
    else g = to_f32(gi);
    w = param[i];
  } else {
    g = to_f32(gi);
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

// param (N) P, grad (N) G, m, v (N) C, master (N) f32 or null.
template <typename P, typename G, typename C>
__global__ void adamw_kernel(P* __restrict__ param, const G* __restrict__ grad, C* __restrict__ m,
                             C* __restrict__ v, float* __restrict__ master, int64_t n, AdamWCoeffs<C> k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(param, grad, m, v, master, i, k);
}

// Up to kTableSize parameters of one (P, G) pair (optim/cuda/multi_tensor.cuh). The betas and eps
// are the step's; decay, step size and bias correction are each tensor's (its decay flag, its
// step count). Under 4 KiB for C = f64: 48 x (5 pointers, n, 3 scalars, a block offset).
template <typename C>
struct AdamWTable {
  void* param[kTableSize];
  const void* grad[kTableSize];
  C* m[kTableSize];
  C* v[kTableSize];
  float* master[kTableSize];
  int64_t n[kTableSize];
  C decay[kTableSize], step_size[kTableSize], bc2_sqrt[kTableSize];
  int first_block[kTableSize + 1];
  AdamWCoeffs<C> shared;
  int count;
};
static_assert(sizeof(AdamWTable<double>) <= 4096, "a launch's table must fit the 4 KiB of kernel arguments");

// table's parameters: param (N_j) P, grad (N_j) G, m, v (N_j) C, master (N_j) f32 or null, each
// updated as adamw_kernel would, by the blocks the table gives it.
template <typename P, typename G, typename C>
__global__ void adamw_multi_kernel(AdamWTable<C> table) {
  const int j = tensor_of_block(table.first_block, blockIdx.x);
  const int64_t block = blockIdx.x - table.first_block[j], blocks = table.first_block[j + 1] - table.first_block[j];
  AdamWCoeffs<C> k = table.shared;
  k.decay = table.decay[j];
  k.step_size = table.step_size[j];
  k.bc2_sqrt = table.bc2_sqrt[j];
  P* param = static_cast<P*>(table.param[j]);
  const G* grad = static_cast<const G*>(table.grad[j]);
  for (int64_t i = block * kThreads + threadIdx.x, n = table.n[j]; i < n; i += blocks * kThreads)
    adamw_element(param, grad, table.m[j], table.v[j], table.master[j], i, k);
}

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? b : 65535);
}


// param, grad, m, v, master as adamw_step takes them -> master's pointer (null when undefined).
// Throws on any tensor adamw_step's contract rules out.
float* checked_master(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& master) {
  const int64_t n = param.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &m, &v})
    if (t->device() != param.device() || !t->is_contiguous() || t->numel() != n)
      throw DeviceError("adamw_step", "grad, m and v must be contiguous, of the parameter's size, on its device");
  if (!param.is_contiguous()) throw ValueError("adamw_step", "the parameter must be contiguous");
  const DType moment = param.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (m.dtype() != moment || v.dtype() != moment)
    throw DTypeError("adamw_step", std::string("moments must be ") + dtype_name(moment));
  if (!master.defined()) return nullptr;
  if (master.dtype() != DType::f32 || master.numel() != n || master.device() != param.device())
    throw DTypeError("adamw_step", "the master copy must be f32 with the parameter's size and device");
  return static_cast<float*>(const_cast<Tensor&>(master).raw_data());
}
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s) {
  float* master_ptr = checked_master(param, grad, m, v, master);
  const int64_t n = param.numel();
  if (n == 0) return;
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

void adamw_step_multi(std::vector<AdamWTensors>& items) {
  // Grouped by device and dtypes, each group in list order: the elements are independent, so
  // the order changes no bits, only which launch an item rides in. Everything is checked before
  // the first launch, so a bad item updates nothing.
  std::map<std::tuple<int, int, int>, std::vector<AdamWTensors*>> groups;
  for (AdamWTensors& it : items) {
    checked_master(it.param, it.grad, it.m, it.v, it.master);
    if (!it.param.device().is_cuda()) throw DeviceError("adamw_step", "expected CUDA tensors, got " + it.param.device().str());
    const AdamWScalars& s0 = items.front().s;
    if (it.s.beta1 != s0.beta1 || it.s.beta2 != s0.beta2 || it.s.eps != s0.eps || it.s.grad_scale != s0.grad_scale)
      throw ValueError("adamw_step", "one step's parameters must share beta1, beta2, eps and grad_scale");
    if (it.param.numel() == 0) continue;
    groups[{it.param.device().index, int(it.param.dtype()), int(it.grad.dtype())}].push_back(&it);
  }
  for (auto& [key, group] : groups) {
    const int dev = std::get<0>(key);
    KEEL_CHECK_CUDA(cudaSetDevice(dev));
    cudaStream_t stream = ::keel::cuda::detail::stream(dev);
    const Tensor& first = group.front()->param;
    ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(first.dtype(), "adamw_step", [&]<typename P>() {
      ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(group.front()->grad.dtype(), "adamw_step", [&]<typename G>() {
        using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
        for_each_table(static_cast<int>(group.size()), [&](int lo, int count) {
          AdamWTable<C> table{};  // zeros past `count`: no uninitialised bytes go to the device
          table.shared = AdamWCoeffs<C>(group[size_t(lo)]->s);
          table.count = count;
          for (int j = 0; j < count; ++j) {
            AdamWTensors& it = *group[size_t(lo + j)];
            const AdamWCoeffs<C> k(it.s);
            table.param[j] = it.param.raw_data();
            table.grad[j] = it.grad.raw_data();
            table.m[j] = static_cast<C*>(it.m.raw_data());
            table.v[j] = static_cast<C*>(it.v.raw_data());
            table.master[j] = checked_master(it.param, it.grad, it.m, it.v, it.master);
            table.n[j] = it.param.numel();
            table.decay[j] = k.decay, table.step_size[j] = k.step_size, table.bc2_sqrt[j] = k.bc2_sqrt;
            table.first_block[j + 1] = table.first_block[j] + blocks_for(it.param.numel());
          }
          keel::cuda::launch_kernel(adamw_multi_kernel<P, G, C>, table.first_block[count], kThreads, 0, stream, table);
          KEEL_CHECK_LAUNCH();
        });
      });
    });
  }
}

}  // namespace keel::optim::cuda
