// Atomic file writes and mkdir -p (files.h).
#include "io/files.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace ampcheck::io {

void make_dirs(const std::string& path) {
  std::string cur = !path.empty() && path[0] == '/' ? "/" : "";
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error(cur + ": cannot create directory: " + std::strerror(errno));
  }
}

std::vector<std::string> stale_pid_entries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> stale;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return stale;
  for (dirent* e; (e = ::readdir(d));) {
    const std::string n = e->d_name;
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = n.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    const long p = std::strtol(pid.c_str(), nullptr, 10);
    if (p > 0 && p != ::getpid() && ::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH)
      stale.push_back(dir + "/" + n);
  }
  ::closedir(d);
  return stale;
}

namespace {
std::string link_target(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}
}  // namespace

void refuse_links_below(const std::string& root, const std::string& path, const std::string& where) {
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  if (path.compare(0, r.size(), r) != 0 || (path.size() > r.size() && path[r.size()] != '/'))
    throw std::logic_error(path + " is not below " + r);
  std::string cur = r;
  std::stringstream rest(path.substr(r.size()));
  std::vector<std::string> parts;
  for (std::string part; std::getline(rest, part, '/');)
    if (!part.empty()) parts.push_back(part);
  for (size_t i = 0; i < parts.size(); ++i) {
    cur += "/" + parts[i];
    struct stat st {};
    if (::lstat(cur.c_str(), &st) != 0) return;  // absent: nothing below it either
    if (S_ISLNK(st.st_mode))
      throw std::runtime_error(
          cur + ": a symbolic link (to " + link_target(cur) + ") inside " + where + " " + r +
          ": ampcheck writes, reads and deletes nothing through a link there (it could lead to files elsewhere), with "
          "or without --force. HINT: remove the link (rm " +
          cur + "; what it points to is left as it is) or name another --out");
    if (i + 1 < parts.size() && !S_ISDIR(st.st_mode))
      throw std::runtime_error(cur + ": not a directory, inside " + where + " " + r +
                               ", where ampcheck keeps a directory. HINT: remove it, or name another --out");
  }
}

void make_dirs_below(const std::string& root, const std::string& path, const std::string& where) {
  refuse_links_below(root, path, where);
  make_dirs(path);
  refuse_links_below(root, path, where);
}

std::string read_tail(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const off_t size = st.st_size;
    const off_t from = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
    out.resize(static_cast<size_t>(size - from));
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, from + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  return out;
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
}  // namespace

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

std::pair<std::string, std::string> parent_and_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  if (slash == std::string::npos) return {".", p};
  return {slash == 0 ? "/" : p.substr(0, slash), p.substr(slash + 1)};
}

std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (name != "." && name != ".." && ::stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int create_temporary(const std::string& tmp) {
  // a leftover at this exact name (an earlier process of this pid was killed mid-write): unlink removes the name
  // (a link's target is untouched)
  struct stat st {};
  if (::lstat(tmp.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp + ": cannot create for writing (" + std::strerror(errno) + ")");
  return fd;
}

void remove_stale_temporaries(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  for (const auto& f : stale_pid_entries(dir, name + ".tmp.")) std::remove(f.c_str());
}

void write_file_atomically(const std::string& path, const std::string& bytes, bool overwrite) {
  remove_stale_temporaries(path);
  struct stat st;
  if (!overwrite && ::stat(path.c_str(), &st) == 0)
    throw std::runtime_error(path + ": exists; refusing to overwrite. HINT: pass --force to replace it");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    // created new (O_EXCL, O_NOFOLLOW): a link planted at the temporary's name is not followed, no file truncated
    const int fd = create_temporary(tmp);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 || done != bytes.size()) {
      std::remove(tmp.c_str());
      throw std::runtime_error(tmp + ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": rename from " + tmp + " failed");
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

}  // namespace ampcheck::io
