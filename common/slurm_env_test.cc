#include "common/slurm_env.h"

#include <string>
#include <vector>

#include "common/cluster_spec_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using cluster_spec_testing::Env;
using cluster_spec_testing::ExpectInvalid;
using cluster_spec_testing::FakeEnv;
using cluster_spec_testing::SixTasksOnTwoNodes;

// ---------------------------------------------------------- Slurm hostlists

TEST(SlurmNodeListTest, ExpandsRanges) {
  auto n = ExpandSlurmNodeList("n[1-3,7],m5");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("n1", "n2", "n3", "n7", "m5"));

  n = ExpandSlurmNodeList("node[01-03]");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("node01", "node02", "node03"));

  n = ExpandSlurmNodeList("gpu[008-010,1]");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("gpu008", "gpu009", "gpu010", "gpu1"));

  n = ExpandSlurmNodeList("n[9-11]");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("n9", "n10", "n11"));

  n = ExpandSlurmNodeList("single");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("single"));

  n = ExpandSlurmNodeList("a[1-2]b,c[5]-x,d.e");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("a1b", "a2b", "c5-x", "d.e"));

  n = ExpandSlurmNodeList("rack[1-2]-n[1-2]");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(*n, ElementsAre("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"));
}

TEST(SlurmNodeListTest, RefusesBadNodeLists) {
  struct Case {
    const char* list;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {"", {"SLURM_STEP_NODELIST is empty"}},
      {"n[1-3", {"SLURM_STEP_NODELIST 'n[1-3'", "unclosed '['"}},
      {"n1-3]", {"']' without '['"}},
      {"n[1-[2]]", {"nested '['"}},
      {"n[]", {"empty bracket group"}},
      {"n[1,,2]", {"empty range"}},
      {"n[3-1]", {"reversed range '3-1'"}},
      {"n[a-b]", {"bad range 'a-b'"}},
      {"n[1-]", {"bad range '1-'"}},
      {"n[-1]", {"bad range '-1'"}},
      {"n[1-2-3]", {"bad range '1-2-3'"}},
      {"n1,,n2", {"empty entry"}},
      {"n1,", {"empty entry"}},
      {"[1-2]", {"range with no name before it"}},
      {"n[1-999999999]", {"expands to more than 100000"}},
      {"a[1-1000]-b[1-1000]", {"expands to more than 100000"}},
      {"n 1", {"bad character ' ' in node name 'n 1'"}},
      {"n:1", {"bad character ':'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.list);
    ExpectInvalid(ExpandSlurmNodeList(c.list, "SLURM_STEP_NODELIST"), c.parts);
  }
}

TEST(SlurmTasksPerNodeTest, ExpandsRepeats) {
  auto t = ExpandSlurmTasksPerNode("3(x2),2");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*t, ElementsAre(3, 3, 2));
  t = ExpandSlurmTasksPerNode("1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*t, ElementsAre(1));
  t = ExpandSlurmTasksPerNode("2,4(x1),1(x3)");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*t, ElementsAre(2, 4, 1, 1, 1));
}

TEST(SlurmTasksPerNodeTest, RefusesBadCounts) {
  for (const char* bad : {"0", "3(x0)", "3(x)", "3(2)", "3(x2", "(x2)", "x",
                          "3,,2", "3,", "-1", "3(x2)4", "2 (x2)"}) {
    SCOPED_TRACE(bad);
    ExpectInvalid(ExpandSlurmTasksPerNode(bad, "SLURM_TASKS_PER_NODE"),
                  {"SLURM_TASKS_PER_NODE", "bad entry",
                   "expected N or N(xM)"});
  }
  ExpectInvalid(ExpandSlurmTasksPerNode("", "SLURM_TASKS_PER_NODE"),
                {"SLURM_TASKS_PER_NODE is empty"});
  ExpectInvalid(ExpandSlurmTasksPerNode("1(x999999)", "V"),
                {"more than 100000"});
}

// -------------------------------------------------------------------- Slurm

TEST(FromSlurmTest, SixTasksOnTwoNodes) {
  const int kNumPs = 2, kBasePort = 8888;
  for (int procid = 0; procid < 6; ++procid) {
    SCOPED_TRACE(procid);
    auto spec = FromSlurm(FakeEnv(SixTasksOnTwoNodes(procid)), kNumPs,
                          kBasePort);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->source, "slurm");
    EXPECT_THAT(spec->ps, ElementsAre("n1:8888", "n1:8889"));
    EXPECT_THAT(spec->workers,
                ElementsAre("n1:8890", "n2:8888", "n2:8889", "n2:8890"));
    EXPECT_EQ(spec->task_type, procid < 2 ? TaskType::kPs : TaskType::kWorker);
    EXPECT_EQ(spec->task_index, procid < 2 ? procid : procid - 2);
    EXPECT_EQ(spec->IsChief(), procid == 2);
  }
  auto spec = FromSlurm(FakeEnv(SixTasksOnTwoNodes(4)), kNumPs, kBasePort);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->SelfAddress(), "n2:8889");
}

TEST(FromSlurmTest, UnevenNodesAndJobLevelFallbacks) {
  // Job-level variables only (no step variables), no NODEID/LOCALID.
  Env env = {{"SLURM_PROCID", "7"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_JOB_NODELIST", "node[01-03]"},
             {"SLURM_TASKS_PER_NODE", "3(x2),2"}};
  auto spec = FromSlurm(FakeEnv(env), 1, 5000);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps, ElementsAre("node01:5000"));
  EXPECT_THAT(spec->workers,
              ElementsAre("node01:5001", "node01:5002", "node02:5000",
                          "node02:5001", "node02:5002", "node03:5000",
                          "node03:5001"));
  EXPECT_EQ(spec->task_type, TaskType::kWorker);
  EXPECT_EQ(spec->task_index, 6);
  EXPECT_EQ(spec->SelfAddress(), "node03:5001");
}

TEST(FromSlurmTest, StepVariablesWinOverJobVariables) {
  Env env = {{"SLURM_PROCID", "1"},
             {"SLURM_NTASKS", "99"},
             {"SLURM_STEP_NUM_TASKS", "2"},
             {"SLURM_JOB_NODELIST", "a,b,c"},
             {"SLURM_STEP_NODELIST", "b"},
             {"SLURM_TASKS_PER_NODE", "33(x3)"},
             {"SLURM_STEP_TASKS_PER_NODE", "2"}};
  auto spec = FromSlurm(FakeEnv(env), 1, 2222);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps, ElementsAre("b:2222"));
  EXPECT_THAT(spec->workers, ElementsAre("b:2223"));
}

TEST(FromSlurmTest, RefusesMalformedEnvironments) {
  struct Case {
    Env changes;  // applied over SixTasksOnTwoNodes(3); "" value: erase
    int num_ps;
    int base_port;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {{{"SLURM_PROCID", ""}}, 2, 8888, {"SLURM_PROCID is not set"}},
      {{{"SLURM_PROCID", "x"}}, 2, 8888,
       {"SLURM_PROCID 'x' is not a non-negative integer"}},
      {{{"SLURM_PROCID", "-1"}}, 2, 8888, {"SLURM_PROCID '-1'"}},
      {{{"SLURM_PROCID", "6"}, {"SLURM_NODEID", ""}, {"SLURM_LOCALID", ""}},
       2, 8888,
       {"SLURM_PROCID 6 is out of range", "SLURM_STEP_NUM_TASKS is 6",
        "valid 0..5"}},
      {{{"SLURM_STEP_NUM_TASKS", ""}}, 2, 8888,
       {"neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set"}},
      {{{"SLURM_STEP_NUM_TASKS", "0"}}, 2, 8888,
       {"SLURM_STEP_NUM_TASKS '0' is not a positive integer"}},
      {{{"SLURM_STEP_NUM_TASKS", "six"}}, 2, 8888,
       {"SLURM_STEP_NUM_TASKS 'six'"}},
      {{{"SLURM_STEP_NODELIST", ""}}, 2, 8888,
       {"neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set"}},
      {{{"SLURM_STEP_NODELIST", "n[1-2"}}, 2, 8888,
       {"SLURM_STEP_NODELIST 'n[1-2'", "unclosed"}},
      {{{"SLURM_STEP_TASKS_PER_NODE", ""}}, 2, 8888,
       {"neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE"}},
      {{{"SLURM_STEP_TASKS_PER_NODE", "3(x2"}}, 2, 8888,
       {"SLURM_STEP_TASKS_PER_NODE '3(x2'", "bad entry"}},
      {{{"SLURM_STEP_TASKS_PER_NODE", "3(x3)"}}, 2, 8888,
       {"SLURM_STEP_TASKS_PER_NODE '3(x3)' describes 3 nodes",
        "SLURM_STEP_NODELIST 'n[1-2]' lists 2"}},
      {{{"SLURM_STEP_TASKS_PER_NODE", "4,3"}}, 2, 8888,
       {"SLURM_STEP_TASKS_PER_NODE '4,3' sums to 7 tasks",
        "SLURM_STEP_NUM_TASKS is 6"}},
      {{}, 6, 8888, {"--num_ps=6 leaves no worker", "SLURM_STEP_NUM_TASKS is 6"}},
      {{}, 7, 8888, {"--num_ps=7 leaves no worker"}},
      {{}, 0, 8888, {"--num_ps=0 must be at least 1"}},
      {{}, 2, 0, {"--base_port=0 is not a port"}},
      {{}, 2, 70000, {"--base_port=70000"}},
      {{}, 2, 65534, {"--base_port=65534", "runs past port 65535"}},
      {{{"SLURM_NODEID", "0"}}, 2, 8888,
       {"SLURM_NODEID/SLURM_LOCALID (0/0) do not match block placement",
        "rank 3 on node 1 (n2) as its task 0", "--distribution=block"}},
      {{{"SLURM_LOCALID", "2"}}, 2, 8888, {"do not match block placement"}},
      {{{"SLURM_NODEID", "one"}}, 2, 8888,
       {"SLURM_NODEID 'one' is not a non-negative integer"}},
      {{{"SLURM_STEP_NODELIST", "n1,n1"}}, 2, 8888,
       {"slurm: address 'n1:8888' is given twice"}},
  };
  for (const Case& c : cases) {
    Env env = SixTasksOnTwoNodes(3);
    for (const auto& [k, v] : c.changes) {
      if (v.empty()) {
        env.erase(k);
      } else {
        env[k] = v;
      }
    }
    SCOPED_TRACE(c.parts[0]);
    ExpectInvalid(FromSlurm(FakeEnv(env), c.num_ps, c.base_port), c.parts);
  }
}

}  // namespace
}  // namespace downpour
