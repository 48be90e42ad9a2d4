#include "tests/bench/process_copies.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

constexpr int kSteps = 40;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // One clock for every process.
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// When each step of a copy began and ended.
struct Steps {
  int64_t begin[kSteps];
  int64_t end[kSteps];
};

// Copies whose steps take different times (copy c sleeps c + 1 ms a step):
// with the gate, no copy begins step k before every copy ended step k - 1.
std::unique_ptr<ProcessCopies> RunSteps(int copies, bool gate) {
  absl::StatusOr<std::unique_ptr<ProcessCopies>> c =
      ProcessCopies::Fork(copies, sizeof(Steps));
  if (!c.ok()) {
    ADD_FAILURE() << c.status();
    return nullptr;
  }
  if ((*c)->index() >= 0) {
    const int me = (*c)->index();
    Steps* s = new ((*c)->slot(me)) Steps();
    for (int k = 0; k < kSteps; ++k) {
      if (gate) (*c)->Gate();
      s->begin[k] = NowNs();
      usleep(1000 * (me + 1));
      s->end[k] = NowNs();
    }
    (*c)->ExitCopy(0);
  }
  EXPECT_TRUE((*c)->WaitAll().ok());
  return std::move(*c);
}

// The latest end of step k - 1 over the copies, against the earliest
// begin of step k: how many steps began before every copy had ended the
// one before.
int EarlySteps(const ProcessCopies& c) {
  int early = 0;
  for (int k = 1; k < kSteps; ++k) {
    int64_t last_end = 0, first_begin = INT64_MAX;
    for (int i = 0; i < c.copies(); ++i) {
      const Steps* s = static_cast<const Steps*>(c.slot(i));
      last_end = std::max(last_end, s->end[k - 1]);
      first_begin = std::min(first_begin, s->begin[k]);
    }
    if (first_begin < last_end) ++early;
  }
  return early;
}

TEST(ProcessCopiesTest, GateStartsEachStepOnceEveryCopyEndedTheLast) {
  std::unique_ptr<ProcessCopies> c = RunSteps(3, /*gate=*/true);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(EarlySteps(*c), 0);
}

TEST(ProcessCopiesTest, WithoutTheGateTheCopiesRunApart) {
  // The check above is not vacuous: copies that do not meet drift apart.
  std::unique_ptr<ProcessCopies> c = RunSteps(3, /*gate=*/false);
  ASSERT_NE(c, nullptr);
  EXPECT_GT(EarlySteps(*c), kSteps / 2);
}

TEST(ProcessCopiesTest, SlotsComeBackToTheParent) {
  absl::StatusOr<std::unique_ptr<ProcessCopies>> c =
      ProcessCopies::Fork(4, sizeof(int64_t));
  ASSERT_TRUE(c.ok()) << c.status();
  if ((*c)->index() >= 0) {
    *new ((*c)->slot((*c)->index())) int64_t = 100 + (*c)->index();
    (*c)->ExitCopy(0);
  }
  ASSERT_TRUE((*c)->WaitAll().ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(*static_cast<const int64_t*>((*c)->slot(i)), 100 + i);
  }
}

TEST(ProcessCopiesTest, AFailedCopyStopsTheOthersWaitingForIt) {
  absl::StatusOr<std::unique_ptr<ProcessCopies>> c =
      ProcessCopies::Fork(3, 8);
  ASSERT_TRUE(c.ok()) << c.status();
  if ((*c)->index() >= 0) {
    if ((*c)->index() == 1) (*c)->ExitCopy(7);
    (*c)->Gate();  // Never passes: copy 1 is gone.
    (*c)->ExitCopy(0);
  }
  int exit_status = 0;
  const absl::Status s = (*c)->WaitAll(&exit_status);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("copy 1"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("exited with status 7"), absl::string_view::npos)
      << s;
  EXPECT_EQ(exit_status, 7);
}

TEST(ProcessCopiesTest, RefusesNoCopies) {
  EXPECT_EQ(ProcessCopies::Fork(0, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace downpour
