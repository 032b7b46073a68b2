// Fuzz target: the YAML scenario parser (scenario::parse_scenario), as `check` / `run` read a hand-edited file.
#include "fuzz_support.h"
#include "scenario/scenario.h"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "fuzz/scenario.yaml";
  try {
    const auto sc = ampcheck::scenario::parse_scenario(text, path);
    FUZZ_CHECK(!sc.run.name.empty(), "a parsed scenario has a name");
  } catch (const std::exception& e) {
    ampcheck::fuzz::check_names_file(e.what(), path);
  }
  return 0;
}
