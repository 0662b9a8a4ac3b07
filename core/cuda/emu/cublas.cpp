// cuBLAS on the emulated device: the handful of cuBLAS functions keel calls (handle setup,
// cublasGemmEx, cublasGemmStridedBatchedEx), defined against the real cublas_v2.h so that any
// signature drift is a compile error, plus the host GEMM engine that cublaslt.cpp shares.
//
// Why: the emulated build runs keel's .cu sources without a GPU, and matmul must behave as on one:
// column-major operands, cuBLAS's argument checks and status codes, f32 accumulation, and outputs
// rounded to nearest-even into f16/bf16. A wrong argument from keel therefore gives a wrong result
// or the status cuBLAS would return, never a silently "fixed" answer.
//
// Work runs synchronously on the calling thread, after cudaStreamSynchronize(handle's stream) so
// that kernels queued before the call have written the operands (a no-op when the emulated
// runtime itself runs launches synchronously). On a stream that is capturing a graph the call
// is recorded after the same checks instead, and computes at each replay (graph.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "core/cuda/emu/block.h"
#include "core/cuda/emu/cublas_gemm.h"
#include "core/cuda/emu/graph.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // recorded, never used: the host engine needs no scratch from it
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

// OpenMP spreads one GEMM over the cores where the build has it; not under ThreadSanitizer, whose
// view of libgomp's thread pool is uninstrumented and would report its hand-offs as races (the
// emu-tsan build compiles this file without -fsanitize=thread but defines KEEL_EMU_TSAN).
#if defined(__SANITIZE_THREAD__) || defined(KEEL_EMU_TSAN)
#define KEEL_EMU_BLAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KEEL_EMU_BLAS_TSAN 1
#endif
#endif
#if defined(_OPENMP) && !defined(KEEL_EMU_BLAS_TSAN)
#define KEEL_EMU_BLAS_THREADS 1
#endif

namespace keel::cuda::emu::blas {

namespace {

// Micro tile: MR rows x NR columns of D accumulated in registers; MC rows of packed A per pass so
// that the slice a thread sweeps stays in cache while it walks its columns.
constexpr int64_t MR = 8, NR = 4, MC = 64;

float load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(void* p, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// TF32 keeps 10 mantissa bits; the tensor-core conversion rounds to nearest, ties away from zero.
float to_tf32(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf and NaN pass through
  u = (u + 0x1000u) & 0xffffe000u;
  return std::bit_cast<float>(u);
}

float round_input(float v, InputRounding r) {
  switch (r) {
    case InputRounding::tf32: return to_tf32(v);
    case InputRounding::f16: return __half2float(__float2half_rn(v));
    case InputRounding::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}

const void* offset(const void* p, cudaDataType_t t, int64_t elements) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(type_size(t));
}

// op(A) (m, k) -> panels of MR rows: out[(q * k + p) * MR + r] = op(A)(q * MR + r, p), rows past
// m zero. f32 from here on, so the inner loop converts nothing.
void pack_a(const GemmInput& a, const void* base, int64_t m, int64_t k, InputRounding rnd, std::vector<float>& out) {
  const int64_t panels = (m + MR - 1) / MR;
  out.assign(static_cast<size_t>(panels * k * MR), 0.0f);
  const bool tr = a.op != CUBLAS_OP_N;
#ifdef KEEL_EMU_BLAS_THREADS
#pragma omp parallel for schedule(static)
#endif
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t r = 0; r < MR && q * MR + r < m; ++r) {
        const int64_t i = q * MR + r;
        out[static_cast<size_t>((q * k + p) * MR + r)] =
            round_input(load(base, a.type, tr ? p + i * a.ld : i + p * a.ld), rnd);
      }
}

// op(B) (k, n) -> blocks of NR columns: out[(s * k + p) * NR + c] = op(B)(p, s * NR + c).
void pack_b(const GemmInput& b, const void* base, int64_t k, int64_t n, InputRounding rnd, std::vector<float>& out) {
  const int64_t blocks = (n + NR - 1) / NR;
  out.assign(static_cast<size_t>(blocks * k * NR), 0.0f);
  const bool tr = b.op != CUBLAS_OP_N;
#ifdef KEEL_EMU_BLAS_THREADS
#pragma omp parallel for schedule(static)
#endif
  for (int64_t s = 0; s < blocks; ++s)
    for (int64_t c = 0; c < NR && s * NR + c < n; ++c) {
      const int64_t j = s * NR + c;
      for (int64_t p = 0; p < k; ++p)
        out[static_cast<size_t>((s * k + p) * NR + c)] =
            round_input(load(base, b.type, tr ? j + p * b.ld : p + j * b.ld), rnd);
    }
}

// acc (NR, MR) = packed A panel (k, MR) times packed B block (k, NR). Every element is one f32
// sum taken in the order p = 0, 1, ..., k-1: f32 and not double because cuBLAS's
// CUBLAS_COMPUTE_32F accumulates in f32, so rounding error here is of the size a GPU shows and
// a tolerance tuned on the emulator holds on hardware. (The GPU's summation order differs, so
// results agree to rounding, not bit for bit.)
void micro_kernel(const float* a, const float* b, int64_t k, float (&acc)[NR][MR]) {
  float c[NR][MR] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* ap = a + p * MR;
    const float* bp = b + p * NR;
    for (int64_t j = 0; j < NR; ++j)
      for (int64_t i = 0; i < MR; ++i) c[j][i] += ap[i] * bp[j];
  }
  std::memcpy(acc, c, sizeof c);
}

}  // namespace

bool is_supported_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

size_t type_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

float gelu_tanh(float v) {
  constexpr float kAlpha = 0.044715f, kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.0f + std::tanh(kBeta * (v + kAlpha * v * v * v)));
}

float gelu_tanh_grad(float v) {
  constexpr float kAlpha = 0.044715f, kBeta = 0.7978845608028654f;
  const float t = std::tanh(kBeta * (v + kAlpha * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kBeta * (1.0f + 3.0f * kAlpha * v * v);
}

// Per batch: pack op(A) and op(B) to f32 (once for a stride-0 operand, the broadcast case), then
// tiles of D in parallel over column blocks. alpha == 0 or k == 0 reads neither A nor B (as the
// reference BLAS), and beta == 0 never reads C, so NaN there cannot leak into D.
void gemm(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0 || keel::emu::count_only()) return;
  const bool product = g.k > 0 && g.alpha != 0.0f;
  std::vector<float> pa, pb;
  const int64_t panels = (g.m + MR - 1) / MR, blocks = (g.n + NR - 1) / NR;
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    if (product) {
      if (bi == 0 || g.a.stride != 0) pack_a(g.a, offset(g.a.p, g.a.type, bi * g.a.stride), g.m, g.k, g.rounding, pa);
      if (bi == 0 || g.b.stride != 0) pack_b(g.b, offset(g.b.p, g.b.type, bi * g.b.stride), g.k, g.n, g.rounding, pb);
    }
    const void* c = g.beta != 0.0f ? offset(g.c.p, g.c.type, bi * g.c.stride) : nullptr;
    void* d = const_cast<void*>(offset(g.d.p, g.d.type, bi * g.d.stride));
    void* aux = g.aux.p ? const_cast<void*>(offset(g.aux.p, g.aux.type, bi * g.aux.stride)) : nullptr;
#ifdef KEEL_EMU_BLAS_THREADS
#pragma omp parallel
#endif
    for (int64_t q0 = 0; q0 < panels; q0 += MC / MR) {
#ifdef KEEL_EMU_BLAS_THREADS
#pragma omp for schedule(static) nowait
#endif
      for (int64_t s = 0; s < blocks; ++s)
        for (int64_t q = q0; q < std::min(panels, q0 + MC / MR); ++q) {
          float acc[NR][MR] = {};
          if (product) micro_kernel(pa.data() + q * g.k * MR, pb.data() + s * g.k * NR, g.k, acc);
          for (int64_t jj = 0; jj < NR && s * NR + jj < g.n; ++jj)
            for (int64_t ii = 0; ii < MR && q * MR + ii < g.m; ++ii) {
              const int64_t i = q * MR + ii, j = s * NR + jj;
              float v = product ? g.alpha * acc[jj][ii] : 0.0f;
              if (c) v += g.beta * load(c, g.c.type, i + j * g.c.ld);
              if (g.bias) v += load(g.bias, g.bias_type, i);
              if (g.dgelu) {
                v *= gelu_tanh_grad(load(aux, g.aux.type, i + j * g.aux.ld));
              } else if (aux) {
                store(aux, g.aux.type, i + j * g.aux.ld, v);
              }
              store(d, g.d.type, i + j * g.d.ld, g.gelu ? gelu_tanh(v) : v);
            }
        }
    }
  }
}

}  // namespace keel::cuda::emu::blas

namespace {

using namespace keel::cuda::emu::blas;

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The (A = B, C) type pairs cublasGemmEx supports with an f32 compute type; what the compute
// type and math mode do to the inputs goes to *rounding. Other compute types (16F, 64F, 32I,
// emulated ones) exist in cuBLAS but keel does not use them: NOT_SUPPORTED here, said plainly.
cublasStatus_t check_types(const cublasContext& h, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                           cublasComputeType_t compute, InputRounding* rounding) {
  const bool all_f32 = at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: {
      if (at != bt || !is_supported_type(at) || (ct != at && ct != CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
      // The math mode reaches f32 operands only, and never a pedantic compute type.
      const int mode = static_cast<int>(h.math) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
      *rounding = InputRounding::none;
      if (compute == CUBLAS_COMPUTE_32F && at == CUDA_R_32F) {
        if (mode == CUBLAS_TF32_TENSOR_OP_MATH) *rounding = InputRounding::tf32;
        if (mode == CUBLAS_TENSOR_OP_MATH) *rounding = InputRounding::f16;  // documented as FAST_16F
      }
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLAS_COMPUTE_32F_FAST_16F: *rounding = InputRounding::f16; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: *rounding = InputRounding::bf16; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: *rounding = InputRounding::tf32; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return all_f32 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;  // the fast types take f32 only
}

// Every algo selects the same host computation; only values outside the enum are refused.
bool valid_algo(cublasGemmAlgo_t algo) {
  const int a = static_cast<int>(algo);
  return (a >= CUBLAS_GEMM_DEFAULT && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
         a == 999;  // 999: AUTOTUNE (CUDA 13)
}

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C for each of `batch` matrices, checked as
// cublasGemmEx / cublasGemmStridedBatchedEx check: bad handle, then bad values, then types.
cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                       cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                       long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, transa == CUBLAS_OP_N ? m : k) || ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!valid_algo(algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
  GemmArgs g;
  if (cublasStatus_t st = check_types(*handle, at, bt, ct, compute, &g.rounding); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  g.m = m, g.n = n, g.k = k, g.batch = batch;
  g.alpha = *static_cast<const float*>(alpha);  // f32 compute types take f32 scalars
  g.beta = *static_cast<const float*>(beta);
  g.a = {A, at, transa, lda, sa};
  g.b = {B, bt, transb, ldb, sb};
  g.c = g.d = {C, ct, ldc, sc};
  // What a GPU kernel would fault on (a null or misaligned operand it reads) is an execution
  // failure here rather than a crash of the test process.
  const bool product = k > 0 && g.alpha != 0.0f;
  if ((product && (!A || !B || !aligned(A, type_size(at)) || !aligned(B, type_size(bt)))) || !C ||
      !aligned(C, type_size(ct)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  // Captured: the checked arguments by value, the product at each replay (alpha and beta
  // are read now, as the library reads host-side scalars when it enqueues the kernel).
  if (keel::emu::is_capturing(handle->stream)) {
    keel::emu::capture(handle->stream, [g] { gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
  }
  if (cudaStreamSynchronize(handle->stream) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  gemm(g);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

namespace keel::cuda::emu::blas {
namespace {
struct Handles {
  std::mutex mu;
  std::set<const void*> live;
};
Handles& handles() {
  static Handles* h = new Handles;  // never destroyed: it must outlive every static destructor
  return *h;
}
}  // namespace
void track_handle(const void* handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().live.insert(handle);
}
void untrack_handle(const void* handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().live.erase(handle);
}
}  // namespace keel::cuda::emu::blas

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext{};
  if (*handle) keel::cuda::emu::blas::track_handle(*handle);
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  keel::cuda::emu::blas::untrack_handle(handle);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// As in cuBLAS, binding a stream drops a workspace set by cublasSetWorkspace (back to the
// default pool): set the stream first, then the workspace.
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS requires the user workspace to be 256-byte aligned.
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!aligned(workspace, 256)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case 4:  // CUBLAS_FP32_EMULATED_BF16X9_MATH (newer headers): f32 accuracy, so plain f32 here
    case 8: handle->math = mode; return CUBLAS_STATUS_SUCCESS;  // CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: f64 only
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, column-major.
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1,
                 computeType, algo);
}

// For b < batchCount: C + b*strideC (m, n) = alpha op(A + b*strideA) op(B + b*strideB) + beta
// C + b*strideC. Strides are in elements and unchecked (0 broadcasts one matrix), as in cuBLAS.
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
    long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc, long long int strideC,
    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
                 ldc, strideC, batchCount, computeType, algo);
}

}  // extern "C"
