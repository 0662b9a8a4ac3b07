// Evaluation on a split, on one rank or shared across the ranks of a data-parallel run.
#include "apps/gpt2/infer/eval.h"

#include <cmath>

#include "apps/gpt2/run/placement.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "data/loader.h"

namespace keel::app {

EvalResult evaluate(nn::GPT2& model, std::shared_ptr<const data::TokenSplit> split, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, Communicator* comm) {
  NoGradGuard no_grad;
  bool was_training = model.training();
  model.eval();
  const int world = comm ? comm->world_size() : 1;
  data::EvalLoader loader(split, {batch_size, seq_len, 0, comm ? comm->rank() : 0, world});
  // Rank r of R takes windows r, R + r, ...: R ranks x ceil(k / R) batches cover the windows
  // of k batches of one rank (exactly when R divides k).
  if (max_batches > 0) max_batches = (max_batches + world - 1) / world;
  const int64_t L = model.config().n_layer, H = model.config().n_head;
  MaxLogit max_logit(L, H), max_range(L, H);
  double loss_sum = 0;
  int64_t tokens = 0, batches = 0;
  data::Batch b;
  while ((max_batches == 0 || batches < max_batches) && loader.next(b)) {
    ++batches;
    if (b.valid_targets == 0) continue;
    auto [ids, tgt] = batch_tensors(b, device);
    nn::GPT2Output out = model.forward(ids, tgt);
    loss_sum += out.loss.item() * double(b.valid_targets);
    tokens += b.valid_targets;
    max_logit.merge(out.max_logit.to_vector<float>());
    max_range.merge(out.max_range.to_vector<float>());
  }
  if (was_training) model.train();
  if (world > 1) {
    Tensor sums = from_vector<double>({loss_sum, double(tokens)}, {2});
    comm->all_reduce_sum(sums);
    auto v = sums.to_vector<double>();
    loss_sum = v[0], tokens = int64_t(v[1]);
    for (MaxLogit* stat : {&max_logit, &max_range}) {
      Tensor m = from_vector<float>(stat->values(), {L * H});
      comm->all_reduce_max(m);
      *stat = MaxLogit(L, H);
      stat->merge(m.to_vector<float>());
    }
  }
  if (tokens == 0)
    throw ConfigError("evaluate", "the validation split has no tokens to predict",
                      "prepare the data with a larger --val-fraction");
  EvalResult r;
  r.loss = loss_sum / double(tokens);
  r.perplexity = std::exp(r.loss);
  r.tokens = tokens;
  r.max_logit = max_logit;
  r.max_range = max_range;
  return r;
}

}  // namespace keel::app
