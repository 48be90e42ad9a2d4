#include "common/cluster_spec.h"

#include <string>
#include <vector>

#include "common/cluster_spec_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using cluster_spec_testing::Env;
using cluster_spec_testing::ExpectInvalid;
using cluster_spec_testing::FakeEnv;
using cluster_spec_testing::SixTasksOnTwoNodes;

// ---------------------------------------------------------- host:port lists

TEST(ParseHostListTest, AcceptsNamesIpv4AndBracketedIpv6) {
  auto hosts = ParseHostList(
      "h1:5000, ps-0.ns.svc:2222,10.0.0.1:1,[::1]:65535,[fe80::1:2]:7");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ElementsAre("h1:5000", "ps-0.ns.svc:2222", "10.0.0.1:1",
                          "[::1]:65535", "[fe80::1:2]:7"));
}

TEST(ParseHostListTest, SplitsHostAndPort) {
  auto hp = ParseHostPort("[::1]:5000");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "[::1]");
  EXPECT_EQ(hp->port, 5000);
  hp = ParseHostPort("node7:80");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "node7");
  EXPECT_EQ(hp->port, 80);
}

TEST(ParseHostListTest, RefusesMalformedListsNamingTheFlagAndEntry) {
  struct Case {
    const char* list;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {"", {"--ps_hosts is empty"}},
      {"   ", {"--ps_hosts is empty"}},
      {"h1:5000,", {"--ps_hosts[1] is empty", "stray comma"}},
      {",h1:5000", {"--ps_hosts[0] is empty"}},
      {"h1:5000,,h2:1", {"--ps_hosts[1] is empty"}},
      {"h1", {"--ps_hosts[0] 'h1'", "no port"}},
      {"h1:", {"port ''", "1..65535"}},
      {":5000", {"host is empty"}},
      {"h1:0", {"port '0' is not a number in 1..65535"}},
      {"h1:65536", {"port '65536'"}},
      {"h1:-1", {"port '-1'"}},
      {"h1:50x", {"port '50x'"}},
      {"h1:+80", {"port '+80'"}},
      {"h1:5000,h2:99999", {"--ps_hosts[1] 'h2:99999'", "port '99999'"}},
      {"::1:5000", {"too many ':'", "brackets"}},
      {"[::1]5000", {"expected ':port' after ']'"}},
      {"[::1:5000", {"missing ']'"}},
      {"[]:5000", {"brackets must hold an IPv6 address"}},
      {"[abc.def]:5000", {"brackets must hold an IPv6 address"}},
      {"[::g]:5000", {"bad character in the IPv6 address"}},
      {"h 1:5000", {"bad character in the host name: ' '"}},
      {"h/1:5000", {"bad character in the host name: '/'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.list);
    ExpectInvalid(ParseHostList(c.list, "--ps_hosts"), c.parts);
  }
}

// -------------------------------------------------------------------- flags

TEST(FromFlagsTest, BuildsTheSpec) {
  auto spec = FromFlags("p0:1,p1:2", "w0:3,w1:4,w2:5", "worker", 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps, ElementsAre("p0:1", "p1:2"));
  EXPECT_THAT(spec->workers, ElementsAre("w0:3", "w1:4", "w2:5"));
  EXPECT_EQ(spec->task_type, TaskType::kWorker);
  EXPECT_EQ(spec->task_index, 2);
  EXPECT_EQ(spec->source, "flags");
  EXPECT_EQ(spec->SelfAddress(), "w2:5");
  EXPECT_FALSE(spec->IsChief());

  spec = FromFlags("p0:1,p1:2", "w0:3", "ps", 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type, TaskType::kPs);
  EXPECT_EQ(spec->SelfAddress(), "p1:2");

  spec = FromFlags("p0:1", "w0:3", "worker", 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->IsChief());
}

TEST(FromFlagsTest, RefusesBadFlags) {
  ExpectInvalid(FromFlags("", "w:1", "worker", 0), {"--ps_hosts is empty"});
  ExpectInvalid(FromFlags("p:1", "", "worker", 0), {"--worker_hosts is empty"});
  ExpectInvalid(FromFlags("p:1", "w:x", "worker", 0),
                {"--worker_hosts[0] 'w:x'", "port 'x'"});
  ExpectInvalid(FromFlags("p:1", "w:2", "chief", 0),
                {"--task_type 'chief'", "expected ps or worker"});
  ExpectInvalid(FromFlags("p:1", "w:2", "", 0), {"--task_type ''"});
  ExpectInvalid(FromFlags("p:1", "w:2,w:3", "worker", 2),
                {"--task_index=2 is out of range for --task_type=worker",
                 "--worker_hosts has 2 entries (valid 0..1)"});
  ExpectInvalid(FromFlags("p:1", "w:2", "ps", -1),
                {"--task_index=-1", "--ps_hosts has 1 entries"});
  ExpectInvalid(FromFlags("h:1,h:2", "h:1", "ps", 0),
                {"flags: address 'h:1' is given twice (ps[0] and worker[0])"});
  ExpectInvalid(FromFlags("H:1", "h:1", "ps", 0), {"given twice"});
}

TEST(TaskTypeTest, RoundTrips) {
  for (TaskType t : {TaskType::kPs, TaskType::kWorker}) {
    auto parsed = ParseTaskType(TaskTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
}

// ---------------------------------------------------------------- TF_CONFIG

constexpr char kTfJobWithChief[] = R"({
  "cluster": {"ps": ["job-ps-0.ns.svc:2222", "job-ps-1.ns.svc:2222"],
              "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
              "chief": ["job-chief-0.ns.svc:2222"]},
  "task": {"type": "%s", "index": %d},
  "environment": "cloud"})";

std::string TfJob(const char* type, int index) {
  char buf[1024];
  snprintf(buf, sizeof(buf), kTfJobWithChief, type, index);
  return buf;
}

TEST(FromTfConfigTest, ChiefIsWorkerZeroAndWorkersFollow) {
  auto spec = FromTfConfig(TfJob("chief", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->source, "TF_CONFIG");
  EXPECT_THAT(spec->ps,
              ElementsAre("job-ps-0.ns.svc:2222", "job-ps-1.ns.svc:2222"));
  EXPECT_THAT(spec->workers, ElementsAre("job-chief-0.ns.svc:2222",
                                         "job-worker-0.ns.svc:2222",
                                         "job-worker-1.ns.svc:2222"));
  EXPECT_EQ(spec->task_type, TaskType::kWorker);
  EXPECT_EQ(spec->task_index, 0);
  EXPECT_TRUE(spec->IsChief());

  spec = FromTfConfig(TfJob("worker", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_index, 1);
  EXPECT_EQ(spec->SelfAddress(), "job-worker-0.ns.svc:2222");

  spec = FromTfConfig(TfJob("worker", 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_index, 2);
  EXPECT_EQ(spec->SelfAddress(), "job-worker-1.ns.svc:2222");

  spec = FromTfConfig(TfJob("ps", 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type, TaskType::kPs);
  EXPECT_EQ(spec->task_index, 1);
  EXPECT_EQ(spec->SelfAddress(), "job-ps-1.ns.svc:2222");
}

TEST(FromTfConfigTest, WithoutChiefWorkerZeroIsTheChief) {
  auto spec = FromTfConfig(
      R"({"cluster":{"ps":["p:1"],"worker":["w0:2","w1:3"]},)"
      R"("task":{"type":"worker","index":0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->workers, ElementsAre("w0:2", "w1:3"));
  EXPECT_EQ(spec->task_index, 0);
  EXPECT_TRUE(spec->IsChief());
}

TEST(FromTfConfigTest, ChiefOnlyAndIgnoredFields) {
  auto spec = FromTfConfig(
      R"({"cluster":{"ps":["p:1"],"chief":["c:2"],"evaluator":["e:9"]},)"
      R"("task":{"type":"chief","index":0},"environment":"cloud",)"
      R"("rpc_layer":"grpc"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->workers, ElementsAre("c:2"));
  EXPECT_TRUE(spec->IsChief());
}

TEST(FromTfConfigTest, RefusesMalformedConfigs) {
  struct Case {
    std::string json;
    std::vector<std::string> parts;
  };
  const std::string ok_cluster =
      R"("cluster":{"ps":["p:1"],"worker":["w:2","w:3"]})";
  const Case cases[] = {
      {"", {"TF_CONFIG is empty"}},
      {"{", {"TF_CONFIG is not valid JSON"}},
      {"{\"cluster\": }", {"TF_CONFIG is not valid JSON", "parse error"}},
      {"[1,2]", {"TF_CONFIG must be a JSON object, got array"}},
      {R"({"task":{"type":"ps","index":0}})",
       {"TF_CONFIG has no \"cluster\" object"}},
      {R"({"cluster":[],"task":{"type":"ps","index":0}})",
       {"\"cluster\" must be an object, got array"}},
      {R"({"cluster":{"worker":["w:2"]},"task":{"type":"worker","index":0}})",
       {"cluster.ps is missing or empty"}},
      {R"({"cluster":{"ps":[],"worker":["w:2"]},"task":{"type":"ps","index":0}})",
       {"cluster.ps is missing or empty"}},
      {R"({"cluster":{"ps":["p:1"]},"task":{"type":"ps","index":0}})",
       {"neither chief nor worker"}},
      {R"({"cluster":{"ps":"p:1","worker":["w:2"]},"task":{"type":"ps","index":0}})",
       {"cluster.ps must be a list of \"host:port\" strings, got string"}},
      {R"({"cluster":{"ps":["p:1"],"worker":[7]},"task":{"type":"ps","index":0}})",
       {"cluster.worker[0] must be a \"host:port\" string, got number"}},
      {R"({"cluster":{"ps":["p:1"],"worker":["w:2","w"]},"task":{"type":"ps","index":0}})",
       {"TF_CONFIG cluster.worker[1] 'w'", "no port"}},
      {R"({"cluster":{"ps":["p:70000"],"worker":["w:2"]},"task":{"type":"ps","index":0}})",
       {"cluster.ps[0] 'p:70000'", "1..65535"}},
      {R"({"cluster":{"ps":["p:1"],"chief":["c:1","c:2"]},"task":{"type":"chief","index":0}})",
       {"cluster.chief has 2 entries", "at most one chief"}},
      {R"({"cluster":{"ps":["p:1"],"master":["m:1"]},"task":{"type":"ps","index":0}})",
       {"job 'master'", "ps, chief and worker"}},
      {"{" + ok_cluster + "}", {"TF_CONFIG has no \"task\" object"}},
      {"{" + ok_cluster + R"(,"task":"ps"})", {"\"task\" must be an object"}},
      {"{" + ok_cluster + R"(,"task":{"index":0}})",
       {"TF_CONFIG task.type is missing"}},
      {"{" + ok_cluster + R"(,"task":{"type":1,"index":0}})",
       {"task.type must be a string, got number"}},
      {"{" + ok_cluster + R"(,"task":{"type":"ps"}})",
       {"TF_CONFIG task.index is missing"}},
      {"{" + ok_cluster + R"(,"task":{"type":"ps","index":"0"}})",
       {"task.index must be an integer, got string"}},
      {"{" + ok_cluster + R"(,"task":{"type":"ps","index":0.5}})",
       {"task.index must be an integer, got number"}},
      {"{" + ok_cluster + R"(,"task":{"type":"ps","index":1}})",
       {"task.index 1 is out of range", "cluster.ps has 1 entries (valid 0..0)"}},
      {"{" + ok_cluster + R"(,"task":{"type":"worker","index":-1}})",
       {"task.index -1 is out of range", "cluster.worker has 2 entries"}},
      {"{" + ok_cluster +
           R"(,"task":{"type":"worker","index":18446744073709551615}})",
       {"task.index 18446744073709551615 is out of range"}},
      {"{" + ok_cluster + R"(,"task":{"type":"chief","index":0}})",
       {"task.type is 'chief' but cluster.chief is missing or empty"}},
      {"{" + ok_cluster + R"(,"task":{"type":"evaluator","index":0}})",
       {"task.type 'evaluator' is not supported"}},
      {"{" + ok_cluster + R"(,"task":{"type":"master","index":0}})",
       {"task.type 'master' is unknown", "expected ps, worker or chief"}},
      {"{" + ok_cluster + R"(,"task":{"type":"PS","index":0}})",
       {"task.type 'PS' is unknown"}},
      {R"({"cluster":{"ps":["h:1"],"worker":["h:1"]},"task":{"type":"ps","index":0}})",
       {"TF_CONFIG: address 'h:1' is given twice"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    ExpectInvalid(FromTfConfig(c.json), c.parts);
  }
  ExpectInvalid(FromTfConfig(TfJob("chief", 1)),
                {"task.index 1 is out of range for the chief"});
  ExpectInvalid(FromTfConfig(TfJob("worker", 2)),
                {"task.index 2 is out of range",
                 "cluster.worker has 2 entries (valid 0..1)"});
}
// --------------------------------------------------------------- precedence

constexpr char kTfConfig[] =
    R"({"cluster":{"ps":["tp:1"],"worker":["tw:2"]},"task":{"type":"ps","index":0}})";

TEST(ResolveClusterSpecTest, NoSourceMeansNoSpec) {
  auto spec = ResolveClusterSpec(ClusterSpecInputs(), FakeEnv({}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_value());
  // Blank variables count as unset.
  spec = ResolveClusterSpec(ClusterSpecInputs(),
                            FakeEnv({{"TF_CONFIG", "  "}, {"SLURM_PROCID", ""}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_value());
}

TEST(ResolveClusterSpecTest, FlagsWinOverTfConfigWhichWinsOverSlurm) {
  Env all = SixTasksOnTwoNodes(0);
  all["TF_CONFIG"] = kTfConfig;
  ClusterSpecInputs flags;
  flags.ps_hosts = "fp:1";
  flags.worker_hosts = "fw0:2,fw1:3";
  flags.task_type = "worker";
  flags.task_index = 1;
  flags.num_ps = 2;
  flags.base_port = 8888;

  auto spec = ResolveClusterSpec(flags, FakeEnv(all));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_value());
  EXPECT_EQ((*spec)->source, "flags");
  EXPECT_EQ((*spec)->SelfAddress(), "fw1:3");

  ClusterSpecInputs no_hosts = flags;
  no_hosts.ps_hosts.clear();
  no_hosts.worker_hosts.clear();
  spec = ResolveClusterSpec(no_hosts, FakeEnv(all));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_value());
  EXPECT_EQ((*spec)->source, "TF_CONFIG");
  EXPECT_EQ((*spec)->SelfAddress(), "tp:1");

  all.erase("TF_CONFIG");
  spec = ResolveClusterSpec(no_hosts, FakeEnv(all));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_value());
  EXPECT_EQ((*spec)->source, "slurm");
  EXPECT_EQ((*spec)->SelfAddress(), "n1:8888");
  EXPECT_EQ((*spec)->ps.size(), 2u);
}

TEST(ResolveClusterSpecTest, StandbyHostsFromFlags) {
  ClusterSpecInputs in;
  in.ps_hosts = "p0:1,p1:1";
  in.ps_standby_hosts = "s0:1,s1:1";
  in.worker_hosts = "w0:1";
  in.task_type = "ps_standby";
  in.task_index = 1;
  auto spec = ResolveClusterSpec(in, FakeEnv({}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_value());
  EXPECT_EQ((*spec)->task_type, TaskType::kPs);
  EXPECT_TRUE((*spec)->standby);
  EXPECT_EQ((*spec)->SelfAddress(), "s1:1");
  EXPECT_THAT((*spec)->ps_standby, ElementsAre("s0:1", "s1:1"));
  auto hosts = ResolveStandbyHosts(in, *spec, 2);
  ASSERT_TRUE(hosts.ok());
  EXPECT_THAT(*hosts, ElementsAre("s0:1", "s1:1"));
  // A primary task of the same job is shard 1 at p1.
  in.task_type = "ps";
  spec = ResolveClusterSpec(in, FakeEnv({}));
  ASSERT_TRUE(spec.ok() && spec->has_value());
  EXPECT_FALSE((*spec)->standby);
  EXPECT_EQ((*spec)->SelfAddress(), "p1:1");
  // One standby per shard; a standby task needs the list; no address twice.
  in.ps_standby_hosts = "s0:1";
  EXPECT_FALSE(ResolveClusterSpec(in, FakeEnv({})).ok());
  in.ps_standby_hosts = "";
  in.task_type = "ps_standby";
  EXPECT_FALSE(ResolveClusterSpec(in, FakeEnv({})).ok());
  in.ps_standby_hosts = "s0:1,p0:1";
  EXPECT_FALSE(ResolveClusterSpec(in, FakeEnv({})).ok());
  // A hand-started worker: the flag alone.
  ClusterSpecInputs hand;
  hand.ps_standby_hosts = "s0:1,s1:1";
  auto alone = ResolveStandbyHosts(hand, std::nullopt, 2);
  ASSERT_TRUE(alone.ok());
  EXPECT_THAT(*alone, ElementsAre("s0:1", "s1:1"));
  EXPECT_FALSE(ResolveStandbyHosts(hand, std::nullopt, 3).ok());
}

TEST(FromTfConfigTest, StandbyJob) {
  auto spec = FromTfConfig(
      R"({"cluster":{"ps":["p0:1"],"ps_standby":["s0:1"],"worker":["w0:1"]},)"
      R"("task":{"type":"ps_standby","index":0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->standby);
  EXPECT_EQ(spec->SelfAddress(), "s0:1");
  EXPECT_FALSE(FromTfConfig(
      R"({"cluster":{"ps":["p0:1","p1:1"],"ps_standby":["s0:1"],"worker":["w0:1"]},)"
      R"("task":{"type":"worker","index":0}})").ok());
}

TEST(ResolveClusterSpecTest, PsHostsAloneIsTheHandStartedMode) {
  ClusterSpecInputs in;
  in.ps_hosts = "p:1,p:2";
  Env env = SixTasksOnTwoNodes(0);
  env["TF_CONFIG"] = kTfConfig;
  auto spec = ResolveClusterSpec(in, FakeEnv(env));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_value());
}

TEST(ResolveClusterSpecTest, APresentButBrokenSourceIsAnError) {
  ClusterSpecInputs in;
  in.worker_hosts = "w:1";
  ExpectInvalid(ResolveClusterSpec(in, FakeEnv({})), {"--ps_hosts is empty"});

  ExpectInvalid(ResolveClusterSpec(ClusterSpecInputs(),
                                   FakeEnv({{"TF_CONFIG", "{oops"},
                                            {"SLURM_PROCID", "0"}})),
                {"TF_CONFIG is not valid JSON"});

  ExpectInvalid(ResolveClusterSpec(ClusterSpecInputs(),
                                   FakeEnv({{"SLURM_PROCID", "0"}})),
                {"neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS"});
}

TEST(ClusterSpecToStringTest, OneLineWithEverything) {
  auto spec = FromTfConfig(TfJob("worker", 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string line = ClusterSpecToString(*spec);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line,
            "cluster spec from TF_CONFIG: this task is worker 2 at "
            "job-worker-1.ns.svc:2222; 2 ps "
            "[job-ps-0.ns.svc:2222,job-ps-1.ns.svc:2222], 3 workers "
            "[job-chief-0.ns.svc:2222,job-worker-0.ns.svc:2222,"
            "job-worker-1.ns.svc:2222]");
  auto chief = FromFlags("p:1", "w:2", "worker", 0);
  ASSERT_TRUE(chief.ok());
  EXPECT_THAT(ClusterSpecToString(*chief),
              HasSubstr("this task is worker 0 (chief) at w:2"));
}

TEST(ValidateClusterSpecTest, CatchesHandBuiltMistakes) {
  ClusterSpec spec;
  spec.source = "test";
  spec.workers = {"w:1"};
  ExpectInvalid(ValidateClusterSpec(spec), {"test: no parameter servers"});
  spec.ps = {"p:1"};
  spec.workers.clear();
  ExpectInvalid(ValidateClusterSpec(spec), {"test: no workers"});
  spec.workers = {"w:1"};
  spec.task_index = 1;
  ExpectInvalid(ValidateClusterSpec(spec),
                {"task index 1 is out of range for 1 worker tasks"});
  EXPECT_EQ(spec.SelfAddress(), "");
  spec.task_index = 0;
  spec.ps = {"p"};
  ExpectInvalid(ValidateClusterSpec(spec), {"test ps[0] 'p'", "no port"});
  spec.ps = {"p:1"};
  EXPECT_TRUE(ValidateClusterSpec(spec).ok());
}

}  // namespace
}  // namespace downpour
