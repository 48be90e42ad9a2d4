// File: worker/local_ps_client.h
//
// ParameterClient over ParameterStore objects in the same process: the real
// store logic with no network, for unit tests of the worker loop (a testonly
// target: production worker code never links the store). Shard i is
// stores[i].
#ifndef DOWNPOUR_WORKER_LOCAL_PS_CLIENT_H_
#define DOWNPOUR_WORKER_LOCAL_PS_CLIENT_H_

#include <memory>
#include <vector>

#include "server/parameter_store.h"
#include "worker/ps_client.h"

namespace downpour {

// The stores are not owned and must outlive the client.
std::unique_ptr<ParameterClient> NewLocalParameterClient(
    std::vector<ParameterStore*> stores, int32_t worker_id);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_LOCAL_PS_CLIENT_H_
