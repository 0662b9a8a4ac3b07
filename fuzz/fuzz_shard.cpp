// libFuzzer target: a token shard (header, sizes, token ids) and a dataset's meta.json. The
// first byte picks which.
#include "data/dataset.h"
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    const auto p = keel::fuzz::write_file("in.bin", rest);
    return keel::fuzz::run([&] {
      keel::data::ShardReader r(p);
      std::vector<int32_t> out(std::min<uint64_t>(r.size(), 64));
      r.read(0, out.size(), out.data());
    });
  }
  std::filesystem::create_directories(keel::fuzz::scratch() / "ds");
  keel::fuzz::write_file("ds/meta.json", rest);
  return keel::fuzz::run([&] { keel::data::read_dataset_meta(keel::fuzz::scratch() / "ds"); });
}
