// The MPI transport's choice of unit for allgather and alltoall blocks:
// MPI's counts are ints, so a block of more than INT_MAX bytes must move in
// wider units. Every block of up to INT_MAX elements of a datatype must have
// one, as MPI_Allgather / MPI_Alltoall of that datatype would take it; the
// arithmetic is checked here, without moving gigabytes.
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>

#include "src/transport/mpi_transport.h"

namespace spccl {
namespace {

TEST(MpiBlockUnit, EveryBlockOfIntMaxElementsMoves) {
  const size_t kIntMax = static_cast<size_t>(INT_MAX);
  for (size_t esize : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, kIntMax / 8 + 1, kIntMax / 4 + 1, kIntMax / 2 + 1,
                         (size_t{1} << 29) + 1, (size_t{1} << 30) + 1, kIntMax - 1, kIntMax}) {
      const size_t bytes = count * esize;
      const size_t unit = blockUnit(bytes);
      ASSERT_NE(unit, 0u) << count << " elements of " << esize << " bytes";
      EXPECT_EQ(bytes % unit, 0u) << count << " x " << esize;
      EXPECT_LE(bytes / unit, kIntMax) << count << " x " << esize;
    }
  }
}

TEST(MpiBlockUnit, SmallBlocksMoveAsBytes) {
  EXPECT_EQ(blockUnit(0), 1u);
  EXPECT_EQ(blockUnit(12), 1u);
  EXPECT_EQ(blockUnit(static_cast<size_t>(INT_MAX)), 1u);
}

TEST(MpiBlockUnit, FloatBlockJustPastTwoGiB) {
  // spcclAllGather of 2^29 + 1 fp32 per rank: 2^31 + 4 bytes, not a multiple of 8.
  const size_t bytes = ((size_t{1} << 29) + 1) * 4;
  const size_t unit = blockUnit(bytes);
  ASSERT_NE(unit, 0u);
  EXPECT_LE(bytes / unit, static_cast<size_t>(INT_MAX));
}

TEST(MpiBlockUnit, BeyondEveryUnit) {
  // More than INT_MAX eight-byte words, or an odd byte count above INT_MAX: no int count moves it.
  EXPECT_EQ(blockUnit((static_cast<size_t>(INT_MAX) + 1) * 8), 0u);
  EXPECT_EQ(blockUnit(static_cast<size_t>(INT_MAX) + 2), 0u);
}

}  // namespace
}  // namespace spccl
