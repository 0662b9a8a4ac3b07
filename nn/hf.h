// Hugging Face GPT-2 interchange: a directory with config.json and model.safetensors, as
// transformers' GPT2LMHeadModel.save_pretrained(..., safe_serialization=True) writes it.
//
// HF GPT-2 keeps its projections in Conv1D layout, weight (in, out); keel's Linear is (out, in)
// like nn.Linear. The four Conv1D weights of a block (attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj) are transposed at the file boundary, nothing else is. Names carry the
// "transformer." prefix when written; on reading it may be absent (h.0.attn.c_attn.weight,
// wte.weight: GPT2Model exports). The attn.bias / attn.masked_bias buffers of old exports are
// ignored; lm_head.weight is taken from wte when the model is tied (HF writes only wte then).
#pragma once

#include <filesystem>
#include <memory>

#include "nn/gpt2.h"
#include "nn/safetensors.h"

namespace keel::nn {

// Builds the model from `dir`/config.json and copies in `dir`/model.safetensors (converted to
// f32). IoError naming the file for missing / unreadable files, missing or unexpected tensors
// and wrong shapes; ConfigError for a config.json that is not GPT-2 or that keel cannot run.
// The model comes back in eval mode, as from transformers' from_pretrained (call train() to
// fine-tune: HF configs carry a dropout of 0.1).
std::unique_ptr<GPT2> load_pretrained(const std::filesystem::path& dir);

// Writes `dir`/config.json (with keel's keys) and `dir`/model.safetensors (HF names, Conv1D
// layout, the parameters' dtype, metadata format=pt as transformers expects). Creates `dir`;
// each file is written atomically.
void save_pretrained(const GPT2& model, const std::filesystem::path& dir);

// The tensors save_pretrained writes, in HF naming and layout (for checkpoints that embed them).
NamedTensors to_hf_tensors(const GPT2& model);
// Copies HF-named tensors (prefix optional, Conv1D layout) into `model`; `source` names the
// file in errors.
void load_hf_tensors(GPT2& model, const NamedTensors& tensors, const std::string& source);

// True for the four Conv1D weights whose HF layout is (in, out).
bool is_conv1d_weight(const std::string& name);

}  // namespace keel::nn
