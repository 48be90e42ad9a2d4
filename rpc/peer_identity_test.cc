#include "rpc/peer_identity.h"

#include "gtest/gtest.h"

namespace downpour {
namespace {

using Kind = PeerIdentity::Kind;

TEST(PeerIdentityTest, TaskNamesAreParsed) {
  EXPECT_EQ(PeerIdentityFromName("worker-3").kind, Kind::kWorker);
  EXPECT_EQ(PeerIdentityFromName("worker-3").index, 3);
  EXPECT_EQ(PeerIdentityFromName("ps-0").kind, Kind::kServer);
  EXPECT_EQ(PeerIdentityFromName("").kind, Kind::kNone);
  for (const char* job : {"downpour-client", "worker-", "worker-x", "worker--1",
                          "worker-1a", "worker-12345678901", "Worker-1"}) {
    EXPECT_EQ(PeerIdentityFromName(job).kind, Kind::kJob) << job;
  }
}

TEST(PeerIdentityTest, OnlyTheWorkersOwnCertificateActsForIt) {
  EXPECT_TRUE(CheckActsForWorker(PeerIdentityFromName("worker-2"), 2, true).ok());
  const absl::Status other =
      CheckActsForWorker(PeerIdentityFromName("worker-1"), 2, false);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("worker-2"), std::string::npos) << other;
  EXPECT_EQ(CheckActsForWorker(PeerIdentityFromName("ps-2"), 2, false).code(),
            absl::StatusCode::kPermissionDenied);
  // A job-wide certificate, unless task certificates are required.
  EXPECT_TRUE(
      CheckActsForWorker(PeerIdentityFromName("downpour-client"), 0, false).ok());
  EXPECT_EQ(
      CheckActsForWorker(PeerIdentityFromName("downpour-client"), 0, true).code(),
      absl::StatusCode::kPermissionDenied);
  // No certificate: plaintext, where the workers are trusted.
  EXPECT_TRUE(CheckActsForWorker(PeerIdentity(), 5, true).ok());
}

}  // namespace
}  // namespace downpour
