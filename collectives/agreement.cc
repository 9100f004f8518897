#include "collectives/agreement.h"

#include <cstring>
#include <string>

#include "collectives/algorithms.h"
#include "collectives/context.h"
#include "include/spccl.h"

namespace spccl {

namespace {

// What call a descriptor opens, in words, for the mismatch message.
std::string describeCall(const CallDescriptor& d) {
  if (d.op & kOtherCollective) {
    const bool exact = d.valueType == kExactValueType;
    switch (static_cast<Collective>(d.op & ~kOtherCollective)) {
      case Collective::kAlltoAllRows:
        return "a compressed alltoall (rows forward)";
      case Collective::kAlltoAllRowsBackward:
        return "an alltoall rows backward";
      case Collective::kAllGather:
        return exact ? "an exact allgather" : "a sparsified allgather";
      case Collective::kRowSparse:
        return "a row-sparse allreduce";
      case Collective::kAlltoAll:
        return "an exact alltoall";
    }
    return formatString("collective %u", static_cast<unsigned>(d.op & ~kOtherCollective));
  }
  if (d.algorithm == kAutoLineUp) return "an auto compressor's trial line-up (SPCCL_AUTO_TRIALS)";
  if (d.algorithm == kAutoSettle) return "an auto compressor settling its trials (SPCCL_AUTO_TRIALS)";
  if (d.valueType == kExactValueType) return "an exact allreduce";
  return formatString("a compressed allreduce (%s)", algorithmName(d.algorithm));
}

}  // namespace

Status checkDescriptors(const CallDescriptor* all, int ranks, const CallDescriptor& mine) {
  // Compare against rank 0's, not this rank's, so every rank reports the same mismatch.
  const CallDescriptor& ref = all[0];
  // Row collectives carry a shape in nnz (all equal); allreduce and the
  // sparsified allgather carry each rank's selected count (<= count).
  const bool nnzIsShape =
      (ref.op & kOtherCollective) && (ref.op & ~kOtherCollective) != static_cast<uint8_t>(Collective::kAllGather);
  // An auto compressor's line-up and settling exchange carry the trial's index there (all equal).
  const bool autoMarker =
      !(ref.op & kOtherCollective) && (ref.algorithm == kAutoLineUp || ref.algorithm == kAutoSettle);
  // Rows calls carry in streamBytes what every rank must share: the
  // forward's entries kept per row, the backward's forward call.
  const uint8_t collective = ref.op & static_cast<uint8_t>(~kOtherCollective);
  const char* const agreedStreamBytes =
      !(ref.op & kOtherCollective)                                    ? nullptr
      : collective == static_cast<uint8_t>(Collective::kAlltoAllRows) ? "entries kept per row (another density?)"
      : collective == static_cast<uint8_t>(Collective::kAlltoAllRowsBackward)
          ? "forward call (sequence number) of its selection (another forward's selection?)"
          : nullptr;
  // A row-sparse call's count is its row length (its row counts may differ);
  // named so only when both calls are row-sparse.
  const bool rowSparse = (ref.op & kOtherCollective) && collective == static_cast<uint8_t>(Collective::kRowSparse);
  for (int r = 0; r < ranks; ++r) {
    const CallDescriptor& d = all[r];
    const char* const countName = rowSparse && d.op == ref.op ? "row length" : "count";
    const char* field = nullptr;
    unsigned long long got = 0, want = 0;
    if (d.magic != kStreamMagic) field = "magic", got = d.magic, want = kStreamMagic;
    else if (d.seq != ref.seq) field = "call sequence number", got = d.seq, want = ref.seq;
    else if (d.count != ref.count) field = countName, got = d.count, want = ref.count;
    else if (d.dataType != ref.dataType) field = "datatype", got = d.dataType, want = ref.dataType;
    else if (d.op != ref.op) field = "op", got = d.op, want = ref.op;
    else if (d.algorithm != ref.algorithm) field = "algorithm", got = d.algorithm, want = ref.algorithm;
    else if (d.valueType != ref.valueType) field = "wire value type", got = d.valueType, want = ref.valueType;
    else if ((d.flags ^ ref.flags) & kCallAuto)
      field = "auto flag (SPCCL_ALGO=auto against a named algorithm)", got = d.flags, want = ref.flags;
    else if (d.flags != ref.flags)
      field = "capacity mode flag (SPCCL_CAPACITY_MODE=fixed against exact)", got = d.flags, want = ref.flags;
    else if ((ref.flags & kCallFixed) && d.nnz != ref.nnz)
      field = "fixed capacity (capacityFactor x k slots)", got = d.nnz, want = ref.nnz;
    else if (nnzIsShape && d.nnz != ref.nnz) field = "row length", got = d.nnz, want = ref.nnz;
    else if (autoMarker && d.nnz != ref.nnz) field = "auto trial call", got = d.nnz, want = ref.nnz;
    else if (agreedStreamBytes && d.streamBytes != ref.streamBytes)
      field = agreedStreamBytes, got = d.streamBytes, want = ref.streamBytes;
    else if (!nnzIsShape && !autoMarker && d.nnz > d.count) field = "selected count", got = d.nnz, want = d.count;
    else if (std::memcmp(&d.density, &ref.density, sizeof d.density) != 0)
      return invalidUsage(
          formatString("mismatched collective call across ranks: rank %d has density %g, rank 0 "
                       "has %g (this rank: count %llu)",
                       r, static_cast<double>(d.density), static_cast<double>(ref.density),
                       static_cast<unsigned long long>(mine.count)));
    if (field) {
      // Where the magic matches, say what each call is: a count or seq
      // mismatch may be the same call, an op or algorithm one another call.
      std::string calls;
      if (d.magic == kStreamMagic) {
        const std::string theirs = describeCall(d), rank0s = describeCall(ref);
        if (theirs != rank0s)
          calls = formatString("; rank %d is in %s, rank 0 in %s", r, theirs.c_str(), rank0s.c_str());
      }
      return invalidUsage(
          formatString("mismatched collective call across ranks: rank %d has %s %llu, rank 0 "
                       "has %llu (this rank: count %llu)%s",
                       r, field, got, want, static_cast<unsigned long long>(mine.count), calls.c_str()));
    }
  }
  return Status::ok();
}

Status agreeOnCall(CollectiveContext& comm, Transport& t, const CallDescriptor& mine) {
  const size_t p = static_cast<size_t>(t.size()), me = static_cast<size_t>(t.rank());
  Executor& ex = *comm.executor;
  const size_t bytes = sizeof mine;
  ExecMemory& staged = comm.exec.descriptors;
  SPCCL_RETURN_IF_ERROR(staged.ensure(ex, p * bytes));
  auto* all = staged.get<unsigned char>();
  SPCCL_RETURN_IF_ERROR(ex.fromHost(all + me * bytes, &mine, sizeof mine));
  SPCCL_RETURN_IF_ERROR(ex.withMemory([&] { return t.allGather(all + me * bytes, bytes, all); }));
  comm.descriptors.resize(p);
  for (size_t r = 0; r < p; ++r) SPCCL_RETURN_IF_ERROR(ex.toHost(&comm.descriptors[r], all + r * bytes, sizeof mine));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  return checkDescriptors(comm.descriptors.data(), t.size(), mine);
}

size_t layoutStreams(const std::vector<size_t>& sizes, std::vector<size_t>* offsets) {
  offsets->resize(sizes.size());
  size_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    (*offsets)[r] = total;
    total += sizes[r];
  }
  return total;
}

size_t announcedSize(uint64_t announced, size_t most, int peer, const char* what, Status* local) {
  if (announced <= most && announced % 8 == 0) return static_cast<size_t>(announced);
  if (local->isOk())
    *local = remoteError(formatString("%s: rank %d announced a %llu-byte stream, at most %zu fit", what, peer,
                                      static_cast<unsigned long long>(announced), most));
  return 0;
}

}  // namespace spccl
