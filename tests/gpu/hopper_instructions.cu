// Every Hopper instruction keel has (core/cuda/ptx_sm90.cuh, core/cuda/wgmma.cuh), each form
// once, in kernels that are compiled and never run: tests/gpu/hopper_sass.py compiles this file
// for sm_90a, sm_90 and sm_80 and checks the SASS nvcc makes of each (no GPU needed).
#include <cuda.h>

#include "core/cuda/ptx_sm90.cuh"
#include "core/cuda/wgmma.cuh"

namespace ptx = keel::cuda::ptx;

namespace {

// Each wgmma form of one width and type, chained on the same accumulators (so none is dead).
template <int N, typename T>
__device__ void every_wgmma(float* out, const uint64_t* desc, const uint32_t* a_in) {
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = out[i];
  const uint32_t a[4] = {a_in[0], a_in[1], a_in[2], a_in[3]};
  ptx::wgmma_fence();
  ptx::wgmma_fence_operand(d);
  ptx::wgmma_m64k16<N, T>(d, desc[0], desc[1], true);
  ptx::wgmma_m64k16<N, T, true, true>(d, desc[0], desc[1], true);
  ptx::wgmma_m64k16_rs<N, T>(d, a, desc[1], true);
  ptx::wgmma_m64k16_rs<N, T, true>(d, a, desc[1], desc[2] != 0);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<1>();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operand(d);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = d[i];
}

// N = 32 (the Hopper backward's dQ slices with a soft cap at width 64) has the shared-memory forms only.
template <typename T>
__device__ void shared_wgmma_n32(float* out, const uint64_t* desc) {
  float d[16];
  for (int i = 0; i < 16; ++i) d[i] = out[i];
  ptx::wgmma_fence();
  ptx::wgmma_fence_operand(d);
  ptx::wgmma_m64k16<32, T>(d, desc[0], desc[1], true);
  ptx::wgmma_m64k16<32, T, true, true>(d, desc[0], desc[1], desc[2] != 0);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operand(d);
  for (int i = 0; i < 16; ++i) out[threadIdx.x * 16 + i] = d[i];
}

}  // namespace

__global__ void __launch_bounds__(384, 1) hopper_wgmma(float* out, const uint64_t* desc, const uint32_t* a) {
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<40>();
    return;
  }
  ptx::setmaxnreg_inc<232>();
  every_wgmma<64, __nv_bfloat16>(out, desc, a);
  every_wgmma<128, __nv_bfloat16>(out, desc, a);
  every_wgmma<64, __half>(out, desc, a);
  every_wgmma<128, __half>(out, desc, a);
  shared_wgmma_n32<__nv_bfloat16>(out, desc);
  shared_wgmma_n32<__half>(out, desc);
}

__global__ void hopper_copies(const __grid_constant__ CUtensorMap map, const float* src, float* out) {
  __shared__ __align__(1024) unsigned char tile[8192];
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) ptx::mbarrier_init(&bar, 1);
  ptx::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, 8192);
    const int32_t c1[1] = {1}, c2[2] = {1, 2}, c3[3] = {1, 2, 3}, c4[4] = {1, 2, 3, 4}, c5[5] = {1, 2, 3, 4, 5};
    ptx::tma_load(tile, &map, c1, &bar);
    ptx::tma_load(tile, &map, c2, &bar);
    ptx::tma_load(tile, &map, c3, &bar);
    ptx::tma_load(tile, &map, c4, &bar);
    ptx::tma_load(tile, &map, c5, &bar);
    ptx::bulk_copy_global_to_shared(tile, src, 1024, &bar);
  } else {
    ptx::mbarrier_arrive(&bar);
  }
  ptx::mbarrier_wait_parity(&bar, 0);
  out[threadIdx.x] = tile[threadIdx.x];
  ptx::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t c1[1] = {1}, c2[2] = {1, 2}, c3[3] = {1, 2, 3}, c4[4] = {1, 2, 3, 4}, c5[5] = {1, 2, 3, 4, 5};
    ptx::tma_store(&map, c1, tile);
    ptx::tma_store(&map, c2, tile);
    ptx::tma_store(&map, c3, tile);
    ptx::tma_store(&map, c4, tile);
    ptx::tma_store(&map, c5, tile);
    ptx::bulk_commit_group();
    ptx::bulk_wait_group_read<0>();
    ptx::bulk_reduce_add_f32(out, reinterpret_cast<const float*>(tile), 1024);
    ptx::bulk_commit_group();
    ptx::bulk_wait_group<0>();
  }
}
