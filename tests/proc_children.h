// File: tests/proc_children.h
//
// Starting `launch` from a test and finding its children by their command
// lines, for tests that kill one child (a server, a worker) and watch the
// rest.
//
//   auto launch = StartLaunch({"--servers=2", "--workers=2"});
//   const pid_t ps0 = FindChild(launch->pid(), {"--port_file=", "ps_0.port"});
//   ASSERT_GT(ps0, 0);
//   ::kill(ps0, SIGKILL);
#ifndef DOWNPOUR_TESTS_PROC_CHILDREN_H_
#define DOWNPOUR_TESTS_PROC_CHILDREN_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "deploy/subprocess.h"

namespace downpour {

// Starts deploy/launch (a data dependency of the test) with `flags`,
// keeping its last 60 output lines; a failure to start is a test failure
// (reported here) and returns nullptr.
std::unique_ptr<Subprocess> StartLaunch(std::vector<std::string> flags);

// The pid of a running (not zombie) child of `parent` whose command line
// holds every one of `needles` (arguments are NUL-separated in /proc), or 0.
pid_t FindChild(pid_t parent, const std::vector<std::string>& needles);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_PROC_CHILDREN_H_
