// Evaluation of a model on a dataset split: the mean next-token loss, perplexity and the attention
// statistics (max |logit|, max row range), used by `gpt2 eval` and by the trainer's validation.
#pragma once

#include <cstdint>
#include <memory>

#include "apps/gpt2/run/max_logit.h"
#include "core/device.h"
#include "core/dist/comm.h"
#include "data/dataset.h"
#include "nn/gpt2.h"

namespace keel::app {

struct EvalResult {
  double loss = 0, perplexity = 0;
  int64_t tokens = 0;
  MaxLogit max_logit;  // (L, H), merged over the batches (NaN wins)
  MaxLogit max_range;  // (L, H) the row logit range (ops/attention.h), merged the same way
};
// Mean next-token loss over (up to max_batches, 0 = all) batches of the split. With a
// communicator of several ranks, each rank evaluates its share of those batches' windows and
// the result (the same on every rank) is that of one rank evaluating them all.
EvalResult evaluate(nn::GPT2& model, std::shared_ptr<const data::TokenSplit> split, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, Communicator* comm = nullptr);

}  // namespace keel::app
