// File: deploy/model_check.h
//
// The model a job names (--model), checked by launch and node before any
// process starts: it must load and resolve (worker/nn/model_spec.h), and
// fit a data set whose image shape is fixed by its format.
#ifndef DOWNPOUR_DEPLOY_MODEL_CHECK_H_
#define DOWNPOUR_DEPLOY_MODEL_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dataset_kind.h"

namespace downpour {

// The spec's error (naming the file and layer), or the mismatch with
// fashion_mnist (1x28x28, 10 classes) or cifar10 (3x32x32, 10 classes). Data
// sets read from files of any shape are checked by the workers when they
// open them.
absl::Status CheckJobModel(const std::string& model, DatasetKind dataset);

// The last value of the flag `name` in `args` ("--name=v", "-name=v",
// "--name v"), or "" when absent; for node, which passes its arguments on
// unparsed.
std::string FlagValueIn(const std::vector<std::string>& args,
                        const std::string& name);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_MODEL_CHECK_H_
