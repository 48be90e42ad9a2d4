// File: deploy/launch_options_test.cc
//
// The replica arithmetic, --mode parsing and every validation error of the
// launcher's options.
#include "deploy/launch_options.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

TEST(LaunchOptionsTest, ServersCountReplicasThatPushOnTheirOwn) {
  LaunchOptions o;
  o.workers = 2;
  o.gpus = "0,0,1,1";  // Two replicas per process.
  EXPECT_EQ(o.ReplicasPerWorker(), 2);
  EXPECT_EQ(o.ServerWorkers(), 2);
  o.local_aggregation = "none";
  EXPECT_EQ(o.ServerWorkers(), 4);
  o.gpus.clear();
  o.replicas = 2;
  EXPECT_EQ(o.ServerWorkers(), 4);
}

TEST(LaunchOptionsTest, NotesWorkerProcessesSharingAGpu) {
  LaunchOptions o;
  o.workers = 2;
  o.host_gpus = 1;  // Both processes on GPU 0.
  EXPECT_THAT(o.SharedGpuNote(),
              HasSubstr("share GPU 0; one process with a replica for each "
                        "entry (--workers=1 --gpus=0,0)"));
  EXPECT_THAT(o.SharedGpuNote(), HasSubstr("mean gradient goes as one push"));
  o.local_aggregation = "none";
  EXPECT_THAT(o.SharedGpuNote(), HasSubstr("pushes as a worker of its own"));
  o.local_aggregation = "sum";
  o.device = "cpu";
  EXPECT_EQ(o.SharedGpuNote(), "");
  o.device = "auto";
  o.host_gpus = 0;  // No GPU: the CPU.
  EXPECT_EQ(o.SharedGpuNote(), "");
  o.device = "cuda";  // The workers will say that there is none.
  EXPECT_EQ(o.SharedGpuNote(), "");
  o.host_gpus = 1;
  EXPECT_THAT(o.SharedGpuNote(), HasSubstr("share GPU 0"));
  o.host_gpus = 2;  // Spread over both.
  EXPECT_EQ(o.SharedGpuNote(), "");
  o.workers = 3;  // The third shares GPU 0 with the first.
  o.gpus = "0,1";
  EXPECT_THAT(o.SharedGpuNote(),
              HasSubstr("share GPU 0; one process with a replica for each "
                        "entry (--workers=1 --gpus=0,1,0)"));
  o.workers = 2;
  o.gpus = "0,1,0,1";  // Each process on both GPUs.
  EXPECT_THAT(o.SharedGpuNote(),
              HasSubstr("share GPU 0, 1; one process with a replica for each "
                        "entry (--workers=1 --gpus=0,1,0,1)"));
  o.gpus_per_worker = 2;  // Asked for.
  EXPECT_EQ(o.SharedGpuNote(), "");
  o.gpus_per_worker = 0;
  o.workers = 1;
  o.gpus = "0,0";  // Already one process.
  EXPECT_EQ(o.SharedGpuNote(), "");
}

TEST(ValidateLaunchOptionsTest, RejectsBadOptions) {
  LaunchOptions o;
  o.ps_server_bin = "/bin/sh";
  o.ps_worker_bin = "/bin/sh";
  o.data_dir = TestTmpDir();
  EXPECT_TRUE(ValidateLaunchOptions(o).ok());

  LaunchOptions bad = o;
  for (const char* mode : {"async", "sync", "ssp"}) {
    absl::StatusOr<TrainMode> parsed = ParseModeFlag(mode);
    ASSERT_TRUE(parsed.ok()) << mode;
    EXPECT_STREQ(TrainModeName(*parsed), mode);
    bad.mode = *parsed;
    EXPECT_TRUE(ValidateLaunchOptions(bad).ok()) << mode;
  }
  absl::Status st = ParseModeFlag("bogus").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unknown --mode=bogus; valid modes: async, sync, ssp, sandblaster");

  // Replica counts are bounded by --workers (2 here).
  bad = o;
  bad.replicas_to_aggregate = 2;
  bad.min_replicas = 2;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  bad.replicas_to_aggregate = 3;
  st = ValidateLaunchOptions(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--replicas_to_aggregate must be in [0, --workers=2]"));
  bad.replicas_to_aggregate = -1;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--replicas_to_aggregate"));
  bad = o;
  bad.min_replicas = 0;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--min_replicas must be in [1, --workers=2], got 0"));
  bad.min_replicas = 3;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--min_replicas"));
  bad = o;
  for (double ls : {-0.1, 1.0, std::nan("")}) {
    bad.label_smoothing = ls;
    EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
                HasSubstr("--label_smoothing must be in [0, 1)"));
  }
  bad.label_smoothing = 0.1;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  // GPUs that do not split evenly among the worker processes (2 here).
  bad = o;
  bad.gpus = "0,1,2";
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--gpus lists 3 GPUs for --workers=2 processes"));
  bad.gpus_per_worker = 1;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  bad.gpus.clear();
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--gpus_per_worker needs --gpus"));
  bad = o;
  bad.augment = "rotate";
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--augment must be none, flip or crop_flip"));
  bad = o;
  bad.staleness = -1;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--staleness must be >= 0"));
  bad.staleness = 0;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  bad = o;
  bad.staleness_aware = true;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  for (TrainMode mode : {TrainMode::kSync, TrainMode::kSsp}) {
    bad.mode = mode;
    st = ValidateLaunchOptions(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("--staleness_aware applies to --mode=async"));
  }
  bad = o;
  bad.drop_stale_threshold = -1;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--drop_stale_threshold"));
  bad = o;
  bad.sync_timeout_s = 0;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--sync_timeout_s must be a positive number"));
  bad.sync_timeout_s = 0.5;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  bad = o;
  bad.eval_every = absl::Seconds(-1);
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--eval_every_s"));
  bad = o;
  bad.eval_examples = 0;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--eval_examples must be >= 1"));

  bad = o;
  bad.workers = 0;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--workers must be >= 1"));
  bad = o;
  bad.servers = 0;
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--servers"));
  bad = o;
  bad.data_dir = "/nonexistent/dir";
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--data_dir=/nonexistent/dir"));
  bad = o;
  bad.ps_worker_bin = "/nonexistent/ps_worker";
  EXPECT_THAT(std::string(ValidateLaunchOptions(bad).message()),
              HasSubstr("--ps_worker_bin"));
  bad = o;
  bad.standby = true;
  EXPECT_TRUE(ValidateLaunchOptions(bad).ok());
  bad.mode = TrainMode::kSandblaster;
  st = ValidateLaunchOptions(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("--standby"));
  bad = o;  // Standbys' metrics ports come after the workers'.
  bad.standby = true;
  bad.metrics_base_port = 65535 - o.servers - o.workers;
  EXPECT_FALSE(ValidateLaunchOptions(bad).ok());
}

}  // namespace
}  // namespace downpour
