// bench_ops: keel's matmul and linear against a bare cuBLAS call at GPT-2 (124M) shapes,
// B*T = 8192 rows of C = 768, bf16 in and out with f32 accumulation:
//   x @ W for 768 -> 2304 (c_attn), 768 -> 3072 (c_fc), 3072 -> 768 (c_proj), 768 -> 50257 (lm_head),
//   and 768 -> 50304: the lm_head as `gpt2` runs it on a GPU, its vocabulary padded to a multiple
//   of 128 (nn/gpt2.cpp), which the unpadded row beside it shows the reason for.
// Prints milliseconds and TFLOP/s side by side; the gap is keel's overhead (allocation from the
// cache, dispatch, layout planning). Then one row per memory-bound op (the op table below; adding
// an op adds a row, docs/ops.md) with its time and the bandwidth its compulsory bytes imply.
// Last, the MLP's c_fc and GELU as linear then gelu beside linear_gelu (the GELU in the GEMM's
// epilogue), with and without a gradient (with one, the fused op writes the pre-activation too).
// Not a test: on a machine without a GPU it says so and exits 0.
//
//   bench_ops [--iters N]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "ops/cross_entropy.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/softmax.h"

using namespace keel;

namespace {

// Mean milliseconds per call of f over `iters` calls on keel's stream, after 3 warm-up calls.
double time_ms(const std::function<void()>& f, int iters, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  KEEL_CHECK_CUDA(cudaEventCreate(&start));
  KEEL_CHECK_CUDA(cudaEventCreate(&stop));
  KEEL_CHECK_CUDA(cudaEventRecord(start, s));
  for (int i = 0; i < iters; ++i) f();
  KEEL_CHECK_CUDA(cudaEventRecord(stop, s));
  KEEL_CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  KEEL_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  KEEL_CHECK_CUDA(cudaEventDestroy(start));
  KEEL_CHECK_CUDA(cudaEventDestroy(stop));
  return ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::stoi(argv[i + 1]);
  if (!cuda::is_available()) {
    std::printf("bench_ops: no CUDA device here; nothing to measure\n");
    return 0;
  }
  try {
    const Device gpu = Device::cuda(0);
    cudaStream_t s = cuda::detail::stream(0);
    cublasHandle_t handle;
    KEEL_CHECK_CUBLAS(cublasCreate(&handle));
    KEEL_CHECK_CUBLAS(cublasSetStream(handle, s));
    cuda::DeviceInfo info = cuda::device_info(0);
    std::printf("device: %s, bf16, f32 accumulation, %d iterations\n", info.name.c_str(), iters);
    std::printf("%-22s %10s %10s %12s %12s %12s %12s\n", "shape (M x K -> N)", "cuBLAS ms", "keel ms", "linear ms",
                "cuBLAS TF/s", "keel TF/s", "linear TF/s");
    const int64_t M = 8192;
    const int64_t shapes[][2] = {{768, 2304}, {768, 3072}, {3072, 768}, {768, 50257}, {768, 50304}};
    Generator gen(0);
    for (const auto& kn : shapes) {
      const int64_t K = kn[0], N = kn[1];
      Tensor x = randn({M, K}, gen, {DType::bf16, gpu});
      Tensor w = randn({K, N}, gen, {DType::bf16, gpu}, 0.0, 0.02);   // x @ w
      Tensor wt = randn({N, K}, gen, {DType::bf16, gpu}, 0.0, 0.02);  // linear(x, wt) = x @ wt^T
      Tensor c = empty({M, N}, {DType::bf16, gpu});
      const float alpha = 1.0f, beta = 0.0f;
      // Row-major C (M, N) = x w is column-major C^T (N, M) = w^T x^T: cuBLAS sees w and x as
      // the column-major matrices (N x K) and (K x M) they already are.
      auto bare = [&] {
        KEEL_CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, w.raw_data(),
                                       CUDA_R_16BF, int(N), x.raw_data(), CUDA_R_16BF, int(K), &beta, c.raw_data(),
                                       CUDA_R_16BF, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      auto ours = [&] { Tensor y = matmul(x, w); };
      auto lin = [&] { Tensor y = linear(x, wt); };
      const double t_bare = time_ms(bare, iters, s), t_ours = time_ms(ours, iters, s), t_lin = time_ms(lin, iters, s);
      const double flop = 2.0 * double(M) * double(N) * double(K);
      char label[64];
      std::snprintf(label, sizeof label, "%lld x %lld -> %lld", (long long)M, (long long)K, (long long)N);
      std::printf("%-22s %10.3f %10.3f %12.3f %12.1f %12.1f %12.1f\n", label, t_bare, t_ours, t_lin,
                  flop / t_bare * 1e-9, flop / t_ours * 1e-9, flop / t_lin * 1e-9);
    }
    KEEL_CHECK_CUBLAS(cublasDestroy(handle));

    // The op table: GPT-2 (124M) activation shapes, bf16. bytes = what the op must read and
    // write at least once (inputs, outputs), so GB/s compares with the HBM peak.
    struct OpRow {
      const char* name;
      std::function<void()> run;
      double bytes;
    };
    const int64_t C = 768, V = 50257, T = 1024;
    Tensor act = randn({M, C}, gen, {DType::bf16, gpu}), hidden = randn({M, 4 * C}, gen, {DType::bf16, gpu});
    Tensor ln_w = randn({C}, gen, {DType::bf16, gpu}), ln_b = randn({C}, gen, {DType::bf16, gpu});
    Tensor scores = randn({M, T}, gen, {DType::bf16, gpu}), logits = randn({M, V}, gen, {DType::bf16, gpu});
    Tensor targets = zeros({M}, {DType::i64, gpu});
    const double two = 2.0;  // bytes per bf16 element
    const std::vector<OpRow> rows = {
        {"gelu (8192 x 3072)", [&] { Tensor y = gelu(hidden); }, two * 2 * double(M) * 4 * C},
        {"layernorm (8192 x 768)", [&] { Tensor y = layernorm(act, ln_w, ln_b); }, two * 2 * double(M) * C},
        {"softmax (8192 x 1024)", [&] { Tensor y = softmax(scores); }, two * 2 * double(M) * T},
        {"cross_entropy (8192 x 50257)", [&] { Tensor l = cross_entropy(logits, targets); }, two * double(M) * V},
    };
    std::printf("\n%-30s %10s %10s\n", "op (bf16)", "keel ms", "GB/s");
    for (const OpRow& r : rows) {
      const double ms = time_ms(r.run, iters, s);
      std::printf("%-30s %10.3f %10.1f\n", r.name, ms, r.bytes / ms * 1e-6);
    }
    Tensor fc_w = randn({4 * C, C}, gen, {DType::bf16, gpu}, 0.0, 0.02), fc_b = zeros({4 * C}, {DType::bf16, gpu});
    std::printf("\n%-30s %10s %10s\n", "c_fc + gelu (bf16)", "unfused ms", "fused ms");
    for (bool grad : {false, true}) {
      fc_w.set_requires_grad(grad);
      const double unfused = time_ms([&] { Tensor y = gelu(linear(act, fc_w, fc_b)); }, iters, s);
      const double fused = time_ms([&] { Tensor y = linear_gelu(act, fc_w, fc_b); }, iters, s);
      std::printf("%-30s %10.3f %10.3f\n", grad ? "8192 x 768 -> 3072, grad" : "8192 x 768 -> 3072", unfused, fused);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
