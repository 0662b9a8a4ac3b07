// The degrees-of-freedom lab: why a global attention head must inflate its logits to represent
// dense local dependencies once the sequence length n is much larger than the head width d
// (arXiv 2505.15548), shown by fitting one head with keel's own autodiff.
//
// One head, softmax(Q K^T / sqrt(d)) with Q = X Wq, K = X Wk, is fitted to a dense local target:
// query i spreads most of its weight uniformly over its last p positions (itself included), the
// rest (`floor`) over all earlier ones. X (n, m) is fixed random input; only Wq, Wk (m, d) learn. Q K^T has rank at most d, while the target's
// log-probabilities form a band of width p: a rank-d matrix can only approximate the band's sharp
// edges by growing large, so as n/d grows a global head's fit gets worse and the range of its
// logits wider (measured: docs/instability.md). A local head of window p (keys outside the band masked, as LS-attention's local heads)
// needs no rank at all for the band: equal logits inside the window are an exact fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/gpt2/run/seed.h"

namespace keel::app {

struct DofLabConfig {
  std::vector<int64_t> n = {16, 32, 64, 128, 256};  // sequence lengths
  std::vector<int64_t> d = {4, 8, 16};               // head widths
  int64_t window = 8;    // p: the target's band, and the local head's window
  // Weight spread evenly over every earlier position, the rest over the band. Above 0 the target
  // is reachable with finite logits (log-target has a finite spread), so growing logits mean the
  // head lacks the rank, not that the target demands infinities.
  double floor = 0.1;
  // m: width of the fixed random inputs; 0 = n, so the inputs are linearly independent and the
  // head width d is the only bound on the rank of QK^T.
  int64_t input_dim = 0;
  int64_t steps = 300;   // Adam steps per fit
  double lr = 0.02;
  Seed seed = 1;
  void validate() const;  // ConfigError naming the field
};

struct DofFit {
  int64_t n = 0, d = 0;
  bool local = false;     // a local head of window p (else a global causal head)
  double kl = 0;          // final mean KL(target || attention) per query, nats
  double tv = 0;          // final mean total-variation distance per query, in [0, 1]
  double max_logit = 0;   // final max |logit| over the allowed (query, key) pairs
  // final max over queries of (largest - smallest logit among its allowed keys): how sharp the
  // head has to be. Unlike max |logit| it ignores a per-query shift, which the softmax ignores too.
  double logit_range = 0;
};

// One fit (deterministic from cfg.seed, n and d).
DofFit fit_head(const DofLabConfig& cfg, int64_t n, int64_t d, bool local);

// Every (n, d) of the grid, global then local head. `progress` (may be null) sees each fit.
std::vector<DofFit> run_dof_lab(const DofLabConfig& cfg, void (*progress)(const DofFit&) = nullptr);

// A fixed-width table for the terminal, one row per (n, d): n/d, global and local KL, TV, max logit.
std::string dof_table(const std::vector<DofFit>& fits);

// A self-contained HTML page: fit error, logit range and max |logit| against n/d, one line per d
// and head kind.
std::string dof_report_html(const DofLabConfig& cfg, const std::vector<DofFit>& fits);

}  // namespace keel::app
