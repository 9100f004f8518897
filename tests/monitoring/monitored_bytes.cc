// Counts the bytes that actually cross between ranks, with Open MPI's own PML
// monitoring (MPI_T performance variable coll_monitoring_messages_size: bytes each
// rank sent to each peer inside collectives, on every communicator), for
// one compressed allreduce and one dense MPI_Allreduce of the same buffer.
// Run under `mpirun --mca pml_monitoring_enable 1`.
//
// Asserts: the compressed call moves no more than the library's cost model
// says (plus a small slack for MPI's own protocol messages), and for 4 ranks,
// 16M floats, density 0.01, split, fp32: at most 1/18 of the dense bytes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "monitor.h"
#include "spccl_mpi.h"

namespace {

using spccl::monitoring::Monitor;

int fail(int rank, const char* what) {
  std::fprintf(stderr, "[rank %d] FAIL: %s (%s)\n", rank, what, spcclGetLastError(nullptr));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t{16} << 20);
  const float density = argc > 2 ? std::strtof(argv[2], nullptr) : 0.01f;

  int bad = 0;
  Monitor mon;
  if (!mon.open()) {
    if (rank == 0)
      std::fprintf(stderr, "coll_monitoring_messages_size unavailable: run under mpirun --mca pml_monitoring_enable 1\n");
    MPI_Finalize();
    return 1;
  }
  spcclComm_t comm = nullptr;
  spcclCompressor_t c = nullptr;
  spcclCompressConfig_t cfg;
  bad |= spcclCommInitMPI(&comm, MPI_COMM_WORLD) != spcclSuccess ? fail(rank, "comm init") : 0;
  bad |= spcclCompressConfigInit(&cfg) != spcclSuccess ? fail(rank, "config init") : 0;
  cfg.density = density;
  cfg.algorithm = SPCCL_ALGO_SPLIT;
  cfg.wireValueType = spcclFloat32;
  bad |= spcclCompressorCreate(comm, count, spcclFloat32, &cfg, &c) != spcclSuccess ? fail(rank, "create") : 0;

  std::vector<float> x(count), y(count), z(count);
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(gen);

  MPI_Barrier(MPI_COMM_WORLD);
  const unsigned long long t0 = mon.sent();
  bad |= spcclAllReduceCompressed(x.data(), y.data(), spcclSum, c, nullptr) != spcclSuccess ? fail(rank, "allreduce") : 0;
  const unsigned long long t1 = mon.sent();
  MPI_Barrier(MPI_COMM_WORLD);
  const unsigned long long t2 = mon.sent();
  MPI_Allreduce(x.data(), z.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const unsigned long long t3 = mon.sent();

  spcclStats_t st{};
  spcclCompressorGetStats(c, &st);
  unsigned long long mine[3] = {t1 - t0, t3 - t2, st.bytesSent}, tot[3];
  MPI_Allreduce(mine, tot, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  const double ratio = static_cast<double>(tot[0]) / static_cast<double>(tot[1]);
  const unsigned long long slack = spccl::monitoring::slackBytes(ranks);
  if (rank == 0) {
    std::printf("ranks=%d count=%zu density=%g algo=split wire=fp32\n", ranks, count, static_cast<double>(density));
    std::printf("bytes crossing ranks (MPI monitoring, all ranks): compressed=%llu dense MPI_Allreduce=%llu ratio=1/%.1f\n",
                tot[0], tot[1], 1.0 / ratio);
    std::printf("spccl's own count (stats.bytesSent, all ranks): %llu\n", tot[2]);
  }
  if (tot[0] > tot[2] + slack) {
    if (rank == 0) std::fprintf(stderr, "FAIL: MPI moved %llu bytes, spccl accounts for %llu\n", tot[0], tot[2]);
    bad = 1;
  }
  if (ranks == 4 && count == (size_t{16} << 20) && density == 0.01f && ratio > 1.0 / 18.0) {
    if (rank == 0) std::fprintf(stderr, "FAIL: compressed/dense = 1/%.1f, the bound is 1/18\n", 1.0 / ratio);
    bad = 1;
  }
  int anyBad = 0;
  MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  spcclCompressorDestroy(c);
  spcclCommDestroy(comm);
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", anyBad ? "FAILED" : "PASSED");
  return anyBad;
}
