// Byte-level BPE encoding and decoding (see tokenizer.h).
#include "data/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/pretokenize.h"

namespace keel::data {

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The cache is bounded so that adversarial or huge inputs cannot grow it without limit;
// English text needs far fewer distinct pieces than this.
constexpr size_t kMaxCacheEntries = 1 << 20;

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  int32_t byte_id[256];
  struct Merge {
    int32_t rank, result;
  };
  std::unordered_map<uint64_t, Merge> merges;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> work;  // scratch for bpe()

  explicit Impl(Vocab v) : vocab(std::move(v)) {
    std::unordered_map<std::string_view, int32_t> id_of;
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (id != vocab.eot_id) id_of.emplace(vocab.tokens[id], id);
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      auto it = id_of.find(std::string_view(&c, 1));
      if (it == id_of.end())
        throw ConfigError("Tokenizer", fmt::format("byte 0x{:02x} has no token", b),
                          "a byte-level vocabulary needs a token for each of the 256 bytes");
      byte_id[b] = it->second;
    }
    merges.reserve(vocab.merges.size() * 2);
    for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
      const auto [l, r] = vocab.merges[rank];
      if (l < 0 || r < 0 || l >= vocab.size() || r >= vocab.size())
        throw ConfigError("Tokenizer", fmt::format("merge {} names an id out of range", rank));
      auto it = id_of.find(vocab.tokens[l] + vocab.tokens[r]);
      if (it == id_of.end())
        throw ConfigError("Tokenizer", fmt::format("merge {} makes a token not in the vocabulary",
                                                   rank));
      // A repeated pair takes its last rank, as GPT-2's dict(zip(merges, range(...))) does.
      merges.insert_or_assign(pair_key(l, r), Merge{static_cast<int32_t>(rank), it->second});
    }
  }

  // GPT-2's bpe(): repeatedly merge every occurrence of the lowest-ranked adjacent pair.
  void bpe(std::string_view piece, std::vector<int32_t>& out) {
    work.clear();
    for (unsigned char b : piece) work.push_back(byte_id[b]);
    while (work.size() > 1) {
      int32_t best_rank = std::numeric_limits<int32_t>::max(), best_result = -1;
      int32_t best_l = -1, best_r = -1;
      for (size_t i = 0; i + 1 < work.size(); ++i) {
        auto it = merges.find(pair_key(work[i], work[i + 1]));
        if (it != merges.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank, best_result = it->second.result;
          best_l = work[i], best_r = work[i + 1];
        }
      }
      if (best_result < 0) break;
      size_t w = 0;
      for (size_t i = 0; i < work.size(); ++i) {
        if (i + 1 < work.size() && work[i] == best_l && work[i + 1] == best_r) {
          work[w++] = best_result;
          ++i;
        } else {
          work[w++] = work[i];
        }
      }
      work.resize(w);
    }
    out.insert(out.end(), work.begin(), work.end());
  }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) {
    if (piece.size() == 1) {
      out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    const size_t start = out.size();
    bpe(piece, out);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + start, out.end()));
  }
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>(std::move(vocab))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) { return Tokenizer(load_vocab(dir)); }

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  for_each_piece(text, [&](std::string_view piece) { impl_->encode_piece(piece, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  encode_append(text, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_special(std::string_view text) {
  std::vector<int32_t> out;
  const int32_t eot = eot_id();
  for (;;) {
    const size_t at = text.find(kEndOfText);
    encode_append(text.substr(0, at), out);
    if (at == std::string_view::npos) break;
    out.push_back(eot);
    text.remove_prefix(at + kEndOfText.size());
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  const auto& tokens = impl_->vocab.tokens;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= static_cast<int32_t>(tokens.size()))
      throw ValueError("Tokenizer::decode",
                       fmt::format("id {} at position {} is outside the vocabulary [0, {})",
                                   ids[i], i, tokens.size()));
    out += tokens[ids[i]];
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab.size(); }

int32_t Tokenizer::eot_id() const {
  if (impl_->vocab.eot_id < 0)
    throw ConfigError("Tokenizer", "the vocabulary has no <|endoftext|> token",
                      "add \"<|endoftext|>\" to encoder.json");
  return impl_->vocab.eot_id;
}

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

}  // namespace keel::data
