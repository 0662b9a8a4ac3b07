// libFuzzer target: the GPT-2 tokenizer on arbitrary bytes. encode then decode must give the
// bytes back (any byte string round-trips); the bytes read as little-endian i32 ids are decoded
// too (ids out of range must be an error, not a read out of bounds).
#include <cstring>

#include "data/assets.h"
#include "data/tokenizer/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static keel::data::Tokenizer tok(keel::data::load_vocab(keel::data::default_vocab_dir()));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (tok.decode(tok.encode(text)) != text) {
    std::fprintf(stderr, "keel fuzz: decode(encode(x)) != x\n");
    std::abort();
  }
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  return keel::fuzz::run([&] { (void)tok.decode(ids); });
}
