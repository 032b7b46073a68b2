// Files: atomic writes and directory creation, with POSIX calls only (no LibTorch).
#pragma once

#include <string>

namespace ampcheck::io {

// Writes `bytes` to path atomically: path.tmp.<pid> then rename(2). Refuses to replace an existing file unless
// overwrite is true (the error names the file and says --force).
void write_file_atomically(const std::string& path, const std::string& bytes, bool overwrite = true);
// mkdir -p with POSIX calls (std::filesystem's remove_all is unsafe next to libtorch; this keeps to POSIX too).
void make_dirs(const std::string& path);
// The temporaries of earlier writes of path (path.tmp.<pid>) whose process is gone — a write killed before its rename
// leaves one — removed. Every atomic write calls it first, so a killed write's partial file lasts until the next.
void remove_stale_temporaries(const std::string& path);

}  // namespace ampcheck::io
