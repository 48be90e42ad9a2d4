#include "rpc/grpc_config.h"

namespace downpour {

void ConfigureServerBuilder(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
}

void ConfigureChannelArguments(grpc::ChannelArguments* args) {
  args->SetMaxReceiveMessageSize(kMaxMessageBytes);
  args->SetMaxSendMessageSize(kMaxMessageBytes);
}

}  // namespace downpour
