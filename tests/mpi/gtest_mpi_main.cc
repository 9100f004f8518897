// GoogleTest main for multi-rank tests (run under mpirun).
//
// - Every rank runs the same tests in the same order; a test's verdict is agreed
//   at its end: an MPI_Allgather of "this rank failed" and, where another rank
//   failed, a failure added on this rank naming the failing ranks. So a test
//   fails everywhere or nowhere, and the exit code is the same on every rank.
// - Only rank 0 keeps gtest's printer; the other ranks print their own failure
//   messages to stderr, prefixed with their rank, so nothing is lost.
// - A per-test watchdog (SIGALRM) turns a hang in a collective into a clear
//   message and a nonzero exit instead of a silent ctest timeout. Seconds per
//   test: SPCCL_TEST_TIMEOUT_S (default 180, 0 disables it).
// - --gtest_shuffle uses rank 0's seed on every rank (otherwise ranks would run
//   tests in different orders and deadlock).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the deprecated MPI C++ bindings are not used
#endif
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

namespace {

int gRank = 0;
int gSize = 1;

// Written before each test, read by the signal handler (which may only call
// async-signal-safe functions: write, _exit).
char gTimeoutMessage[1024];
size_t gTimeoutMessageLength = 0;

extern "C" void onTestTimeout(int) {
  ssize_t ignored = write(STDERR_FILENO, gTimeoutMessage, gTimeoutMessageLength);
  (void)ignored;
  _exit(124);
}

unsigned testTimeoutSeconds() {
  const char* s = std::getenv("SPCCL_TEST_TIMEOUT_S");
  if (s == nullptr || *s == '\0') return 180;
  return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
}

class MpiAgreementListener : public testing::EmptyTestEventListener {
 public:
  explicit MpiAgreementListener(unsigned timeoutSeconds) : timeoutSeconds_(timeoutSeconds) {}

  void OnTestStart(const testing::TestInfo& info) override {
    int n = std::snprintf(gTimeoutMessage, sizeof gTimeoutMessage,
                          "[rank %d] %s.%s did not finish within %u s (a rank is probably stuck "
                          "in a collective); exiting\n",
                          gRank, info.test_suite_name(), info.name(), timeoutSeconds_);
    gTimeoutMessageLength = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof gTimeoutMessage - 1);
    if (timeoutSeconds_ > 0) alarm(timeoutSeconds_);
  }

  void OnTestPartResult(const testing::TestPartResult& result) override {
    // Rank 0's failures are printed by gtest's own printer; the agreement
    // failure added below is only interesting there too.
    if (gRank == 0 || !result.failed() || addingAgreementFailure_) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n[rank %d] %s\n", gRank,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(), gRank,
                 indent(result.message()).c_str());
    std::fflush(stderr);
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    int failedHere = info.result()->Failed() ? 1 : 0;
    std::vector<int> failed(static_cast<size_t>(gSize));
    MPI_Allgather(&failedHere, 1, MPI_INT, failed.data(), 1, MPI_INT, MPI_COMM_WORLD);
    alarm(0);

    std::ostringstream ranks;
    bool otherFailed = false;
    for (int r = 0; r < gSize; ++r) {
      if (!failed[static_cast<size_t>(r)]) continue;
      if (ranks.tellp() > 0) ranks << ", ";
      ranks << r;
      if (r != gRank) otherFailed = true;
    }
    if (otherFailed) {
      addingAgreementFailure_ = true;
      ADD_FAILURE_AT(info.file(), info.line())
          << "test failed on rank(s) " << ranks.str() << " of " << gSize
          << " (messages of ranks other than 0 are on stderr, prefixed with the rank)";
      addingAgreementFailure_ = false;
    }
  }

 private:
  static std::string indent(const char* message) {
    std::string out;
    for (const char* p = message; *p != '\0'; ++p) {
      out += *p;
      if (*p == '\n' && p[1] != '\0') out += "[rank " + std::to_string(gRank) + "] ";
    }
    return out;
  }

  unsigned timeoutSeconds_;
  bool addingAgreementFailure_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);

  testing::InitGoogleTest(&argc, argv);

  if (GTEST_FLAG_GET(shuffle)) {
    int seed = GTEST_FLAG_GET(random_seed);
    if (seed == 0) seed = static_cast<int>(std::time(nullptr) % 99991) + 1;
    MPI_Bcast(&seed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    GTEST_FLAG_SET(random_seed, seed);
  }

  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (gRank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    // Every rank would write the same --gtest_output file.
    delete listeners.Release(listeners.default_xml_generator());
  }
  // Appended after the printer: gtest calls OnTestEnd in reverse order, so the
  // agreement failure is recorded before the printer reports the verdict.
  listeners.Append(new MpiAgreementListener(testTimeoutSeconds()));
  std::signal(SIGALRM, onTestTimeout);

  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Failures outside tests (environment, suite set-up) are not agreed above.
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
