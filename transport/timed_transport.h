// A Transport that forwards to another and adds the wall time spent inside
// each call to a counter: SPCCL_PROFILE's "communication" time (bytes on the
// wire plus waiting for the other ranks).
#pragma once

#include <chrono>

#include "transport/transport.h"

namespace spccl {

// Reads the clock only when on (SPCCL_PROFILE, or an auto trial call): off,
// a timed step costs a branch, no clock read.
class Stopwatch {
 public:
  explicit Stopwatch(bool on) : on_(on), start_(on ? Clock::now() : Clock::time_point{}) {}
  // Seconds since construction; 0 when off.
  double seconds() const { return on_ ? std::chrono::duration<double>(Clock::now() - start_).count() : 0.0; }

 private:
  using Clock = std::chrono::steady_clock;
  bool on_;
  Clock::time_point start_;
};

class TimedTransport final : public Transport {
 public:
  TimedTransport(Transport& inner, double* seconds) : inner_(inner), seconds_(seconds) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                        spcclRedOp_t op) override {
    return timed([&] { return inner_.allReduceDense(sendbuff, recvbuff, count, type, op); });
  }
  Status allGather(const void* send, size_t bytes, void* recv) override {
    return timed([&] { return inner_.allGather(send, bytes, recv); });
  }
  Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                    const size_t* recvOffsets) override {
    return timed([&] { return inner_.allGatherV(send, sendBytes, recv, recvBytes, recvOffsets); });
  }
  Status allToAll(const void* send, size_t bytes, void* recv) override {
    return timed([&] { return inner_.allToAll(send, bytes, recv); });
  }
  Status allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                   const size_t* recvBytes, const size_t* recvOffsets) override {
    return timed([&] { return inner_.allToAllV(send, sendBytes, sendOffsets, recv, recvBytes, recvOffsets); });
  }

 private:
  template <typename F>
  Status timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = f();
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }
  Transport& inner_;
  double* seconds_;
};

}  // namespace spccl
