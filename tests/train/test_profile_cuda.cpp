// The profiler's counts of one training step of a tiny GPT-2 on a GPU (exact on the emulated
// one): FLOPs, bytes and launches of each kind of op against numbers worked out by hand from
// the model's shapes, so a change that adds a launch, or a cost formula that drifts, fails here.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/profiler.h"
#include "cuda_test.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"
#include "optim/clip.h"

using namespace keel;

namespace {
struct Totals {
  double calls = 0, flops = 0, bytes = 0, launches = 0, library = 0, copies = 0, syncs = 0;
};
Totals totals(const profiler::Summary& s, const std::string& name, profiler::Phase phase) {
  Totals t;
  for (const profiler::Row& r : s.rows)
    if (r.name == name && r.phase == phase) {
      t.calls += double(r.calls), t.flops += r.flops, t.bytes += r.bytes;
      t.launches += double(r.counts.launches), t.library += double(r.counts.library_calls);
      t.copies += double(r.counts.copies), t.syncs += double(r.counts.syncs);
    }
  return t;
}
}  // namespace

TEST_CASE("profiler on the GPU: one step of a tiny GPT-2, counted exactly") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  nn::GPT2Config c;
  // L 2, H 2 heads of D 32, C 64, V 512 (multiples of 8: cuBLAS's fast path), bias, tied, f32.
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 32, c.vocab_size = 512;
  const double L = 2, H = 2, D = 32, C = 64, V = 512, B = 2, T = 32, BT = B * T;
  nn::GPT2 model(c, 7);
  model.to(dev);
  optim::AdamW opt(model.named_parameters());
  std::vector<int32_t> ids(static_cast<size_t>(BT)), tg(static_cast<size_t>(BT));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 5) % 512), tg[i] = int32_t((i * 11 + 3) % 512);
  const Tensor x = from_vector(ids, {2, 32}).to(dev), y = from_vector(tg, {2, 32}).to(dev);
  auto step = [&] {
    opt.zero_grad();
    model.forward(x, y).loss.backward();
    {
      profiler::PhaseGuard optimizer(profiler::Phase::optimizer);
      optim::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
    }
  };
  step();  // warm-up: the caching allocator and cuBLAS handles
  profiler::Session session({dev, "H100"});
  session.step_begin();
  step();
  session.step_end();
  const profiler::Profile p = session.finish();
  const profiler::Summary s = profiler::summarize(p);
  using profiler::Phase;
  const double params = double(model.named_parameters().size());  // 2 + 12 per layer + ln_f's 2 = 28

  // Linear layers: c_attn (C -> 3C) and attn c_proj (C -> C) per layer, with bias (one add per
  // output), and the tied lm_head (C -> V, no bias). The MLP's two are the mlp op's (below).
  const double matrix = L * 2 * BT * (3 * C * C + C * C) + 2 * BT * C * V;
  const double bias_adds = L * BT * (3 * C + C);
  const Totals lin = totals(s, "linear", Phase::forward), linb = totals(s, "LinearBackward", Phase::backward);
  CHECK(lin.calls == 2 * L + 1);
  CHECK(lin.flops == matrix + bias_adds);
  CHECK(lin.library == 2 * L + 1);  // one cuBLAS(Lt) call each, the bias in its epilogue
  CHECK(lin.launches == 0);
  CHECK(linb.flops == 2 * matrix + bias_adds);  // dx and dweight each a product of the forward's size; dbias sums
  // dx, dweight and dbias one operation each; the lm_head has no bias.
  CHECK(linb.launches + linb.library == 3 * 2 * L + 2);

  // The MLP, one op (ops/mlp.h): c_fc (C -> 4C) with its bias and GELU (10 FLOPs per output), the
  // pre-activation kept for the backward, then c_proj (4C -> C) with its bias. In bf16/f16 c_fc is
  // one cuBLASLt call whose epilogue does it all; in f32, as here, the product with the bias in its
  // epilogue, then keel's gelu kernel (the epilogue's GELU is not exact enough for f32,
  // ops/cuda/linear_gelu.cu). Bytes are the op's, whichever path, all f32: x, weight and bias read,
  // output and pre-activation written, then c_proj's operands and output.
  const double fc = L * 2 * BT * C * 4 * C, fc_out = L * BT * 4 * C, proj_out = L * BT * C;
  const double w = L * 4 * C * C;  // each of the two weights, all layers
  const Totals m = totals(s, "mlp", Phase::forward), mb = totals(s, "MLPBackward", Phase::backward);
  CHECK(m.calls == L);
  CHECK(m.library == 2 * L);
  CHECK(m.launches == L);  // f32: the gelu kernel
  CHECK(m.flops == fc + fc_out + 10 * fc_out + fc + proj_out);
  CHECK(m.bytes == (L * BT * C + w + L * 4 * C + 2 * fc_out + (fc_out + w + L * C + proj_out)) * 4);
  // The backward: c_proj's dweight and dbias, d(pre) = (grad @ c_proj) gelu'(pre) (in bf16/f16
  // one cuBLASLt call with the DGELU epilogue; 16 FLOPs per element and a read of pre), then c_fc's
  // dx, dweight and dbias from d(pre).
  CHECK(mb.calls == L);
  CHECK(mb.flops == 2 * fc + proj_out + 16 * fc_out + 2 * fc + fc_out);  // dx and dweight: a product each
  const double proj_bytes = (proj_out + w + fc_out) + (proj_out + fc_out + w) + (proj_out + L * C);
  const double fc_bytes = (fc_out + w + proj_out) + (fc_out + proj_out + w) + (fc_out + L * 4 * C);
  CHECK(mb.bytes == (proj_bytes + fc_out + fc_bytes) * 4);
  // c_proj's dweight and dbias, d(pre) (f32: the product, then gelu's kernel), c_fc's three
  CHECK(mb.launches + mb.library == 7 * L);
  // No gelu op of its own anywhere in the step: the kernels are mlp's.
  CHECK(totals(s, "gelu", Phase::forward).calls == 0);
  CHECK(totals(s, "GeluBackward", Phase::backward).calls == 0);

  // Causal attention: T(T+1)/2 pairs per head, 4 D FLOPs each forward, 10 D backward.
  const double pairs = L * B * H * T * (T + 1) / 2;
  CHECK(totals(s, "attention", Phase::forward).flops == 4 * D * pairs);
  CHECK(totals(s, "AttentionPackedBackward", Phase::backward).flops == 10 * D * pairs);  // the model packs q, k, v
  // forward: q, k, v read, out written (f32), the row log-sum-exp (f32) written
  CHECK(totals(s, "attention", Phase::forward).bytes == L * (4 * BT * C * 4 + B * H * T * 4));

  // The loss as the fused classifier (model.forward's loss gradient is 1, that of backward()):
  // the forward counts the targets, makes one pass per row writing lse, the row's loss and its
  // gradient (4 + 3 FLOPs per logit), and takes the mean; the backward only checks the gradient.
  const Totals ce = totals(s, "cross_entropy", Phase::forward);
  const Totals ceb = totals(s, "CrossEntropyBackward", Phase::backward);
  CHECK(ce.launches == 3);
  CHECK(ce.flops == 7 * BT * V);
  CHECK(ce.bytes == 2 * BT * V * 4 + BT * 4 + BT * 4 + 4);  // logits, dlogits, i32 targets, lse, loss
  CHECK(ceb.launches == 1);
  CHECK(ceb.flops == 0);
  CHECK(ceb.bytes == 4);

  // Adds: the embeddings' (B, T, C) + (T, C), whose backward sums the position table's gradient
  // over the batch. Each block's last residual add is done by the LayerNorm after it (below).
  const Totals addb = totals(s, "AddBackward", Phase::backward);
  CHECK(addb.calls == 1);
  CHECK(addb.bytes == BT * C * 4 + T * C * 4);

  // LayerNorm alone: only layer 0's ln_1, whose input is the embeddings' sum; x read, y written,
  // weight and bias read, mean and rstd written (f32).
  const Totals ln = totals(s, "layernorm", Phase::forward);
  CHECK(ln.calls == 1);
  CHECK(ln.launches == 1);
  CHECK(ln.bytes == 2 * BT * C * 4 + 2 * C * 4 + 2 * BT * 4);
  // A residual add and the LayerNorm after it as one kernel (add_layernorm), 2L of them: the
  // attention's add with ln_2 in every layer, the MLP's add with the next layer's ln_1 or ln_f
  // (nn::Residual). 1 + 8 FLOPs per element; x and y read, h and out written, weight and bias
  // read, mean and rstd written. Its backward: layernorm's (12 FLOPs per element; grad, h, weight,
  // mean and rstd read, dx, dweight and dbias written) with h's gradient from its other use read
  // and added into dx (1 FLOP per element), except after ln_f, whose h has no other use:
  // dx, dweight's and dbias' partial sums and their final sum, 3 kernels. h's own node hands its
  // gradient over and launches nothing; ln_f's h gets no gradient, so it has none.
  const Totals aln = totals(s, "add_layernorm", Phase::forward);
  const Totals alnb = totals(s, "AddLayerNormBackward", Phase::backward);
  const Totals alnr = totals(s, "AddLayerNormResidual", Phase::backward);
  CHECK(aln.calls == 2 * L);
  CHECK(aln.launches == 2 * L);
  CHECK(aln.flops == 2 * L * 9 * BT * C);
  CHECK(aln.bytes == 2 * L * (4 * BT * C * 4 + 2 * C * 4 + 2 * BT * 4));
  CHECK(alnb.calls == 2 * L);
  CHECK(alnb.launches == 3 * 2 * L);
  CHECK(alnb.flops == (2 * L - 1) * 13 * BT * C + 12 * BT * C);
  CHECK(alnb.bytes == 2 * L * (4 * BT * C * 4 + 3 * C * 4 + 2 * BT * 4) - BT * C * 4);
  CHECK(alnr.calls == 2 * L - 1);
  CHECK(alnr.launches + alnr.library + alnr.copies == 0);

  // The optimizer: AdamW is one fused multi-tensor kernel per 48 parameter tensors of a dtype
  // (one here); the gradient norm sums every gradient's squares in one table launch and a final
  // pass, then an ordered sum into a zeroed slot (a fill): one sync.
  const Totals adamw = totals(s, "adamw", Phase::optimizer), norm = totals(s, "grad_norm", Phase::optimizer);
  CHECK(adamw.calls == 1);
  CHECK(adamw.launches == 1);
  CHECK(params == 2 + 12 * L + 2);
  CHECK(norm.syncs == 1);
  CHECK(norm.launches == 4);
  // The inputs are on the device already, and the embeddings check and group their ids there
  // (issue 31): what waits is the gradient norm's readback and the forward's copy of the
  // attention statistics to the host (the model's default; the trainer keeps them on the device).
  CHECK(totals(s, "embedding", Phase::forward).syncs == 0);
  CHECK(totals(s, "EmbeddingBackward", Phase::backward).syncs == 0);
  CHECK(s.counts.syncs == 2);

  // The rows add up: no launch of the step is counted twice, and few fall outside every op.
  double launches = 0;
  for (const profiler::Row& r : s.rows) launches += double(r.counts.launches + r.counts.library_calls);
  CHECK(launches + double(s.outside.launches + s.outside.library_calls) ==
        double(s.counts.launches + s.counts.library_calls));
  CHECK(s.step_predicted_us > 0);
  CHECK(profiler::table(p).find("predicted H100 step") != std::string::npos);
}
