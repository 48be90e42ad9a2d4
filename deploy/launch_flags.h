// File: deploy/launch_flags.h
//
// Everything `launch` takes from its command line, read once into a
// LaunchOptions: its own flags (--servers, --workers, the curve, the child
// binaries, --log_dir, --max_restarts, --secure, --metrics_base_port) and
// the flag libraries it shares with ps_server and ps_worker (the job's
// shape, the store, training, backend and transport flags), whose given
// values it passes on to its children unchanged.
//
//   absl::ParseCommandLine(argc, argv);
//   LaunchOptions o;
//   if (!LaunchOptionsFromFlags(argv[0], &o)) return 2;  // it printed why
#ifndef DOWNPOUR_DEPLOY_LAUNCH_FLAGS_H_
#define DOWNPOUR_DEPLOY_LAUNCH_FLAGS_H_

#include "deploy/launch_options.h"

namespace downpour {

// Fills *o from the flags, finds the child binaries (next to `argv0`'s
// executable unless given) and, with --secure, makes the job's
// certificates. False, after printing why on stderr, for a bad flag, a
// missing binary or failed certificates.
bool LaunchOptionsFromFlags(const char* argv0, LaunchOptions* o);

// The GPUs this host shows a process: the entries of CUDA_VISIBLE_DEVICES
// when it is set, else the NVIDIA driver's /proc/driver/nvidia/gpus.
int CountHostGpus();

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCH_FLAGS_H_
