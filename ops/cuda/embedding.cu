// Embedding on the device: forward gathers rows, backward sums gradient rows per id.
//
// Forward range-checks the ids in the kernel (core/cuda/device_check.h), so a lookup needs no
// copy of them to the host. Backward is deterministic without atomics or a device sort: training
// has the ids on the host already (the front end range-checks them there), so the host groups the positions by id with a
// stable counting sort (O(N + V)) and uploads the groups; then one block per distinct id sums
// that id's gradient rows in position order, in f32, and adds the sum into its row of gw. Each
// row of gw has exactly one writer, and the summation order is fixed, so repeated runs give
// identical bits (atomicAdd in f32 would not), at the cost of one small host-to-device copy.
#include <vector>

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

// groups = [rows (U) | starts (U + 1) | order (N)]: id rows[u] occurs at positions
// order[starts[u] .. starts[u+1]), ascending. g (N, C) -> gw (V, C): gw[rows[u]] += sum.
// One block per distinct id, threads across the C columns (coalesced row reads).
template <typename T>
__global__ void embedding_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ groups, int64_t U,
                                          int64_t C, T* __restrict__ gw) {
  const int64_t* rows = groups;
  const int64_t* starts = groups + U;
  const int64_t* order = groups + 2 * U + 1;
  for (int64_t u = blockIdx.x; u < U; u += gridDim.x) {
    const int64_t begin = starts[u], end = starts[u + 1];
    T* dst = gw + rows[u] * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t k = begin; k < end; ++k) acc += to_f32(g[order[k] * C + c]);
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

// g (N, C) on the device, ids_host (N) on the CPU -> gw (V, C) += per-id sums
void embedding_backward(const Tensor& g, const Tensor& ids_host, Tensor& gw) {
  require_device(gw, "embedding backward");
  const int64_t V = gw.size(0), C = gw.size(1);
  std::vector<int64_t> ids = ids_host.to_vector<int64_t>();
  const int64_t N = static_cast<int64_t>(ids.size());
  if (N == 0 || C == 0) return;
  // Stable counting sort of the positions by id (ids were range-checked by the forward).
  std::vector<int64_t> count(V + 1, 0);
  for (int64_t id : ids) ++count[id + 1];
  int64_t U = 0;
  for (int64_t v = 0; v < V; ++v) U += count[v + 1] > 0;
  std::vector<int64_t> groups(2 * U + 1 + N);
  int64_t *rows = groups.data(), *starts = rows + U, *order = starts + U + 1;
  std::vector<int64_t> cursor(V, 0);  // where id v's positions start in `order`
  for (int64_t v = 0, u = 0, at = 0; v < V; ++v) {
    cursor[v] = at;
    if (count[v + 1] == 0) continue;
    rows[u] = v, starts[u] = at;
    at += count[v + 1], ++u;
  }
  starts[U] = N;
  for (int64_t n = 0; n < N; ++n) order[cursor[ids[n]]++] = n;
  Tensor dgroups = from_vector<int64_t>(groups, {static_cast<int64_t>(groups.size())}, {DType::i64, gw.device()});

  Tensor gc = g.detach().contiguous();
  visit_float(gw.dtype(), "embedding backward", [&]<typename T>() {
    Where w = where(gw);
    const int threads = C >= 256 ? 256 : (C >= 128 ? 128 : (C >= 64 ? 64 : 32));
    const int blocks = static_cast<int>(std::min<int64_t>(U, int64_t(sm_count(w.device)) * 32));
    launch_kernel(embedding_backward_kernel<T>, blocks, threads, 0, w.stream, ptr<const T>(gc), ptr<const int64_t>(dgroups), U,
                                                                   C, ptr<T>(gw));
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
