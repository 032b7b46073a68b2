// Files: atomic writes and directory creation, with POSIX calls only (no LibTorch).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ampcheck::io {

// Writes `bytes` to path atomically: path.tmp.<pid> then rename(2). Refuses to replace an existing file unless
// overwrite is true (the error names the file and says --force).
void write_file_atomically(const std::string& path, const std::string& bytes, bool overwrite = true);
// mkdir -p with POSIX calls (std::filesystem's remove_all is unsafe next to libtorch; this keeps to POSIX too).
void make_dirs(const std::string& path);
// The temporaries of earlier writes of path (path.tmp.<pid>) whose process is gone — a write killed before its rename
// leaves one — removed. Every atomic write calls it first, so a killed write's partial file lasts until the next.
void remove_stale_temporaries(const std::string& path);
// Creates the temporary `tmp` new (O_CREAT | O_EXCL | O_NOFOLLOW: never through a link planted at its name), a
// leftover at that exact name removed first; returns its descriptor; throws naming it.
int create_temporary(const std::string& tmp);
// The entries of dir named <prefix><pid> whose process is gone (full paths): what a killed writer left.
std::vector<std::string> stale_pid_entries(const std::string& dir, const std::string& prefix);
// Refuses (throws naming it) a symbolic link at any component of `path` below the directory `root` — root itself is
// the user's choice and may be one —, and a component before the last that is not a directory. A component that does
// not exist ends the check (nothing below it exists). `where` names root in the message ("the sweep directory").
// What it guards against is a link present before the caller writes (a directory restored from a cache); the caller
// calls it right before each use.
void refuse_links_below(const std::string& root, const std::string& path, const std::string& where);
// make_dirs of `path` (below `root`), with refuse_links_below before and after: no directory is created through a
// link, and an existing link is refused.
void make_dirs_below(const std::string& root, const std::string& path, const std::string& where);
// The last max_bytes of a file (all of it when shorter), read without following a link and without reading the rest;
// "" when it cannot be opened.
std::string read_tail(const std::string& path, size_t max_bytes);
// rm -rf with POSIX nftw (std::filesystem is avoided: the libtorch.so the harness links exports std::filesystem
// symbols of its own build that shadow libstdc++'s; a call through them crashed).
void remove_tree(const std::string& path);
// A path's directory and last component, trailing slashes ignored: "a/b/" -> {"a", "b"}, "b" -> {".", "b"},
// "/b" -> {"/", "b"} (what is written beside --out: its staging directory, a rank's scratch directory).
std::pair<std::string, std::string> parent_and_name(const std::string& path);
// Whether anything is at `path` (stat(2) succeeds: a file, a directory, a link to one).
bool file_exists(const std::string& path);
// A path's last component without its extension: "dir/run.h5" -> "run", "dir/.hidden" -> ".hidden".
std::string file_stem(const std::string& path);
// The names of the directories in `dir` (a link to one included), sorted; none where `dir` cannot be read.
std::vector<std::string> subdirectories(const std::string& dir);

}  // namespace ampcheck::io
