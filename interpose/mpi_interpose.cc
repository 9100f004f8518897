// libspccl_mpi.so: compresses an unmodified MPI program's collectives.
//
// Defines MPI_Allreduce, MPI_Alltoall and MPI_Allgather (plus MPI_Init,
// MPI_Init_thread and MPI_Finalize for set-up and tear-down) through MPI's
// profiling interface: every call is forwarded to its PMPI_* twin unless
// compression applies, in which case it goes to spccl's drop-in collective
// (spcclAllReduce, spcclAlltoAll, spcclAllGather) on an spccl communicator
// cached on the MPI communicator. Loaded with LD_PRELOAD or linked before
// libmpi. spccl is called through its public C API only; the SPCCL_*
// variables are read by spccl's own parameter table, compiled in
// (intercept_env.h), so they mean here what they mean to the library.
//
// A call is handed to spccl when all of these hold, and passes through
// untouched otherwise:
//   - SPCCL_INTERCEPT names the collective (allreduce, alltoall, allgather, all;
//     off by default) and every rank agreed on it at MPI_Init;
//   - the datatype is MPI_FLOAT (send and receive), the op MPI_SUM (allreduce),
//     send and receive counts match;
//   - the rank's send buffer holds at least SPCCL_MIN_COMPRESS_COUNT elements
//     (allreduce: count; alltoall: sendcount * ranks; allgather: sendcount);
//   - the communicator is an intracommunicator of more than one rank;
//   - MPI was not initialised with MPI_THREAD_MULTIPLE (spccl communicators
//     are not for concurrent use) and SPCCL_DISABLE is off;
//   - every rank's SPCCL_* environment is valid.
// Every condition is the same on every rank of a correct MPI program (the env
// is checked for agreement at MPI_Init), so all ranks take the same path.
//
// Recursion. libspccl.so makes MPI calls of its own (the MPI transport's
// collectives, and MPI_Allreduce in spcclCommInitMPI). With this library
// preloaded or linked first, a call to MPI_Allreduce from inside libspccl.so
// resolves to the definition below, not libmpi's. Two defences, each enough
// for the case it covers:
//   1. A thread-local depth counter is raised around every call into spccl;
//      while it is raised, every wrapper forwards straight to PMPI_*. This
//      covers every MPI call spccl makes while serving an intercepted call,
//      whatever the call and wherever in spccl it is made.
//   2. The transport's data movement (src/transport/mpi_transport.cc) calls
//      PMPI_* directly, so spccl's own traffic is never intercepted even when
//      the program also calls spccl itself (no depth raised): an exact path
//      the user asked spccl for must not be compressed behind their back.
// A counter instead of a "spccl owns this communicator" lookup: it needs no
// knowledge of spccl's internal communicators and cannot go stale.
//
// Lifetime. The spccl communicator lives in an attribute of the MPI
// communicator (MPI_Comm_create_keyval). Its delete callback (run by
// MPI_Comm_free) only queues the spccl communicator: the MPI standard leaves
// MPI calls inside delete callbacks undefined, and spcclCommDestroy frees an
// MPI communicator. The queue is drained at the next wrapper call and at
// MPI_Finalize, which also destroys every spccl communicator still alive and
// deletes the attributes before calling PMPI_Finalize.
#include <mpi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "intercept_env.h"
#include "spccl_mpi.h"
#include "src/params.h"

namespace {

constexpr int kAllreduce = 0, kAlltoall = 1, kAllgather = 2, kNumColls = 3;
using Coll = int;
constexpr const char* kCollNames[kNumColls] = {"allreduce", "alltoall", "allgather"};
constexpr unsigned kCollBit[kNumColls] = {spccl::kInterceptAllreduce, spccl::kInterceptAlltoall,
                                          spccl::kInterceptAllgather};

// Per collective, this rank: wrapper calls, calls handed to spccl, those spccl
// compressed, and spccl's byte counts for the handed calls.
constexpr int kCalls = 0, kHanded = 1, kCompressed = 2, kBytesSent = 3, kDenseBytes = 4, kNumCounters = 5;
using Counter = int;

struct Entry {  // one MPI communicator's spccl communicator
  MPI_Comm user = MPI_COMM_NULL;
  spcclComm_t comm = nullptr;  // nullptr: this communicator always passes through
};

struct State {
  std::mutex mu;
  bool ready = false;  // set up by our MPI_Init*/MPI_Init_thread
  unsigned mask = 0;   // kCollBit of the intercepted collectives (agreed by all ranks)
  unsigned long long minCount = 65536;
  bool report = false;  // SPCCL_DEBUG=INFO or TRACE on some rank: report at MPI_Finalize
  bool trace = false;
  int rank = -1;
  int keyval = MPI_KEYVAL_INVALID;
  std::vector<Entry*> live;     // attribute set on entry->user
  std::vector<Entry*> pending;  // attribute deleted by MPI; spccl comm still to destroy
  unsigned long long counters[kNumColls][kNumCounters] = {};
};

State& state() {
  static State* s = new State();  // never destroyed: wrappers may run from atexit paths
  return *s;
}

// > 0 while this thread is inside spccl: every wrapper then forwards to PMPI.
thread_local int tDepth = 0;
struct InsideSpccl {
  InsideSpccl() { ++tDepth; }
  ~InsideSpccl() { --tDepth; }
  InsideSpccl(const InsideSpccl&) = delete;
  InsideSpccl& operator=(const InsideSpccl&) = delete;
};

// Same prefix as libspccl's log lines; stderr only.
void logLine(const char* level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void logLine(const char* level, const char* fmt, ...) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s:%d:%ld [%d] SPCCL %s interpose: %s\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), state().rank, level, body);
}

std::string maskNames(unsigned mask) {
  std::string out;
  for (int c = 0; c < kNumColls; ++c)
    if (mask & kCollBit[c]) out += (out.empty() ? "" : ",") + std::string(kCollNames[c]);
  return out.empty() ? "off" : out;
}

int deleteEntry(MPI_Comm, int, void* attribute, void*) {
  State& s = state();
  auto* e = static_cast<Entry*>(attribute);
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < s.live.size(); ++i)
    if (s.live[i] == e) {
      s.live.erase(s.live.begin() + static_cast<long>(i));
      break;
    }
  if (e->comm != nullptr) {
    s.pending.push_back(e);  // destroyed outside this callback (see the top of this file)
  } else {
    delete e;
  }
  return MPI_SUCCESS;
}

void drainPending() {
  State& s = state();
  std::vector<Entry*> done;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.pending.empty()) return;
    done.swap(s.pending);
  }
  for (Entry* e : done) {
    {
      InsideSpccl inside;
      spcclCommDestroy(e->comm);
    }
    delete e;
  }
  if (s.trace) logLine("TRACE", "released %zu spccl communicator(s) of freed MPI communicators", done.size());
}

// Called once, right after PMPI_Init*/PMPI_Init_thread succeeded.
void setUp(int provided) {
  State& s = state();
  PMPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  const char* interceptEnv = std::getenv("SPCCL_INTERCEPT");
  const bool asked = interceptEnv != nullptr && interceptEnv[0] != '\0';
  // spccl's own table reads and validates every SPCCL_* variable (intercept_env.h).
  spccl::Params params;
  const spccl::Status env = spccl::loadParamsFromEnv(&params);
  const bool valid = env.isOk();
  unsigned mask = 0;
  // A failed load leaves params as they were: the default where the environment is invalid.
  const unsigned long long minCount = params.minCompressCount;
  if (!valid) {
    if (asked) logLine("WARN", "invalid SPCCL_* environment, every call passes through: %s", env.message().c_str());
  } else {
    mask = params.intercept;
    if (params.disable) mask = 0;
    if (mask != 0 && provided == MPI_THREAD_MULTIPLE) {
      logLine("WARN", "MPI_THREAD_MULTIPLE: spccl communicators are not for concurrent use, every call passes through");
      mask = 0;
    }
  }
  const spccl::LogLevel debug = spccl::interpose::debugLevel(env, params);
  const bool info = debug >= spccl::LogLevel::kInfo;
  // All ranks must take the same path for every call: agree on the settings
  // that decide it (max of x and of ~x: equal everywhere iff max == ~max(~x)).
  unsigned long long v[8] = {valid ? 1ull : 0ull, 0, mask, 0, minCount, 0, info ? 1ull : 0ull, 0};
  for (int i = 0; i < 8; i += 2) v[i + 1] = ~v[i];
  if (PMPI_Allreduce(MPI_IN_PLACE, v, 8, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  const bool agree = v[2] == ~v[3] && v[4] == ~v[5];
  const bool allValid = v[1] == ~1ull;  // min(valid) == 1
  s.report = v[6] != 0;
  s.trace = debug >= spccl::LogLevel::kTrace;
  if (!allValid) {
    mask = 0;
  } else if (!agree) {
    if (s.rank == 0)
      logLine("WARN", "ranks disagree on SPCCL_INTERCEPT or SPCCL_MIN_COMPRESS_COUNT, every call passes through");
    mask = 0;
  }
  if (mask != 0 && PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteEntry, &s.keyval, nullptr) != MPI_SUCCESS)
    mask = 0;
  s.mask = mask;
  s.minCount = minCount;
  s.ready = true;
  if (info && s.rank == 0) {
    if (mask == 0)
      logLine("INFO", "libspccl_mpi.so loaded, interception off: every call passes through to MPI");
    else
      logLine("INFO", "libspccl_mpi.so loaded: SPCCL_INTERCEPT=%s, MPI_FLOAT (+ MPI_SUM for allreduce) send buffers "
              "of at least %llu elements go to spccl",
              maskNames(mask).c_str(), minCount);
  }
}

bool intercepts(Coll c) {
  const State& s = state();
  return tDepth == 0 && s.ready && (s.mask & kCollBit[c]) != 0;
}

void tally(Coll c, Counter k, unsigned long long n) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.counters[c][k] += n;
}

// The spccl communicator of `comm`, created on first use (collective over
// comm: every rank reaches this at the same call). nullptr: pass through.
spcclComm_t commFor(MPI_Comm comm) {
  State& s = state();
  void* value = nullptr;
  int found = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_get_attr(comm, s.keyval, &value, &found) != MPI_SUCCESS) return nullptr;
  if (found) return static_cast<Entry*>(value)->comm;

  auto* e = new Entry();
  e->user = comm;
  int inter = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  PMPI_Comm_size(comm, &size);
  if (!inter && size > 1) {
    spcclResult_t r;
    {
      InsideSpccl inside;
      r = spcclCommInitMPI(&e->comm, comm);
    }
    // A failure on one rank only (spccl agrees on env errors itself, not on
    // others) must not leave ranks on different paths.
    int ok = r == spcclSuccess ? 1 : 0;
    PMPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) {
      if (r != spcclSuccess) logLine("WARN", "spcclCommInitMPI failed, this communicator passes through: %s",
                                     spcclGetLastError(nullptr));
      if (e->comm != nullptr) {
        InsideSpccl inside;
        spcclCommDestroy(e->comm);
      }
      e->comm = nullptr;
    }
  }
  if (PMPI_Comm_set_attr(comm, s.keyval, e) != MPI_SUCCESS) {
    if (e->comm != nullptr) {
      InsideSpccl inside;
      spcclCommDestroy(e->comm);
    }
    delete e;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.live.push_back(e);
  }
  return e->comm;
}

// Runs one spccl collective and attributes spccl's counters to collective c.
template <typename F>
int runSpccl(Coll c, spcclComm_t sc, MPI_Comm comm, F&& call) {
  spcclStats_t before{}, after{};
  spcclResult_t r;
  {
    InsideSpccl inside;
    spcclCommGetStats(sc, &before);
    r = call();
    spcclCommGetStats(sc, &after);
  }
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.counters[c][kHanded] += 1;
    s.counters[c][kCompressed] += after.compressedCalls - before.compressedCalls;
    s.counters[c][kBytesSent] += after.bytesSent - before.bytesSent;
    s.counters[c][kDenseBytes] += after.denseBytes - before.denseBytes;
  }
  if (state().trace)
    logLine("TRACE", "%s: %s, %llu bytes sent for %llu dense", kCollNames[c],
            after.compressedCalls != before.compressedCalls ? "compressed" : "exact",
            static_cast<unsigned long long>(after.bytesSent - before.bytesSent),
            static_cast<unsigned long long>(after.denseBytes - before.denseBytes));
  if (r == spcclSuccess) return MPI_SUCCESS;
  logLine("WARN", "spccl %s failed: %s: %s", kCollNames[c], spcclGetErrorString(r), spcclGetLastError(sc));
  // The communicator's error handler decides, as for any failed MPI call.
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

bool isFloat(MPI_Datatype t) { return t == MPI_FLOAT; }

void reportAtFinalize() {
  State& s = state();
  unsigned long long mine[kNumColls * kNumCounters], all[kNumColls * kNumCounters];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::memcpy(mine, s.counters, sizeof mine);
  }
  int ranks = 1;
  PMPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (PMPI_Reduce(mine, all, kNumColls * kNumCounters, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD) !=
      MPI_SUCCESS)
    return;
  if (s.rank != 0) return;
  for (int c = 0; c < kNumColls; ++c) {
    if ((s.mask & kCollBit[c]) == 0) continue;  // never counted: not intercepted
    const unsigned long long* n = all + c * kNumCounters;
    const double sent = static_cast<double>(n[kBytesSent]), dense = static_cast<double>(n[kDenseBytes]);
    // Bytes as spccl counts them (spcclStats_t): dense = what the dense
    // collective sends in nccl-tests' bus convention.
    logLine("INFO",
            "%s (all %d ranks): %llu calls, %llu handed to spccl (%llu compressed), %llu passed through; "
            "spccl sent %llu bytes for %llu dense (%.1fx fewer, %llu bytes saved)",
            kCollNames[c], ranks, n[kCalls], n[kHanded], n[kCompressed], n[kCalls] - n[kHanded], n[kBytesSent],
            n[kDenseBytes], sent > 0 ? dense / sent : 1.0,
            n[kDenseBytes] > n[kBytesSent] ? n[kDenseBytes] - n[kBytesSent] : 0ull);
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) {
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    setUp(provided);
  }
  return rc;
}

__attribute__((visibility("default"))) int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) setUp(*provided);
  return rc;
}

__attribute__((visibility("default"))) int MPI_Finalize(void) {
  State& s = state();
  if (s.ready && tDepth == 0) {
    if (s.report) reportAtFinalize();
    drainPending();
    std::vector<Entry*> live;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      live = s.live;
    }
    // Destroy first, then delete the attribute: the callback frees the entry.
    for (Entry* e : live) {
      if (e->comm != nullptr) {
        InsideSpccl inside;
        spcclCommDestroy(e->comm);
        e->comm = nullptr;
      }
      PMPI_Comm_delete_attr(e->user, s.keyval);
    }
    if (s.keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&s.keyval);
    s.mask = 0;
    s.ready = false;
  }
  return PMPI_Finalize();
}

__attribute__((visibility("default"))) int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (!intercepts(kAllreduce)) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  drainPending();
  tally(kAllreduce, kCalls, 1);
  if (count <= 0 || static_cast<unsigned long long>(count) < state().minCount || !isFloat(datatype) || op != MPI_SUM)
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  spcclComm_t sc = commFor(comm);
  if (sc == nullptr) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return runSpccl(kAllreduce, sc, comm, [&] {
    return spcclAllReduce(send, recvbuf, static_cast<size_t>(count), spcclFloat, spcclSum, sc, nullptr);
  });
}

__attribute__((visibility("default"))) int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                         void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                                         MPI_Comm comm) {
  if (!intercepts(kAlltoall)) return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  drainPending();
  tally(kAlltoall, kCalls, 1);
  const bool inPlace = sendbuf == MPI_IN_PLACE;
  int size = 0;
  PMPI_Comm_size(comm, &size);  // an invalid comm fails here and again, properly reported, in PMPI below
  const bool eligible = recvcount > 0 && isFloat(recvtype) && (inPlace || (sendcount == recvcount && isFloat(sendtype))) &&
                        static_cast<unsigned long long>(recvcount) * static_cast<unsigned long long>(size) >=
                            state().minCount;
  spcclComm_t sc = eligible ? commFor(comm) : nullptr;
  if (sc == nullptr) return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const void* send = inPlace ? recvbuf : sendbuf;
  return runSpccl(kAlltoall, sc, comm, [&] {
    return spcclAlltoAll(send, recvbuf, static_cast<size_t>(recvcount), spcclFloat, sc, nullptr);
  });
}

__attribute__((visibility("default"))) int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                          void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                                          MPI_Comm comm) {
  if (!intercepts(kAllgather))
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  drainPending();
  tally(kAllgather, kCalls, 1);
  const bool inPlace = sendbuf == MPI_IN_PLACE;
  const bool eligible = recvcount > 0 && isFloat(recvtype) && (inPlace || (sendcount == recvcount && isFloat(sendtype))) &&
                        static_cast<unsigned long long>(recvcount) >= state().minCount;
  spcclComm_t sc = eligible ? commFor(comm) : nullptr;
  if (sc == nullptr) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  // In place: this rank's block already sits at its slot, as spcclAllGather expects.
  const void* send = inPlace ? static_cast<const char*>(recvbuf) + static_cast<size_t>(rank) *
                                                                       static_cast<size_t>(recvcount) * sizeof(float)
                             : sendbuf;
  return runSpccl(kAllgather, sc, comm, [&] {
    return spcclAllGather(send, recvbuf, static_cast<size_t>(recvcount), spcclFloat, sc, nullptr);
  });
}

}  // extern "C"
