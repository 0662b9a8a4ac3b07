// Reading and writing GPT-2 vocabulary files (see vocab.h).
#include "data/tokenizer/vocab.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/io.h"
#include "data/tokenizer/unicode.h"

namespace keel::data {

namespace {

struct ByteTables {
  std::array<char32_t, 256> to_cp{};
  std::unordered_map<char32_t, uint8_t> from_cp;
  std::vector<uint8_t> order;
};

const ByteTables& tables() {
  static const ByteTables t = [] {
    ByteTables t;
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    for (int b = 0; b < 256; ++b)
      if (printable(b)) t.to_cp[b] = static_cast<char32_t>(b), t.order.push_back(b);
    int n = 0;
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) t.to_cp[b] = static_cast<char32_t>(256 + n++), t.order.push_back(b);
    for (int b = 0; b < 256; ++b) t.from_cp[t.to_cp[b]] = static_cast<uint8_t>(b);
    return t;
  }();
  return t;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return tables().to_cp[b]; }
const std::vector<uint8_t>& gpt2_byte_order() { return tables().order; }

std::string to_gpt2_alphabet(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, tables().to_cp[b]);
  return out;
}

bool from_gpt2_alphabet(std::string_view text, std::string& bytes) {
  bytes.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const CodeUnit u = decode_utf8(p + i, text.size() - i);
    auto it = tables().from_cp.find(u.cp);
    if (it == tables().from_cp.end()) return false;
    bytes += static_cast<char>(it->second);
    i += u.len;
  }
  return true;
}

Vocab load_vocab(const std::filesystem::path& dir) {
  const auto enc_path = dir / "encoder.json", bpe_path = dir / "vocab.bpe";
  if (!std::filesystem::is_directory(dir))
    throw IoError("load_vocab", fmt::format("{}: vocabulary directory not found", dir.string()),
                  "pass a directory holding encoder.json and vocab.bpe");
  const std::string enc_text = io::read_file(enc_path, "load_vocab", io::kMaxJsonBytes),
                    bpe_text = io::read_file(bpe_path, "load_vocab", io::kMaxJsonBytes);

  const nlohmann::json enc = io::parse_json(enc_text, enc_path.string(), "load_vocab");
  if (!enc.is_object() || enc.empty())
    throw IoError("load_vocab", fmt::format("{}: expected a non-empty JSON object of token -> id",
                                            enc_path.string()));
  Vocab v;
  v.tokens.resize(enc.size());
  std::vector<bool> seen(enc.size(), false);
  std::unordered_map<std::string, int32_t> by_spelling;  // GPT-2 alphabet -> id
  by_spelling.reserve(enc.size());
  std::string bytes;
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_integer())
      throw IoError("load_vocab", fmt::format("{}: token {} has a non-integer id", enc_path.string(),
                                              io::quote(it.key())));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(enc.size()) || seen[id])
      throw IoError("load_vocab",
                    fmt::format("{}: ids must be 0..{} with no repeats; id {} is not",
                                enc_path.string(), enc.size() - 1, id));
    seen[id] = true;
    if (it.key() == kEndOfText) {
      v.eot_id = static_cast<int32_t>(id);
      bytes = std::string(kEndOfText);
    } else if (!from_gpt2_alphabet(it.key(), bytes)) {
      throw IoError("load_vocab", fmt::format("{}: token {} uses a character outside GPT-2's byte "
                                              "alphabet", enc_path.string(),
                                              io::quote(it.key())));
    }
    v.tokens[id] = bytes;
    by_spelling.emplace(it.key(), static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    append_utf8(spelled, byte_to_unicode(static_cast<uint8_t>(b)));
    if (!by_spelling.count(spelled))
      throw IoError("load_vocab", fmt::format("{}: byte 0x{:02x} has no token; a byte-level "
                                              "vocabulary needs all 256", enc_path.string(), b));
  }

  // vocab.bpe: GPT-2's reader drops the first line (#version) and reads "left right" pairs.
  size_t line_no = 0;
  for (size_t pos = 0; pos < bpe_text.size();) {
    size_t eol = bpe_text.find('\n', pos);
    if (eol == std::string::npos) eol = bpe_text.size();
    std::string_view line(bpe_text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw IoError("load_vocab", fmt::format("{}:{}: expected \"left right\", got \"{}\"",
                                              bpe_path.string(), line_no, line));
    const std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
    auto l = by_spelling.find(left), r = by_spelling.find(right),
         m = by_spelling.find(left + right);
    if (l == by_spelling.end() || r == by_spelling.end() || m == by_spelling.end())
      throw IoError("load_vocab", fmt::format("{}:{}: merge \"{}\" names a token missing from {}",
                                              bpe_path.string(), line_no, line,
                                              enc_path.filename().string()));
    v.merges.emplace_back(l->second, r->second);
  }
  return v;
}

void save_vocab(const Vocab& vocab, const std::filesystem::path& dir) {
  // Written by hand so that entries appear in id order, as in GPT-2's own file.
  std::string enc = "{";
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string key =
        id == vocab.eot_id ? std::string(kEndOfText) : to_gpt2_alphabet(vocab.tokens[id]);
    if (id) enc += ", ";
    enc += nlohmann::json(key).dump(-1, ' ', /*ensure_ascii=*/true);
    enc += fmt::format(": {}", id);
  }
  enc += "}";
  std::string bpe = "#version: 0.2\n";
  for (const auto& [l, r] : vocab.merges)
    bpe += to_gpt2_alphabet(vocab.tokens[l]) + " " + to_gpt2_alphabet(vocab.tokens[r]) + "\n";
  io::write_file_atomic(dir / "encoder.json", enc, "save_vocab");
  io::write_file_atomic(dir / "vocab.bpe", bpe, "save_vocab");
}

}  // namespace keel::data
