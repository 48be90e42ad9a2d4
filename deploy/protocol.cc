#include "deploy/protocol.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace downpour {
namespace {

bool ConsumeNumber(absl::string_view* s, double* out) {
  size_t n = 0;
  while (n < s->size() &&
         (absl::ascii_isdigit((*s)[n]) || (*s)[n] == '.' || (*s)[n] == '-' ||
          (*s)[n] == '+' || (*s)[n] == 'e' || (*s)[n] == 'E')) {
    ++n;
  }
  if (n == 0 || !absl::SimpleAtod(s->substr(0, n), out)) return false;
  s->remove_prefix(n);
  return true;
}

// Minimal recursive-descent JSON scanner over a string_view.
class JsonScanner {
 public:
  explicit JsonScanner(absl::string_view s) : s_(s) {}

  absl::StatusOr<JsonNumbers> TopLevelObject() {
    JsonNumbers out;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    SkipSpace();
    if (Consume('}')) return Finish(std::move(out));
    while (true) {
      SkipSpace();
      std::string key;
      if (!String(&key)) return Error("expected a string key");
      SkipSpace();
      if (!Consume(':')) return Error("expected ':'");
      SkipSpace();
      if (!s_.empty() && (s_[0] == '-' || absl::ascii_isdigit(s_[0]))) {
        double v;
        if (!ConsumeNumber(&s_, &v)) return Error("bad number");
        out[key] = v;
      } else if (!SkipValue(0)) {
        return Error("bad value");
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) return Finish(std::move(out));
      return Error("expected ',' or '}'");
    }
  }

 private:
  absl::StatusOr<JsonNumbers> Finish(JsonNumbers out) {
    SkipSpace();
    if (!s_.empty()) return Error("trailing characters");
    return out;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: ", what, " at \"",
                     s_.substr(0, 20), "\""));
  }

  void SkipSpace() {
    while (!s_.empty() && absl::ascii_isspace(s_[0])) s_.remove_prefix(1);
  }

  bool Consume(char c) {
    if (s_.empty() || s_[0] != c) return false;
    s_.remove_prefix(1);
    return true;
  }

  // Reads a string; escapes other than \" and \\ are kept verbatim, which is
  // enough for keys.
  bool String(std::string* out) {
    if (!Consume('"')) return false;
    while (!s_.empty()) {
      char c = s_[0];
      s_.remove_prefix(1);
      if (c == '"') return true;
      if (c == '\\') {
        if (s_.empty()) return false;
        char e = s_[0];
        s_.remove_prefix(1);
        if (e == '"' || e == '\\' || e == '/') {
          out->push_back(e);
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
        continue;
      }
      out->push_back(c);
    }
    return false;
  }

  bool SkipValue(int depth) {
    if (depth > 64) return false;
    SkipSpace();
    if (s_.empty()) return false;
    std::string ignored;
    switch (s_[0]) {
      case '"':
        return String(&ignored);
      case '{':
      case '[': {
        const char close = s_[0] == '{' ? '}' : ']';
        s_.remove_prefix(1);
        SkipSpace();
        if (Consume(close)) return true;
        while (true) {
          SkipSpace();
          if (close == '}') {
            if (!String(&ignored)) return false;
            SkipSpace();
            if (!Consume(':')) return false;
          }
          if (!SkipValue(depth + 1)) return false;
          SkipSpace();
          if (Consume(',')) continue;
          return Consume(close);
        }
      }
      default: {
        for (absl::string_view word : {"true", "false", "null"}) {
          if (absl::StartsWith(s_, word)) {
            s_.remove_prefix(word.size());
            return true;
          }
        }
        double v;
        return ConsumeNumber(&s_, &v);
      }
    }
  }

  absl::string_view s_;
};

}  // namespace

std::optional<WorkerProgress> ParseProgressLine(absl::string_view line) {
  WorkerProgress p;
  absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&s, "worker ")) return std::nullopt;
  size_t colon = s.find(':');
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(s.substr(0, colon), &p.worker)) {
    return std::nullopt;
  }
  s.remove_prefix(colon + 1);
  if (!absl::ConsumePrefix(&s, " step ")) return std::nullopt;
  size_t comma = s.find(',');
  if (comma == absl::string_view::npos ||
      !absl::SimpleAtoi(s.substr(0, comma), &p.step)) {
    return std::nullopt;
  }
  s.remove_prefix(comma + 1);
  if (!absl::ConsumePrefix(&s, " loss = ")) return std::nullopt;
  if (!ConsumeNumber(&s, &p.loss)) {
    // Tolerate "nan"/"inf" losses: the rate is what the launcher needs.
    size_t sp = s.find(' ');
    if (sp == absl::string_view::npos) return std::nullopt;
    p.loss = NAN;
    s.remove_prefix(sp);
  }
  if (!absl::ConsumePrefix(&s, " (")) return std::nullopt;
  if (!ConsumeNumber(&s, &p.examples_per_sec)) return std::nullopt;
  if (!absl::StartsWith(s, " examples/sec")) return std::nullopt;
  return p;
}

absl::StatusOr<JsonNumbers> ParseJsonNumbers(absl::string_view json) {
  return JsonScanner(json).TopLevelObject();
}

std::optional<JsonNumbers> ParseTaggedJson(absl::string_view line,
                                           absl::string_view tag) {
  absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&s, tag) || !absl::ConsumePrefix(&s, " ")) {
    return std::nullopt;
  }
  absl::StatusOr<JsonNumbers> parsed = ParseJsonNumbers(s);
  if (!parsed.ok()) return std::nullopt;
  return *std::move(parsed);
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  out += "\"";
  return out;
}

void JsonWriter::Key(absl::string_view key) {
  if (body_.size() > 1) body_ += ",";
  absl::StrAppend(&body_, JsonQuote(key), ":");
}

JsonWriter& JsonWriter::Add(absl::string_view key, absl::string_view value) {
  Key(key);
  body_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Add(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonWriter& JsonWriter::Add(absl::string_view key, double value) {
  Key(key);
  if (std::isfinite(value)) {
    absl::StrAppend(&body_, absl::StrFormat("%.10g", value));
  } else {
    body_ += "null";
  }
  return *this;
}

JsonWriter& JsonWriter::AddNull(absl::string_view key) {
  Key(key);
  body_ += "null";
  return *this;
}

}  // namespace downpour
