#include "core/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "core/copy.h"
#include "core/cuda/kernels.h"
#include "core/factory.h"

namespace keel {

namespace {
thread_local bool t_grad_enabled = true;
thread_local GradReadyHook t_grad_ready_hook;

// The node an input's gradient flows into: its grad_fn, or for a leaf requiring grad an
// AccumulateGrad; null when the input needs no gradient.
std::shared_ptr<Node> edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  return std::make_shared<AccumulateGrad>(t.impl_ptr());
}
}  // namespace

Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack = std::move(next);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    // The last owner of n: take its edges before it dies, so its destructor recurses no further.
    if (n && n.use_count() == 1) {
      for (auto& e : n->next) stack.push_back(std::move(e));
      n->next.clear();
    }
  }
}

GradReadyHookGuard::GradReadyHookGuard(GradReadyHook hook) : previous_(std::move(t_grad_ready_hook)) {
  t_grad_ready_hook = std::move(hook);
}
GradReadyHookGuard::~GradReadyHookGuard() { t_grad_ready_hook = std::move(previous_); }

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool needs_grad(std::initializer_list<Tensor> inputs) { return needs_grad(std::vector<Tensor>(inputs)); }

void connect(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  node->next.clear();
  for (const Tensor& t : inputs) node->next.push_back(edge_for(t));
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
}
void connect(Tensor& output, std::shared_ptr<Node> node, std::initializer_list<Tensor> inputs) {
  connect(output, std::move(node), std::vector<Tensor>(inputs));
}

void accumulate_into(Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape())
    throw ShapeError("accumulate_into", "gradient of shape " + shape_str(src.shape()) +
                                            " cannot be added to one of shape " + shape_str(dst.shape()));
  if (dst.device() != src.device())
    throw DeviceError("accumulate_into", "gradient on " + src.device().str() + ", accumulator on " +
                                             dst.device().str());
  if (!dst.is_contiguous() && dst.dtype() != src.dtype())
    throw ValueError("accumulate_into", "a strided accumulator (a window) takes a gradient of its own dtype, got " +
                                            std::string(dtype_name(src.dtype())) + " into " +
                                            dtype_name(dst.dtype()));
  // On a GPU the kernel widens the source as it reads it (a bf16 gradient into an f32 buffer):
  // one pass, and the same bits as converting it first. A strided dst (a window of a larger
  // gradient: SliceBackward::add_into) is added in place, in one pass too.
  if (dst.device().is_cuda())  // only the widening add needs a packed source
    return cuda::add_inplace(dst, src.dtype() == dst.dtype() ? src : src.contiguous());
  Tensor s = src.dtype() == dst.dtype() ? src.contiguous() : src.detach().to(dst.dtype()).contiguous();
  visit_dtype(dst.dtype(), [&]<typename T>() {
    const T* p = s.data<T>();
    auto add = [&](T& d, int64_t i) { d = static_cast<T>(static_cast<double>(d) + static_cast<double>(p[i])); };
    if (dst.is_contiguous()) {
      T* d = dst.data<T>();
      for (int64_t i = 0, n = dst.numel(); i < n; ++i) add(d[i], i);
    } else {
      T* base = static_cast<T*>(dst.storage()->data());
      for_each_offset(dst.shape(), dst.strides(), dst.offset(), [&](int64_t i, int64_t off) { add(base[off], i); });
    }
  });
}

// Gradient g into an accumulator of dtype `into`: reads both and writes the accumulator (a
// first gradient is a copy: read g, write the gradient). The one op cost kept in core, since
// the engine itself does this work; the rest are in ops/op_costs.
static profiler::Cost accumulate_cost(const Tensor& g, DType into, bool first) {
  profiler::Cost c;
  c.flops = first ? 0.0 : double(g.numel());
  c.bytes = double(g.numel()) * (double(dtype_size(g.dtype())) + (first ? 1.0 : 2.0) * double(dtype_size(into)));
  c.shape = shape_str(g.shape());
  return c;
}

profiler::Cost AccumulateGrad::cost(const Tensor& g) const {
  auto leaf = leaf_.lock();
  if (!leaf) return accumulate_cost(g, g.dtype(), true);
  if (leaf->grad) return accumulate_cost(g, leaf->grad->dtype, false);
  return accumulate_cost(g, leaf->grad_buffer ? leaf->grad_buffer->dtype : leaf->dtype, true);
}

std::vector<Tensor> AccumulateGrad::backward(const Tensor& grad_output) {
  auto leaf = leaf_.lock();
  if (!leaf) return {};
  if (!leaf->grad) {
    // Own a private copy: grad_output may be shared with another node's gradient. Into the
    // leaf's buffer when it has one (converted to its dtype), else into new memory.
    Tensor g = leaf->grad_buffer ? Tensor(leaf->grad_buffer)
                                 : empty(grad_output.shape(), {leaf->dtype, grad_output.device()});
    copy_(g, grad_output);
    leaf->grad = g.impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    accumulate_into(acc, grad_output);
  }
  return {};
}

namespace {

// The gradient the backward starts from: grad_in, or 1 for a scalar root.
Tensor root_gradient(const Tensor& root, const Tensor& grad_in) {
  if (!root.requires_grad())
    throw AutogradError("backward", "this tensor does not require grad and has no grad_fn",
                        "set requires_grad on the leaves before computing it, outside NoGradGuard");
  if (!grad_in.defined()) {
    if (root.numel() != 1)
      throw AutogradError("backward", "backward() on a non-scalar tensor of shape " + shape_str(root.shape()) +
                                          " needs an explicit gradient",
                          "reduce to a scalar (e.g. keel::sum or mean) or pass the gradient of the same shape");
    return ones(root.shape(), {root.dtype(), root.device()});
  }
  if (grad_in.shape() != root.shape())
    throw ShapeError("backward", "gradient of shape " + shape_str(grad_in.shape()) + " for a tensor of shape " +
                                     shape_str(root.shape()));
  return grad_in;
}

// For every node reachable from start, how many edges lead into it: the number of consumers
// whose gradients it must receive before it can run. Iterative, so that deep graphs (long
// sequences of ops) cannot overflow the stack.
std::unordered_map<Node*, int> count_consumers(Node* start) {
  std::unordered_map<Node*, int> consumers{{start, 0}};
  std::vector<Node*> stack{start};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->released)
      throw AutogradError("backward", std::string("the graph through ") + n->name() +
                                          " was already freed by an earlier backward()",
                          "recompute the forward pass, or pass retain_graph=true to the first backward()");
    for (auto& next : n->next) {
      if (!next) continue;
      auto [it, inserted] = consumers.try_emplace(next.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(next.get());
    }
  }
  return consumers;
}

// Data parallelism's hook (GradReadyHookGuard): told when a leaf's gradient is final. A leaf
// used by several ops has one AccumulateGrad node per use, so its gradient is final when the
// last of them has run. Counts nothing when nobody listens.
class LeafReadyHook {
 public:
  explicit LeafReadyHook(const std::unordered_map<Node*, int>& nodes) {
    if (!t_grad_ready_hook) return;
    for (auto& [n, _] : nodes)
      if (auto* acc = dynamic_cast<AccumulateGrad*>(n))
        if (auto leaf = acc->leaf()) ++uses_left_[leaf.get()];
  }
  void ran(Node* n) {
    if (!t_grad_ready_hook) return;
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n))
      if (auto leaf = acc->leaf(); leaf && --uses_left_[leaf.get()] == 0) t_grad_ready_hook(leaf);
  }

 private:
  std::unordered_map<TensorImpl*, int> uses_left_;
};

// The gradients the nodes that have not run yet have received so far: each is the sum of what
// its consumers sent. A sum goes in place only into a gradient the engine owns (one it made by
// adding, or one a fresh_gradients() node returned); any other may be shared (a view's
// backward passes its gradient through), so a second contribution to it goes into a copy.
class PendingGradients {
 public:
  void put(Node* n, Tensor g) { grads_[n] = std::move(g); }

  Tensor take(Node* n) {
    Tensor g = std::move(grads_[n]);
    grads_.erase(n);
    owned_.erase(n);
    return g;
  }

  // A node whose backward adds its gradient into its one input's pending gradient (SliceBackward
  // writes its window of it) does so when the engine owns that gradient: true when it did, and
  // the input then has nothing new to sum.
  bool add_through(Node* n, const Tensor& g) {
    Node* next = n->next.size() == 1 ? n->next[0].get() : nullptr;
    if (!next || !owned_.count(next)) return false;
    profiler::Scope prof(n->name(), profiler::Phase::backward);
    if (prof) prof.cost(n->add_into_cost(g));
    return n->add_into(g, grads_[next]);
  }

  // n's input gradients (input_grads[i] for n->next[i]) added to the pending ones.
  void deliver(const Node& n, const std::vector<Tensor>& input_grads) {
    for (size_t i = 0; i < n.next.size() && i < input_grads.size(); ++i) {
      Node* next = n.next[i].get();
      if (!next || !input_grads[i].defined()) continue;
      auto it = grads_.find(next);
      if (it == grads_.end() || !it->second.defined()) {
        grads_[next] = input_grads[i];
        if (n.fresh_gradients()) owned_.insert(next);
        continue;
      }
      // A tensor used twice: the two contributions summed.
      profiler::Scope prof("accumulate_grad", profiler::Phase::backward);
      if (prof) prof.cost(accumulate_cost(input_grads[i], it->second.dtype(), false));
      if (!owned_.count(next)) {
        it->second = it->second.clone();
        owned_.insert(next);
      }
      accumulate_into(it->second, input_grads[i]);
    }
  }

 private:
  std::unordered_map<Node*, Tensor> grads_;
  std::unordered_set<Node*> owned_;
};

// Every op's backward is profiled here, in one place, under its node's name.
std::vector<Tensor> run_node(Node& n, const Tensor& g) {
  profiler::Scope prof(n.name(), profiler::Phase::backward);
  if (prof) prof.cost(n.cost(g));
  return n.backward(g);
}

}  // namespace

// Reverse-mode autodiff, as micrograd does it: run every node after all the nodes that consume
// its output (Kahn's algorithm on the recorded graph, from the loss down), each node turning its
// output's gradient into its inputs' gradients, and the gradients of a value used twice summed.
void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  const Tensor grad = root_gradient(root, grad_in);
  NoGradGuard no_grad;  // backward itself is not recorded (no higher-order gradients)
  std::shared_ptr<Node> start = root.grad_fn() ? root.grad_fn() : std::make_shared<AccumulateGrad>(root.impl_ptr());
  std::unordered_map<Node*, int> consumers = count_consumers(start.get());
  LeafReadyHook leaf_ready(consumers);
  PendingGradients pending;
  pending.put(start.get(), grad);
  std::vector<Node*> ready{start.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    const Tensor g = pending.take(n);
    if (!pending.add_through(n, g)) {
      std::vector<Tensor> input_grads = run_node(*n, g);
      leaf_ready.ran(n);
      pending.deliver(*n, input_grads);
    }
    for (auto& next : n->next)  // a node runs once every consumer has delivered its gradient
      if (next && --consumers[next.get()] == 0) ready.push_back(next.get());
    if (!retain_graph) {  // free what the node saved for its backward
      n->release();
      n->released = true;
    }
  }
}

}  // namespace keel
