// Link check of libspccl_nccl.so, runnable without a GPU: it loads (every
// pnccl* and spccl symbol it needs resolves, RTLD_NOW), defines each NCCL
// function it must interpose, and leaves every other NCCL function to the
// real libnccl.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s path/to/libspccl_nccl.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  int failures = 0;
  auto owner = [](void* sym) -> const char* {
    Dl_info info{};
    return sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "(none)";
  };
  const char* mine[] = {"ncclAllReduce", "ncclAllGather",    "ncclAlltoAll",    "ncclGroupStart",
                        "ncclGroupEnd",  "ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort"};
  for (const char* name : mine) {
    void* sym = dlsym(lib, name);
    const char* where = owner(sym);
    const bool ok = sym != nullptr && std::strstr(where, "libspccl_nccl") != nullptr;
    std::printf("%-18s %s (%s)\n", name, ok ? "interposed" : "MISSING", where);
    failures += !ok;
  }
  // Left to NCCL: resolved through the library's dependencies, defined in libnccl.
  const char* theirs[] = {"ncclSend",         "ncclRecv",        "ncclBroadcast", "ncclReduceScatter",
                          "ncclCommInitRank", "ncclGetUniqueId", "ncclCommCount"};
  for (const char* name : theirs) {
    void* sym = dlsym(lib, name);
    const char* where = owner(sym);
    const bool ok = sym != nullptr && std::strstr(where, "libnccl") != nullptr;
    std::printf("%-18s %s (%s)\n", name, ok ? "left to NCCL" : "WRONG", where);
    failures += !ok;
  }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
