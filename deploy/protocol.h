// File: deploy/protocol.h
//
// Parsers for the lines that ps_worker prints and the launcher interprets,
// plus the tiny JSON support the launcher needs. The line formats are the
// contract between worker/ and deploy/:
//
//   worker 1: step 120, loss = 0.412 (3150.2 examples/sec; 0.020 sec/batch) [...]
//   DONE {"worker":1,"steps":940,"examples":60000,"final_loss":0.31,"seconds":55.2}
//   EVAL {"test_accuracy":0.8843,"test_loss":0.33,"examples":10000}
//   SERVER_STATS {"shard":0,"staleness_mean":1.2,"staleness_max":7,...}
//
//   std::optional<WorkerProgress> p = ParseProgressLine(line);
//   std::optional<JsonNumbers> done = ParseTaggedJson(line, "DONE");
//   double steps = done->at("steps");
#ifndef DOWNPOUR_DEPLOY_PROTOCOL_H_
#define DOWNPOUR_DEPLOY_PROTOCOL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

// One worker progress line.
struct WorkerProgress {
  int worker = 0;
  int64_t step = 0;
  double loss = 0;
  double examples_per_sec = 0;
};

// Parses "worker <I>: step <N>, loss = <L> (<R> examples/sec; ...". Anything
// after "examples/sec" is ignored. Returns nullopt for any other line.
std::optional<WorkerProgress> ParseProgressLine(absl::string_view line);

// The numeric members of a JSON object's top level, by key. Members whose
// value is a string, bool, null, array or object are skipped.
using JsonNumbers = std::map<std::string, double>;

// Parses one JSON object and returns its top-level numeric members. Fails on
// malformed JSON (unbalanced brackets, unterminated strings, missing ':' ...).
absl::StatusOr<JsonNumbers> ParseJsonNumbers(absl::string_view json);

// If `line` is `<tag> {json}` (the tag at the very start of the line, after
// optional leading spaces, followed by one space), returns the object's
// numeric members; nullopt for other lines or malformed JSON.
std::optional<JsonNumbers> ParseTaggedJson(absl::string_view line,
                                           absl::string_view tag);

// Builds a flat JSON object with members in insertion order.
//
//   JsonWriter w;
//   w.Add("mode", "async").Add("steps", int64_t{940}).Add("lr", 0.05);
//   w.str()  // {"mode":"async","steps":940,"lr":0.05}
class JsonWriter {
 public:
  JsonWriter& Add(absl::string_view key, absl::string_view value);
  JsonWriter& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  JsonWriter& Add(absl::string_view key, int64_t value);
  JsonWriter& Add(absl::string_view key, int value) {
    return Add(key, static_cast<int64_t>(value));
  }
  // Non-finite values are written as null. Up to 10 significant digits.
  JsonWriter& Add(absl::string_view key, double value);
  // Appends "key": null.
  JsonWriter& AddNull(absl::string_view key);

  std::string str() const { return body_ + "}"; }

 private:
  void Key(absl::string_view key);
  std::string body_ = "{";
};

// Quotes and escapes `s` as a JSON string.
std::string JsonQuote(absl::string_view s);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_PROTOCOL_H_
