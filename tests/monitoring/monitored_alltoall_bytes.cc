// Counts, with Open MPI's own collective monitoring (monitor.h), the bytes
// one DCT-MP alltoall moves: spcclAlltoAllRowsCompressed forward and the
// spcclAlltoAllRowsBackward through its selection, against a dense
// MPI_Alltoall of the same buffer. Run under
// `mpirun --mca pml_monitoring_enable 1`.
//
// Shape: rowLen 128 fp32, density 1/16 (8 of 128 kept per row: 8-bit
// indices, fp32 values: SPCCL_VALUE_TYPE=fp32 is set before the communicator).
// "4 ranks x 4096 rows" is read as 4096 rows per peer block (each
// rank sends 4 x 4096 rows), the larger payload; 4096 rows per rank in all
// (1024 per peer, where the fixed per-message bytes weigh more) runs too.
// Arguments `rowsPerPeer [rowLen [density]]` run that one shape instead.
//
// Asserts, per shape and pass: the compressed payload (rows x k x (index +
// value bytes) to each peer; values only in the backward) <= MPI's count <=
// spccl's own bytesSent + slack; the backward moves fewer bytes than the
// forward (no indices); and at 4 ranks with the default shapes, the forward
// at most 1/10 of the dense MPI_Alltoall's bytes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "monitor.h"
#include "spccl_mpi.h"

namespace {

using spccl::monitoring::Monitor;

struct Shape {
  size_t rowsPerPeer;
  size_t rowLen;
  float density;
};

int fail(int rank, const char* what) {
  std::fprintf(stderr, "[rank %d] FAIL: %s (%s)\n", rank, what, spcclGetLastError(nullptr));
  return 1;
}

// A dense MPI_Alltoall moves (P-1) blocks of rowsPerPeer x rowLen floats per rank.
bool measure(const Shape& shape, bool boundApplies, spcclComm_t comm, Monitor& mon, int rank, int ranks) {
  const size_t block = shape.rowsPerPeer * shape.rowLen;
  const size_t count = block * static_cast<size_t>(ranks);
  std::vector<float> x(count), y(count), z(count), grad(count), gradOut(count);
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(gen);
  for (float& v : grad) v = normal(gen);

  int bad = 0;
  spcclSelection_t selection = nullptr;
  spcclStats_t s0{}, s1{}, s2{};
  MPI_Barrier(MPI_COMM_WORLD);
  spcclCommGetStats(comm, &s0);
  const unsigned long long t0 = mon.sent();
  bad |= spcclAlltoAllRowsCompressed(x.data(), y.data(), shape.rowsPerPeer, shape.rowLen, spcclFloat32, shape.density,
                                     &selection, comm, nullptr) != spcclSuccess
             ? fail(rank, "spcclAlltoAllRowsCompressed")
             : 0;
  const unsigned long long t1 = mon.sent();
  spcclCommGetStats(comm, &s1);
  MPI_Barrier(MPI_COMM_WORLD);
  const unsigned long long t2 = mon.sent();
  if (!bad)
    bad |= spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), selection, nullptr) != spcclSuccess
               ? fail(rank, "spcclAlltoAllRowsBackward")
               : 0;
  const unsigned long long t3 = mon.sent();
  spcclCommGetStats(comm, &s2);
  MPI_Barrier(MPI_COMM_WORLD);
  const unsigned long long t4 = mon.sent();
  const int block32 = static_cast<int>(block);
  MPI_Alltoall(x.data(), block32, MPI_FLOAT, z.data(), block32, MPI_FLOAT, MPI_COMM_WORLD);
  const unsigned long long t5 = mon.sent();
  if (selection != nullptr) spcclSelectionDestroy(selection);

  // Sums over ranks: MPI's forward, backward, dense; spccl's forward, backward.
  unsigned long long mine[5] = {t1 - t0, t3 - t2, t5 - t4, s1.bytesSent - s0.bytesSent, s2.bytesSent - s1.bytesSent};
  unsigned long long tot[5];
  MPI_Allreduce(mine, tot, 5, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  int anyBad = 0;
  MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anyBad) return false;

  // max(1, ceil(density * rowLen)), at most rowLen, the product read as the
  // decimal density means (docs/ALGORITHMS.md, step 2).
  const double product = static_cast<double>(shape.density) * static_cast<double>(shape.rowLen);
  const double whole = std::floor(product);
  const size_t ceilKeep = static_cast<size_t>(product - whole > std::ldexp(product, -24) ? whole + 1 : whole);
  const size_t keep = std::max<size_t>(1, std::min<size_t>(shape.rowLen, ceilKeep));
  const unsigned long long indexBytes = shape.rowLen <= 256 ? 1 : shape.rowLen <= 65536 ? 2 : 4;
  const unsigned long long valueBytes = 4;  // fp32 wire
  const unsigned long long kept = static_cast<unsigned long long>(ranks) * (ranks - 1) * shape.rowsPerPeer * keep;
  const unsigned long long payload[2] = {kept * (indexBytes + valueBytes), kept * valueBytes};
  const unsigned long long slack = spccl::monitoring::slackBytes(ranks);
  const double ratio[2] = {static_cast<double>(tot[0]) / static_cast<double>(tot[2]),
                           static_cast<double>(tot[1]) / static_cast<double>(tot[2])};
  bool ok = true;
  if (rank == 0) {
    std::printf("ranks=%d rowsPerPeer=%zu rowLen=%zu density=%g (keep %zu per row) fp32\n", ranks, shape.rowsPerPeer,
                shape.rowLen, static_cast<double>(shape.density), keep);
    std::printf(
        "  bytes crossing ranks (MPI monitoring, all ranks): forward=%llu backward=%llu dense MPI_Alltoall=%llu\n",
        tot[0], tot[1], tot[2]);
    std::printf("  forward/dense = 1/%.2f, backward/dense = 1/%.2f\n", 1.0 / ratio[0], 1.0 / ratio[1]);
    std::printf("  spccl's own count (bytesSent, all ranks): forward=%llu backward=%llu; payload alone: %llu, %llu\n",
                tot[3], tot[4], payload[0], payload[1]);
  }
  const char* pass[2] = {"forward", "backward"};
  for (int p = 0; p < 2; ++p) {
    if (tot[p] < payload[p]) {
      if (rank == 0)
        std::fprintf(
            stderr, "FAIL: %s: MPI counted %llu bytes, less than the payload %llu (traffic outside MPI collectives?)\n",
            pass[p], tot[p], payload[p]);
      ok = false;
    }
    if (tot[p] > tot[3 + p] + slack) {
      if (rank == 0)
        std::fprintf(stderr, "FAIL: %s: MPI moved %llu bytes, spccl accounts for %llu\n", pass[p], tot[p], tot[3 + p]);
      ok = false;
    }
  }
  if (tot[1] >= tot[0]) {
    if (rank == 0)
      std::fprintf(stderr, "FAIL: the backward (%llu bytes) is not smaller than the forward (%llu)\n", tot[1], tot[0]);
    ok = false;
  }
  if (boundApplies && ratio[0] > 0.1) {
    if (rank == 0) std::fprintf(stderr, "FAIL: forward/dense = 1/%.2f, the bound is 1/10\n", 1.0 / ratio[0]);
    ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  Monitor mon;
  if (!mon.open()) {
    if (rank == 0)
      std::fprintf(stderr,
                   "coll_monitoring_messages_size unavailable: run under mpirun --mca pml_monitoring_enable 1\n");
    MPI_Finalize();
    return 1;
  }
  std::vector<Shape> shapes;
  const bool defaults = argc < 2;
  if (defaults) {
    shapes = {{4096, 128, 1.0f / 16}, {4096 / static_cast<size_t>(ranks), 128, 1.0f / 16}};
  } else {
    shapes = {{std::strtoull(argv[1], nullptr, 10), argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 128,
               argc > 3 ? std::strtof(argv[3], nullptr) : 1.0f / 16}};
  }

  // fp32 values on the wire, as the shape above says, whatever the caller's environment.
  setenv("SPCCL_VALUE_TYPE", "fp32", /*overwrite=*/1);
  spcclComm_t comm = nullptr;
  int bad = spcclCommInitMPI(&comm, MPI_COMM_WORLD) != spcclSuccess ? fail(rank, "comm init") : 0;
  int anyBad = 0;
  MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!anyBad)
    for (const Shape& shape : shapes)
      if (!measure(shape, defaults && ranks == 4, comm, mon, rank, ranks)) anyBad = 1;
  if (comm != nullptr) spcclCommDestroy(comm);
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", anyBad ? "FAILED" : "PASSED");
  return anyBad;
}
