// File: fuzz/fuzz_util.h
//
// Helpers shared by the libFuzzer targets of fuzz/:
// a byte reader that splits the fuzzer's input into the pieces a target needs,
// and a per-process scratch file for the readers that take a path.
//
//   FuzzInput in(data, size);
//   const uint8_t which = in.Byte();
//   std::string rest = in.Rest();
//
// Each target defines LLVMFuzzerTestOneInput. Built with --config=fuzz it
// links libFuzzer's main; otherwise fuzz_replay_main.cc replays files (the
// seed corpus) through it, so the suite runs every seed in every build.
#ifndef DOWNPOUR_FUZZ_FUZZ_UTIL_H_
#define DOWNPOUR_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace downpour {
namespace fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t left() const { return size_ - pos_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Up to n bytes.
  std::string Bytes(size_t n) {
    n = n < left() ? n : left();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string Rest() { return Bytes(left()); }

 private:
  const uint8_t* const data_;  // Not owned.
  const size_t size_;
  size_t pos_ = 0;
};

// Writes `bytes` to a file of this process named `name` under $TMPDIR (or
// /tmp) and returns its path; the next call with the same name overwrites it.
inline std::string WriteScratchFile(const std::string& name,
                                    const std::string& bytes) {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir == nullptr) dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") +
                           "/downpour_fuzz_" + std::to_string(getpid()) + "_" +
                           name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

}  // namespace fuzz
}  // namespace downpour

#endif  // DOWNPOUR_FUZZ_FUZZ_UTIL_H_
