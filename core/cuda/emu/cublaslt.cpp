// cuBLASLt on the emulated device: the cuBLASLt functions keel calls for linear's fused bias and
// linear_gelu's fused bias + GELU (ops/cuda/linear_lt.cu: linear_lt), defined against the real
// cublasLt.h, computing with the host GEMM engine of cublas.cpp (core/cuda/emu/cublas_gemm.h).
//
// Why: so linear's cublasLtMatmul path runs without a GPU with cuBLASLt's meaning: descriptors
// carry the transposes, epilogue and bias; layouts carry type, rows, cols and leading dimension
// (column-major); D = alpha op(A) op(B) + beta C, plus with CUBLASLT_EPILOGUE_BIAS a bias of
// length rows(D) added to every column before the rounding to D's type; with the GELU epilogues
// D = gelu(that value) in the tanh form (cublas_gemm.h: gelu_tanh), and with GELU_AUX(_BIAS) the
// value before the GELU is also written to the aux matrix (EPILOGUE_AUX_POINTER, column-major,
// EPILOGUE_AUX_LD a multiple of 8 and at least rows(D), in D's type); with DGELU the aux matrix
// is read instead, the GELU's input, and D = value * gelu'(aux). Supported: compute type
// CUBLAS_COMPUTE_32F (also _PEDANTIC and the _FAST_16F/_16BF/_TF32 variants, which round f32
// inputs as the GPU does) with f32 scalars; A = B in f32, f16 or bf16; C = D in A's type or f32;
// epilogues DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS and DGELU; no batching
// (layout attributes are not settable). Anything else (RELU, DGELU_BGRAD, the bias gradients,
// another aux type) is CUBLAS_STATUS_NOT_SUPPORTED, so an unimplemented feature is loud, not wrong.
//
// Alignment (what is enforced, and why): a null or element-misaligned operand, and a bias pointer
// under 16 bytes of alignment, are CUBLAS_STATUS_EXECUTION_FAILED: on a GPU the kernel faults on
// them (the heuristic never sees how the bias is aligned, and the BIAS kernels load it in 16-byte
// vectors). The aux matrix is held to 16 bytes as well, because its leading dimension must be a
// whole number of such vectors: element-misaligned at the heuristic (which reads the pointer) is
// NOT_SUPPORTED, under 16 bytes at the matmul EXECUTION_FAILED. A minimum-alignment preference
// below an operand's element size leaves the heuristic with no algorithm (NOT_SUPPORTED); an
// algorithm from the heuristic records the alignments its preference promised, and
// cublasLtMatmul with a pointer aligned less than promised is CUBLAS_STATUS_INVALID_VALUE
// (arguments in conflict with the algorithm).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>

#include "core/cuda/emu/cublas_gemm.h"
#include "core/cuda/emu/graph.h"

struct cublasLtContext {
  int unused = 0;  // the host engine keeps no per-handle state
};

namespace {

using namespace keel::cuda::emu::blas;

// The public descriptor types point to fixed-size opaque structs; each box puts the emulator's
// fields after one, so a handle converts back to its box (first member of a standard-layout struct).
struct Desc {
  int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F, pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N, fill_mode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  int32_t bias_type = -1;  // -1: D's type
  const void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t aux_type = -1;  // -1: D's type
};
struct DescBox {
  cublasLtMatmulDescOpaque_t opaque;
  Desc d;
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct LayoutBox {
  cublasLtMatrixLayoutOpaque_t opaque;
  Layout l;
};
struct Pref {
  uint32_t search_mode = 0, reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint64_t max_workspace = 0, impl_mask = ~uint64_t(0);
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's default assumption
  float max_waves = 0.0f;
};
struct PrefBox {
  cublasLtMatmulPreferenceOpaque_t opaque;
  Pref p;
};

Desc& desc(cublasLtMatmulDesc_t h) { return reinterpret_cast<DescBox*>(h)->d; }
const Layout& layout(cublasLtMatrixLayout_t h) { return reinterpret_cast<LayoutBox*>(h)->l; }
Pref& pref(cublasLtMatmulPreference_t h) { return reinterpret_cast<PrefBox*>(h)->p; }

// What the heuristic writes into cublasLtMatmulAlgo_t: a tag and the promised alignments.
constexpr uint64_t kAlgoTag = 0x6b65656c2d656d75;  // "keel-emu"

template <class T>
cublasStatus_t set_field(T& field, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

// Which parts of the epilogue a cublasLtEpilogue_t asks for.
bool epilogue_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epilogue_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
bool epilogue_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

bool valid_op(int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Checks one problem as cuBLASLt does and fills shapes, types and rounding of *g (pointers and
// scalars are the caller's). op(A) is (m, k) and op(B) is (k, n), read off the layouts and the
// transposes; C and D must both be (m, n).
cublasStatus_t check_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
                             GemmArgs* g) {
  if (!valid_op(d.transa) || !valid_op(d.transb) || !valid_op(d.transc)) return CUBLAS_STATUS_INVALID_VALUE;
  for (const Layout* l : {&a, &b, &c, &dl})
    if (l->ld < 1 || static_cast<uint64_t>(l->ld) < l->rows) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  const uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n || dl.rows != m || dl.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  if (std::max({m, n, k}) > uint64_t(INT32_MAX)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.transc != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;  // cuBLASLt: only N for C
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST && d.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // device-vector alpha is not emulated
  switch (d.compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: g->rounding = InputRounding::none; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: g->rounding = InputRounding::f16; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: g->rounding = InputRounding::bf16; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: g->rounding = InputRounding::tf32; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (d.scale != CUDA_R_32F || a.type != b.type || !is_supported_type(a.type) || c.type != dl.type ||
      (dl.type != a.type && dl.type != CUDA_R_32F) ||
      (g->rounding != InputRounding::none && a.type != CUDA_R_32F))  // the fast types take f32 operands
    return CUBLAS_STATUS_NOT_SUPPORTED;
  g->bias = nullptr;
  g->gelu = epilogue_gelu(d.epilogue);
  g->dgelu = d.epilogue == CUBLASLT_EPILOGUE_DGELU;
  g->aux = {};
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !epilogue_bias(d.epilogue) && !g->gelu && !g->dgelu)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // RELU, the bias gradients: not emulated (keel uses none)
  if (epilogue_bias(d.epilogue)) {
    // Which bias types cuBLASLt pairs with which D type varies by version: any float type reads.
    g->bias_type = d.bias_type == -1 ? dl.type : static_cast<cudaDataType_t>(d.bias_type);
    if (!is_supported_type(g->bias_type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    g->bias = d.bias;
  }
  if (epilogue_aux(d.epilogue)) {
    // cublasLt.h: the GELU input matrix's leading dimension "must be divisible by 8 and be no
    // less than the number of rows in the output matrix".
    if (d.aux_ld < static_cast<int64_t>(m) || d.aux_ld % 8 != 0) return CUBLAS_STATUS_INVALID_VALUE;
    const int32_t aux_type = d.aux_type == -1 ? dl.type : d.aux_type;
    if (aux_type != dl.type) return CUBLAS_STATUS_NOT_SUPPORTED;  // fp8's other aux types: not emulated
    g->aux = {d.aux, dl.type, d.aux_ld, 0};
  }
  g->m = static_cast<int64_t>(m), g->n = static_cast<int64_t>(n), g->k = static_cast<int64_t>(k), g->batch = 1;
  g->a = {nullptr, a.type, static_cast<cublasOperation_t>(d.transa), a.ld, 0};
  g->b = {nullptr, b.type, static_cast<cublasOperation_t>(d.transb), b.ld, 0};
  g->c = {nullptr, c.type, c.ld, 0};
  g->d = {nullptr, dl.type, dl.ld, 0};
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new (std::nothrow) cublasLtContext{};
  if (*lightHandle) keel::cuda::emu::blas::track_handle(*lightHandle);
  return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  keel::cuda::emu::blas::untrack_handle(lightHandle);
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* box = new (std::nothrow) DescBox{};
  if (!box) return CUBLAS_STATUS_ALLOC_FAILED;
  box->d.compute = computeType;
  box->d.scale = scaleType;
  *matmulDesc = &box->opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete reinterpret_cast<DescBox*>(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

// Values are checked where they are used (heuristic, matmul); here only the size, as cuBLASLt.
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = desc(matmulDesc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_field(d.compute, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_field(d.scale, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set_field(d.pointer_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_field(d.transa, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_field(d.transb, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSC: return set_field(d.transc, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return set_field(d.fill_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(d.epilogue, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_field(d.bias, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return set_field(d.bias_batch_stride, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_field(d.bias_type, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_field(d.aux, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_field(d.aux_ld, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return set_field(d.aux_batch_stride, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set_field(d.aux_type, buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // real attributes the emulator does not model
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  auto* box = new (std::nothrow) LayoutBox{};
  if (!box) return CUBLAS_STATUS_ALLOC_FAILED;
  box->l = {type, rows, cols, ld};
  *matLayout = &box->opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete reinterpret_cast<LayoutBox*>(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  auto* box = new (std::nothrow) PrefBox{};
  if (!box) return CUBLAS_STATUS_ALLOC_FAILED;
  *p = &box->opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<PrefBox*>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  Pref& f = pref(p);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return set_field(f.search_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_field(f.max_workspace, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set_field(f.reduction_mask, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_field(f.align[0], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_field(f.align[1], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_field(f.align[2], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_field(f.align[3], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return set_field(f.max_waves, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return set_field(f.impl_mask, buf, sizeInBytes);
    default: return CUBLAS_STATUS_INVALID_VALUE;  // every real preference is listed above
  }
}

// One algorithm, needing no workspace, whenever the problem is one the engine computes and every
// minimum-alignment preference admits its operand's element size; else NOT_SUPPORTED with none.
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
      !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  GemmArgs g;
  const Desc& d = desc(operationDesc);
  if (cublasStatus_t st = check_problem(d, layout(Adesc), layout(Bdesc), layout(Cdesc), layout(Ddesc), &g);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  const Pref& p = pref(preference);
  const cudaDataType_t types[4] = {g.a.type, g.b.type, g.c.type, g.d.type};
  for (int i = 0; i < 4; ++i)
    if (p.align[i] < type_size(types[i])) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (g.bias && !aligned(g.bias, type_size(g.bias_type))) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (g.aux.p && !aligned(g.aux.p, type_size(g.aux.type))) return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof r);
  r.algo.data[0] = kAlgoTag;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = p.align[i];
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C (m, n) [+ bias (m) on every column], then
// [aux (m, n) = that, D = gelu(that)] or [D = that * gelu'(aux)] as the epilogue asks.
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)workspace, (void)workspaceSizeInBytes;  // the algorithm needs no workspace
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  GemmArgs g;
  const Desc& d = desc(computeDesc);
  const Layout &lc = layout(Cdesc), &ld = layout(Ddesc);
  if (cublasStatus_t st = check_problem(d, layout(Adesc), layout(Bdesc), lc, ld, &g); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (algo && algo->data[0] != kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;  // not from the heuristic
  if (C && C == D && (lc.ld != ld.ld || lc.type != ld.type))
    return CUBLAS_STATUS_INVALID_VALUE;  // in place: one layout
  if ((epilogue_bias(d.epilogue) && !d.bias) || (epilogue_aux(d.epilogue) && !d.aux))
    return CUBLAS_STATUS_INVALID_VALUE;  // nothing to read the bias from, or the aux to or from
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  g.alpha = *static_cast<const float*>(alpha);  // scale type f32
  g.beta = *static_cast<const float*>(beta);
  g.a.p = A, g.b.p = B, g.c.p = C, g.d.p = D;
  const bool product = g.k > 0 && g.alpha != 0.0f;
  const void* ptrs[4] = {product ? A : nullptr, product ? B : nullptr, g.beta != 0.0f ? C : nullptr, D};
  const cudaDataType_t types[4] = {g.a.type, g.b.type, g.c.type, g.d.type};
  for (int i = 0; i < 4; ++i) {
    if ((i == 3 || ptrs[i]) && (!ptrs[i] || !aligned(ptrs[i], type_size(types[i]))))
      return CUBLAS_STATUS_EXECUTION_FAILED;  // the kernel would fault
    if (ptrs[i] && algo && !aligned(ptrs[i], std::max<size_t>(1, algo->data[1 + i])))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((g.bias && !aligned(g.bias, 16)) || (g.aux.p && !aligned(g.aux.p, 16))) return CUBLAS_STATUS_EXECUTION_FAILED;
  // Captured: the checked arguments by value, the product at each replay (alpha and beta
  // are read now, as the library reads host-side scalars when it enqueues the kernel).
  if (keel::emu::is_capturing(stream)) {
    keel::emu::capture(stream, [g] { gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  gemm(g);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
