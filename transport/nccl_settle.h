// Waiting out ncclInProgress, for communicators created non-blocking
// (ncclConfig_t::blocking = 0). Plain C++ over nccl.h's types: the unit
// tests run it without a GPU.
#pragma once

#include <nccl.h>

#include <thread>

namespace spccl {

// A non-blocking communicator may answer a call with ncclInProgress before
// the operation is on its stream (and a communicator still initialising
// answers every call so). What spccl does next depends on it being there: a
// kernel on the same stream reads what it received, a copy of the exchanged
// call records is followed by a stream synchronisation. So, as NCCL asks of
// its callers, spccl polls the communicator's state
// (ncclCommGetAsyncError, which `query` calls) until it is no longer in
// progress, and returns the final result: ncclSuccess, or the error that
// ended the operation (an ncclCommAbort from another thread included). A
// blocking communicator never answers ncclInProgress: `query` is not
// called. Calls inside an NCCL group are not settled one by one (NCCL runs
// them at ncclGroupEnd, which is).
template <typename Query>
ncclResult_t settleNcclResult(ncclResult_t result, Query&& query) {
  while (result == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t asked = query(&state);
    if (asked != ncclSuccess) return asked;
    result = state;
    if (result == ncclInProgress) std::this_thread::yield();
  }
  return result;
}

}  // namespace spccl
