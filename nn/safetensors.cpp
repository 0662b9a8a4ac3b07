#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/io.h"

namespace keel::nn {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {
// A header longer than this is corrupt, not a model (HF's own reader uses the same limit).
constexpr uint64_t kMaxHeader = 100u << 20;

// load_safetensors' errors: an IoError naming the file.
constexpr const char* kLoadOp = "load_safetensors";
[[noreturn]] void fail(const std::string& file, const std::string& msg,
                       const std::string& hint = "is the file a complete safetensors file?") {
  throw IoError(kLoadOp, file + ": " + msg, hint);
}

// The header's JSON text, read from `in` (a file of `size` bytes) after its 8-byte length.
std::string read_header_text(std::ifstream& in, const std::string& file, uint64_t size) {
  if (size < 8) fail(file, "only " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > size - 8)
    fail(file, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                   " bytes)",
         "the file is truncated or not a safetensors file");
  if (n > kMaxHeader) fail(file, "header length " + std::to_string(n) + " is implausibly large");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) fail(file, "cannot read the header");
  return text;
}

// The header's __metadata__: string keys to string values.
void read_metadata(const std::string& file, const json& v, std::map<std::string, std::string>& metadata) {
  if (!v.is_object()) fail(file, "__metadata__ is not an object");
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) fail(file, "__metadata__ value '" + m.key() + "' is not a string");
    metadata[m.key()] = m.value().get<std::string>();
  }
}

// One tensor of the header: its dtype, shape and bytes [begin, end) in the data region.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// The header's entry for tensor `name`, checked: a known dtype, a plausible shape, and offsets
// inside the data region (of data_size bytes) that span exactly the shape's bytes.
Entry parse_entry(const std::string& file, const std::string& name, const json& v, uint64_t data_size) {
  const std::string where = file + ": tensor '" + name + "'";
  auto bad = [&](const std::string& msg) { fail(file, "tensor " + io::quote(name, 80) + ": " + msg); };
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    bad("needs dtype, shape and data_offsets");
  if (!v["dtype"].is_string()) bad("dtype is not a string");
  Entry e{name, parse_safetensors_dtype(v["dtype"].get<std::string>(), where), {}, 0, 0};
  if (!v["shape"].is_array()) bad("shape is not an array");
  uint64_t numel = 1;
  for (const json& d : v["shape"]) {
    if (!d.is_number_unsigned()) bad("shape " + io::quote_json(v["shape"]) + " holds a non-integer or negative size");
    const uint64_t s = d.get<uint64_t>();
    if (s > (uint64_t{1} << 48) || (s && numel > std::numeric_limits<uint64_t>::max() / 8 / s))
      bad("shape " + shape_str(e.shape) + " x " + std::to_string(s) + " is implausibly large");
    numel *= s;
    e.shape.push_back(static_cast<int64_t>(s));
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad("data_offsets must be two non-negative integers, got " + io::quote_json(off));
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size)
    bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
        ") fall outside the data region of " + std::to_string(data_size) + " bytes");
  if (e.end - e.begin != numel * dtype_size(e.dtype))
    bad("data_offsets span " + std::to_string(e.end - e.begin) + " bytes but shape " + shape_str(e.shape) + " x " +
        v["dtype"].get<std::string>() + " needs " + std::to_string(numel * dtype_size(e.dtype)));
  return e;
}

// Sorts the entries by offset and fails when two share bytes.
void check_no_overlap(const std::string& file, std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end && entries[i].end > entries[i].begin)
      fail(file, "tensors '" + entries[i - 1].name + "' and '" + entries[i].name + "' overlap in the data region");
}
}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

DType parse_safetensors_dtype(const std::string& s, const std::string& where) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64})
    if (s == safetensors_dtype_name(t)) return t;
  throw IoError("load_safetensors", where + ": unsupported dtype '" + s + "'",
                "keel reads F32, F64, BF16, F16, I32 and I64 tensors");
}

Tensor SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return {};
}

void save_safetensors(const fs::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  static const char* kOp = "save_safetensors";
  NoGradGuard no_grad;
  std::set<std::string> names;
  std::vector<Tensor> host;
  json header;
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw ValueError(kOp, path.string() + ": invalid tensor name '" + name + "'");
    if (!names.insert(name).second) throw ValueError(kOp, path.string() + ": tensor '" + name + "' given twice");
    if (!t.defined()) throw ValueError(kOp, path.string() + ": tensor '" + name + "' is undefined");
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(h.numel()) * dtype_size(h.dtype());
    header[name] = {{"dtype", safetensors_dtype_name(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(h);
  }
  std::string text = header.empty() ? std::string("{}") : header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data region starts 8-byte aligned
  const uint64_t n = text.size();

  io::AtomicWriter w(path, kOp);
  w.write(&n, 8);  // the host is little-endian (static_assert above)
  w.write(text);
  for (const Tensor& h : host) w.write(h.raw_data(), static_cast<size_t>(h.numel()) * dtype_size(h.dtype()));
  w.commit();
}

SafetensorsFile load_safetensors(const fs::path& path) {
  const std::string file = path.string();
  // Only regular files: a FIFO would block the open forever.
  io::require_regular_file(path, kLoadOp);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail(file, "cannot stat: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(file, "cannot open", "check the permissions");
  const std::string text = read_header_text(in, file, size);
  const uint64_t n = text.size(), data_size = size - 8 - n;

  const json header = io::parse_json(text, file + " (header)", kLoadOp);
  if (!header.is_object()) fail(file, "the header is not a JSON object");
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") read_metadata(file, it.value(), out.metadata);
    else entries.push_back(parse_entry(file, it.key(), it.value(), data_size));
  }
  check_no_overlap(file, entries);

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, {e.dtype});
    if (e.end > e.begin) {
      in.seekg(static_cast<std::streamoff>(8 + n + e.begin));
      in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(e.end - e.begin));
      if (!in) fail(file, "tensor '" + e.name + "': cannot read its data");
    }
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace keel::nn
