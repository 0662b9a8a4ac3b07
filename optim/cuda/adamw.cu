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

// What a gated launch (adamw_step_multi_gated) reads on the device; control null: an ungated one.
struct GateArgs {
  const double* control;   // (2): [applied, the clip's factor]
  const int64_t* counts;   // (P): step counts, already advanced by adamw_decide
  const double* bc1;       // (L): 1 - b1^t
  const double* bc2_sqrt;  // (L): sqrt(1 - b2^t)
  double lr;
};

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
  int counter[kTableSize];  // gated: the tensor's entry of GateArgs::counts
  AdamWCoeffs<C> shared;
  GateArgs gate;
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
  if (const double* control = table.gate.control) {
    // The step the host would have taken once it read the scalars: AdamW::set_bias_correction's
    // f64 division by the denominators the host computed (AdamW::bias_denominators).
    if (control[0] == 0.0) return;  // not applied: a non-finite loss or gradient
    const int64_t t = table.gate.counts[table.counter[j]];
    k.step_size = C(table.gate.lr / table.gate.bc1[t]);
    k.bc2_sqrt = C(table.gate.bc2_sqrt[t]);
    k.grad_scale32 = float(control[1]);
    k.grad_scale64 = control[1];
  }
  P* param = static_cast<P*>(table.param[j]);
  const G* grad = static_cast<const G*>(table.grad[j]);
  for (int64_t i = block * kThreads + threadIdx.x, n = table.n[j]; i < n; i += blocks * kThreads)
    adamw_element(param, grad, table.m[j], table.v[j], table.master[j], i, k);
}

// scalars (S) f64, counts (P) i64, stepped (P) i32 -> control (2) f64; counts += stepped when
// applied. One block of kThreads.
__global__ void decide_kernel(const double* __restrict__ scalars, int64_t sumsq_slot, int64_t loss_slot,
                              double max_norm, int64_t* __restrict__ counts, const int* __restrict__ stepped,
                              int64_t n, double* __restrict__ control) {
  const double norm = ::sqrt(scalars[sumsq_slot]), loss = scalars[loss_slot];
  const bool applied = norm - norm == 0.0 && loss - loss == 0.0;  // finite: inf - inf and NaN - NaN are NaN
  if (threadIdx.x == 0) {
    control[0] = applied ? 1.0 : 0.0;
    control[1] = applied && max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  }
  if (!applied) return;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) counts[i] += stepped[i];
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

namespace {
void check_gate_tensor(const Tensor& t, DType dtype, int dev, const char* what) {
  if (!t.defined() || t.dtype() != dtype || !t.is_contiguous() || !t.device().is_cuda() || t.device().index != dev)
    throw DeviceError("AdamW::step_gated", std::string(what) + " must be a contiguous " + dtype_name(dtype) +
                                               " tensor on the parameters' GPU");
}

void check_gate(const AdamWGate& g, int dev) {
  check_gate_tensor(g.scalars, DType::f64, dev, "the step's scalars");
  check_gate_tensor(g.counts, DType::i64, dev, "the step counts");
  check_gate_tensor(g.stepped, DType::i32, dev, "the stepped flags");
  check_gate_tensor(g.control, DType::f64, dev, "the control");
  check_gate_tensor(g.bc1, DType::f64, dev, "the bias-correction table");
  check_gate_tensor(g.bc2_sqrt, DType::f64, dev, "the bias-correction table");
  const int64_t s = g.scalars.numel();
  if (g.sumsq_slot < 0 || g.sumsq_slot >= s || g.loss_slot < 0 || g.loss_slot >= s || g.control.numel() != 2 ||
      g.stepped.numel() != g.counts.numel() || g.bc1.numel() != g.bc2_sqrt.numel())
    throw ShapeError("AdamW::step_gated", "the gate's slots or table sizes do not fit its tensors");
}

// adamw_step_multi, gated when gate is given (counter then holds each item's entry of counts).
void step_multi(std::vector<AdamWTensors>& items, const std::vector<int>* counter, const AdamWGate* gate) {
  // Grouped by device and dtypes, each group in list order: the elements are independent, so
  // the order changes no bits, only which launch an item rides in. Everything is checked before
  // the first launch, so a bad item updates nothing.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<AdamWTensors*, int>>> groups;
  const int gate_dev = gate && gate->counts.defined() ? gate->counts.device().index : -1;
  if (gate) {
    check_gate(*gate, gate_dev);
    if (counter->size() != items.size()) throw ShapeError("AdamW::step_gated", "expected a step-count entry per parameter");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    AdamWTensors& it = items[i];
    checked_master(it.param, it.grad, it.m, it.v, it.master);
    if (!it.param.device().is_cuda()) throw DeviceError("adamw_step", "expected CUDA tensors, got " + it.param.device().str());
    const AdamWScalars& s0 = items.front().s;
    if (it.s.beta1 != s0.beta1 || it.s.beta2 != s0.beta2 || it.s.eps != s0.eps || it.s.grad_scale != s0.grad_scale)
      throw ValueError("adamw_step", "one step's parameters must share beta1, beta2, eps and grad_scale");
    if (it.param.numel() == 0) continue;
    if (gate && it.param.device().index != gate_dev)
      throw DeviceError("AdamW::step_gated", "a parameter is on another GPU than the step's control");
    if (gate && ((*counter)[i] < 0 || (*counter)[i] >= gate->counts.numel()))
      throw ShapeError("AdamW::step_gated", "a step-count entry is outside the counts");
    groups[{it.param.device().index, int(it.param.dtype()), int(it.grad.dtype())}].push_back({&it, gate ? (*counter)[i] : 0});
  }
  GateArgs args{};
  if (gate)
    args = GateArgs{static_cast<const double*>(gate->control.raw_data()), static_cast<const int64_t*>(gate->counts.raw_data()),
                    static_cast<const double*>(gate->bc1.raw_data()), static_cast<const double*>(gate->bc2_sqrt.raw_data()),
                    gate->lr};
  for (auto& [key, group] : groups) {
    const int dev = std::get<0>(key);
    KEEL_CHECK_CUDA(cudaSetDevice(dev));
    cudaStream_t stream = ::keel::cuda::detail::stream(dev);
    const Tensor& first = group.front().first->param;
    ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(first.dtype(), "adamw_step", [&]<typename P>() {
      ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(group.front().first->grad.dtype(), "adamw_step", [&]<typename G>() {
        using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
        for_each_table(static_cast<int>(group.size()), [&](int lo, int count) {
          AdamWTable<C> table{};  // zeros past `count`: no uninitialised bytes go to the device
          table.shared = AdamWCoeffs<C>(group[size_t(lo)].first->s);
          table.gate = args;
          table.count = count;
          for (int j = 0; j < count; ++j) {
            AdamWTensors& it = *group[size_t(lo + j)].first;
            table.counter[j] = group[size_t(lo + j)].second;
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

}  // namespace

void adamw_step_multi(std::vector<AdamWTensors>& items) { step_multi(items, nullptr, nullptr); }

void adamw_step_multi_gated(std::vector<AdamWTensors>& items, const std::vector<int>& counter, const AdamWGate& gate) {
  step_multi(items, &counter, &gate);
}

void adamw_decide(AdamWGate& gate) {
  const int dev = gate.counts.defined() ? gate.counts.device().index : -1;
  check_gate(gate, dev);
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  keel::cuda::launch_kernel(decide_kernel, 1, kThreads, 0, ::keel::cuda::detail::stream(dev),
                            static_cast<const double*>(gate.scalars.raw_data()), gate.sumsq_slot, gate.loss_slot,
                            gate.max_norm, static_cast<int64_t*>(gate.counts.raw_data()),
                            static_cast<const int*>(gate.stepped.raw_data()), gate.counts.numel(),
                            static_cast<double*>(gate.control.raw_data()));
  KEEL_CHECK_LAUNCH();
}

}  // namespace keel::optim::cuda
