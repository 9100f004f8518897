// Logging to stderr, NCCL-style prefix "host:pid:tid [rank] SPCCL LEVEL ...".
// Never stdout: the library must not mix with the application's output.
#pragma once

#include "kernels/core/status.h"

namespace spccl {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

void setLogLevel(LogLevel level);
LogLevel logLevel();
void logMessage(LogLevel level, int rank, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// This thread's last failure, for spcclGetLastError().
void setLastError(const Status& status);
const char* lastError();

}  // namespace spccl

#define SPCCL_LOG(level, rank, ...)                                       \
  do {                                                                    \
    if (static_cast<int>(::spccl::logLevel()) >= static_cast<int>(level)) \
      ::spccl::logMessage(level, rank, __VA_ARGS__);                      \
  } while (0)
#define SPCCL_WARN(rank, ...) SPCCL_LOG(::spccl::LogLevel::kWarn, rank, __VA_ARGS__)
#define SPCCL_INFO(rank, ...) SPCCL_LOG(::spccl::LogLevel::kInfo, rank, __VA_ARGS__)
#define SPCCL_TRACE(rank, ...) SPCCL_LOG(::spccl::LogLevel::kTrace, rank, __VA_ARGS__)
