// Fuzz target: the YAML scenario parser (scenario::parse_scenario), as `check` / `run` read a hand-edited file. A
// scenario parsed is UTF-8 and its name, why, strategy and expected error are printable (io/text.h).
#include "fuzz_support.h"
#include "scenario/scenario.h"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "fuzz/scenario.yaml";
  try {
    const auto sc = ampcheck::scenario::parse_scenario(text, path);
    FUZZ_CHECK(!sc.run.name.empty(), "a parsed scenario has a name");
    // its text reaches summary.json, the reports and the terminal: printable (the file UTF-8, escapes as \xNN)
    FUZZ_CHECK(ampcheck::io::first_invalid_utf8(sc.text) == std::string::npos, "a scenario parsed is UTF-8 text");
    for (const std::string* s : {&sc.run.name, &sc.why, &sc.expect.error, &sc.run.strategy.name})
      FUZZ_CHECK(ampcheck::io::first_unprintable(*s) == std::string::npos, "a scenario's strings are printable");
  } catch (const std::exception& e) {
    ampcheck::fuzz::check_names_file(e.what(), path);
  }
  return 0;
}
