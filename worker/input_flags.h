// File: worker/input_flags.h
//
// How a worker turns data files into model input, defined once for
// ps_worker and the launcher (which passes the given ones on to its
// workers and evaluations; `node` passes every flag on): --normalize_mean,
// --normalize_std, --image_resize and --skip_bad_images, read into an
// InputOptions (worker/data/input_options.h) whose defaults are theirs.
// The input threads and the prefetch depth are --data_threads and
// --prefetch (worker/training_flags.h). Only a main calls these functions.
//
//   DP_ASSIGN_OR_RETURN(InputOptions input, InputOptionsFromFlags());
#ifndef DOWNPOUR_WORKER_INPUT_FLAGS_H_
#define DOWNPOUR_WORKER_INPUT_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/input_options.h"

namespace downpour {

// The values of the input flags, checked: InvalidArgument naming the flag
// for a value that is not a list of finite numbers, a std <= 0, or a mean
// and std of different lengths.
absl::StatusOr<InputOptions> InputOptionsFromFlags();

// "--name=value" for each input flag given on the command line.
std::vector<std::string> GivenInputFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_INPUT_FLAGS_H_
