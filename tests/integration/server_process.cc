#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace linserve {

ServerProcess::ServerProcess(const std::vector<std::string>& args, const std::string& log,
                             const std::string& port_file)
    : log_(log), port_file_(port_file) {
  // A crashed server's file may remain (the new one replaces it once bound): a reader that
  // starts before the new process would read the stale ports.
  if (!port_file.empty()) std::remove(port_file.c_str());
  std::string binary = LINSERVE_SERVER_BINARY;
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  argv.push_back(binary.data());
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // The child starts with no signals blocked, whatever this process's threads block.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  spawned_ = posix_spawn(&pid_, binary.c_str(), &actions, &attributes, argv.data(), environ) == 0;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
}

ServerProcess::~ServerProcess() {
  if (spawned_ && !exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool ServerProcess::WaitForPorts(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    std::ifstream in(port_file_);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> kv = absl::StrSplit(line, '=');
      int value = 0;
      if (kv.size() == 2 && absl::SimpleAtoi(kv[1], &value)) {
        if (kv[0] == "grpc_port") grpc_port_ = value;
        if (kv[0] == "metrics_port") metrics_port_ = value;
      }
    }
    if (grpc_port_ > 0) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      exited_ = true;
      return false;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

int ServerProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return -1;
}

void ServerProcess::Signal(int signal) { kill(pid_, signal); }

std::string ServerProcess::Log() const {
  std::ifstream in(log_);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::unique_ptr<Client> ServerProcess::Connect(ClientOptions options) const {
  options.target = absl::StrCat("127.0.0.1:", grpc_port_);
  return *Client::Create(options);
}

}  // namespace linserve
