// The row-sparse allreduce (spcclAllReduceRowSparse) with each algorithm, side
// by side in one run: every rank's rows carry ids drawn from a shared range
// (duplicates within and across ranks), both algorithms run on the same rows,
// each on its own communicator (SPCCL_ROWSPARSE_ALGO is read at creation), and
// their calls alternate. Per algorithm: the median of -n calls, each the
// slowest rank's time after a barrier. Both must give the same union and the
// same sums (the run fails otherwise). For an A/B of two builds, run the same
// command with LD_LIBRARY_PATH set to the other libspccl.
//   mpirun -np 4 build/perf/rowsparse_bench [--rows 20000] [--row-len 64] [--id-range 40000] [--iters 30]
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "spccl.h"
#include "spccl_mpi.h"

namespace {

struct Run {
  explicit Run(const char* a) : algo(a) {}
  const char* algo;
  spcclComm_t comm = nullptr;
  std::vector<double> seconds;
  std::vector<int64_t> ids;
  std::vector<float> rows;
  size_t n = 0;
};

bool flag(int argc, char** argv, int* i, const char* name, size_t* out) {
  if (std::strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return false;
  *out = std::strtoull(argv[++*i], nullptr, 10);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t nrows = 20000, rowLen = 64, idRange = 40000, iters = 30;
  for (int i = 1; i < argc; ++i) {
    if (flag(argc, argv, &i, "--rows", &nrows) || flag(argc, argv, &i, "--row-len", &rowLen) ||
        flag(argc, argv, &i, "--id-range", &idRange) || flag(argc, argv, &i, "--iters", &iters))
      continue;
    if (rank == 0)
      std::fprintf(stderr, "usage: rowsparse_bench [--rows N] [--row-len L] [--id-range R] [--iters N] (unknown: %s)\n",
                   argv[i]);
    MPI_Finalize();
    return 2;
  }
  if (nrows == 0 || rowLen == 0 || idRange == 0 || iters == 0) {
    if (rank == 0) std::fprintf(stderr, "rowsparse_bench: every size must be at least 1\n");
    MPI_Finalize();
    return 2;
  }
  std::mt19937_64 g(17 + static_cast<uint64_t>(rank));
  std::vector<int64_t> ids(nrows);
  std::vector<float> rows(nrows * rowLen);
  for (int64_t& id : ids) id = static_cast<int64_t>(g() % idRange);
  std::normal_distribution<float> normal;
  for (float& x : rows) x = normal(g);
  const size_t cap = std::min(idRange, nrows * static_cast<size_t>(size));

  Run runs[2] = {Run("allgather"), Run("partition")};
  for (Run& r : runs) {
    setenv("SPCCL_ROWSPARSE_ALGO", r.algo, 1);
    if (spcclCommInitMPI(&r.comm, MPI_COMM_WORLD) != spcclSuccess) {
      std::fprintf(stderr, "rank %d: spcclCommInitMPI failed: %s\n", rank, spcclGetLastError(nullptr));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    r.ids.resize(cap);
    r.rows.resize(cap * rowLen);
  }
  unsetenv("SPCCL_ROWSPARSE_ALGO");
  for (size_t it = 0; it < iters + 3; ++it)  // 3 warm-up calls each
    for (Run& r : runs) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, r.ids.data(), r.rows.data(),
                                  cap, &r.n, r.comm, nullptr) != spcclSuccess) {
        std::fprintf(stderr, "rank %d: %s: %s\n", rank, r.algo, spcclGetLastError(r.comm));
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      double dt = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= 3) r.seconds.push_back(slowest);
    }
  const bool same =
      runs[0].n == runs[1].n &&
      std::equal(runs[0].ids.begin(), runs[0].ids.begin() + static_cast<ptrdiff_t>(runs[0].n), runs[1].ids.begin()) &&
      std::memcmp(runs[0].rows.data(), runs[1].rows.data(), runs[0].n * rowLen * sizeof(float)) == 0;
  if (rank == 0) {
    std::printf("row-sparse allreduce: %d ranks, %zu rows of %zu fp32 per rank, ids in [0, %zu), union %zu ids\n", size,
                nrows, rowLen, idRange, runs[0].n);
    for (Run& r : runs) {
      std::sort(r.seconds.begin(), r.seconds.end());
      spcclStats_t s{};
      spcclCommGetStats(r.comm, &s);
      std::printf("%-9s median %8.3f ms over %zu calls, %llu bytes sent per call by rank 0\n", r.algo,
                  1e3 * r.seconds[r.seconds.size() / 2], r.seconds.size(),
                  static_cast<unsigned long long>(s.bytesSent / std::max<uint64_t>(s.calls, 1)));
    }
    std::printf("rowsparse_bench: allgather %.3f ms, partition %.3f ms, results %s\n",
                1e3 * runs[0].seconds[runs[0].seconds.size() / 2], 1e3 * runs[1].seconds[runs[1].seconds.size() / 2],
                same ? "identical" : "DIFFERENT");
  }
  for (Run& r : runs) spcclCommDestroy(r.comm);
  MPI_Finalize();
  return same ? 0 : 1;
}
