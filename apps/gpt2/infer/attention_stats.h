// Attention statistics of a trained model (`gpt2 attention-stats`): per layer and head, how far
// back and how spread out the attention is, averaged over a sample of sequences. They answer the
// paper's first open check on a trained model: are long-range dependencies sparse? A head that
// puts little mass beyond 50 tokens could have been local; a global head whose mass beyond 50 sits
// on a few keys with a low effective rank is doing the sparse long-range work that a low-rank
// (d-dimensional) head can do well, which is why LS-attention's global heads need no large logits.
//
// For one head and one sequence, P is the T x T matrix of attention probabilities (row i is query
// i's distribution over keys 0..i). Per row:
//   share beyond w   the mass on keys at least w tokens back, sum_{j <= i - w} P_ij: what a local
//                    head of window w could not see (rows i >= w only; rows with no such key skip)
//   entropy          -sum_j P_ij ln P_ij, in nats: 0 for a one-hot row, ln(i + 1) for a uniform one
//   keys for 90%     the fewest keys whose probabilities add up to 0.9
// and per matrix
//   effective rank   exp(-sum_k p_k ln p_k) with p_k = s_k / sum(s), s the singular values of P
//                    (Roy and Vetterli's measure): T for a diagonal P, 1 for P of rank 1.
// Row statistics average over the rows, then everything over the sequences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt2.h"

namespace keel::app {

inline constexpr int64_t kStatWindows[] = {16, 50, 100};

struct HeadStats {
  int64_t window = 0;                        // the head's window (0: global)
  std::vector<double> share_beyond;          // one per kStatWindows; NaN when T <= w
  double entropy = 0, keys_90 = 0, effective_rank = 0;
};

struct AttentionStats {
  int64_t sequences = 0, seq_len = 0;
  std::vector<std::vector<HeadStats>> layers;  // [layer][head]
};

// p: (T, T) row-major, one head's probabilities for one sequence -> this sequence's statistics
// (window left 0). Exposed for tests.
HeadStats head_stats(const std::vector<float>& p, int64_t T);

// sequences: token windows of one length T <= the model's context, at least one. Runs the model
// without gradients on its device. ConfigError for an empty sample or windows of mixed length.
AttentionStats attention_stats(nn::GPT2& model, const std::vector<std::vector<int32_t>>& sequences);

// One JSON object: {"sequences", "seq_len", "windows", "layers": [[{head, window, share_beyond: {w: x},
// entropy, keys_90, effective_rank}, ...], ...]}; a NaN is the string "nan" (as in metrics.jsonl).
std::string attention_stats_json(const AttentionStats& s);

// A fixed-width table for the terminal, a row per (layer, head).
std::string attention_stats_table(const AttentionStats& s);

// A small SVG: one panel per statistic (mass beyond 50 tokens, entropy, keys for 90%, effective
// rank), a bar per (layer, head), local heads orange and global heads blue.
std::string attention_stats_svg(const AttentionStats& s, const std::string& title);

}  // namespace keel::app
