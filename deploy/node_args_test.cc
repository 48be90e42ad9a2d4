#include "deploy/node_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NodeArgsTest, SpecFlagsAreReadAndEverythingPassesThrough) {
  auto a = ParseNodeArgs({"--num_ps=2", "--base_port", "3000", "--epochs=3",
                          "--bind=0.0.0.0", "--print_spec", "--nooverlap"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->spec_inputs.num_ps, 2);
  EXPECT_EQ(a->spec_inputs.base_port, 3000);
  EXPECT_TRUE(a->print_spec);
  EXPECT_THAT(a->passthrough,
              ElementsAre("--num_ps=2", "--base_port", "3000", "--epochs=3",
                          "--bind=0.0.0.0", "--nooverlap"));
  const auto argv = ChildArgv("/bin/ps_worker", *a, {});
  EXPECT_EQ(argv.front(), "/bin/ps_worker");
  EXPECT_EQ(argv.back(),
            "--undefok=base_port,bind,epochs,nooverlap,num_ps,overlap");
  // Knowing the other binary's flags, only those are let through: a flag
  // neither binary defines reaches the child as unknown.
  auto typo = ParseNodeArgs({"--epocs=3", "--bind=0.0.0.0", "--num_ps=1"});
  ASSERT_TRUE(typo.ok());
  EXPECT_EQ(ChildArgv("/bin/ps_worker", *typo, {"bind", "num_ps", "port"})
                .back(),
            "--undefok=bind,num_ps");
}

TEST(NodeArgsTest, HelpAndTheOtherBinarysFlags) {
  auto a = ParseNodeArgs({"--help"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->help);
  EXPECT_TRUE(a->passthrough.empty());
  EXPECT_THAT(NodeUsage(), HasSubstr("--print_spec"));
  EXPECT_THAT(FlagNamesFromHelp("ps_server: usage\n\n  Flags from server/x.cc:\n"
                                "    --bind (Address.); default: \"\";\n"
                                "      continued (text)\n"
                                "    --port (Port.); default: 0;\n"),
              ElementsAre("bind", "port"));
}

TEST(NodeArgsTest, FlagsSourceGivesRoleLine) {
  auto a = ParseNodeArgs({"--ps_hosts=p0:1,p1:2", "--worker_hosts=w0:3,w1:4",
                          "--task_type=worker", "--task_index=1"});
  ASSERT_TRUE(a.ok());
  auto spec = ResolveClusterSpec(a->spec_inputs, [](const std::string&) {
    return std::optional<std::string>();
  });
  ASSERT_TRUE(spec.ok() && spec->has_value());
  EXPECT_EQ(DescribeRole(**spec),
            "role=worker index=1 chief=false self=w1:4 ps=p0:1,p1:2 "
            "workers=w0:3,w1:4 source=flags");
  EXPECT_STREQ(ChildBinaryFor(**spec), "worker/ps_worker");
}

TEST(NodeArgsTest, MalformedInputIsRefusedWithReason) {
  EXPECT_THAT(ParseNodeArgs({"positional"}).status().message(),
              HasSubstr("only flags"));
  EXPECT_THAT(ParseNodeArgs({"--task_index"}).status().message(),
              HasSubstr("needs a value"));
  EXPECT_THAT(ParseNodeArgs({"--num_ps=two"}).status().message(),
              HasSubstr("--num_ps must be an integer"));
}

}  // namespace
}  // namespace downpour
