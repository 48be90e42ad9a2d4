#include "rpc/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// The memfd's name, as /proc/<pid>/fd/<fd> shows it ("/memfd:" + name).
constexpr char kMemfdName[] = "downpour-payloads";
constexpr char kMagic[16] = "downpour-shm/1";

struct Header {
  char magic[16];
  uint64_t key;
  uint64_t size;
  uint32_t call_shards;  // Call blocks after the reply area (rpc/shared_calls.h).
};
static_assert(sizeof(Header) <= kClientBellOffset, "the bell after the header");

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

uint64_t CallBlocksBytes(uint32_t call_shards) {
  return RoundUp(CallAreaBytes(static_cast<int>(call_shards)), 4096);
}

// Shard `shard`'s call block in a mapping of `size` bytes at `base` whose
// last CallBlocksBytes(call_shards) hold the blocks; null for no such shard.
ShardCalls* ShardCallsAt(char* base, uint64_t size, int call_shards, int shard) {
  if (shard < 0 || shard >= call_shards) return nullptr;
  return reinterpret_cast<ShardCalls*>(
             base + size - CallBlocksBytes(static_cast<uint32_t>(call_shards))) +
         shard;
}

std::atomic<uint32_t>* ClientBellAt(char* base) {
  return reinterpret_cast<std::atomic<uint32_t>*>(base + kClientBellOffset);
}

// Size and areas of a region whose areas hold area_bytes (> 0) each, with
// call blocks for call_shards shards after them.
wire::SharedRef Layout(int64_t area_bytes, int call_shards) {
  const uint64_t area = RoundUp(static_cast<uint64_t>(area_bytes), 4096);
  wire::SharedRef ref;
  ref.push_offset = kSharedHeaderBytes;
  ref.reply_offset = kSharedHeaderBytes + area;
  ref.size = kSharedHeaderBytes + 2 * area +
             CallBlocksBytes(static_cast<uint32_t>(call_shards));
  return ref;
}

uint64_t RandomKey() {
  std::random_device rd;
  uint64_t k = 0;
  while (k == 0) k = (uint64_t{rd()} << 32) ^ rd();
  return k;
}

std::string Errno(const char* what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

std::string FdPath(const wire::SharedRef& ref) {
  return absl::StrCat("/proc/", ref.pid, "/fd/", ref.fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    int64_t area_bytes, int call_shards) {
  if (area_bytes <= 0 || call_shards < 0 || call_shards > kMaxCallShards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: area of ", area_bytes, " bytes, ", call_shards,
        " call blocks"));
  }
  wire::SharedRef ref = Layout(area_bytes, call_shards);
  const int fd = memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::UnavailableError(Errno("shared memory: memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(ref.size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const std::string e = Errno("shared memory: sizing and sealing");
    close(fd);
    return absl::UnavailableError(e);
  }
  void* p = mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string e = Errno("shared memory: mmap");
    close(fd);
    return absl::UnavailableError(e);
  }
  ref.pid = static_cast<uint32_t>(getpid());
  ref.fd = fd;  // Kept open (and so reachable by the servers) until ~SharedRegion.
  ref.key = RandomKey();
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.key = ref.key;
  h.size = ref.size;
  h.call_shards = static_cast<uint32_t>(call_shards);
  std::memcpy(p, &h, sizeof(h));
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(static_cast<char*>(p), ref, call_shards));
}

bool SharedRegion::Fits(const wire::SharedRef& ref, int64_t area_bytes,
                        int call_shards) {
  if (area_bytes <= 0 || call_shards < 0 || call_shards > kMaxCallShards) {
    return false;
  }
  const wire::SharedRef want = Layout(area_bytes, call_shards);
  return ref.push_offset == want.push_offset &&
         ref.reply_offset == want.reply_offset && ref.size == want.size;
}

ShardCalls* SharedRegion::shard_calls(int shard) const {
  return ShardCallsAt(base_, ref_.size, call_shards_, shard);
}

std::atomic<uint32_t>* SharedRegion::client_bell() const {
  return ClientBellAt(base_);
}

SharedRegion::~SharedRegion() {
  munmap(base_, ref_.size);
  close(ref_.fd);
}

absl::StatusOr<std::shared_ptr<MappedRegion>> MappedRegion::Open(
    const wire::SharedRef& ref) {
  const auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: pid ", ref.pid, " fd ", ref.fd, ": ", why));
  };
  if (ref.pid == 0 || ref.fd < 0 || ref.size <= kSharedHeaderBytes ||
      ref.size > (uint64_t{1} << 40)) {
    return refuse(absl::StrCat("no region of ", ref.size, " bytes there"));
  }
  // Opened as a path first: O_PATH opens nothing (no device, FIFO or socket
  // is touched), and what it names is checked on that descriptor, which
  // cannot change under us: one of our memfds, on tmpfs (not hugetlbfs,
  // whose pages can run out under a mapping). Only then is the same file
  // opened for reading and writing. The refusals do not say what the
  // descriptor was, so that a probe cannot list another process's files.
  const int path_fd = open(FdPath(ref).c_str(), O_PATH | O_CLOEXEC);
  if (path_fd < 0) return refuse("not a payload region");
  const std::string self = absl::StrCat("/proc/self/fd/", path_fd);
  char link[256];
  const ssize_t n = readlink(self.c_str(), link, sizeof(link) - 1);
  if (n > 0) link[n] = '\0';
  struct stat st;
  struct statfs fs;
  const bool ours =
      n > 0 && absl::StartsWith(link, absl::StrCat("/memfd:", kMemfdName, " ")) &&
      fstat(path_fd, &st) == 0 && S_ISREG(st.st_mode) &&
      fstatfs(path_fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  const int fd = ours ? open(self.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY |
                                               O_NONBLOCK)
                      : -1;
  close(path_fd);
  if (fd < 0) return refuse("not a payload region");
  const int seals = fcntl(fd, F_GET_SEALS);
  std::string why;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "not a regular memory file";
  } else if (static_cast<uint64_t>(st.st_size) != ref.size) {
    why = absl::StrCat("it has ", st.st_size, " bytes, not ", ref.size);
  } else if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 ||
             (seals & F_SEAL_SEAL) == 0) {
    why = "not sealed against shrinking";
  }
  if (!why.empty()) {
    close(fd);
    return refuse(why);
  }
  void* p = mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return refuse(Errno("mmap"));
  Header h;
  std::memcpy(&h, p, sizeof(h));
  // The call blocks' count is read once, here: the worker could change it.
  const uint32_t call_shards =
      h.call_shards <= static_cast<uint32_t>(kMaxCallShards) ? h.call_shards : 0;
  std::shared_ptr<MappedRegion> m(new MappedRegion(
      static_cast<char*>(p), ref.size, static_cast<uint64_t>(st.st_ino),
      static_cast<int>(call_shards)));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.key != ref.key ||
      h.size != ref.size || h.call_shards != call_shards ||
      CallBlocksBytes(call_shards) > ref.size - kSharedHeaderBytes) {
    return refuse("the region's header does not match the request's key");
  }
  return m;
}

MappedRegion::~MappedRegion() { munmap(base_, size_); }

ShardCalls* MappedRegion::shard_calls(int shard) const {
  return ShardCallsAt(base_, size_, call_shards_, shard);
}

std::atomic<uint32_t>* MappedRegion::client_bell() const {
  return ClientBellAt(base_);
}

bool MappedRegion::StillHeld(const wire::SharedRef& ref) const {
  struct stat st;
  return stat(FdPath(ref).c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_ino) == inode_;
}

absl::Status MappedRegion::Check(uint64_t area, int64_t offset,
                                 int64_t bytes) const {
  if (area < kSharedHeaderBytes || area > size_ || offset < 0 || bytes < 0 ||
      static_cast<uint64_t>(offset) > size_ - area ||
      static_cast<uint64_t>(bytes) > size_ - area - static_cast<uint64_t>(offset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: ", bytes, " bytes at ", area, " + ", offset,
        " lie outside the region's ", size_, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::string_view> MappedRegion::Read(uint64_t area,
                                                     int64_t offset,
                                                     int64_t bytes) const {
  if (absl::Status s = Check(area, offset, bytes); !s.ok()) return s;
  return absl::string_view(base_ + area + offset, static_cast<size_t>(bytes));
}

absl::StatusOr<char*> MappedRegion::Write(uint64_t area, int64_t offset,
                                          int64_t bytes) const {
  if (absl::Status s = Check(area, offset, bytes); !s.ok()) return s;
  return base_ + area + offset;
}

absl::StatusOr<std::shared_ptr<MappedRegion>> SharedRegionCache::Get(
    const wire::SharedRef& ref) {
  const Key key{ref.pid, ref.fd, ref.key};
  {
    absl::MutexLock l(&mu_);
    if (absl::Now() - last_check_ >= recheck_every_) DropReleased();
    auto it = regions_.find(key);
    if (it != regions_.end()) return it->second.first;
  }
  // Opened outside the lock: two requests may both open one; one is kept.
  absl::StatusOr<std::shared_ptr<MappedRegion>> m = MappedRegion::Open(ref);
  if (!m.ok()) return m.status();
  absl::MutexLock l(&mu_);
  auto present = regions_.find(key);  // Opened meanwhile by another request.
  if (present != regions_.end()) return present->second.first;
  DropReleased();
  while (static_cast<int>(regions_.size()) >= max_ && !regions_.empty()) {
    auto oldest = regions_.begin();
    for (auto it = regions_.begin(); it != regions_.end(); ++it) {
      if (it->second.second < oldest->second.second) oldest = it;
    }
    regions_.erase(oldest);
  }
  return regions_.emplace(key, std::make_pair(*m, ++clock_)).first->second.first;
}

void SharedRegionCache::DropReleased() {
  last_check_ = absl::Now();
  for (auto it = regions_.begin(); it != regions_.end();) {
    wire::SharedRef held;
    held.pid = std::get<0>(it->first);
    held.fd = std::get<1>(it->first);
    it = it->second.first->StillHeld(held) ? std::next(it) : regions_.erase(it);
  }
}

bool IsLoopbackPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]:") ||
         absl::StartsWith(peer, "ipv6:[::ffff:127.") ||
         absl::StartsWith(peer, "unix:");
}

}  // namespace downpour
