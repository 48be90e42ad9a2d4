// File: common/test_files.h
//
// Test-only file helpers: paths under the test's scratch directory and
// whole-file reads and writes.
//
//   const std::string path = TestTmpPath("model.safetensors");
//   WriteBytes(path, bytes);
//   EXPECT_EQ(ReadBytes(path), bytes);
#ifndef DOWNPOUR_COMMON_TEST_FILES_H_
#define DOWNPOUR_COMMON_TEST_FILES_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace downpour {

// TEST_TMPDIR (set by Bazel), or /tmp outside Bazel.
inline std::string TestTmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

inline std::string TestTmpPath(const std::string& name) {
  return TestTmpDir() + "/" + name;
}

// The whole file; empty when it cannot be opened.
inline std::string ReadBytes(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// Replaces the file's contents; a failure fails the test.
inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size()) << path;
  std::fclose(f);
}

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_TEST_FILES_H_
