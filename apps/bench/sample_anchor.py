#!/usr/bin/env python3
"""The PyTorch anchor of apps/bench/bench_sample.py (its docstring says what is measured and
checked): transformers' GPT2LMHeadModel on keel's weights, eager or with its decode step
compiled, called the way the installed transformers wants it, and load_models, which loads it
and the f32 reference from the Hugging Face directory `gpt2 bench-sample --save-hf` wrote.
Imports torch and transformers only when used; keel never does."""

import copy
import inspect
import os
import sys


class AnchorError(RuntimeError):
    """The anchor misbehaved (its cache did not grow): its numbers would be wrong, so none are kept."""


class Anchor:
    """transformers' GPT2LMHeadModel, called the way the installed version wants (found from its
    signatures, never by trying keywords: a version that swallowed an unknown keyword into
    **kwargs would silently run without the cache)."""

    def __init__(self, model, dev, dtype, versions, compiled):
        import torch
        import transformers
        self.torch, self.model, self.dev, self.dtype, self.versions = torch, model, dev, dtype, versions
        self.cfg = model.config
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self.positions = "cache_position" in params  # older versions: the caller tracks positions
        self.compiled = compiled
        self.name = "compiled" if compiled else "eager"
        self.impl = "torch-compiled" if compiled else "torch"
        self.extra_warmup = 3 if compiled else 0  # compilation and CUDA-graph recording
        if compiled:
            if not hasattr(transformers, "StaticCache"):
                raise AnchorError(f"transformers {transformers.__version__} has no StaticCache")
            self.mode = "reduce-overhead" if dev.type == "cuda" else None  # CUDA graphs need CUDA
            for k in ("recompile_limit", "cache_size_limit"):  # a graph per (batch, cache length)
                if hasattr(torch._dynamo.config, k):
                    setattr(torch._dynamo.config, k, max(64, getattr(torch._dynamo.config, k)))
            fullgraph = bool(getattr(model, "_can_compile_fullgraph", False))
            self.compile_info = {"mode": self.mode or "default", "fullgraph": fullgraph, "dynamic": False}
            self.step_fn = torch.compile(model.forward, mode=self.mode, fullgraph=fullgraph, dynamic=False)
        else:
            self.compile_info = None
            self.step_fn = model.forward

    def new_cache(self, B, max_len):
        if self.compiled:
            from transformers import StaticCache
            sig = inspect.signature(StaticCache.__init__).parameters
            kw = {"config": self.cfg, "max_cache_len": max_len}
            for k, v in (("max_batch_size", B), ("batch_size", B), ("device", self.dev), ("dtype", self.dtype)):
                if k in sig:
                    kw[k] = v
            cache = StaticCache(**kw)
        else:
            from transformers import DynamicCache
            cache = DynamicCache(config=self.cfg) if "config" in inspect.signature(DynamicCache.__init__).parameters \
                else DynamicCache()
        cache.keel_length = 0  # positions written, for versions that want cache_position
        return cache

    def length(self, cache):
        return int(cache.get_seq_length())

    def fill_random(self, cache, B, L):
        t = self.torch
        H, D = self.cfg.n_head, self.cfg.n_embd // self.cfg.n_head
        for layer in range(self.cfg.n_layer):
            kw = {"cache_kwargs": {"cache_position": t.arange(L, device=self.dev)}} if self.positions else {}
            cache.update(t.randn(B, H, L, D, device=self.dev, dtype=self.dtype),
                         t.randn(B, H, L, D, device=self.dev, dtype=self.dtype), layer, **kw)
        cache.keel_length = L

    def __call__(self, ids, cache, step):
        """The last position's logits (B, V) after feeding ids (B, T): `step` uses the compiled
        forward (a decode step), else the eager one (a prefill)."""
        t = self.torch
        T = ids.shape[1]
        kw = {self.cache_kw: cache, "use_cache": True}
        if self.keep_kw:
            kw[self.keep_kw] = 1
        if self.positions:
            kw["cache_position"] = t.arange(cache.keel_length, cache.keel_length + T, device=self.dev)
        fn = self.step_fn if step else self.model.forward
        if step and self.compiled and hasattr(t.compiler, "cudagraph_mark_step_begin"):
            t.compiler.cudagraph_mark_step_begin()
        logits = fn(ids, **kw).logits[:, -1, :]
        cache.keel_length += T
        if self.length(cache) != cache.keel_length:
            raise AnchorError(f"the {self.name} anchor's cache holds {self.length(cache)} positions after "
                              f"{cache.keel_length} were fed: transformers {self.versions['transformers']} did not "
                              f"use the cache given as `{self.cache_kw}`")
        return logits


def load_models(a, torch):
    """The anchor's model in the run's dtype and the f32 reference (the same weights rounded to
    that dtype, evaluated in f32), both on the device."""
    from transformers import GPT2LMHeadModel

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    dev = torch.device("cuda" if a.device.startswith("cuda") else "cpu")
    hf = os.path.join(a.out, "hf")
    model, info = GPT2LMHeadModel.from_pretrained(hf, output_loading_info=True, attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in info["missing_keys"]:
                if not name.endswith(".bias"):
                    sys.exit(f"bench_sample.py: {hf} lacks {name}, which is not a bias")
                p.zero_()  # keel's bias-free model is GPT-2 with zero biases
    ref = copy.deepcopy(model).to(dtype).to(dev, torch.float32).eval()
    model = model.to(dev, dtype).eval()
    return model, ref, dev, dtype
