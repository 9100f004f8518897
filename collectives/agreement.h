// Call agreement: before any stream moves, every rank allgathers its call
// descriptor (codec/codec.h CallDescriptor) and checks all of them, so a
// mismatched call fails on every rank with the same message instead of
// reaching the transport with shapes that differ. Also the two helpers every
// algorithm uses to size what peers announced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"
#include "kernels/core/executor.h"
#include "kernels/core/status.h"
#include "transport/transport.h"

namespace spccl {

struct CollectiveContext;  // collectives/context.h

// Checks every rank's descriptor against this rank's. The result is the same
// on every rank (all see the same descriptors): a mismatch is
// spcclInvalidUsage naming the first disagreeing rank and field.
// For other collectives (op & kOtherCollective) nnz must match too.
Status checkDescriptors(const CallDescriptor* all, int ranks, const CallDescriptor& mine);

// Allgathers the descriptors into comm.descriptors and checks them
// (checkDescriptors): the verdict is the same on every rank, so a mismatched
// call fails everywhere before any stream moves. The descriptors travel
// through the communicator's executor memory (an NCCL transport moves only
// device memory); t is comm's transport, or a wrapper of it.
Status agreeOnCall(CollectiveContext& comm, Transport& t, const CallDescriptor& mine);

// Offsets of streams laid end to end in one buffer; returns the total bytes.
size_t layoutStreams(const std::vector<size_t>& sizes, std::vector<size_t>* offsets);

// A stream size a peer announced. Plausible (<= most, a multiple of 8): used
// as is. Otherwise this rank expects 0 bytes from that peer (MPI reports the
// truncation) and *local records the error: the rank still takes part in
// every remaining exchange of the call, so no honest rank is left waiting.
size_t announcedSize(uint64_t announced, size_t most, int peer, const char* what, Status* local);

}  // namespace spccl
