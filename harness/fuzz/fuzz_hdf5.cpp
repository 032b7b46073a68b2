// Fuzz target: the HDF5 trajectory / reference reader as every command calls it on a file from outside
// (trajectory::read_trajectory_contained: libhdf5 parses the file in a child process; its crash or hang becomes an
// error naming the file). The child's coverage does not reach libFuzzer, so this target finds little new input of
// its own: it proves the containment on the committed corpus and on mutations; scenarios/fuzz/judge_fuzz.py drives
// `ampcheck judge` over thousands of mutated files for the same property end to end.
#include "fuzz_support.h"
#include "trajectory/trajectory_file.h"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ampcheck::fuzz::InputFile input(data, size, ".h5");
  const std::string& path = input.path();
  try {
    const auto f =
        ampcheck::trajectory::read_trajectory_contained(path, ampcheck::trajectory::Columns::LossRequired, 10);
    (void)f;
  } catch (const std::exception& e) {
    ampcheck::fuzz::check_names_file(e.what(), path);
  }
  return 0;
}
