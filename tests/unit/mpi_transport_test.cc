// The MPI transport's choice of unit for allgather and alltoall blocks:
// MPI's counts are ints, so a block of more than INT_MAX bytes must move in
// wider units. Every block of up to INT_MAX elements of a datatype must have
// one, as MPI_Allgather / MPI_Alltoall of that datatype would take it; the
// arithmetic is checked here, without moving gigabytes.
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>

#include "transport/mpi_transport.h"

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

// The overlap rule both transports apply before a collective reads its send
// buffer (transport/transport.h; the NCCL transport stages such send data
// through scratch, the MPI transport moves it into place).
TEST(TransportSendNeedsMove, OnlyOverlapsOtherThanTheInPlaceForm) {
  char buf[64] = {};
  // Allreduce: in place (send == recv) needs nothing; one element off does.
  EXPECT_FALSE(sendNeedsMove(buf, 16, buf, buf, 16));
  EXPECT_TRUE(sendNeedsMove(buf + 4, 16, buf, buf, 16));
  EXPECT_TRUE(sendNeedsMove(buf, 16, buf + 4, buf + 4, 16));
  // Allgather of 8 bytes over 4 ranks, rank 2: its slot is in place; the
  // start of recv on every rank is not (a port's sendbuff == recvbuff).
  EXPECT_FALSE(sendNeedsMove(buf + 16, 8, buf + 16, buf, 32));
  EXPECT_TRUE(sendNeedsMove(buf, 8, buf + 16, buf, 32));
  EXPECT_TRUE(sendNeedsMove(buf + 28, 8, buf + 16, buf, 32));  // straddles the end
  // Alltoall: nullptr as the slot, so even send == recv moves.
  EXPECT_TRUE(sendNeedsMove(buf, 32, nullptr, buf, 32));
  // Separate or touching buffers, and empty ones, never.
  EXPECT_FALSE(sendNeedsMove(buf + 32, 16, buf, buf, 32));
  EXPECT_FALSE(sendNeedsMove(buf, 16, buf + 16, buf + 16, 16));
  EXPECT_FALSE(sendNeedsMove(buf + 4, 0, buf, buf, 16));
  EXPECT_FALSE(sendNeedsMove(buf + 4, 16, buf, buf, 0));
}

}  // namespace
}  // namespace spccl
