#include "src/log.h"

#include <mpi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace spccl {

namespace {
std::atomic<int> gLevel{static_cast<int>(LogLevel::kWarn)};
thread_local std::string tLastError;

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    default:
      return "";
  }
}
}  // namespace

Status mpiFailure(int err, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", err);
  return {spcclSystemError, formatString("%s failed at %s:%d: %s", call, file, line, text)};
}

void setLogLevel(LogLevel level) { gLevel.store(static_cast<int>(level)); }
LogLevel logLevel() { return static_cast<LogLevel>(gLevel.load(std::memory_order_relaxed)); }

void logMessage(LogLevel level, int rank, const char* fmt, ...) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  va_list ap;
  va_start(ap, fmt);
  char body[2048];
  std::vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  // One fprintf per line so lines of concurrent ranks do not interleave mid-line.
  std::fprintf(stderr, "%s:%d:%ld [%d] SPCCL %s %s\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), body);
}

void setLastError(const Status& status) { tLastError = status.message(); }
const char* lastError() { return tLastError.c_str(); }

}  // namespace spccl
