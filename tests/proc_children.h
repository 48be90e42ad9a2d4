// File: tests/proc_children.h
//
// Finding a launched process's children by their command lines, for tests
// that kill one child of `launch` (a server, a worker) and watch the rest.
//
//   const pid_t ps0 = FindChild(launch->pid(), {"--port_file=", "ps_0.port"});
//   ASSERT_GT(ps0, 0);
//   ::kill(ps0, SIGKILL);
#ifndef DOWNPOUR_TESTS_PROC_CHILDREN_H_
#define DOWNPOUR_TESTS_PROC_CHILDREN_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace downpour {

// The pid of a running (not zombie) child of `parent` whose command line
// holds every one of `needles` (arguments are NUL-separated in /proc), or 0.
pid_t FindChild(pid_t parent, const std::vector<std::string>& needles);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_PROC_CHILDREN_H_
