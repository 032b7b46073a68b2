// Shared by the fuzz targets (harness/fuzz): each target is a libFuzzer entry point, LLVMFuzzerTestOneInput, over one
// reader of outside data. Built with the `sanitize` preset it links libFuzzer (clang, ASan + UBSan); in every other
// build it links replay_main.cpp, which runs the committed corpus and regression inputs once each (CTest
// unit.fuzz_replay). A target's oracle: the reader returns or throws a std::exception with a message that names the
// file and is printable UTF-8 (io/text.h: it may quote the file's bytes); anything else — a crash, a sanitizer
// report, another exception type, a message without the file or with raw bytes — is a finding (FUZZ_CHECK aborts).
#pragma once

#include "io/text.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace ampcheck::fuzz {

// A per-process file holding the input (the readers take a path, as the commands do); removed when it goes.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size, const std::string& ext)
      : path_("/tmp/ampcheck-fuzz-" + std::to_string(::getpid()) + ext) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  ~InputFile() { std::remove(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

#define FUZZ_CHECK(cond, what)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "fuzz oracle failed: %s (%s)\n", (what), #cond); \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

// The oracle for a refused input: the message names the file, and is printable (no raw byte of the file in it).
inline void check_names_file(const char* message, const std::string& path) {
  if (std::string(message).find(path) == std::string::npos) {
    std::fprintf(stderr, "fuzz oracle failed: the error does not name the file %s: %s\n", path.c_str(), message);
    std::abort();
  }
  if (io::first_unprintable(message) != std::string::npos) {
    std::fprintf(stderr, "fuzz oracle failed: the error is not printable UTF-8: %s\n",
                 io::printable_text(message).c_str());
    std::abort();
  }
}

}  // namespace ampcheck::fuzz
