// Embedding on the device: forward gathers rows, backward sums gradient rows per id.
//
// Forward range-checks the ids in the kernel (core/cuda/device_check.h), so neither a lookup nor
// a training step copies them to the host. Backward sums, for each id, its gradient rows in
// increasing position order, in f32, and adds the sum into that id's row of gw: one writer per
// row and a fixed order, so repeated runs give identical bits (atomicAdd in f32 would not).
// The positions are grouped by id on the device, without a wait on the host:
//   1. histogram: counts[v] = occurrences of id v, by integer atomicAdd (exact in any order);
//   2. scan: one block turns the counts into bucket starts (exclusive prefix sum), chunk by
//      chunk with a running carry, so any V works;
//   3. placement: one block walks the positions in ascending chunks of a block's width; a
//      thread's slot is its bucket's cursor plus the number of earlier threads of the chunk
//      with the same id, and the last of them advances the cursor. Earlier chunks are placed
//      before later ones and, within a chunk, lower positions first, so each bucket lists its
//      positions in ascending order: a stable counting sort, the same grouping the host made
//      before, with no atomic whose order could leak into the result;
//   4. sum: one block per id, threads across the C columns, as before.
// Ids outside the table (reported by the forward's check) fall in no bucket.
#include "core/cuda/device_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/embedding.h"

namespace keel::cuda {

namespace {
using namespace dev;

// B*T = N ids, weight (rows, C) -> out (N, C). kVec: rows are whole 16-byte packs (C * sizeof(T)
// a multiple of 16 and both bases aligned), one pack per thread; else one element. An id outside
// [0, rows) is reported to `check` (core/cuda/device_check.h: the host raises it at its next
// synchronisation) and its output row is zeros, so the kernel never reads outside the table.
template <typename T, typename I, bool kVec>
__global__ void embedding_forward_kernel(const T* __restrict__ w, const I* __restrict__ ids, T* __restrict__ out,
                                         int64_t N, int64_t C, int64_t rows, DeviceCheckSlot* check) {
  constexpr int V = kVec ? Pack<T>::N : 1;
  const int64_t per_row = C / V, total = N * per_row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / per_row, c = (e % per_row) * V;
    const int64_t id = static_cast<int64_t>(ids[n]);
    if (id < 0 || id >= rows) {
      if (atomicCAS(&check->code, int32_t(DeviceCheck::none), int32_t(DeviceCheck::embedding_id)) ==
          int32_t(DeviceCheck::none))
        check->value = id, check->index = n, check->bound = rows;
      for (int i = 0; i < V; ++i) out[n * C + c + i] = from_f32<T>(0.0f);
      continue;
    }
    const T* src = w + id * C + c;
    if constexpr (kVec)
      store_pack(out + n * C + c, load_pack(src));
    else
      out[n * C + c] = *src;
  }
}

// ids (N) -> counts (V) += occurrences; counts zeroed by the caller. Out-of-table ids are skipped.
template <typename I>
__global__ void embedding_histogram_kernel(const I* __restrict__ ids, int64_t N, int64_t V,
                                           unsigned long long* __restrict__ counts) {
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = static_cast<int64_t>(ids[n]);
    if (id >= 0 && id < V) atomicAdd(counts + id, 1ull);
  }
}

// One block of kScanThreads. cursor (V) holds the counts on entry -> starts (V + 1): the exclusive
// prefix sums, starts[V] = the total; cursor (V) = starts[0 .. V), where placement begins.
constexpr int kScanThreads = 256;
__global__ void embedding_scan_kernel(int64_t V, int64_t* __restrict__ starts, int64_t* __restrict__ cursor) {
  KEEL_SHARED(int64_t[kScanThreads], sums);
  const int t = threadIdx.x;
  int64_t carry = 0;
  for (int64_t base = 0; base < V; base += kScanThreads) {
    const int64_t v = base + t;
    const int64_t count = v < V ? cursor[v] : 0;
    sums[t] = count;
    __syncthreads();
    for (int step = 1; step < kScanThreads; step *= 2) {  // inclusive scan (Hillis-Steele)
      const int64_t add = t >= step ? sums[t - step] : 0;
      __syncthreads();
      sums[t] += add;
      __syncthreads();
    }
    if (v < V) starts[v + 1] = carry + sums[t], cursor[v] = carry + sums[t] - count;
    carry += sums[kScanThreads - 1];
    __syncthreads();  // every thread has read sums before the next chunk overwrites it
  }
  if (t == 0) starts[0] = 0;
}

// One block of kPlaceThreads. ids (N), cursor (V) from the scan -> order (N): the positions of
// each id, ascending, from its bucket start on (see the top of the file for why it is stable).
constexpr int kPlaceThreads = 256;
template <typename I>
__global__ void embedding_place_kernel(const I* __restrict__ ids, int64_t N, int64_t V, int64_t* __restrict__ cursor,
                                       int64_t* __restrict__ order) {
  KEEL_SHARED(int64_t[kPlaceThreads], chunk);
  const int t = threadIdx.x;
  for (int64_t base = 0; base < N; base += kPlaceThreads) {
    const int64_t n = base + t;
    int64_t id = n < N ? static_cast<int64_t>(ids[n]) : -1;
    if (id >= V) id = -1;
    chunk[t] = id;
    __syncthreads();
    int64_t rank = 0;
    bool last = true;
    if (id >= 0)
      for (int s = 0; s < kPlaceThreads; ++s)
        if (chunk[s] == id) {
          if (s < t) ++rank;
          else if (s > t) last = false;
        }
    if (id >= 0) order[cursor[id] + rank] = n;
    __syncthreads();  // every thread has read its cursor before the last of its id moves it
    if (id >= 0 && last) cursor[id] += rank + 1;
    __syncthreads();
  }
}

// starts (V + 1), order (N): id v occurs at positions order[starts[v] .. starts[v+1]), ascending.
// g (N, C) -> gw (V, C): gw[v] += the sum of those rows of g. One block per id with positions,
// threads across the C columns (coalesced row reads). At most 256 threads; 8 blocks of them per
// SM (32 registers) keep the row reads in flight.
constexpr int kSumUnroll = 8;
template <typename T>
__global__ void __launch_bounds__(256, 8)
    embedding_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ starts,
                              const int64_t* __restrict__ order, int64_t V, int64_t C, T* __restrict__ gw) {
  for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
    const int64_t begin = starts[v], end = starts[v + 1];
    if (begin == end) continue;
    T* dst = gw + v * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      // Eight rows' loads issued before their adds: a frequent token's bucket holds thousands of
      // positions, and with one load after another its block waited on memory latency for each
      // (on an H100 the embedding backward was 2.6 ms of the paper model's 19 ms step, where its
      // bytes take 0.06). The adds keep position order, so the bits are the CPU's, as before.
      float acc = 0.0f;
      int64_t k = begin;
      for (; k + kSumUnroll <= end; k += kSumUnroll) {
        float row[kSumUnroll];
#pragma unroll
        for (int j = 0; j < kSumUnroll; ++j) row[j] = to_f32(g[order[k + j] * C + c]);
#pragma unroll
        for (int j = 0; j < kSumUnroll; ++j) acc += row[j];
      }
      for (; k < end; ++k) acc += to_f32(g[order[k] * C + c]);
      dst[c] = from_f32<T>(to_f32(dst[c]) + acc);
    }
  }
}
}  // namespace

// weight (V, C), ids (N) -> out (N, C)
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out) {
  require_device(weight, "embedding");
  const int64_t N = ids.numel(), C = weight.size(1);
  if (N == 0 || C == 0) return;
  visit_float(weight.dtype(), "embedding", [&]<typename T>() {
    visit_index(ids.dtype(), "embedding", [&]<typename I>() {
      Where w = where(out);
      const T* pw = ptr<const T>(weight);
      T* po = ptr<T>(out);
      const bool vec = (C * sizeof(T)) % 16 == 0 && plan::vector_head(C, sizeof(T), {pw, po}) == 0;
      const int64_t items = vec ? N * C / Pack<T>::N : N * C;
      const int blocks = grid_for(items, kThreads, w.device);
      const int64_t rows = weight.size(0);
      DeviceCheckSlot* check = device_check_slot(w.device);
      if (vec)
        launch_kernel(embedding_forward_kernel<T, I, true>, blocks, kThreads, 0, w.stream, pw, ptr<const I>(ids), po, N,
                      C, rows, check);
      else
        launch_kernel(embedding_forward_kernel<T, I, false>, blocks, kThreads, 0, w.stream, pw, ptr<const I>(ids), po,
                      N, C, rows, check);
      KEEL_CHECK_LAUNCH();
    });
  });
}

// g (N, C), ids (N) on gw's device -> gw (V, C) += per-id sums
void embedding_backward(const Tensor& g, const Tensor& ids, Tensor& gw) {
  require_device(gw, "embedding backward");
  const int64_t V = gw.size(0), C = gw.size(1), N = ids.numel();
  if (N == 0 || C == 0 || V == 0) return;
  // [starts (V + 1) | cursor (V) | order (N)]; the cursor region is the histogram's, so zeroed.
  Tensor groups = zeros({2 * V + 1 + N}, {DType::i64, gw.device()});
  int64_t* starts = ptr<int64_t>(groups);
  int64_t* cursor = starts + V + 1;
  int64_t* order = cursor + V;
  Tensor gc = g.detach().contiguous();
  visit_index(ids.dtype(), "embedding backward", [&]<typename I>() {
    Where w = where(gw);
    const I* pi = ptr<const I>(ids);
    static_assert(sizeof(unsigned long long) == sizeof(int64_t));
    launch_kernel(embedding_histogram_kernel<I>, grid_for(N, kThreads, w.device), kThreads, 0, w.stream, pi, N, V,
                  reinterpret_cast<unsigned long long*>(cursor));
    KEEL_CHECK_LAUNCH();
    launch_kernel(embedding_scan_kernel, 1, kScanThreads, 0, w.stream, V, starts, cursor);
    KEEL_CHECK_LAUNCH();
    launch_kernel(embedding_place_kernel<I>, 1, kPlaceThreads, 0, w.stream, pi, N, V, cursor, order);
    KEEL_CHECK_LAUNCH();
  });
  visit_float(gw.dtype(), "embedding backward", [&]<typename T>() {
    Where w = where(gw);
    const int threads = C >= 256 ? 256 : (C >= 128 ? 128 : (C >= 64 ? 64 : 32));
    const int blocks = static_cast<int>(std::min<int64_t>(V, int64_t(sm_count(w.device)) * 32));
    launch_kernel(embedding_backward_kernel<T>, blocks, threads, 0, w.stream, ptr<const T>(gc), starts, order, V, C,
                  ptr<T>(gw));
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
