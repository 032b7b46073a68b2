// Fuzz target: the JSON-lines trajectory reader (reference::read_jsonl_trajectory), as `judge` / `reference` read a
// file another training loop wrote.
#include "fuzz_support.h"
#include "reference/external_run.h"

#include <cmath>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ampcheck::fuzz::InputFile input(data, size, ".jsonl");
  const std::string& path = input.path();
  try {
    const auto f = ampcheck::reference::read_jsonl_trajectory(path);
    FUZZ_CHECK(!f.trajectory.rows.empty(), "a trajectory read has a step");
    ampcheck::reference::check_same_training(f, path, f, path);
  } catch (const std::exception& e) {
    ampcheck::fuzz::check_names_file(e.what(), path);
  }
  return 0;
}
