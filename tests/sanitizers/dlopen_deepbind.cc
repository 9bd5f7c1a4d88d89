// RTLD_DEEPBIND under the sanitizers.
//
// model/tokenizer/sentencepiece_model.cc opens the SentencePiece plugin with RTLD_DEEPBIND, so that Debian's
// libsentencepiece binds to the protobuf-lite 3.14 it carries instead of gRPC's libprotobuf 3.21
// (model/tokenizer/sentencepiece_model.h). The sanitizer runtimes refuse RTLD_DEEPBIND and kill the process
// (https://github.com/google/sanitizers/issues/611): a deep-bound library would call libc's malloc
// and libstdc++'s operator new instead of theirs. Linked into every executable of a
// LINSERVE_SANITIZE build, this dlopen drops RTLD_DEEPBIND where it is not needed, in a process
// without libprotobuf (every test but those that serve a SentencePiece model over gRPC); where
// libprotobuf is loaded it fails the dlopen, with a dlerror() that says why, and the caller reports
// that the plugin cannot be opened. scripts/test.sh leaves those tests out of the sanitizer jobs.
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using DlopenFn = void* (*)(const char*, int);

int IsProtobuf(dl_phdr_info* info, size_t, void*) {
  return info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "/libprotobuf") != nullptr;
}

bool ProtobufLoaded() { return dl_iterate_phdr(IsProtobuf, nullptr) != 0; }

}  // namespace

extern "C" void* dlopen(const char* file, int mode) {
  static const DlopenFn real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  if (real == nullptr) std::abort();
  if ((mode & RTLD_DEEPBIND) != 0) {
    if (ProtobufLoaded()) {
      // A failed dlopen of a path that names the reason leaves dlerror() set for the caller.
      std::string reason = "/(sanitizer build: RTLD_DEEPBIND with libprotobuf loaded)/";
      reason += file != nullptr ? file : "";
      return real(reason.c_str(), RTLD_NOW);
    }
    mode &= ~RTLD_DEEPBIND;
  }
  return real(file, mode);
}
