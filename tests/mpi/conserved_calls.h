// Comm and ConservedCalls: a communicator, and a compressor's allreduces on fresh normal inputs, with what
// a conservation check needs (tests/mpi/calibrate_test.cc,
// tests/mpi/compressor_memory_test.cc).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "include/spccl.h"
#include "tests/mpi/test_util.h"

namespace spccl::test {

// A communicator over MPI_COMM_WORLD for the life of the object; r is the
// init's result.
struct Comm {
  spcclComm_t c = nullptr;
  spcclResult_t r;
  Comm() { r = spcclCommInitMPI(&c, MPI_COMM_WORLD); }
  ~Comm() {
    if (c) spcclCommDestroy(c);
  }
};

// Calls of one compressor on fresh normal inputs (seeded by the call and
// the rank), with what conservation needs: every rank's inputs summed, the
// outputs summed, and each output checked bitwise against rank 0's.
struct ConservedCalls {
  spcclComm_t comm;
  spcclCompressor_t c;
  size_t n;
  std::vector<double> inSum, outSum;
  std::vector<float> in, out, contributions;
  ConservedCalls(spcclComm_t comm_, spcclCompressor_t c_, size_t n_)
      : comm(comm_),
        c(c_),
        n(n_),
        inSum(n_),
        outSum(n_),
        in(n_),
        out(n_),
        contributions(n_ * static_cast<size_t>(worldSize())) {}

  // One allreduce; false (on every rank) when it failed on any.
  bool call(unsigned seed) {
    std::mt19937 gen(seed + static_cast<unsigned>(worldRank()));
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < n; ++i) in[i] = normal(gen);
    MPI_Allgather(in.data(), static_cast<int>(n), MPI_FLOAT, contributions.data(), static_cast<int>(n), MPI_FLOAT,
                  MPI_COMM_WORLD);
    for (int r = 0; r < worldSize(); ++r)
      for (size_t i = 0; i < n; ++i) inSum[i] += contributions[static_cast<size_t>(r) * n + i];
    if (!okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c, nullptr), comm, "allreduce"))
      return false;
    for (size_t i = 0; i < n; ++i) outSum[i] += out[i];
    std::vector<float> rank0(out);
    MPI_Bcast(rank0.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(std::memcmp(rank0.data(), out.data(), n * sizeof(float)), 0) << "seed " << seed;
    return true;
  }

  // max_i |sum of outputs + sum of residuals - sum of inputs| / (1 + |sum of inputs|)
  double worstImbalance() {
    std::vector<float> residual(n), residualSum(n);
    EXPECT_EQ(spcclCompressorGetResidual(c, residual.data(), n), spcclSuccess);
    MPI_Allreduce(residual.data(), residualSum.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(outSum[i] + residualSum[i] - inSum[i]) / (1.0 + std::abs(inSum[i])));
    return worst;
  }
};

}  // namespace spccl::test
