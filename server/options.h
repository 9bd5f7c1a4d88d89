// ServerOptions: what linserve's command-line flags configure, read and range-checked in one
// place (options.cc defines the flags; `linserve --help` lists them). main.cc wires the
// server from it.
#ifndef LINSERVE_SERVER_OPTIONS_H_
#define LINSERVE_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/backend/backend_factory.h"
#include "server/engine/engine.h"
#include "server/engine/scheduler.h"
#include "server/transport/auth.h"
#include "server/transport/grpc_server.h"
#include "spdlog/spdlog.h"

namespace linserve {

struct ServerOptions {
  spdlog::level::level_enum log_level = spdlog::level::info;
  // The model directory (--model).
  std::string model_dir;
  DeviceSelection device;
  BackendOptions backend;
  // Its scheduler's prefill budgets are the flags' until ApplySchedulerFlags gives those left
  // at "the device's default" the device's values.
  EngineOptions engine;
  // The interface every server listens on (--host).
  std::string host;
  GrpcServerOptions grpc;
  AuthOptions auth;
  // The metrics and probes server's port; -1: off.
  int32_t metrics_port = -1;
  // The OpenAI API's port; -1: off.
  int32_t http_port = -1;
  int32_t http_max_connections = 1024;
  absl::Duration http_request_deadline = absl::Seconds(30);
  // The model's id in the HTTP API; "": the model directory's name.
  std::string served_model_name;
  // "": none.
  std::string port_file;
  absl::Duration drain_deadline = absl::Seconds(30);
};

// Reads every flag. INVALID_ARGUMENT naming the flag at fault (and reading the token files:
// their errors name them too).
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// The prefill flags left at their "device's default" values take `device`'s (SchedulerDefaults).
absl::Status ApplySchedulerFlags(DeviceKind device, SchedulerLimits& limits);

// Whether `path` (a source file's, as absl reports it) defines linserve's flags: `--help`
// lists those.
bool DefinesServerFlags(absl::string_view path);

}  // namespace linserve

#endif  // LINSERVE_SERVER_OPTIONS_H_
