// File: rpc/rpc_convert.h
//
// The one place where the project's types meet the wire: absl::Status <->
// grpc::Status (converted once at each RPC boundary, as TensorFlow's
// grpc_util.h does) and ModelLayout / ShardStats <-> their protos. The
// ShardStats conversions are generated from the one field list in
// common/shard_stats.h.
//
// Thread-safety: stateless functions.
#ifndef DOWNPOUR_RPC_RPC_CONVERT_H_
#define DOWNPOUR_RPC_RPC_CONVERT_H_

#include "absl/status/status.h"
#include "common/shard_stats.h"
#include "common/sharding.h"
#include "grpcpp/support/status.h"
#include "proto/parameter_server.pb.h"
#include "rpc/wire.h"

namespace downpour {

grpc::Status ToGrpcStatus(const absl::Status& s);
// `what` names the call and the peer, e.g. "Push to 127.0.0.1:5000".
absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view what);

void LayoutToProto(const ModelLayout& layout, proto::ModelLayout* out);

// proto::SharedMemory and the wire's SharedRef (rpc/shared_memory.h).
void SharedRefToProto(const wire::SharedRef& ref, proto::SharedMemory* out);
wire::SharedRef SharedRefFromProto(const proto::SharedMemory& m);
ModelLayout LayoutFromProto(const proto::ModelLayout& p);

void StatsToProto(const ShardStats& s, proto::StatsResponse* out);
ShardStats StatsFromProto(const proto::StatsResponse& p);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_RPC_CONVERT_H_
