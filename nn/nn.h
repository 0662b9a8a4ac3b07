// Everything of keel's nn layer in one include: modules, the GPT-2 model and config,
// safetensors files and the Hugging Face interchange.
#pragma once

#include "nn/attention.h"
#include "nn/block.h"
#include "nn/config.h"
#include "nn/embedding.h"
#include "nn/gpt2.h"
#include "nn/hf.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/safetensors.h"
