// Wire format: one self-describing stream per (sender, receiver, stage).
//
//   [StreamHeader, 56 bytes][indices: nnz x uint32][values: nnz x wire type][pad to 8]
//   dense kind: [StreamHeader][values: (rangeEnd-rangeBegin) x wire type][pad to 8]
//   error kind: [StreamHeader] only; `status` holds the sender's spcclResult_t
//
// Indices are global positions in the dense buffer, strictly increasing and
// inside [rangeBegin, rangeEnd). Every field of a received stream is checked
// before use: a peer's stream is untrusted input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/core/elementwise.h"
#include "src/status.h"

namespace spccl {

constexpr uint32_t kStreamMagic = 0x4c435053u;  // "SPCL" little-endian
constexpr uint16_t kStreamVersion = 1;

enum class IndexEncoding : uint8_t { kCoo32 = 1 };
enum class StreamKind : uint8_t { kPairs = 1, kDense = 2, kError = 3 };

struct StreamHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t indexEncoding;  // IndexEncoding
  uint8_t valueType;      // core::ValueType
  uint8_t kind;           // StreamKind
  uint8_t algorithm;      // SPCCL_ALGO_* of the call
  uint8_t status;         // kError: the sender's spcclResult_t
  uint8_t reserved0;
  uint32_t reserved1;
  uint64_t denseCount;  // elements of the whole buffer
  uint64_t rangeBegin;  // this stream covers [rangeBegin, rangeEnd)
  uint64_t rangeEnd;
  uint64_t nnz;  // pairs (kPairs) or 0
  uint64_t seq;  // the communicator's call sequence number
};
static_assert(sizeof(StreamHeader) == 56, "wire header must stay 56 bytes");

constexpr size_t alignStream(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

size_t pairsStreamBytes(uint64_t nnz, core::ValueType vt);
size_t denseStreamBytes(uint64_t len, core::ValueType vt);
constexpr size_t kErrorStreamBytes = sizeof(StreamHeader);

// Exchanged (allgather) at the start of every compressed call: every rank
// sees every rank's descriptor, so all ranks agree on whether the call is
// consistent, and on each rank's stream size, before any stream moves.
struct CallDescriptor {
  uint32_t magic;
  uint8_t algorithm;  // SPCCL_ALGO_* actually taken
  uint8_t valueType;  // wire value type
  uint8_t dataType;   // user spcclDataType_t
  uint8_t op;         // spcclRedOp_t
  uint64_t seq;
  uint64_t count;
  uint64_t nnz;
};
static_assert(sizeof(CallDescriptor) == 32, "call descriptor must stay 32 bytes");

// Checks every rank's descriptor against this rank's. The result is the same
// on every rank (all see the same descriptors): a mismatch is
// spcclInvalidUsage naming the first disagreeing rank and field.
Status checkDescriptors(const CallDescriptor* all, int ranks, const CallDescriptor& mine);

// What the receiver expects of a stream; anything else is rejected.
struct StreamExpect {
  uint64_t denseCount;
  uint64_t rangeBegin;
  uint64_t rangeEnd;
  uint64_t seq;
  uint8_t algorithm;
  core::ValueType valueType;
  bool allowDense;  // owner-stage streams may be dense
};

struct StreamInfo {
  uint64_t denseCount, rangeBegin, rangeEnd, nnz, seq;
  uint8_t algorithm;
  core::ValueType valueType;
  StreamKind kind;
};

// Writes a pairs stream: header, indices, values (converted to the wire type).
// `dst` must hold pairsStreamBytes(nnz, vt). Returns bytes written.
size_t encodePairs(void* dst, const StreamInfo& info, const uint32_t* indices, const void* wireValues);
// Writes a dense stream of fp32 values converted to the wire type; `decoded`
// (optional) receives what receivers will decode. Returns bytes written.
size_t encodeDense(void* dst, const StreamInfo& info, const float* values, float* decoded);
size_t encodeError(void* dst, const StreamInfo& info, spcclResult_t code);

// A validated view of a received stream.
struct StreamView {
  StreamKind kind;
  uint64_t nnz;
  const uint32_t* indices;  // kPairs
  const void* values;       // kPairs and kDense
  core::ValueType valueType;
  uint64_t rangeBegin, rangeEnd;
  spcclResult_t peerStatus;  // kError
};

// Validates everything: size, magic, version, encodings, counts, range, seq,
// index order and bounds. `peer` names the sender in messages.
Status parseStream(const void* data, size_t bytes, const StreamExpect& expect, int peer, StreamView* out);

// acc[i - accBase] += value for every entry of a validated stream.
void accumulateStream(const StreamView& view, float* acc, uint64_t accBase);

}  // namespace spccl
