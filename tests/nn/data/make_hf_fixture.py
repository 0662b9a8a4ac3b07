#!/usr/bin/env python3
"""Makes the Hugging Face GPT-2 reference fixtures read by tests/nn/test_hf_reference.cpp.

    pip install numpy safetensors
    python3 tests/nn/data/make_hf_fixture.py      # rewrites tests/nn/data/hf_tiny{,_legacy}/

numpy and safetensors are tools for MAKING this fixture only. keel never depends on them (nor on
PyTorch / transformers): the C++ test reads the files written here and nothing else. The output
is deterministic (fixed numpy seed), so re-running it reproduces the committed files.

What it writes, in two directories holding the same random tiny GPT-2:

  hf_tiny/         config.json as transformers' GPT2Config.save_pretrained writes it, and
                   model.safetensors named as GPT2LMHeadModel.save_pretrained(...,
                   safe_serialization=True) names it: "transformer." prefix, Conv1D weights in
                   (in, out) layout, no lm_head.weight (tied to transformer.wte.weight), no
                   attn.bias buffers (non-persistent in current transformers).
  hf_tiny_legacy/  the layout of the original openai-community/gpt2 upload: no prefix
                   ("h.0.attn.c_attn.weight", "wte.weight"), an f32 causal-mask buffer
                   "h.N.attn.bias" (1, 1, n_ctx, n_ctx) per block, and a config.json of that era
                   (no tie_word_embeddings, no n_inner: both take their defaults).
  expected.json    (in each) the token ids (B=2, T=16), the reference logits (B, T, V) flattened
                   row-major, and the mean next-token cross-entropy transformers computes for
                   GPT2LMHeadModel(input_ids=ids, labels=ids): logits[:, :-1] against ids[:, 1:].

The reference forward pass below is written from the math of transformers' modeling_gpt2.py
(eager attention, eval mode: dropout off) and evaluated in float64 from the float32 weights, so
it is the exact value an f32 implementation approximates.

Size: n_embd is 16 (not 32) so that each directory stays under 100 KB; n_head 2 still exercises
the head split (head_dim 8).
"""

import json
import math
import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

N_LAYER, N_HEAD, N_EMBD, N_POS, VOCAB = 2, 2, 16, 16, 97
EPS = 1e-5
B, T = 2, 16
STD = 0.2  # well above GPT-2's 0.02, so the logits are far from uniform
SEED = 20240607

# config.json exactly as transformers (4.4x) writes GPT2Config(n_layer=2, n_head=2, n_embd=16,
# n_positions=16, n_ctx=16, vocab_size=97) for a GPT2LMHeadModel, keys sorted as it sorts them.
CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": EPS,
    "model_type": "gpt2",
    "n_ctx": N_POS,
    "n_embd": N_EMBD,
    "n_head": N_HEAD,
    "n_inner": None,
    "n_layer": N_LAYER,
    "n_positions": N_POS,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.1,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "transformers_version": "4.44.2",
    "use_cache": True,
    "vocab_size": VOCAB,
}

# The original openai-community/gpt2 config.json, shrunk to the same sizes.
LEGACY_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": EPS,
    "model_type": "gpt2",
    "n_ctx": N_POS,
    "n_embd": N_EMBD,
    "n_head": N_HEAD,
    "n_layer": N_LAYER,
    "n_positions": N_POS,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": VOCAB,
}


def make_weights(rng):
    """HF names (with the transformer. prefix) -> float32 arrays in HF layout."""
    C = N_EMBD

    def normal(*shape):
        return (STD * rng.standard_normal(shape)).astype(np.float32)

    def gain(n):
        return (1.0 + STD * rng.standard_normal(n)).astype(np.float32)

    w = {
        "transformer.wte.weight": normal(VOCAB, C),
        "transformer.wpe.weight": normal(N_POS, C),
    }
    for l in range(N_LAYER):
        p = f"transformer.h.{l}."
        w[p + "ln_1.weight"] = gain(C)
        w[p + "ln_1.bias"] = normal(C)
        w[p + "attn.c_attn.weight"] = normal(C, 3 * C)  # Conv1D: (in, out)
        w[p + "attn.c_attn.bias"] = normal(3 * C)
        w[p + "attn.c_proj.weight"] = normal(C, C)
        w[p + "attn.c_proj.bias"] = normal(C)
        w[p + "ln_2.weight"] = gain(C)
        w[p + "ln_2.bias"] = normal(C)
        w[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        w[p + "mlp.c_fc.bias"] = normal(4 * C)
        w[p + "mlp.c_proj.weight"] = normal(4 * C, C)
        w[p + "mlp.c_proj.bias"] = normal(C)
    w["transformer.ln_f.weight"] = gain(C)
    w["transformer.ln_f.bias"] = normal(C)
    return w


# ---- the reference forward pass, float64 ----------------------------------------------------

def layer_norm(x, g, b):
    # torch.nn.LayerNorm: biased variance over the last dim, eps inside the square root
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * g + b


def conv1d(x, w, b):
    # transformers.pytorch_utils.Conv1D: x @ weight + bias with weight (in, out)
    return x @ w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attention(x, p, w):
    Bn, Tn, C = x.shape
    H, D = N_HEAD, C // N_HEAD
    qkv = conv1d(x, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"])  # (B, T, 3C)
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]             # split(n_embd, dim=2)

    def heads(t):  # (B, T, C) -> (B, H, T, D)
        return t.reshape(Bn, Tn, H, D).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)  # scale_attn_weights: / sqrt(head_dim)
    causal = np.tril(np.ones((Tn, Tn), dtype=bool))
    scores = np.where(causal, scores, np.finfo(np.float64).min)  # masked -> dtype min
    probs = softmax(scores)
    out = probs @ v                                                  # (B, H, T, D)
    out = out.transpose(0, 2, 1, 3).reshape(Bn, Tn, C)              # merge heads
    return conv1d(out, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])


def mlp(x, p, w):
    h = gelu_new(conv1d(x, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]))
    return conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])


def forward(w32, ids):
    w = {k: v.astype(np.float64) for k, v in w32.items()}
    Tn = ids.shape[1]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][np.arange(Tn)]
    for l in range(N_LAYER):
        p = f"transformer.h.{l}."
        x = x + attention(layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"]), p, w)
        x = x + mlp(layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"]), p, w)
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    return x @ w["transformer.wte.weight"].T  # tied lm_head, no bias


def hf_loss(logits, ids):
    # GPT2LMHeadModel(labels=ids): shift_logits = logits[..., :-1, :], shift_labels = ids[..., 1:],
    # CrossEntropyLoss(reduction="mean") over all B * (T - 1) positions (none is -100 here).
    lg = logits[:, :-1, :].reshape(-1, logits.shape[-1])
    y = ids[:, 1:].reshape(-1)
    m = lg.max(-1, keepdims=True)
    logz = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[:, 0]
    return float(np.mean(logz - lg[np.arange(len(y)), y]))


# ---- writing --------------------------------------------------------------------------------

def write_dir(name, config, tensors, expected):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    weights = os.path.join(d, "model.safetensors")
    save_file(tensors, weights, metadata={"format": "pt"})
    os.chmod(weights, 0o644)  # safetensors creates it 0600
    with open(os.path.join(d, "expected.json"), "w") as f:
        f.write(expected)
    total = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))
    print(f"{d}: {total} bytes")


def main():
    rng = np.random.default_rng(SEED)
    w = make_weights(rng)
    ids = rng.integers(0, VOCAB, size=(B, T), dtype=np.int64)
    ids[0, 0], ids[1, -1] = 0, VOCAB - 1  # both ends of the vocabulary

    logits = forward(w, ids)
    loss = hf_loss(logits, ids)
    print(f"loss {loss:.9f}  (log V = {math.log(VOCAB):.4f})  |logits| max {np.abs(logits).max():.3f} "
          f"std {logits.std():.3f}")

    # 9 significant digits: far below the f32 tolerance the test checks, and keeps the file small.
    expected = (
        "{\n"
        f'  "note": "made by tests/nn/data/make_hf_fixture.py: float64 reference of transformers GPT2LMHeadModel",\n'
        f'  "shape": [{B}, {T}, {VOCAB}],\n'
        f'  "ids": {json.dumps(ids.tolist())},\n'
        f'  "loss": {loss!r},\n'
        '  "logits": [' + ", ".join(f"{v:.9g}" for v in logits.reshape(-1)) + "]\n"
        "}\n"
    )

    write_dir("hf_tiny", CONFIG, w, expected)

    legacy = {k[len("transformer."):]: v for k, v in w.items()}
    causal = np.tril(np.ones((N_POS, N_POS), dtype=np.float32)).reshape(1, 1, N_POS, N_POS)
    for l in range(N_LAYER):
        legacy[f"h.{l}.attn.bias"] = causal.copy()
    write_dir("hf_tiny_legacy", LEGACY_CONFIG, legacy, expected)


if __name__ == "__main__":
    main()
