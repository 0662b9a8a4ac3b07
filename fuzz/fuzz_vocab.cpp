// libFuzzer target: the vocabulary loader (encoder.json + vocab.bpe). The input is split at the
// first NUL byte: encoder.json before it, vocab.bpe after it.
#include "data/tokenizer/vocab.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  std::filesystem::create_directories(keel::fuzz::scratch() / "vocab");
  keel::fuzz::write_file("vocab/encoder.json", in.substr(0, cut));
  keel::fuzz::write_file("vocab/vocab.bpe", cut == std::string_view::npos ? "" : in.substr(cut + 1));
  return keel::fuzz::run([&] { keel::data::load_vocab(keel::fuzz::scratch() / "vocab"); });
}
