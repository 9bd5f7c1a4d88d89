// The factories of linserve-cli's commands (one file each).
#ifndef LINSERVE_CLIENT_CLI_COMMANDS_H_
#define LINSERVE_CLIENT_CLI_COMMANDS_H_

#include <memory>

#include "client/cli/command.h"

namespace linserve::cli {

std::unique_ptr<Command> NewGenerateCommand();
std::unique_ptr<Command> NewChatCommand();
std::unique_ptr<Command> NewSessionsCommand();
std::unique_ptr<Command> NewModelCommand();
std::unique_ptr<Command> NewHealthCommand();
std::unique_ptr<Command> NewTokenizeCommand();
std::unique_ptr<Command> NewDetokenizeCommand();

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_COMMANDS_H_
