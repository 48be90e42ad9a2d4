#include "common/dataset_kind.h"

namespace downpour {

bool AbslParseFlag(absl::string_view text, DatasetKind* d, std::string* error) {
  return ParseEnumFlag(kDatasetNames, text, d, error);
}

std::string AbslUnparseFlag(DatasetKind d) { return DatasetName(d); }

}  // namespace downpour
