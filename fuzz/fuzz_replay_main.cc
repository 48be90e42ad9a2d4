// The main of a fuzz target outside --config=fuzz: runs every file named on
// the command line, or every file in a named directory, through
// LLVMFuzzerTestOneInput once (libFuzzer's own main does the same for file
// arguments). Exits 1 when an argument cannot be read or nothing was run, so
// a test over the seed corpus cannot pass empty.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int ran = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;  // libFuzzer flags.
    struct stat st;
    if (stat(arg.c_str(), &st) != 0) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", arg.c_str());
      return 1;
    }
    std::vector<std::string> files;
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(arg.c_str());
      if (d == nullptr) return 1;
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') files.push_back(arg + "/" + e->d_name);
      }
      closedir(d);
    } else {
      files.push_back(arg);
    }
    for (const std::string& f : files) {
      if (!RunFile(f)) {
        std::fprintf(stderr, "fuzz replay: cannot read %s\n", f.c_str());
        return 1;
      }
      ++ran;
    }
  }
  std::printf("fuzz replay: %d inputs ran\n", ran);
  return ran > 0 ? 0 : 1;
}
