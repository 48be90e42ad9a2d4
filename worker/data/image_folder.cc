#include "worker/data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

bool IsImageName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".png") || absl::EndsWith(lower, ".jpg") ||
         absl::EndsWith(lower, ".jpeg");
}

// The entries of `dir` (not "." and ".."), sorted; split into directories
// and other files by stat (following links, as os.walk does).
absl::Status ListDir(const std::string& dir, std::vector<std::string>* dirs,
                     std::vector<std::string>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(dir, ": no such directory"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": cannot list: ", std::strerror(err)));
  }
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      struct stat st;
      is_dir = stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    (is_dir ? dirs : files)->push_back(name);
  }
  closedir(d);
  std::sort(dirs->begin(), dirs->end());
  std::sort(files->begin(), files->end());
  return absl::OkStatus();
}

// The image files under `dir`, recursively: the files of a directory, then
// its subdirectories, each in sorted order.
absl::Status CollectImages(const std::string& dir, int depth,
                           std::vector<std::string>* out) {
  if (depth > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": directories nested too deep"));
  }
  std::vector<std::string> dirs, files;
  if (absl::Status s = ListDir(dir, &dirs, &files); !s.ok()) return s;
  for (const std::string& f : files) {
    if (IsImageName(f)) out->push_back(dir + "/" + f);
  }
  for (const std::string& sub : dirs) {
    if (absl::Status s = CollectImages(dir + "/" + sub, depth + 1, out);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageFolderIndex> ListImageFolder(const std::string& split_dir) {
  ImageFolderIndex index;
  std::vector<std::string> loose;
  if (absl::Status s = ListDir(split_dir, &index.classes, &loose); !s.ok()) {
    return s;
  }
  if (index.classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        split_dir, ": no class directories (expected ", split_dir,
        "/<class>/<image>.png|jpg)"));
  }
  for (size_t c = 0; c < index.classes.size(); ++c) {
    const std::string dir = split_dir + "/" + index.classes[c];
    const size_t before = index.files.size();
    if (absl::Status s = CollectImages(dir, 0, &index.files); !s.ok()) {
      return s;
    }
    if (index.files.size() == before) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": class directory holds no .png, .jpg or .jpeg file"));
    }
    index.labels.resize(index.files.size(), static_cast<int32_t>(c));
  }
  return index;
}

std::vector<int64_t> SubsetIndices(int64_t total, int64_t max) {
  const int64_t n = max > 0 && max < total ? max : total;
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k) {
    out[k] = n == total ? k
                        : static_cast<int64_t>(
                              static_cast<__int128>(k) * total / n);
  }
  return out;
}

}  // namespace downpour
