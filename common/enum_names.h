// File: common/enum_names.h
//
// One table per option enum maps each value to the one name a flag, a log
// line or a SUMMARY key spells it with; parsing and printing both read the
// table, so the two cannot drift. An enum used as a flag type defines
// AbslParseFlag / AbslUnparseFlag with these, and an unknown name is refused
// while the command line is parsed, naming the valid ones.
//
//   inline constexpr EnumName<Augment> kAugmentNames[] = {
//       {Augment::kNone, "none"}, {Augment::kFlip, "flip"}};
//   absl::StatusOr<Augment> a = ParseEnumName(kAugmentNames, "flip");
//   const char* n = EnumNameOf(kAugmentNames, Augment::kFlip);  // "flip"
#ifndef DOWNPOUR_COMMON_ENUM_NAMES_H_
#define DOWNPOUR_COMMON_ENUM_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace downpour {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// "a, b or c": the names of a table, for messages.
template <typename E, size_t N>
std::string EnumNameList(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The value named `text`; InvalidArgument naming the valid names otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseEnumName(const EnumName<E> (&table)[N],
                                absl::string_view text) {
  for (const EnumName<E>& e : table) {
    if (text == e.name) return e.value;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown value '", text, "' (valid: ", EnumNameList(table), ")"));
}

// The name of `value` ("?" for a value missing from the table).
template <typename E, size_t N>
const char* EnumNameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return "?";
}

// The body of an AbslParseFlag for an enum flag.
template <typename E, size_t N>
bool ParseEnumFlag(const EnumName<E> (&table)[N], absl::string_view text,
                   E* value, std::string* error) {
  absl::StatusOr<E> parsed = ParseEnumName(table, text);
  if (!parsed.ok()) {
    *error = std::string(parsed.status().message());
    return false;
  }
  *value = *parsed;
  return true;
}

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_ENUM_NAMES_H_
