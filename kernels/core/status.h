// Internal result type: a code plus a message. Every internal function that
// can fail returns a Status; the C entry points turn it into an
// spcclResult_t and the thread's last-error message.
#pragma once

#include <string>
#include <utility>

#include "include/spccl.h"

namespace spccl {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(spcclResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool isOk() const { return code_ == spcclSuccess; }
  spcclResult_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // A failure the caller is expected to handle in normal operation (e.g.
  // "output too small, here is the size"): logged at INFO, not WARN.
  bool expected() const { return expected_; }
  Status& markExpected() {
    expected_ = true;
    return *this;
  }

 private:
  spcclResult_t code_ = spcclSuccess;
  std::string message_;
  bool expected_ = false;
};

std::string formatString(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

inline Status invalidArgument(std::string m) { return {spcclInvalidArgument, std::move(m)}; }
inline Status invalidUsage(std::string m) { return {spcclInvalidUsage, std::move(m)}; }
inline Status remoteError(std::string m) { return {spcclRemoteError, std::move(m)}; }
inline Status internalError(std::string m) { return {spcclInternalError, std::move(m)}; }
inline Status systemError(std::string m) { return {spcclSystemError, std::move(m)}; }

// Turns an MPI error code into a Status naming the call and file:line.
Status mpiFailure(int err, const char* call, const char* file, int line);

// spcclGetErrorString's text for a result code (every layer names a peer's
// or its own code with it).
const char* resultString(spcclResult_t result);

}  // namespace spccl

#define SPCCL_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::spccl::Status _spccl_st = (expr);      \
    if (!_spccl_st.isOk()) return _spccl_st; \
  } while (0)

// Every MPI call in the library goes through this: MPI_ERRORS_RETURN is set
// on spccl's communicators, so failures come back here as codes.
#define SPCCL_MPI_CHECK(call)                                                                         \
  do {                                                                                                \
    int _spccl_err = (call);                                                                          \
    if (_spccl_err != MPI_SUCCESS) return ::spccl::mpiFailure(_spccl_err, #call, __FILE__, __LINE__); \
  } while (0)
