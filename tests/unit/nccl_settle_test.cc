// settleNcclResult (transport/nccl_settle.h): how spccl waits out
// ncclInProgress on a non-blocking NCCL communicator. The query stands in for
// ncclCommGetAsyncError, so no GPU is needed.
#ifdef SPCCL_WITH_NCCL

#include "transport/nccl_settle.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

// Answers the queries with `states` in turn; counts them.
struct ScriptedQuery {
  std::vector<ncclResult_t> states;
  ncclResult_t answer = ncclSuccess;  // what the query itself returns
  size_t asked = 0;
  ncclResult_t operator()(ncclResult_t* state) {
    if (answer != ncclSuccess) {
      ++asked;
      return answer;
    }
    *state = states.at(asked++);
    return ncclSuccess;
  }
};

TEST(NcclSettle, ABlockingCommunicatorsResultIsReturnedWithoutAQuery) {
  for (ncclResult_t r : {ncclSuccess, ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError, ncclSystemError}) {
    ScriptedQuery q;
    EXPECT_EQ(spccl::settleNcclResult(r, q), r);
    EXPECT_EQ(q.asked, 0u);
  }
}

TEST(NcclSettle, InProgressIsPolledUntilTheOperationSettles) {
  ScriptedQuery q{{ncclInProgress, ncclInProgress, ncclInProgress, ncclSuccess}};
  EXPECT_EQ(spccl::settleNcclResult(ncclInProgress, q), ncclSuccess);
  EXPECT_EQ(q.asked, 4u);
}

TEST(NcclSettle, TheErrorThatEndsAnOperationIsReturned) {
  ScriptedQuery q{{ncclInProgress, ncclRemoteError}};
  EXPECT_EQ(spccl::settleNcclResult(ncclInProgress, q), ncclRemoteError);
  EXPECT_EQ(q.asked, 2u);
}

TEST(NcclSettle, AFailedQueryIsReturned) {
  ScriptedQuery q;
  q.answer = ncclInvalidArgument;  // e.g. a communicator already destroyed
  EXPECT_EQ(spccl::settleNcclResult(ncclInProgress, q), ncclInvalidArgument);
  EXPECT_EQ(q.asked, 1u);
}

}  // namespace

#endif  // SPCCL_WITH_NCCL
