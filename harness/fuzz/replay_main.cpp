// The fuzz targets' driver outside libFuzzer: runs LLVMFuzzerTestOneInput once on each file named, or on every file
// of each directory named (the committed corpus and regression inputs); exit 0 when every input ran.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (::stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(argv[i]);
      continue;
    }
    DIR* d = ::opendir(argv[i]);
    std::vector<std::string> in_dir;
    for (dirent* e; d && (e = ::readdir(d));)
      if (e->d_name[0] != '.') in_dir.push_back(std::string(argv[i]) + "/" + e->d_name);
    if (d) ::closedir(d);
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs ran\n", files.size());
  return files.empty() ? 2 : 0;
}
