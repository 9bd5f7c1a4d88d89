// libFuzzer target: model/format/safetensors.h's reader on hostile bytes. A file the reader accepts must
// be readable in full: every tensor's bytes lie inside the file and convert without a fault, and
// writing the accepted tensors back gives a file the reader accepts again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/format/safetensors.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linserve;
  auto file = SafetensorsFile::Parse(std::string(reinterpret_cast<const char*>(data), size),
                                     "fuzz.safetensors");
  if (!file.ok()) return 0;
  std::vector<std::vector<float>> floats;
  std::vector<std::vector<int64_t>> ints;
  std::vector<SafetensorsWriteTensor> rewrite;
  for (const SafetensorsTensor& t : (*file)->tensors()) {
    Check((*file)->Find(t.name).ok());
    Check((*file)->Data(t).size() == t.end - t.begin);
    SafetensorsWriteTensor w{t.name, t.dtype, t.shape, {}, {}};
    if (IsFloatDtype(t.dtype)) {
      auto v = (*file)->ReadFloat32(t.name);
      Check(v.ok() && static_cast<int64_t>(v->size()) == t.num_elements);
      floats.push_back(*std::move(v));
    } else {
      auto v = (*file)->ReadInt64(t.name);
      Check(v.ok() && static_cast<int64_t>(v->size()) == t.num_elements);
      ints.push_back(*std::move(v));
    }
    rewrite.push_back(std::move(w));
  }
  // Spans into floats/ints, which no longer grow.
  size_t next_float = 0, next_int = 0;
  for (SafetensorsWriteTensor& w : rewrite) {
    if (IsFloatDtype(w.dtype)) {
      w.floats = floats[next_float++];
    } else {
      w.ints = ints[next_int++];
    }
  }
  auto bytes = SerializeSafetensors(rewrite, (*file)->metadata());
  Check(bytes.ok());
  Check(SafetensorsFile::Parse(*std::move(bytes), "rewritten").ok());
  return 0;
}
