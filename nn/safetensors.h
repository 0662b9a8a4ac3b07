// safetensors files (https://github.com/huggingface/safetensors), the format of keel's
// checkpoints and of Hugging Face model weights:
//
//   [8 bytes] N, little-endian u64: the header's length
//   [N bytes] JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"key": "string value", ...} (optional)}
//   [rest]    the data region; offsets are relative to its start, tensors row-major little-endian
//
// dtypes: F32, F64, BF16, F16, I32, I64 (keel's own). Reading validates every field and throws
// IoError naming the file and the tensor; writing is atomic (core/io.h).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "core/named_tensors.h"

namespace keel::nn {

struct SafetensorsFile {
  NamedTensors tensors;  // contiguous CPU tensors, in data-offset order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or an undefined Tensor.
  Tensor find(const std::string& name) const;
};

// tensors: any dtype keel has, any device, any layout (copied to contiguous CPU bytes). Names
// must be distinct and non-empty, and not "__metadata__". The header is padded with spaces to a
// multiple of 8 bytes so every tensor's data starts 8-byte aligned.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads the whole file. IoError (naming the file) on: a missing file, fewer than 8 bytes, a
// header length past the end of the file, malformed JSON or fields, an unknown dtype, negative
// shapes, data_offsets out of range, not matching shape x dtype size, or overlapping another.
SafetensorsFile load_safetensors(const std::filesystem::path& path);

// "F32" <-> DType::f32, ...; IoError naming `where` for a dtype keel does not have.
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& s, const std::string& where);

}  // namespace keel::nn
