// File: common/safetensors.cc
//
// safetensors writer and reader. The header is JSON through nlohmann/json,
// checked against the grammar the format uses: one object whose values are
// either tensor entries {"dtype": string, "shape": [int...],
// "data_offsets": [int, int]} or the "__metadata__" object of string values.
// Numbers other than non-negative integers, booleans, null and nesting beyond
// that are rejected; repeated keys too.
#include "common/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

constexpr uint64_t kMaxHeaderBytes = kMaxSafetensorsHeaderBytes;

// Product of `shape`, or -1 if a dim is negative or the product exceeds
// `limit`.
int64_t CheckedNumElements(const std::vector<int64_t>& shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > limit / d) {
      // n * d > limit unless a later dim is 0; one zero dim makes it empty.
      for (int64_t e : shape) {
        if (e == 0) return 0;
      }
      return -1;
    }
    n *= d;
  }
  return n;
}

void AppendLE32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Raw header entry as parsed, before cross-checks against the data section.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;
};

absl::Status HeaderError(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat(path, ": bad safetensors header: ", what));
}

// Records the first repeated key of any object while nlohmann parses (its
// objects keep only the last of equal keys, so they must be caught here).
class DuplicateKeyFinder {
 public:
  bool operator()(int depth, nlohmann::json::parse_event_t event,
                  nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      keys_.emplace_back();
    } else if (event == Event::object_end && !keys_.empty()) {
      keys_.pop_back();
    } else if (event == Event::key && !keys_.empty()) {
      const std::string key = parsed.get<std::string>();
      if (depth == 1) top_key_ = key;
      if (!keys_.back().insert(key).second && error_.empty()) {
        error_ = Describe(depth, key);
      }
    }
    return true;
  }
  // Empty when no key was repeated.
  const std::string& error() const { return error_; }

 private:
  std::string Describe(int depth, const std::string& key) const {
    if (depth == 1) {
      return key == "__metadata__"
                 ? std::string("duplicate \"__metadata__\"")
                 : absl::StrCat("duplicate tensor \"", key, "\"");
    }
    if (depth == 2 && top_key_ == "__metadata__") {
      return absl::StrCat("duplicate metadata key \"", key, "\"");
    }
    return absl::StrCat("unexpected or repeated key \"", key,
                        "\" in tensor \"", top_key_, "\"");
  }

  std::vector<std::set<std::string>> keys_;
  std::string top_key_;
  std::string error_;
};

// nlohmann's parse error in the words the old parser used for the common
// cases, with the byte offset.
absl::Status SyntaxError(const std::string& path,
                         const nlohmann::json::parse_error& e) {
  std::string what = e.what();
  if (size_t at = what.find("syntax error"); at != std::string::npos) {
    what = what.substr(at);
  }
  if (absl::StrContains(what, "missing closing quote")) {
    what = absl::StrCat("unterminated string; ", what);
  } else if (absl::StrContains(what, "expected end of input")) {
    what = absl::StrCat("unexpected text after the header object; ", what);
  }
  return absl::DataLossError(absl::StrCat(
      path, ": bad safetensors header at byte ", e.byte, ": ", what));
}

// `value` as a list of non-negative int64 integers, or an error naming
// `what`.
absl::Status ReadUintArray(const std::string& path, const std::string& what,
                           const nlohmann::json& value,
                           std::vector<int64_t>* out) {
  if (!value.is_array()) {
    return HeaderError(path, absl::StrCat(what, " must be an array"));
  }
  for (const nlohmann::json& v : value) {
    if (!v.is_number_unsigned() ||
        v.get<uint64_t>() >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return HeaderError(path, absl::StrCat(what, " must hold non-negative "
                                            "integers, got ", v.dump()));
    }
    out->push_back(static_cast<int64_t>(v.get<uint64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ReadEntry(const std::string& path, const std::string& name,
                       const nlohmann::json& value, Entry* e) {
  e->name = name;
  const std::string where = absl::StrCat("tensor \"", name, "\"");
  if (!value.is_object()) {
    return HeaderError(path, absl::StrCat(where, " must be an object"));
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" &&
        it.key() != "data_offsets") {
      return HeaderError(path, absl::StrCat("unexpected or repeated key \"",
                                            it.key(), "\" in ", where));
    }
  }
  if (!value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets")) {
    return HeaderError(path,
                       absl::StrCat(where, " needs dtype, shape and data_offsets"));
  }
  if (!value["dtype"].is_string()) {
    return HeaderError(path, absl::StrCat(where, ": dtype must be a string"));
  }
  e->dtype = value["dtype"].get<std::string>();
  DP_RETURN_IF_ERROR(ReadUintArray(path, absl::StrCat(where, ": shape"),
                                   value["shape"], &e->shape));
  DP_RETURN_IF_ERROR(ReadUintArray(path, absl::StrCat(where, ": data_offsets"),
                                   value["data_offsets"], &e->offsets));
  if (e->offsets.size() != 2) {
    return HeaderError(
        path, absl::StrCat(where, ": data_offsets must hold two integers"));
  }
  return absl::OkStatus();
}

absl::Status ReadMetadata(const std::string& path, const nlohmann::json& value,
                          std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return HeaderError(path, "\"__metadata__\" must be an object");
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string()) {
      return HeaderError(path, absl::StrCat("metadata \"", it.key(),
                                            "\" must be a string"));
    }
    (*metadata)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

// Parses the header text (one JSON object of tensor entries and an optional
// "__metadata__" object of strings). Every error is DataLoss naming `path`;
// no exception escapes.
absl::Status ParseHeader(const std::string& path, const std::string& text,
                         std::vector<Entry>* entries,
                         std::map<std::string, std::string>* metadata) {
  const size_t first = text.find_first_not_of(" \t\n\r");
  if (first == std::string::npos || text[first] != '{') {
    return absl::DataLossError(absl::StrCat(
        path, ": bad safetensors header at byte ",
        first == std::string::npos ? text.size() : first, ": expected '{'"));
  }
  nlohmann::json header;
  DuplicateKeyFinder duplicates;
  try {
    header = nlohmann::json::parse(text, std::ref(duplicates));
  } catch (const nlohmann::json::parse_error& e) {
    return SyntaxError(path, e);
  } catch (const nlohmann::json::exception& e) {
    return HeaderError(path, e.what());
  }
  if (!duplicates.error().empty()) return HeaderError(path, duplicates.error());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      DP_RETURN_IF_ERROR(ReadMetadata(path, it.value(), metadata));
      continue;
    }
    Entry e;
    DP_RETURN_IF_ERROR(ReadEntry(path, it.key(), it.value(), &e));
    entries->push_back(std::move(e));
  }
  return absl::OkStatus();
}

// The header JSON: "__metadata__" first (omitted when empty), then the
// tensors in order. Bytes that are not UTF-8 become U+FFFD.
std::string HeaderJson(const std::vector<TensorSpec>& tensors,
                       const std::vector<int64_t>& counts,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t end = offset + counts[i] * 4;
    nlohmann::ordered_json entry;
    entry["dtype"] = "F32";
    entry["shape"] = tensors[i].shape;
    entry["data_offsets"] = {offset, end};
    header[tensors[i].name] = std::move(entry);
    offset = end;
  }
  return header.dump(-1, ' ', false,
                     nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat,
                              const std::map<std::string, std::string>& metadata) {
  const int64_t total = static_cast<int64_t>(flat.size());
  std::set<std::string> names;
  std::vector<int64_t> counts;
  int64_t sum = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": bad tensor name \"", t.name, "\""));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": duplicate tensor name \"", t.name, "\""));
    }
    const int64_t n = CheckedNumElements(t.shape, total);
    if (n < 0 || sum + n > total) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensors hold more elements than the ", total,
          " floats given (at \"", t.name, "\", or it has a negative dim)"));
    }
    counts.push_back(n);
    sum += n;
  }
  if (sum != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensors hold ", sum, " elements but ", total,
        " floats were given"));
  }

  std::string header = HeaderJson(tensors, counts, metadata);
  // Pad so the data starts 8-byte aligned, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a header of ", header.size(), " bytes is above the ",
        kMaxHeaderBytes, " that readers accept; not written"));
  }

  std::string prefix;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix.push_back(static_cast<char>(n >> (8 * i)));
  prefix.append(header);

  // Unavailable naming the path, as the contract says.
  DP_ASSIGN_OR_RETURN(AtomicFileWriter out,
                      AtomicFileWriter::Open(path, FileDurability::kFsync));
  DP_RETURN_IF_ERROR(out.Append(prefix));
  std::string buf;
  constexpr size_t kChunkFloats = 1 << 16;
  for (size_t begin = 0; begin < flat.size(); begin += kChunkFloats) {
    const size_t end = std::min(flat.size(), begin + kChunkFloats);
    buf.clear();
    for (size_t i = begin; i < end; ++i) AppendLE32(FloatBits(flat[i]), &buf);
    DP_RETURN_IF_ERROR(out.Append(buf));
  }
  DP_RETURN_IF_ERROR(out.Commit());
  return absl::OkStatus();
}

namespace {

// The whole file; NotFound or Unavailable naming `path`.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  std::string bytes;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0) bytes.append(chunk, got);
  const bool read_failed = std::ferror(f) != 0;
  std::fclose(f);
  if (read_failed) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return bytes;
}

// The tensors must tile the data section: contiguous, in order, no gaps,
// nothing left over (the same rule the reference reader enforces). Sorts
// `entries` by offset.
absl::Status CheckEntries(const std::string& path, int64_t data_size,
                          std::vector<Entry>* entries) {
  std::stable_sort(entries->begin(), entries->end(),
                   [](const Entry& a, const Entry& b) {
                     return a.offsets < b.offsets;
                   });
  int64_t expect_begin = 0;
  for (const Entry& e : *entries) {
    if (e.dtype != "F32") {
      return absl::UnimplementedError(absl::StrCat(
          path, ": tensor \"", e.name, "\" has dtype ", e.dtype,
          "; only F32 is supported"));
    }
    if (e.offsets[1] > data_size) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated: tensor \"", e.name, "\" ends at data byte ",
          e.offsets[1], " but the data section has ", data_size, " bytes"));
    }
    const int64_t count = CheckedNumElements(e.shape, data_size / 4);
    if (e.offsets[0] != expect_begin || count < 0 ||
        e.offsets[1] < e.offsets[0] ||
        e.offsets[1] - e.offsets[0] != count * 4) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor \"", e.name, "\" has data_offsets [", e.offsets[0],
          ", ", e.offsets[1], "] but should start at ", expect_begin,
          " and span 4 bytes for each of its ",
          count < 0 ? std::string("(too many)") : absl::StrCat(count),
          " elements"));
    }
    expect_begin = e.offsets[1];
  }
  if (expect_begin != data_size) {
    return absl::DataLossError(absl::StrCat(
        path, ": tensors cover ", expect_begin, " bytes but the data section has ",
        data_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  DP_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path));
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(
        path, ": ", bytes.size(), " bytes is too short for a safetensors file"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(
        path, ": header length ", n, " does not fit in a file of ",
        bytes.size(), " bytes"));
  }
  const std::string header = bytes.substr(8, n);
  std::vector<Entry> entries;
  SafetensorsFile out;
  DP_RETURN_IF_ERROR(ParseHeader(path, header, &entries, &out.metadata));

  const int64_t data_begin = static_cast<int64_t>(8 + n);
  const int64_t data_size = static_cast<int64_t>(bytes.size()) - data_begin;
  DP_RETURN_IF_ERROR(CheckEntries(path, data_size, &entries));

  out.flat.resize(static_cast<size_t>(data_size / 4));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + data_begin;
  for (size_t i = 0; i < out.flat.size(); ++i, p += 4) {
    out.flat[i] = BitsFloat(uint32_t{p[0]} | (uint32_t{p[1]} << 8) |
                            (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
  }
  for (Entry& e : entries) {
    out.tensors.push_back(TensorSpec{std::move(e.name), std::move(e.shape)});
  }
  return out;
}

}  // namespace downpour
