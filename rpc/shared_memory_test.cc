#include "rpc/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(SharedRegionTest, AServerMapsTheWorkersRegionAndSeesItsBytes) {
  auto region = SharedRegion::Create(1000);
  ASSERT_TRUE(region.ok()) << region.status();
  const wire::SharedRef& ref = (*region)->ref();
  EXPECT_EQ(ref.push_offset, kSharedHeaderBytes);
  EXPECT_GE(ref.reply_offset, ref.push_offset + 1000);
  EXPECT_GE(ref.size, ref.reply_offset + 1000);
  std::memcpy((*region)->push_area() + 40, "gradient", 8);

  auto mapped = MappedRegion::Open(ref);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  auto read = (*mapped)->Read(ref.push_offset, 40, 8);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "gradient");
  auto dst = (*mapped)->Write(ref.reply_offset, 8, 6);
  ASSERT_TRUE(dst.ok()) << dst.status();
  std::memcpy(*dst, "values", 6);
  EXPECT_EQ(std::string((*region)->reply_area() + 8, 6), "values");
}

TEST(SharedRegionTest, AnotherProcessesRegionIsMappedThroughProc) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto region = SharedRegion::Create(64);
    if (!region.ok()) _exit(1);
    std::memcpy((*region)->push_area(), "from the child", 14);
    wire::SharedRef ref = (*region)->ref();
    if (write(to_parent[1], &ref, sizeof(ref)) != sizeof(ref)) _exit(2);
    char done;
    if (read(to_child[0], &done, 1) != 1) _exit(3);  // Keeps the region open.
    _exit(std::memcmp((*region)->reply_area(), "from the parent", 15) == 0 ? 0 : 4);
  }
  wire::SharedRef ref;
  ASSERT_EQ(read(to_parent[0], &ref, sizeof(ref)), static_cast<ssize_t>(sizeof(ref)));
  EXPECT_EQ(ref.pid, static_cast<uint32_t>(child));
  auto mapped = MappedRegion::Open(ref);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(*(*mapped)->Read(ref.push_offset, 0, 14), "from the child");
  std::memcpy(*(*mapped)->Write(ref.reply_offset, 0, 15), "from the parent", 15);
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The mapping outlives the process that made it.
  EXPECT_EQ(*(*mapped)->Read(ref.push_offset, 0, 14), "from the child");
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

TEST(SharedRegionTest, ARefThatDoesNotMatchIsRefused) {
  auto region = SharedRegion::Create(64);
  ASSERT_TRUE(region.ok()) << region.status();
  wire::SharedRef wrong_key = (*region)->ref();
  wrong_key.key ^= 1;
  EXPECT_EQ(MappedRegion::Open(wrong_key).status().code(),
            absl::StatusCode::kFailedPrecondition);
  wire::SharedRef wrong_size = (*region)->ref();
  wrong_size.size += 4096;
  EXPECT_EQ(MappedRegion::Open(wrong_size).status().code(),
            absl::StatusCode::kFailedPrecondition);
  wire::SharedRef no_fd = (*region)->ref();
  no_fd.fd = 1 << 20;
  EXPECT_EQ(MappedRegion::Open(no_fd).status().code(),
            absl::StatusCode::kFailedPrecondition);
  wire::SharedRef no_pid = (*region)->ref();
  no_pid.pid = 0;
  EXPECT_EQ(MappedRegion::Open(no_pid).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SharedRegionTest, OnlyOurSealedMemfdsAreOpened) {
  // A plain file: the server must not open what a request points at.
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  wire::SharedRef ref;
  ref.pid = static_cast<uint32_t>(getpid());
  ref.fd = fileno(f);
  ref.size = 2 * kSharedHeaderBytes;
  ASSERT_EQ(ftruncate(ref.fd, static_cast<off_t>(ref.size)), 0);
  absl::Status s = MappedRegion::Open(ref).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not a payload region"), std::string::npos) << s;
  std::fclose(f);

  // A memfd with our name that could still shrink (and fault a mapping).
  const int fd = memfd_create("downpour-payloads", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(ref.size)), 0);
  ref.fd = fd;
  s = MappedRegion::Open(ref).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not sealed"), std::string::npos) << s;
  close(fd);
}

TEST(SharedRegionTest, CallBlocksFollowTheAreasAndBothSidesSeeThem) {
  auto region = SharedRegion::Create(1000, /*call_shards=*/3);
  ASSERT_TRUE(region.ok()) << region.status();
  const wire::SharedRef& ref = (*region)->ref();
  EXPECT_TRUE(SharedRegion::Fits(ref, 1000, 3));
  EXPECT_FALSE(SharedRegion::Fits(ref, 1000, 2));
  EXPECT_FALSE(SharedRegion::Fits(ref, 1000));
  EXPECT_EQ((*region)->call_shards(), 3);
  EXPECT_EQ((*region)->shard_calls(3), nullptr);
  EXPECT_EQ((*region)->shard_calls(-1), nullptr);
  ShardCalls* last = (*region)->shard_calls(2);
  ASSERT_NE(last, nullptr);
  // After the reply area, inside the region.
  EXPECT_GE(reinterpret_cast<char*>((*region)->shard_calls(0)),
            (*region)->reply_area() + (*region)->area_bytes());
  EXPECT_LE(reinterpret_cast<char*>(last + 1),
            (*region)->push_area() - ref.push_offset + ref.size);
  std::memcpy(last->slots[kCallSlots - 1].request, "to shard 2", 10);
  last->bell.store(7);

  auto mapped = MappedRegion::Open(ref);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->call_shards(), 3);
  ShardCalls* seen = (*mapped)->shard_calls(2);
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(std::string(seen->slots[kCallSlots - 1].request, 10), "to shard 2");
  EXPECT_EQ(seen->bell.load(), 7u);
  (*mapped)->client_bell()->store(9);
  EXPECT_EQ((*region)->client_bell()->load(), 9u);
  EXPECT_EQ((*mapped)->shard_calls(3), nullptr);

  auto plain = SharedRegion::Create(1000);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->call_shards(), 0);
  EXPECT_EQ((*plain)->shard_calls(0), nullptr);
  EXPECT_FALSE(SharedRegion::Create(1000, -1).ok());
}

TEST(SharedRegionTest, AHeaderClaimingMoreCallBlocksThanFitIsRefused) {
  auto region = SharedRegion::Create(1000, /*call_shards=*/1);
  ASSERT_TRUE(region.ok()) << region.status();
  // The header's count, as a worker could rewrite it (after the magic, key
  // and size).
  char* header = (*region)->push_area() - kSharedHeaderBytes;
  const uint32_t many = 1000;
  std::memcpy(header + 32, &many, sizeof(many));
  auto mapped = MappedRegion::Open((*region)->ref());
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SharedRegionTest, ReadsAndWritesOutsideTheAreasAreRefused) {
  auto region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const wire::SharedRef& ref = (*region)->ref();
  auto mapped = MappedRegion::Open(ref);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const MappedRegion& m = **mapped;
  EXPECT_TRUE(m.Read(ref.reply_offset, 0, 4096).ok());
  EXPECT_FALSE(m.Read(ref.reply_offset, 1, 4096).ok());
  EXPECT_FALSE(m.Read(0, 0, 8).ok());  // The header.
  EXPECT_FALSE(m.Read(ref.size + 1, 0, 0).ok());
  EXPECT_FALSE(m.Read(ref.push_offset, -4, 4).ok());
  EXPECT_FALSE(m.Read(ref.push_offset, int64_t{1} << 62, int64_t{1} << 62).ok());
  EXPECT_FALSE(m.Write(ref.push_offset, 0, -1).ok());
  EXPECT_EQ(m.Write(ref.reply_offset, 4096, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedRegionCacheTest, MapsARegionOnceAndRefusesAWrongKey) {
  auto region = SharedRegion::Create(64);
  ASSERT_TRUE(region.ok()) << region.status();
  SharedRegionCache cache(/*max_regions=*/2);
  auto a = cache.Get((*region)->ref());
  auto b = cache.Get((*region)->ref());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  wire::SharedRef other = (*region)->ref();
  other.key ^= 2;
  EXPECT_FALSE(cache.Get(other).ok());
  // More regions than it keeps: the oldest goes, and is mapped again.
  auto r2 = SharedRegion::Create(64), r3 = SharedRegion::Create(64);
  ASSERT_TRUE(r2.ok() && r3.ok());
  ASSERT_TRUE(cache.Get((*r2)->ref()).ok());
  ASSERT_TRUE(cache.Get((*r3)->ref()).ok());
  auto again = cache.Get((*region)->ref());
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->get(), a->get());
}

TEST(SharedRegionCacheTest, ARegionItsWorkerClosedIsDroppedOnTheNextOpen) {
  SharedRegionCache cache;
  auto first = SharedRegion::Create(64);
  ASSERT_TRUE(first.ok());
  const wire::SharedRef ref = (*first)->ref();
  auto mapped = cache.Get(ref);
  ASSERT_TRUE(mapped.ok());
  EXPECT_TRUE((*mapped)->StillHeld(ref));
  std::weak_ptr<MappedRegion> weak = *mapped;
  mapped->reset();
  first->reset();  // The worker closes its descriptor.
  auto second = SharedRegion::Create(64);  // Likely on the same fd number.
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(cache.Get((*second)->ref()).ok());
  EXPECT_TRUE(weak.expired());  // Unmapped: its memory is given back.
}

TEST(SharedRegionCacheTest, RequestsRecheckWhetherRegionsAreStillHeld) {
  SharedRegionCache cache(/*max_regions=*/64,
                          /*recheck_every=*/absl::ZeroDuration());
  auto kept = SharedRegion::Create(64), closed = SharedRegion::Create(64);
  ASSERT_TRUE(kept.ok() && closed.ok());
  ASSERT_TRUE(cache.Get((*kept)->ref()).ok());
  auto mapped = cache.Get((*closed)->ref());
  ASSERT_TRUE(mapped.ok());
  std::weak_ptr<MappedRegion> weak = *mapped;
  mapped->reset();
  closed->reset();
  // No new region: a request for one still held finds the other gone.
  ASSERT_TRUE(cache.Get((*kept)->ref()).ok());
  EXPECT_TRUE(weak.expired());
}

TEST(LoopbackTest, Peers) {
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.0.0.1:41234"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::1]:41234"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::ffff:127.0.0.1]:41234"));
  EXPECT_TRUE(IsLoopbackPeer("unix:/tmp/ps.sock"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:198.18.0.2:41234"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:[::ffff:198.18.0.2]:41234"));
  EXPECT_FALSE(IsLoopbackPeer(""));
}

}  // namespace
}  // namespace downpour
