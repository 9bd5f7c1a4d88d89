// Opens liblinserve_sentencepiece.so once per process; see sentencepiece_model.h for why
// SentencePiece lives in a plugin. The plugin is looked for next to the installed programs
// (<dir of the executable>/../lib/linserve/) and then in the build tree it was built in.
#include "model/tokenizer/sentencepiece_model.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <system_error>

namespace linserve {
namespace {

constexpr char kPluginFile[] = "liblinserve_sentencepiece.so";

struct Plugin {
  LoadSentencePieceModelFn load = nullptr;
  std::string error;
};

std::vector<std::filesystem::path> PluginCandidates() {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / ".." / "lib" / "linserve" / kPluginFile);
  candidates.push_back(std::filesystem::path(LINSERVE_PLUGIN_DIR) / kPluginFile);
  return candidates;
}

Plugin OpenPlugin() {
  Plugin plugin;
  plugin.error = "cannot open the SentencePiece plugin:";
  for (const std::filesystem::path& candidate : PluginCandidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(candidate, ec)) {
      plugin.error.append(" ").append(candidate.string()).append(" (absent);");
      continue;
    }
    // The handle stays open for the life of the process: models loaded through it may be too.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      plugin.error.append(" ").append(dlerror()).append(";");
      continue;
    }
    void* symbol = dlsym(handle, kLoadSentencePieceModelSymbol);
    if (symbol == nullptr) {
      plugin.error.append(" ").append(candidate.string()).append(" lacks ");
      plugin.error.append(kLoadSentencePieceModelSymbol).append(";");
      continue;
    }
    plugin.load = reinterpret_cast<LoadSentencePieceModelFn>(symbol);
    plugin.error.clear();
    return plugin;
  }
  return plugin;
}

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string& error) {
  static const Plugin plugin = OpenPlugin();
  if (plugin.load == nullptr) {
    error = plugin.error;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(plugin.load(path.c_str(), &error));
}

}  // namespace linserve
