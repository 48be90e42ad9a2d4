// File: common/safetensors.cc
//
// safetensors writer and a small JSON parser for exactly the header grammar
// the format uses: one object whose values are either tensor entries
// {"dtype": string, "shape": [int...], "data_offsets": [int, int]} or the
// "__metadata__" object of string values. Numbers other than non-negative
// integers, booleans, null and nesting beyond that are rejected.
#include "common/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, so
// that a garbage length cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

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

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
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

// Writes all of `data` to `f`; false on a short write.
bool WriteAll(std::FILE* f, const std::string& data) {
  return std::fwrite(data.data(), 1, data.size(), f) == data.size();
}

// Raw header entry as parsed, before cross-checks against the data section.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;
};

// Recursive-descent parser over the header bytes. Every error names the file.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text)
      : path_(path), s_(text) {}

  absl::Status Parse(std::vector<Entry>* entries,
                     std::map<std::string, std::string>* metadata) {
    bool seen_metadata = false;
    std::set<std::string> names;
    DP_RETURN_IF_ERROR(ParseObject([&](const std::string& key) -> absl::Status {
      if (key == "__metadata__") {
        if (seen_metadata) return Error("duplicate \"__metadata__\"");
        seen_metadata = true;
        return ParseObject([&](const std::string& k) -> absl::Status {
          std::string v;
          DP_RETURN_IF_ERROR(ParseString(&v));
          if (!metadata->emplace(k, std::move(v)).second) {
            return Error(absl::StrCat("duplicate metadata key \"", k, "\""));
          }
          return absl::OkStatus();
        });
      }
      if (!names.insert(key).second) {
        return Error(absl::StrCat("duplicate tensor \"", key, "\""));
      }
      Entry e;
      e.name = key;
      DP_RETURN_IF_ERROR(ParseEntry(&e));
      entries->push_back(std::move(e));
      return absl::OkStatus();
    }));
    SkipWhitespace();
    if (pos_ != s_.size()) return Error("unexpected text after the header object");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::DataLossError(absl::StrCat(
        path_, ": bad safetensors header at byte ", pos_, ": ", what));
  }

  void SkipWhitespace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' ||
                                s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  absl::Status Expect(char c) {
    SkipWhitespace();
    if (pos_ >= s_.size() || s_[pos_] != c) {
      return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    }
    ++pos_;
    return absl::OkStatus();
  }

  // Peeks the next non-whitespace character ('\0' at the end).
  char Peek() {
    SkipWhitespace();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  // Parses {"key": <value>, ...}; `on_value` parses each value.
  template <typename F>
  absl::Status ParseObject(F on_value) {
    DP_RETURN_IF_ERROR(Expect('{'));
    if (Peek() == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    for (;;) {
      std::string key;
      DP_RETURN_IF_ERROR(ParseString(&key));
      DP_RETURN_IF_ERROR(Expect(':'));
      DP_RETURN_IF_ERROR(on_value(key));
      const char c = Peek();
      if (c == ',') {
        ++pos_;
        continue;
      }
      if (c == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    *out = v;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  absl::Status ParseString(std::string* out) {
    DP_RETURN_IF_ERROR(Expect('"'));
    out->clear();
    for (;;) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return absl::OkStatus();
      if (c < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          DP_RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xdc00 && cp <= 0xdfff) return Error("lone low surrogate");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') {
              return Error("high surrogate without a low one");
            }
            pos_ += 2;
            uint32_t lo;
            DP_RETURN_IF_ERROR(ParseHex4(&lo));
            if (lo < 0xdc00 || lo > 0xdfff) return Error("bad low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  absl::Status ParseUint(int64_t* out) {
    SkipWhitespace();
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int digit = s_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        return Error("integer overflow");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) return Error("expected a non-negative integer");
    *out = v;
    return absl::OkStatus();
  }

  absl::Status ParseUintArray(std::vector<int64_t>* out) {
    out->clear();
    DP_RETURN_IF_ERROR(Expect('['));
    if (Peek() == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    for (;;) {
      int64_t v;
      DP_RETURN_IF_ERROR(ParseUint(&v));
      out->push_back(v);
      const char c = Peek();
      if (c == ',') {
        ++pos_;
        continue;
      }
      if (c == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseEntry(Entry* e) {
    bool has_dtype = false, has_shape = false, has_offsets = false;
    DP_RETURN_IF_ERROR(ParseObject([&](const std::string& key) -> absl::Status {
      if (key == "dtype" && !has_dtype) {
        has_dtype = true;
        return ParseString(&e->dtype);
      }
      if (key == "shape" && !has_shape) {
        has_shape = true;
        return ParseUintArray(&e->shape);
      }
      if (key == "data_offsets" && !has_offsets) {
        has_offsets = true;
        return ParseUintArray(&e->offsets);
      }
      return Error(absl::StrCat("unexpected or repeated key \"", key,
                                "\" in tensor \"", e->name, "\""));
    }));
    if (!has_dtype || !has_shape || !has_offsets) {
      return Error(absl::StrCat("tensor \"", e->name,
                                "\" needs dtype, shape and data_offsets"));
    }
    if (e->offsets.size() != 2) {
      return Error(absl::StrCat("tensor \"", e->name,
                                "\": data_offsets must hold two integers"));
    }
    return absl::OkStatus();
  }

  const std::string& path_;
  const std::string& s_;
  size_t pos_ = 0;
};

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

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header.append("\"__metadata__\":{");
    for (const auto& [k, v] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(k, &header);
      header.push_back(':');
      AppendJsonString(v, &header);
    }
    header.push_back('}');
  }
  first = metadata.empty();
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!first) header.push_back(',');
    first = false;
    AppendJsonString(tensors[i].name, &header);
    header.append(":{\"dtype\":\"F32\",\"shape\":[");
    for (size_t d = 0; d < tensors[i].shape.size(); ++d) {
      if (d > 0) header.push_back(',');
      absl::StrAppend(&header, tensors[i].shape[d]);
    }
    const int64_t end = offset + counts[i] * 4;
    absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  header.push_back('}');
  // Pad so the data starts 8-byte aligned, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string prefix;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix.push_back(static_cast<char>(n >> (8 * i)));
  prefix.append(header);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create ", tmp, " for ", path, ": ", std::strerror(errno)));
  }
  bool ok = WriteAll(f, prefix);
  std::string buf;
  constexpr size_t kChunkFloats = 1 << 16;
  for (size_t begin = 0; ok && begin < flat.size(); begin += kChunkFloats) {
    const size_t end = std::min(flat.size(), begin + kChunkFloats);
    buf.clear();
    for (size_t i = begin; i < end; ++i) AppendLE32(FloatBits(flat[i]), &buf);
    ok = WriteAll(f, buf);
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot write ", path, " (via ", tmp, "): ", std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", tmp, " to ", path, ": ", std::strerror(rename_err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
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
  DP_RETURN_IF_ERROR(HeaderParser(path, header).Parse(&entries, &out.metadata));

  const int64_t data_begin = static_cast<int64_t>(8 + n);
  const int64_t data_size = static_cast<int64_t>(bytes.size()) - data_begin;
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) {
                     return a.offsets < b.offsets;
                   });
  // The tensors must tile the data section: contiguous, in order, no gaps,
  // nothing left over (the same rule the reference reader enforces).
  int64_t expect_begin = 0;
  for (const Entry& e : entries) {
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
