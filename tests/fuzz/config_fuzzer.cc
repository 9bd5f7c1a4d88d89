// libFuzzer target: config.json parsing (model/format/config.h). An accepted config serialises back to
// JSON that parses to the same config (ModelConfigToJson's contract).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/format/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linserve;
  auto config = ParseModelConfig(std::string_view(reinterpret_cast<const char*>(data), size),
                                 "fuzz/config.json");
  if (!config.ok()) return 0;
  (void)config->StateFloatsPerSlot();
  const std::string json = ModelConfigToJson(*config);
  auto again = ParseModelConfig(json, "round-trip");
  if (!again.ok() || ModelConfigToJson(*again) != json) std::abort();
  return 0;
}
