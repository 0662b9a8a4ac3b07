#include "optim/zero_adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/copy.h"
#include "core/factory.h"
#include "optim/grad_math.h"

namespace keel::optim {

namespace {

// AdamW decays parameters with dim >= 2 (matrices) and not vectors. A segment of a matrix is
// therefore viewed as a 1 x len matrix and a segment of a vector as a vector, so that the inner
// AdamW decays exactly what the plain one would.
Shape segment_shape(const Tensor& param, int64_t len) { return param.dim() >= 2 ? Shape{1, len} : Shape{len}; }
}  // namespace

Tensor ZeroAdamW::slice_of(const Tensor& flat, int64_t at, const Shape& shape) const {
  return flat.as_strided(shape, contiguous_strides(shape), flat.offset() + at);
}

ZeroAdamW::ZeroAdamW(std::shared_ptr<Communicator> comm, NamedTensors params, AdamWOptions opt, DType reduce_dtype,
                     size_t chunk_bytes)
    : comm_(std::move(comm)), params_(std::move(params)), opt_(opt), reduce_dtype_(reduce_dtype) {
  opt_.validate();
  if (!comm_) throw ConfigError("ZeroAdamW", "no communicator");
  if (params_.empty()) throw ConfigError("ZeroAdamW", "got an empty parameter list", "pass model.named_parameters()");
  if (reduce_dtype_ != DType::f32 && reduce_dtype_ != DType::bf16)
    throw DTypeError("ZeroAdamW", std::string("gradients are reduced in f32 or bf16, not ") + dtype_name(reduce_dtype_));
  const Tensor& first = params_.front().second;
  for (auto& [name, p] : params_) {
    if (!p.defined()) throw ConfigError("ZeroAdamW", "parameter '" + name + "' is an undefined tensor");
    if (p.dtype() != DType::f32 && !is_half(p.dtype()))
      throw DTypeError("ZeroAdamW", "parameter '" + name + "' has dtype " + dtype_name(p.dtype()),
                       "ZeRO shards f32, bf16 and f16 parameters");
    if (p.dtype() != first.dtype() || p.device() != first.device())
      throw DeviceError("ZeroAdamW", "parameters must share one device and dtype",
                        "move the model to one device and dtype first");
    if (!p.is_contiguous())
      throw ValueError("ZeroAdamW", "parameter '" + name + "' is not contiguous", "parameters are updated in place");
    offset_.push_back(total_);
    total_ += p.numel();
  }
  const int64_t world = comm_->world_size();
  shard_ = std::max<int64_t>(1, (total_ + world - 1) / world);
  chunk_ = std::clamp<int64_t>(int64_t(chunk_bytes / (4 * size_t(world))), 1, shard_);

  // This rank's slice [lo, hi) of the flat space, cut at parameter boundaries.
  const int64_t lo = comm_->rank() * shard_, hi = lo + shard_;
  grad_shard_ = zeros({shard_}, {DType::f32, first.device()});
  NamedTensors segments;
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto& [name, p] = params_[k];
    const int64_t a = std::max(lo, offset_[k]), b = std::min(hi, offset_[k] + p.numel());
    if (a >= b) continue;
    Segment s{k, a - offset_[k], b - a, a - lo, name + "@" + std::to_string(a - offset_[k])};
    const Shape shape = segment_shape(p, s.len);
    Tensor view = p.detach().as_strided(shape, contiguous_strides(shape), p.offset() + s.begin);
    view.set_grad(slice_of(grad_shard_, s.at, shape));  // the inner AdamW reads the slice of the mean
    segments.emplace_back(s.name, view);
    segments_.push_back(std::move(s));
  }
  if (!segments.empty()) inner_ = std::make_unique<AdamW>(std::move(segments), opt_);
  grad32_.resize(params_.size());
}

ZeroAdamW::~ZeroAdamW() = default;

// A parameter no backward reached keeps an undefined gradient, which reduce_gradients counts as zero.
void ZeroAdamW::zero_grad() {
  for (size_t k = 0; k < params_.size(); ++k) clear_gradient(params_[k].second, grad32_[k]);
}

template <typename Of>
void ZeroAdamW::pack(Of of, int64_t a, int64_t n, Tensor& buf, int64_t at) const {
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t lo = std::max(a, offset_[k]), hi = std::min(a + n, offset_[k] + params_[k].second.numel());
    if (lo >= hi) continue;
    Tensor src = of(k);
    if (!src.defined()) continue;  // the buffer was zeroed
    src = src.contiguous();
    Tensor dst = slice_of(buf, at + (lo - a), {hi - lo});
    copy_(dst, slice_of(src, lo - offset_[k], {hi - lo}));
  }
}

template <typename Of>
void ZeroAdamW::unpack(Of of, int64_t a, int64_t n, const Tensor& buf, int64_t at) const {
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t lo = std::max(a, offset_[k]), hi = std::min(a + n, offset_[k] + params_[k].second.numel());
    if (lo >= hi) continue;
    Tensor dst = slice_of(of(k), lo - offset_[k], {hi - lo});
    copy_(dst, slice_of(buf, at + (lo - a), {hi - lo}));
  }
}

// Every rank's gradients -> this rank's slice (S) of their sum, divided by W in f32. Chunk c
// reduces elements [c, c + n) of every rank's slice: rank r's piece is flat [r*S + c, r*S + c + n).
void ZeroAdamW::reduce_gradients() {
  const int64_t world = comm_->world_size();
  auto grad = [&](size_t k) { return params_[k].second.grad(); };
  for (int64_t c = 0; c < shard_; c += chunk_) {
    const int64_t n = std::min(chunk_, shard_ - c);
    Tensor in = zeros({world * n}, {reduce_dtype_, grad_shard_.device()});  // padding stays zero
    for (int64_t r = 0; r < world; ++r) pack(grad, r * shard_ + c, n, in, r * n);
    Tensor out = slice_of(grad_shard_, c, {n});
    if (reduce_dtype_ == DType::f32) {
      comm_->reduce_scatter_sum(in, out);
    } else {
      Tensor part = empty({n}, {reduce_dtype_, grad_shard_.device()});
      comm_->reduce_scatter_sum(in, part);
      copy_(out, part);  // the mean is taken, and kept, in f32
    }
  }
  if (world > 1) scale_(grad_shard_, 1.0 / double(world));
}

void ZeroAdamW::scale_gradients(double s) {
  if (s != 1.0) scale_(grad_shard_, s);
}

double ZeroAdamW::clip_grad_norm(double max_norm) {
  if (!(max_norm >= 0) || !std::isfinite(max_norm))
    throw ValueError("ZeroAdamW::clip_grad_norm", "max_norm must be a finite number >= 0, got " +
                                                      std::to_string(max_norm), "pass e.g. 1.0 (0: no clipping)");
  Tensor sq = from_vector<double>({sum_of_squares(grad_shard_)}, {1});
  comm_->all_reduce_sum(sq);
  const double norm = std::sqrt(sq.to_vector<double>()[0]);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) scale_(grad_shard_, max_norm / (norm + 1e-6));
  return norm;
}

Tensor ZeroAdamW::gather(const Tensor& shard) const {
  Tensor full = empty({shard_ * comm_->world_size()}, {shard.dtype(), shard.device()});
  comm_->all_gather(shard, full);
  return full;
}

void ZeroAdamW::step(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ValueError("ZeroAdamW::step", "lr must be a finite number >= 0, got " + std::to_string(lr));
  opt_.lr = lr;
  ++steps_;
  if (inner_) inner_->step(lr);  // writes this rank's slice of the parameters in place
  // Every rank sends its updated slice and receives everyone's, chunk by chunk.
  const int64_t world = comm_->world_size(), lo = comm_->rank() * shard_;
  const Tensor& first = params_.front().second;
  auto param = [&](size_t k) { return params_[k].second.detach(); };
  for (int64_t c = 0; c < shard_; c += chunk_) {
    const int64_t n = std::min(chunk_, shard_ - c);
    Tensor mine = zeros({n}, {first.dtype(), first.device()});
    pack(param, lo + c, n, mine, 0);
    Tensor all = empty({world * n}, {first.dtype(), first.device()});
    comm_->all_gather(mine, all);
    for (int64_t r = 0; r < world; ++r) unpack(param, r * shard_ + c, n, all, r * n);
  }
}

NamedTensors ZeroAdamW::state() const {
  std::map<std::string, Tensor> mine;
  if (inner_)
    for (auto& [name, t] : inner_->state()) mine.emplace(name, t);
  const bool half = is_half(params_.front().second.dtype());
  // One state tensor of every segment, laid into this rank's slice, then gathered whole.
  auto whole = [&](const std::string& suffix) {
    Tensor shard = zeros({shard_}, {DType::f32, grad_shard_.device()});
    for (const Segment& s : segments_) {
      const Tensor& src = mine.at(s.name + suffix);
      Tensor dst = slice_of(shard, s.at, src.shape());
      copy_(dst, src);
    }
    return gather(shard);
  };
  Tensor m = whole(".m"), v = whole(".v"), master = half ? whole(".master") : Tensor{};
  // A parameter's update count: its owners all hold the same one; the others say 0.
  std::vector<int64_t> steps(params_.size(), 0);
  for (const Segment& s : segments_) steps[s.param] = mine.at(s.name + ".step").to_vector<int64_t>()[0];
  Tensor all_steps = from_vector<int64_t>(steps, {int64_t(steps.size())});
  comm_->all_reduce_max(all_steps);
  steps = all_steps.to_vector<int64_t>();

  NamedTensors out;
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto& [name, p] = params_[k];
    out.emplace_back(name + ".m", slice_of(m, offset_[k], p.shape()).clone());
    out.emplace_back(name + ".v", slice_of(v, offset_[k], p.shape()).clone());
    if (half) out.emplace_back(name + ".master", slice_of(master, offset_[k], p.shape()).clone());
    out.emplace_back(name + ".step", from_vector<int64_t>({steps[k]}, {}));
  }
  out.emplace_back("step", from_vector<int64_t>({steps_}, {}));
  return out;
}

void ZeroAdamW::load_state(const NamedTensors& state) {
  // The whole state is checked here (every rank sees the same file, so every rank raises the
  // same error); the inner AdamW then checks the slices it is given.
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state)
    if (!by_name.emplace(name, t).second)
      throw ConfigError("ZeroAdamW::load_state", "state entry '" + name + "' appears twice");
  const bool half = is_half(params_.front().second.dtype());
  size_t used = 0;
  auto take = [&](const std::string& key, const Shape& shape, DType dtype) -> Tensor {
    auto it = by_name.find(key);
    if (it == by_name.end())
      throw ConfigError("ZeroAdamW::load_state", "state entry '" + key + "' is missing",
                        "the checkpoint belongs to another model or was written without optimizer state");
    if (it->second.shape() != shape)
      throw ShapeError("ZeroAdamW::load_state", "state entry '" + key + "' has shape " +
                                                    shape_str(it->second.shape()) + ", expected " + shape_str(shape));
    if (it->second.dtype() != dtype)
      throw DTypeError("ZeroAdamW::load_state", "state entry '" + key + "' has dtype " +
                                                    dtype_name(it->second.dtype()) + ", expected " + dtype_name(dtype));
    ++used;
    return it->second.contiguous();
  };
  for (const auto& [name, p] : params_) {
    check_state_values(take(name + ".m", p.shape(), DType::f32), name + ".m", "ZeroAdamW::load_state");
    check_state_values(take(name + ".v", p.shape(), DType::f32), name + ".v", "ZeroAdamW::load_state");
    if (half)
      check_state_values(take(name + ".master", p.shape(), DType::f32), name + ".master", "ZeroAdamW::load_state");
    take(name + ".step", {}, DType::i64);
  }
  Tensor step = take("step", {}, DType::i64);
  if (used != by_name.size())
    throw ConfigError("ZeroAdamW::load_state", "the state has entries that match no parameter of this optimizer",
                      "the checkpoint belongs to another model");
  const int64_t steps = step.to_vector<int64_t>()[0];
  if (steps < 0) throw ValueError("ZeroAdamW::load_state", "state entry 'step' is negative");

  // This rank's slices, under the inner AdamW's names.
  NamedTensors slices;
  for (const Segment& s : segments_) {
    const std::string& name = params_[s.param].first;
    const Shape shape = segment_shape(params_[s.param].second, s.len);
    auto part = [&](const std::string& suffix) {
      Tensor whole = by_name.at(name + suffix).contiguous();
      return whole.as_strided(shape, contiguous_strides(shape), whole.offset() + s.begin);
    };
    slices.emplace_back(s.name + ".m", part(".m"));
    slices.emplace_back(s.name + ".v", part(".v"));
    if (half) slices.emplace_back(s.name + ".master", part(".master"));
    slices.emplace_back(s.name + ".step", by_name.at(name + ".step"));
  }
  slices.emplace_back("step", step);
  if (inner_) inner_->load_state(slices);
  steps_ = steps;
}

int64_t ZeroAdamW::state_bytes() const {
  int64_t owned = 0;
  for (const Segment& s : segments_) owned += s.len;
  return owned * (is_half(params_.front().second.dtype()) ? 12 : 8);
}

int64_t ZeroAdamW::unsharded_state_bytes() const {
  return total_ * (is_half(params_.front().second.dtype()) ? 12 : 8);
}

double ZeroAdamW::finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback) {
  reduce_gradients();
  scale_gradients(1.0 / scaler.scale());
  const double norm = clip_grad_norm(max_norm);
  // The shard's norm needs its all-reduce before it is known, so the readback is a copy of its own.
  if (readback) readback->read();
  return norm;
}

NamedTensors ZeroAdamW::gather_state(bool keep) const {
  NamedTensors s = state();  // collective: every rank gathers
  return keep ? s : NamedTensors{};
}

std::string ZeroAdamW::summary() const {
  return fmt::format("ZeRO-1, optimizer state {:.2f} MB on rank {} ({:.2f} MB unsharded), {} of {} elements per rank",
                     double(state_bytes()) / 1e6, comm_->rank(), double(unsharded_state_bytes()) / 1e6, shard_, total_);
}

}  // namespace keel::optim
