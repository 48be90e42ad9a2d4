#include "server/shard_snapshot.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

using nlohmann::json;
constexpr char kMetaKey[] = "downpour_snapshot";

// FNV-1a over 8-byte words (and the tail bytes), to catch a corrupt file.
uint64_t Checksum(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kChecksumSeed = 1469598103934665603ull;

std::string Prefix(int32_t shard, int32_t num_shards) {
  return absl::StrCat("shard-", shard, "-of-", num_shards, "-");
}

json LayoutJson(const ModelLayout& l) {
  json tensors = json::array();
  for (const TensorSpec& t : l.tensors) {
    tensors.push_back({{"name", t.name}, {"shape", t.shape}});
  }
  json j = {{"tensors", tensors},
            {"num_shards", l.num_shards},
            {"max_chunk_bytes", l.max_chunk_bytes},
            {"spread_min_bytes", l.spread_min_bytes}};
  if (!l.pinned_blocks.empty()) j["pinned_blocks"] = l.pinned_blocks;
  return j;
}

ModelLayout LayoutFromJson(const json& j) {
  ModelLayout l;
  for (const json& t : j.at("tensors")) {
    l.tensors.push_back({t.at("name").get<std::string>(),
                         t.at("shape").get<std::vector<int64_t>>()});
  }
  l.num_shards = j.at("num_shards").get<int32_t>();
  l.max_chunk_bytes = j.at("max_chunk_bytes").get<int64_t>();
  l.spread_min_bytes = j.at("spread_min_bytes").get<int64_t>();
  if (j.contains("pinned_blocks")) {
    l.pinned_blocks = j.at("pinned_blocks").get<std::vector<int32_t>>();
  }
  return l;
}

// A part bitmap as hex digits, four parts a digit (part 4i + j is bit j of
// digit i): the table's rows cost W x chunks / 4 bytes in the header.
std::string PartsHex(const std::vector<bool>& parts) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out((parts.size() + 3) / 4, '0');
  for (size_t i = 0; i < out.size(); ++i) {
    int nibble = 0;
    for (size_t j = 0; j < 4 && 4 * i + j < parts.size(); ++j) {
      nibble |= parts[4 * i + j] ? 1 << j : 0;
    }
    out[i] = kHex[nibble];
  }
  return out;
}

// The bitmap of `n` parts from PartsHex's digits; throws (a corrupt file)
// when they do not match.
std::vector<bool> PartsFromHex(const std::string& hex, int64_t n) {
  if (n < 0 || static_cast<int64_t>(hex.size()) != (n + 3) / 4) {
    throw std::runtime_error("dedup parts do not match num_parts");
  }
  std::vector<bool> parts(static_cast<size_t>(n));
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = hex[i];
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      throw std::runtime_error("dedup parts are not hex digits");
    }
    for (size_t j = 0; j < 4; ++j) {
      const size_t k = 4 * i + j;
      if (k < parts.size()) {
        parts[k] = (v >> j) & 1;
      } else if ((v >> j) & 1) {
        throw std::runtime_error("dedup parts set beyond num_parts");
      }
    }
  }
  return parts;
}

json DedupJson(const std::vector<DedupEntry>& entries) {
  json out = json::array();
  for (const DedupEntry& e : entries) {
    out.push_back({{"worker", e.worker_id},
                   {"incarnation", std::to_string(e.incarnation)},
                   {"seq", e.seq},
                   {"num_parts", e.num_parts},
                   {"parts_hex", PartsHex(e.parts)},
                   {"retired", e.retired}});
  }
  return out;
}

std::vector<DedupEntry> DedupFromJson(const json& j) {
  std::vector<DedupEntry> out;
  for (const json& r : j) {
    DedupEntry e;
    e.worker_id = r.at("worker").get<int32_t>();
    e.incarnation = std::stoull(r.at("incarnation").get<std::string>());
    e.seq = r.at("seq").get<int64_t>();
    e.num_parts = r.at("num_parts").get<int32_t>();
    if (r.contains("parts")) {  // The list form older files hold.
      e.parts = r.at("parts").get<std::vector<bool>>();
    } else {
      const std::string hex = r.at("parts_hex").get<std::string>();
      // An entry with no seq yet has no bitmap.
      e.parts = PartsFromHex(hex, hex.empty() ? 0 : e.num_parts);
    }
    e.retired = r.at("retired").get<std::vector<uint64_t>>();
    out.push_back(std::move(e));
  }
  return out;
}

// One tensor of the file: its name and float data.
struct Blob {
  std::string name;
  const float* data;
  int64_t n;
};

std::vector<Blob> Blobs(const ShardSnapshot& s) {
  std::vector<Blob> blobs;
  for (const ChunkSnapshot& c : s.chunks) {
    blobs.push_back({absl::StrCat("chunk.", c.chunk_id, ".values"),
                     c.values->data(), static_cast<int64_t>(c.values->size())});
    if (!c.opt_state.empty()) {
      blobs.push_back({absl::StrCat("chunk.", c.chunk_id, ".opt"),
                       c.opt_state.data(),
                       static_cast<int64_t>(c.opt_state.size())});
    }
  }
  return blobs;
}

std::string HeaderBytes(const ShardSnapshot& s, const std::vector<Blob>& blobs) {
  uint64_t sum = kChecksumSeed;
  json header = json::object();
  int64_t offset = 0;
  for (const Blob& b : blobs) {
    const int64_t bytes = b.n * 4;
    header[b.name] = {{"dtype", "F32"},
                      {"shape", {b.n}},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sum = Checksum(sum, b.data, static_cast<size_t>(bytes));
  }
  json versions = json::array();
  for (const ChunkSnapshot& c : s.chunks) versions.push_back({c.chunk_id, c.version});
  json meta = {{"layout", LayoutJson(s.layout)},
               {"shard_index", s.shard_index},
               {"num_shards", s.num_shards},
               {"optimizer", s.optimizer},
               {"mode", s.mode},
               {"step", s.step},
               {"created_unix_ms", s.created_unix_ms},
               {"versions", versions},
               {"dedup", DedupJson(s.dedup)},
               {"clocks", s.clocks},
               {"checksum", std::to_string(sum)}};
  header["__metadata__"] = {{kMetaKey, meta.dump()}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(len >> (8 * i));
  return out + text;
}

// Appends all of `data` to `out`, counting towards the debug crash.
absl::Status WriteAll(AtomicFileWriter* out, const char* data, int64_t n,
                      int64_t* written, const SnapshotWriteOptions& o) {
  while (n > 0) {
    int64_t step = std::min<int64_t>(n, 1 << 20);
    if (o.debug_crash_after_bytes >= 0) {
      step = std::min(step, std::max<int64_t>(
                                1, o.debug_crash_after_bytes - *written));
    }
    DP_RETURN_IF_ERROR(
        out->Append(absl::string_view(data, static_cast<size_t>(step))));
    data += step;
    n -= step;
    *written += step;
    if (o.debug_crash_after_bytes >= 0 && *written >= o.debug_crash_after_bytes) {
      std::fprintf(stderr, "ps_server: debug: crashing after %lld snapshot bytes\n",
                   static_cast<long long>(*written));
      ::_exit(86);
    }
  }
  return absl::OkStatus();
}

// Snapshot files of one shard, newest first.
std::vector<std::string> ListSnapshots(const std::string& dir, int32_t shard,
                                       int32_t num_shards) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  const std::string prefix = Prefix(shard, num_shards);
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string kExt = ".safetensors";
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + kExt.size() ||
        name.compare(name.size() - kExt.size(), kExt.size(), kExt) != 0) {
      continue;
    }
    int64_t ms;
    if (!absl::SimpleAtoi(name.substr(prefix.size(), name.size() - prefix.size() -
                                                       kExt.size()),
                          &ms)) {
      continue;
    }
    found.push_back({ms, e.path().string()});
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

}  // namespace

absl::StatusOr<std::string> WriteShardSnapshot(
    const std::string& dir, const ShardSnapshot& s,
    const SnapshotWriteOptions& options) {
  const std::string path =
      absl::StrCat(dir, "/", Prefix(s.shard_index, s.num_shards),
                   s.created_unix_ms, ".safetensors");
  const std::vector<Blob> blobs = Blobs(s);
  const std::string head = HeaderBytes(s, blobs);
  // A file no reader accepts would push the good ones out of the folder.
  const uint64_t max_header =
      std::min(options.max_header_bytes, kMaxSafetensorsHeaderBytes);
  if (head.size() - 8 > max_header) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "snapshot ", path, " not written: its header would be ",
        head.size() - 8, " bytes, above the ", max_header,
        " a reader accepts; the previous snapshots are kept"));
  }
  DP_RETURN_IF_ERROR(CreatePrivateDirectories(dir));
  // Temporary file, fsync, rename, fsync of the folder (common/atomic_file.h).
  absl::Status written_ok = [&]() -> absl::Status {
    DP_ASSIGN_OR_RETURN(AtomicFileWriter out,
                        AtomicFileWriter::Open(path, FileDurability::kFsync));
    int64_t written = 0;
    DP_RETURN_IF_ERROR(WriteAll(&out, head.data(),
                                static_cast<int64_t>(head.size()), &written,
                                options));
    for (const Blob& b : blobs) {
      DP_RETURN_IF_ERROR(WriteAll(&out, reinterpret_cast<const char*>(b.data),
                                  b.n * 4, &written, options));
    }
    return out.Commit();
  }();
  if (!written_ok.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "could not write snapshot: ", written_ok.message()));
  }
  const std::vector<std::string> all =
      ListSnapshots(dir, s.shard_index, s.num_shards);
  for (size_t i = kKeepSnapshots; i < all.size(); ++i) {
    std::remove(all[i].c_str());
  }
  return path;
}

namespace {

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("snapshot ", path, " is corrupt or truncated: ", what));
}

// Fills `s` from the file's metadata and tensors (checksum first).
absl::Status FromFile(const std::string& path, const SafetensorsFile& f,
                      ShardSnapshot* s) {
  auto it = f.metadata.find(kMetaKey);
  if (it == f.metadata.end()) return Corrupt(path, "no downpour_snapshot metadata");
  const json meta = json::parse(it->second);  // throws on malformed JSON
  std::map<std::string, std::pair<int64_t, int64_t>> where;  // offset, n
  uint64_t sum = kChecksumSeed;
  int64_t offset = 0;
  for (const TensorSpec& t : f.tensors) {
    const int64_t n = t.NumElements();
    sum = Checksum(sum, f.flat.data() + offset, static_cast<size_t>(n) * 4);
    where[t.name] = {offset, n};
    offset += n;
  }
  if (std::to_string(sum) != meta.at("checksum").get<std::string>()) {
    return Corrupt(path, "checksum mismatch");
  }
  s->layout = LayoutFromJson(meta.at("layout"));
  s->shard_index = meta.at("shard_index").get<int32_t>();
  s->num_shards = meta.at("num_shards").get<int32_t>();
  s->optimizer = meta.at("optimizer").get<std::string>();
  s->mode = meta.at("mode").get<std::string>();
  s->step = meta.at("step").get<int64_t>();
  s->created_unix_ms = meta.at("created_unix_ms").get<int64_t>();
  s->dedup = DedupFromJson(meta.at("dedup"));
  s->clocks = meta.at("clocks").get<std::vector<int64_t>>();
  for (const json& v : meta.at("versions")) {
    ChunkSnapshot c;
    c.chunk_id = v.at(0).get<int32_t>();
    c.version = v.at(1).get<int64_t>();
    auto values = where.find(absl::StrCat("chunk.", c.chunk_id, ".values"));
    if (values == where.end()) {
      return Corrupt(path, absl::StrCat("no values of chunk ", c.chunk_id));
    }
    const float* base = f.flat.data() + values->second.first;
    c.values = std::make_shared<const std::vector<float>>(
        base, base + values->second.second);
    auto opt = where.find(absl::StrCat("chunk.", c.chunk_id, ".opt"));
    if (opt != where.end()) {
      const float* o = f.flat.data() + opt->second.first;
      c.opt_state.assign(o, o + opt->second.second);
    }
    s->chunks.push_back(std::move(c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSnapshotValues(const ShardSnapshot& s) {
  auto counter_ok = [](int64_t v) { return v >= 0 && v <= kMaxSnapshotCounter; };
  auto finite = [](const float* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) return false;
    }
    return true;
  };
  if (!counter_ok(s.step)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", s.step, " is outside [0, ", kMaxSnapshotCounter, "]"));
  }
  for (const ChunkSnapshot& c : s.chunks) {
    if (!counter_ok(c.version)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id, " has version ", c.version,
          ", outside [0, ", kMaxSnapshotCounter, "]"));
    }
    if ((c.values != nullptr && !finite(c.values->data(), c.values->size())) ||
        !finite(c.opt_state.data(), c.opt_state.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id, " holds a NaN or infinite value"));
    }
  }
  for (int64_t clock : s.clocks) {
    if (!counter_ok(clock)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "clock ", clock, " is outside [0, ", kMaxSnapshotCounter, "]"));
    }
  }
  for (const DedupEntry& e : s.dedup) {
    if (!counter_ok(e.seq)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", e.worker_id, "'s push seq ", e.seq, " is outside [0, ",
          kMaxSnapshotCounter, "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardSnapshot> ReadShardSnapshot(const std::string& path) {
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  if (!f.ok()) {
    if (absl::IsNotFound(f.status())) return f.status();
    return Corrupt(path, std::string(f.status().message()));
  }
  ShardSnapshot s;
  try {
    DP_RETURN_IF_ERROR(FromFile(path, *f, &s));
  } catch (const std::exception& e) {
    return Corrupt(path, absl::StrCat("bad metadata: ", e.what()));
  }
  if (absl::Status v = CheckSnapshotValues(s); !v.ok()) {
    return Corrupt(path, std::string(v.message()));
  }
  return s;
}

absl::StatusOr<LoadedSnapshot> LoadLatestShardSnapshot(const std::string& dir,
                                                       int32_t shard_index,
                                                       int32_t num_shards) {
  LoadedSnapshot out;
  for (const std::string& path : ListSnapshots(dir, shard_index, num_shards)) {
    absl::StatusOr<ShardSnapshot> s = ReadShardSnapshot(path);
    if (s.ok() && (s->shard_index != shard_index || s->num_shards != num_shards)) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "snapshot ", path, " is of shard ", s->shard_index, " of ",
          s->num_shards, ", not ", shard_index, " of ", num_shards));
    }
    if (!s.ok()) {
      out.refused.push_back(std::string(s.status().message()));
      continue;
    }
    out.snapshot = *std::move(s);
    out.path = path;
    return out;
  }
  if (out.refused.empty()) {
    return absl::NotFoundError(absl::StrCat("no snapshot of shard ",
                                            shard_index, " of ", num_shards,
                                            " in ", dir));
  }
  std::string why = absl::StrCat("none of the ", out.refused.size(),
                                 " snapshots of shard ", shard_index, " of ",
                                 num_shards, " in ", dir, " is usable");
  for (const std::string& r : out.refused) absl::StrAppend(&why, "; ", r);
  return absl::DataLossError(why);
}

}  // namespace downpour
