#include "core/copy.h"
#include "core/profiler.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cuda/kernels.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"

namespace keel {

namespace {
// One element S -> D, as the CUDA copy (core/cuda/kernels.cu) converts it. Integer to integer
// is direct: double holds integers only up to 2^53, so an i64 above that would change, and
// narrowing i64 -> i32 keeps the low 32 bits (C++20's rule, PyTorch's result) where a
// double -> i32 conversion of an out-of-range value is undefined. Anything with a floating side
// goes through double, which keeps every value exact except the narrowing you asked for
// (f32 -> bf16 rounds, f64 -> i64 truncates).
template <typename D, typename S>
D convert(S s) {
  if constexpr (std::is_integral_v<D> && std::is_integral_v<S>)
    return static_cast<D>(s);
  else
    return static_cast<D>(static_cast<double>(s));
}

// Same dtype, and the last dim packed on both sides (a transpose of heads, a slice of a KV
// cache): a memcpy per row instead of an element at a time. false when it does not apply.
bool copy_rows(Tensor& dst, const Tensor& src) {
  const int64_t nd = src.dim();
  if (nd < 2 || dst.dtype() != src.dtype() || src.strides()[nd - 1] != 1 || dst.strides()[nd - 1] != 1) return false;
  const int64_t n = src.shape()[nd - 1];
  if (n < 8) return false;  // short rows: the element loop is as fast
  const Shape rows(src.shape().begin(), src.shape().end() - 1);
  std::vector<int64_t> to(static_cast<size_t>(numel_of(rows)));
  for_each_offset(rows, Shape(dst.strides().begin(), dst.strides().end() - 1), dst.offset(),
                  [&](int64_t i, int64_t off) { to[static_cast<size_t>(i)] = off; });
  const size_t es = dtype_size(src.dtype());
  char* d = static_cast<char*>(dst.storage()->data());
  const char* s = static_cast<const char*>(src.storage()->data());
  for_each_offset(rows, Shape(src.strides().begin(), src.strides().end() - 1), src.offset(),
                  [&](int64_t i, int64_t off) { std::memcpy(d + to[static_cast<size_t>(i)] * es, s + off * es, n * es); });
  return true;
}

void copy_cpu(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.numel() * dtype_size(dst.dtype()));
    return;
  }
  if (copy_rows(dst, src)) return;
  visit_dtype(dst.dtype(), [&]<typename D>() {
    visit_dtype(src.dtype(), [&]<typename S>() {
      D* d = static_cast<D*>(dst.storage()->data());
      const S* s = static_cast<const S*>(src.storage()->data());
      if (dst.is_contiguous()) {
        D* out = d + dst.offset();
        for_each_offset(src.shape(), src.strides(), src.offset(),
                        [&](int64_t i, int64_t off) { out[i] = convert<D>(s[off]); });
      } else {
        // Both strided: gather src into a packed buffer first, then scatter.
        std::vector<D> packed(src.numel());
        for_each_offset(src.shape(), src.strides(), src.offset(),
                        [&](int64_t i, int64_t off) { packed[i] = convert<D>(s[off]); });
        for_each_offset(dst.shape(), dst.strides(), dst.offset(),
                        [&](int64_t i, int64_t off) { d[off] = packed[i]; });
      }
    });
  });
}
}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape())
    throw ShapeError("copy_", "destination shape " + shape_str(dst.shape()) + " differs from source shape " +
                                  shape_str(src.shape()));
  if (src.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  // Profiled as an op of its own when no op around it is (contiguous(), to() in model code).
  // Its cost, read src and write dst, is kept here because core does the work (ops/op_costs.h).
  profiler::Scope prof(dd == sd ? "copy" : dd.is_cuda() ? "copy_to_device" : "copy_to_host");
  if (prof) {
    profiler::Cost c;
    c.bytes = double(src.numel()) * double(dtype_size(src.dtype()) + dtype_size(dst.dtype()));
    c.shape = shape_str(src.shape());
    prof.cost(c);
  }
  if (dd.is_cpu() && sd.is_cpu()) return copy_cpu(dst, src);
  if (dd.is_cuda() && sd.is_cuda() && dd == sd) return cuda::copy_strided(dst, src);

  // Between host and device (or two devices): move packed bytes of the source dtype, then
  // convert and lay out on the destination side.
  Tensor packed_src = src.is_contiguous() ? src : src.detach().contiguous();
  size_t nbytes = packed_src.numel() * dtype_size(packed_src.dtype());
  Tensor staged = empty(src.shape(), {src.dtype(), dd});
  if (dd.is_cuda() && sd.is_cpu())
    cuda::memcpy_host_to_device(staged.raw_data(), packed_src.raw_data(), nbytes, dd.index);
  else if (dd.is_cpu() && sd.is_cuda())
    cuda::memcpy_device_to_host(staged.raw_data(), packed_src.raw_data(), nbytes, sd.index);
  else
    cuda::memcpy_peer(staged.raw_data(), dd.index, packed_src.raw_data(), sd.index, nbytes);
  copy_(dst, staged);
}

}  // namespace keel
