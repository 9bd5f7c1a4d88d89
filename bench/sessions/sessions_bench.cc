// linserve-sessions-bench: the session tiers' costs without a server, for bench/sessions/run.sh.
//
//   --mode=make_state_dir: writes --sessions records of the model into --dir as a server's
//     state_dir holds them, to time a server's restore and measure its memory with that many
//     idle sessions. Every record is a session that never ran (zero state): the file is a
//     valid record of full size but sparse on disk (the state is a hole), so a million of them
//     fit on a test machine. A restore reads only each file's header, whatever its state.
//   --mode=tiers: drives a SessionStore over the model's CPU backend (one state slot) and a
//     SessionPersister in --dir through swaps (a session taking the slot from an idle one) from
//     each tier, and prints one JSON object of per-swap latencies (median and p90, µs):
//       host:      the idle one hibernates to host memory, the other comes back from it;
//       disk_warm: the idle one leaves memory for disk (budget 0), the other is read back from
//                  its file in the page cache;
//       disk_cold: the same with the file evicted from the page cache first
//                  (posix_fadvise DONTNEED), so it is read from the device.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "model/backend/backend_factory.h"
#include "model/model.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/session_record.h"
#include "server/sessions/session_store.h"

ABSL_FLAG(std::string, model, "", "Model directory.");
ABSL_FLAG(std::string, mode, "tiers", "make_state_dir or tiers.");
ABSL_FLAG(std::string, dir, "", "The state_dir to write (make_state_dir) or use (tiers).");
ABSL_FLAG(int64_t, sessions, 10000, "make_state_dir: records to write.");
ABSL_FLAG(int32_t, swaps, 200, "tiers: swaps measured per tier.");
ABSL_FLAG(int32_t, prompt_tokens, 64, "tiers: tokens fed to each session before measuring.");

namespace linserve {
namespace {

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "linserve-sessions-bench: %s\n", status.ToString().c_str());
  std::exit(1);
}

// Writes `bytes` to `path`, skipping 4 KiB blocks of zeros (holes read back as zeros).
absl::Status WriteSparse(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": open failed"));
  constexpr size_t kBlock = 4096;
  const std::string zeros(kBlock, '\0');
  for (size_t at = 0; at < bytes.size(); at += kBlock) {
    const size_t n = std::min(kBlock, bytes.size() - at);
    if (n == kBlock && bytes.compare(at, n, zeros) == 0) continue;
    if (::pwrite(fd, bytes.data() + at, n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": write failed"));
    }
  }
  const bool ok = ::ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  ::close(fd);
  return ok ? absl::OkStatus() : absl::InternalError(absl::StrCat(path, ": truncate failed"));
}

void MakeStateDir(const Model& model, const std::string& dir, int64_t sessions) {
  if (absl::Status s = DefaultFileSystem().CreateDirectories(dir); !s.ok()) Die(s);
  // One record serves every file: the id is the file's name, and the times are the same.
  SessionRecord record;
  record.snapshot.create_time = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()));
  record.last_use_time = record.snapshot.create_time;
  record.snapshot.state.state.assign(model.config.StateFloatsPerSlot(), 0.0f);
  const std::string bytes = EncodeSessionRecord(record, model.fingerprint);
  for (int64_t i = 0; i < sessions; ++i) {
    absl::StatusOr<SessionId> id = NewSessionId();
    if (!id.ok()) Die(id.status());
    if (absl::Status s = WriteSparse(absl::StrCat(dir, "/", id->value, ".session"), bytes);
        !s.ok()) {
      Die(s);
    }
  }
  std::printf("{\"sessions\": %lld, \"record_bytes\": %zu}\n", static_cast<long long>(sessions),
              bytes.size());
}

void EvictFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Percentiles {
  double median = 0;
  double p90 = 0;
};

Percentiles Summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

// Swaps two sessions through one slot `swaps` times; returns the µs of each swap (Find, which
// reads a session on disk back, plus MakeResident, which hibernates the other one).
std::vector<double> Swaps(const Model& model, const std::string& dir, int64_t host_mib, bool cold,
                          int32_t swaps, int32_t prompt_tokens) {
  BackendOptions backend_options;
  backend_options.max_slots = 1;
  backend_options.num_threads = 1;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(model, backend_options, DeviceSelection::kCpu);
  if (!backend.ok()) Die(backend.status());
  absl::StatusOr<std::unique_ptr<SessionPersister>> persister = SessionPersister::Open(
      {.dir = dir}, model.config, model.fingerprint, /*max_pending_tokens=*/65536);
  if (!persister.ok()) Die(persister.status());
  SessionStore store(**backend,
                     {.max_sessions = 16,
                      .idle_timeout = absl::InfiniteDuration(),
                      .host_state_memory_mib = host_mib},
                     persister->get());
  std::vector<TokenId> prompt(static_cast<size_t>(prompt_tokens));
  for (int32_t i = 0; i < prompt_tokens; ++i) prompt[i] = 3 + i % 100;
  SessionId ids[2];
  absl::Time now = absl::Now();
  for (SessionId& id : ids) {
    absl::StatusOr<Session*> s = store.Create(now);
    if (!s.ok()) Die(s.status());
    if (absl::Status st = store.MakeResident(**s, now); !st.ok()) Die(st);
    if (absl::Status st = (*backend)->Prefill(*(*s)->slot, prompt, {}); !st.ok()) Die(st);
    (*s)->history.Append(prompt);
    store.Release(**s, now);
    id = (*s)->id;
  }
  if (absl::Status s = (*persister)->Flush(); !s.ok()) Die(s);
  std::vector<double> us;
  for (int32_t i = 0; i < swaps; ++i) {
    const SessionId& id = ids[i % 2];
    if (cold) EvictFromPageCache(absl::StrCat(dir, "/", id.value, ".session"));
    now += absl::Milliseconds(1);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Session*> s = store.Find(id);
    if (!s.ok()) Die(s.status());
    if (absl::Status st = store.MakeResident(**s, now); !st.ok()) Die(st);
    const auto end = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    store.Release(**s, now);
    // The write behind of the release is on disk before the next swap, so that a read from
    // the disk tier reads the file, not the record still queued for writing.
    if (absl::Status st = (*persister)->Flush(); !st.ok()) Die(st);
  }
  if (absl::Status s = (*persister)->Flush(); !s.ok()) Die(s);
  return us;
}

void Tiers(const Model& model, const std::string& dir, int32_t swaps, int32_t prompt_tokens) {
  const Percentiles host =
      Summarise(Swaps(model, dir + "/host", 4096, false, swaps, prompt_tokens));
  const Percentiles warm = Summarise(Swaps(model, dir + "/warm", 0, false, swaps, prompt_tokens));
  const Percentiles cold = Summarise(Swaps(model, dir + "/cold", 0, true, swaps, prompt_tokens));
  std::printf(
      "{\"state_bytes\": %lld, \"swaps\": %d, \"host_us\": [%.1f, %.1f], "
      "\"disk_warm_us\": [%.1f, %.1f], \"disk_cold_us\": [%.1f, %.1f]}\n",
      static_cast<long long>(model.config.StateFloatsPerSlot() * 4), swaps, host.median, host.p90,
      warm.median, warm.p90, cold.median, cold.p90);
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::unique_ptr<linserve::Model>> model =
      linserve::LoadModel(absl::GetFlag(FLAGS_model));
  if (!model.ok()) linserve::Die(model.status());
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) linserve::Die(absl::InvalidArgumentError("--dir is required"));
  if (absl::GetFlag(FLAGS_mode) == "make_state_dir") {
    linserve::MakeStateDir(**model, dir, absl::GetFlag(FLAGS_sessions));
  } else if (absl::GetFlag(FLAGS_mode) == "tiers") {
    linserve::Tiers(**model, dir, absl::GetFlag(FLAGS_swaps), absl::GetFlag(FLAGS_prompt_tokens));
  } else {
    linserve::Die(absl::InvalidArgumentError("--mode: make_state_dir or tiers"));
  }
  return 0;
}
