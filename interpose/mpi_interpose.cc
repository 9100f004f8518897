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
//     off by default);
//   - allreduce: the datatype is MPI_FLOAT and the op MPI_SUM (MPI requires the
//     same count and datatype on every rank, and Open MPI rejects MPI_SUM on a
//     derived datatype: derived types pass through, for MPI to judge);
//   - alltoall, allgather: the send and receive type signatures are all
//     MPI_FLOAT (decoded through derived datatypes: ranks may spell the same
//     signature differently, MPI_Type_contiguous(n, MPI_FLOAT) x 1 on one rank
//     and MPI_FLOAT x n on another) and carry as many floats each;
//   - the rank's send buffer holds at least SPCCL_MIN_COMPRESS_COUNT elements
//     (allreduce: count; alltoall: floats per peer * ranks; allgather: floats
//     sent), and one block is at most INT_MAX floats;
//   - allreduce: send and receive buffers are not the same address (with
//     MPI_FLOAT and without MPI_IN_PLACE that is erroneous: MPI reports it as
//     it would without us). Not a condition for alltoall and allgather, where
//     derived types may select disjoint memory of one buffer (MPI_BOTTOM):
//     an address is this rank's own and must decide nothing;
//   - the communicator is an intracommunicator of more than one rank;
//   - no rank initialised MPI with MPI_THREAD_MULTIPLE (spccl communicators are
//     not for concurrent use) and SPCCL_DISABLE is off;
//   - every rank's SPCCL_* environment is valid, and the ranks agree on the
//     settings that decide a call's path or that spccl checks across ranks
//     (kAgreed in setUp: SPCCL_INTERCEPT, SPCCL_DISABLE, SPCCL_MIN_COMPRESS_COUNT,
//     the densities, SPCCL_ALGO, SPCCL_VALUE_TYPE, SPCCL_ALLTOALL_ROW_LEN).
// In a correct MPI program each condition is decided alike on every rank: the
// environment is agreed at MPI_Init; counts, ops and type signatures must match
// across ranks in MPI itself; only the datatype handle and the memory layout
// may differ per rank, and they decide nothing: a rank whose layout is not
// plain contiguous floats copies through a contiguous temporary (stageFloats),
// so spccl always sees contiguous floats. The communicator-level conditions are
// the same on every rank by construction, and spcclCommInitMPI's outcome is
// agreed in commFor. Erroneous programs (an aliased buffer on one rank only, say)
// are MPI's to diagnose, as without the interposer.
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
//   2. The transport's data movement (transport/mpi_transport.cc) calls
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
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
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
constexpr unsigned kAllColls = spccl::kInterceptAllreduce | spccl::kInterceptAlltoall | spccl::kInterceptAllgather;

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
  spccl::LogLevel level = spccl::LogLevel::kWarn;  // this rank's SPCCL_DEBUG: gates logLine
  bool report = false;                             // SPCCL_DEBUG=INFO or TRACE on rank 0: report at MPI_Finalize
  bool trace = false;
  int rank = -1;
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm self = MPI_COMM_NULL;  // stageFloats' copies: MPI_COMM_SELF duplicated at MPI_Init (no attributes yet)
  std::vector<Entry*> live;       // attribute set on entry->user
  std::vector<Entry*> pending;    // attribute deleted by MPI; spccl comm still to destroy
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

// Same prefix as libspccl's log lines; stderr only. Gated like the library's
// SPCCL_LOG (src/log.h): printed when this rank's SPCCL_DEBUG is at `level` or
// above (NONE prints nothing, the default WARN prints warnings).
void logLine(spccl::LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void logLine(spccl::LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(state().level) < static_cast<int>(level)) return;
  const char* name = level == spccl::LogLevel::kWarn ? "WARN" : level == spccl::LogLevel::kInfo ? "INFO" : "TRACE";
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s:%d:%ld [%d] SPCCL %s interpose: %s\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), state().rank, name, body);
}
constexpr spccl::LogLevel kWarn = spccl::LogLevel::kWarn, kInfo = spccl::LogLevel::kInfo,
                          kTrace = spccl::LogLevel::kTrace;

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
  if (s.trace) logLine(kTrace, "released %zu spccl communicator(s) of freed MPI communicators", done.size());
}

unsigned long long floatBits(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// A setting every rank must share for its collectives to take one path: the
// value on this rank, and the collectives it concerns (their path, or what
// spccl compares across ranks at each call and fails on: densities, algorithm,
// wire value type, row length).
struct Agreed {
  const char* name;
  unsigned long long value;
  unsigned colls;
};

// Called once, right after PMPI_Init*/PMPI_Init_thread succeeded.
void setUp(int provided) {
  State& s = state();
  PMPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  const char* interceptEnv = std::getenv("SPCCL_INTERCEPT");
  const bool asked = interceptEnv != nullptr && interceptEnv[0] != '\0';
  // spccl's own table reads and validates every SPCCL_* variable (intercept_env.h).
  // A failed load leaves params as they were: the defaults where the environment is invalid.
  spccl::Params params;
  const spccl::Status env = spccl::loadParamsFromEnv(&params);
  const bool valid = env.isOk();
  s.level = spccl::interpose::debugLevel(env, params);
  s.trace = s.level >= kTrace;
  const Agreed agreed[] = {
      {"SPCCL_INTERCEPT", params.intercept, kAllColls},
      {"SPCCL_DISABLE", params.disable ? 1ull : 0ull, kAllColls},
      {"SPCCL_MIN_COMPRESS_COUNT", params.minCompressCount, kAllColls},
      {"SPCCL_VALUE_TYPE", static_cast<unsigned long long>(params.valueType), kAllColls},
      {"SPCCL_ALLREDUCE_DENSITY", floatBits(params.allreduceDensity), spccl::kInterceptAllreduce},
      {"SPCCL_ALGO", static_cast<unsigned long long>(params.algorithm), spccl::kInterceptAllreduce},
      {"SPCCL_ALLTOALL_DENSITY", floatBits(params.alltoallDensity), spccl::kInterceptAlltoall},
      {"SPCCL_ALLTOALL_ROW_LEN", params.alltoallRowLen, spccl::kInterceptAlltoall},
      {"SPCCL_ALLGATHER_DENSITY", floatBits(params.allgatherDensity), spccl::kInterceptAllgather},
  };
  constexpr int kNumAgreed = sizeof agreed / sizeof agreed[0];
  // One MPI_MAX over MPI_COMM_WORLD: flags (any rank), then each setting x as
  // (x, ~x), equal on every rank iff max(x) == ~max(~x).
  constexpr int kValid = 0, kAsked = 1, kMultiple = 2, kReport = 3, kInvalidRank = 4, kFlags = 5;
  unsigned long long v[kFlags + 2 * kNumAgreed];
  v[kValid] = valid ? ~1ull : ~0ull;  // max: ~min(valid)
  v[kAsked] = asked ? 1 : 0;
  v[kMultiple] = provided == MPI_THREAD_MULTIPLE ? 1 : 0;
  v[kReport] = s.rank == 0 && s.level >= kInfo ? 1 : 0;                                // only rank 0 prints the report
  v[kInvalidRank] = valid ? 0 : ULLONG_MAX - static_cast<unsigned long long>(s.rank);  // max: the lowest such rank
  for (int i = 0; i < kNumAgreed; ++i) {
    v[kFlags + 2 * i] = agreed[i].value;
    v[kFlags + 2 * i + 1] = ~agreed[i].value;
  }
  if (PMPI_Allreduce(MPI_IN_PLACE, v, kFlags + 2 * kNumAgreed, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) !=
      MPI_SUCCESS)
    return;
  const bool allValid = v[kValid] == ~1ull, anyAsked = v[kAsked] != 0;
  s.report = v[kReport] != 0;
  unsigned mask = 0;
  if (!allValid) {
    // Every rank passes through; say so wherever SPCCL_INTERCEPT was set, the
    // invalid rank with its reason, rank 0 in any case.
    if (anyAsked) {
      if (!valid) logLine(kWarn, "invalid SPCCL_* environment, every call passes through: %s", env.message().c_str());
      else if (s.rank == 0)
        logLine(kWarn,
                "invalid SPCCL_* environment on rank %llu (its WARN line names the value), every call "
                "passes through",
                ULLONG_MAX - v[kInvalidRank]);
    }
  } else {
    const unsigned anyIntercept = static_cast<unsigned>(v[kFlags]);  // the collectives some rank asked for
    std::string differ;
    for (int i = 0; i < kNumAgreed; ++i)
      if (v[kFlags + 2 * i] != ~v[kFlags + 2 * i + 1] && (agreed[i].colls & anyIntercept) != 0)
        differ += (differ.empty() ? "" : ", ") + std::string(agreed[i].name);
    if (!differ.empty()) {
      if (s.rank == 0) logLine(kWarn, "ranks disagree on %s, every call passes through", differ.c_str());
    } else {
      mask = params.disable ? 0 : params.intercept;
      if (mask != 0 && v[kMultiple] != 0) {
        if (s.rank == 0)
          logLine(kWarn,
                  "MPI_THREAD_MULTIPLE: spccl communicators are not for concurrent use, every call passes "
                  "through");
        mask = 0;
      }
    }
  }
  if (mask != 0 && PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteEntry, &s.keyval, nullptr) != MPI_SUCCESS)
    mask = 0;
  if ((mask & (spccl::kInterceptAlltoall | spccl::kInterceptAllgather)) != 0 &&
      PMPI_Comm_dup(MPI_COMM_SELF, &s.self) != MPI_SUCCESS)
    s.self = MPI_COMM_NULL;  // stageFloats then fails, reported per call
  s.mask = mask;
  s.minCount = params.minCompressCount;
  s.ready = true;
  if (s.rank == 0) {
    if (mask == 0) logLine(kInfo, "libspccl_mpi.so loaded, interception off: every call passes through to MPI");
    else
      logLine(kInfo,
              "libspccl_mpi.so loaded: SPCCL_INTERCEPT=%s, MPI_FLOAT (+ MPI_SUM for allreduce) send buffers "
              "of at least %llu elements go to spccl",
              maskNames(mask).c_str(), s.minCount);
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
      if (r != spcclSuccess)
        logLine(kWarn, "spcclCommInitMPI failed, this communicator passes through: %s", spcclGetLastError(nullptr));
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
// `staged`: MPI_SUCCESS, or the error of copying this rank's data to or from
// a contiguous temporary (the call still runs: the other ranks are in it).
template <typename F>
int runSpccl(Coll c, spcclComm_t sc, MPI_Comm comm, F&& call, int staged = MPI_SUCCESS) {
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
    logLine(kTrace, "%s: %s, %llu bytes sent for %llu dense", kCollNames[c],
            after.compressedCalls != before.compressedCalls ? "compressed" : "exact",
            static_cast<unsigned long long>(after.bytesSent - before.bytesSent),
            static_cast<unsigned long long>(after.denseBytes - before.denseBytes));
  if (r == spcclSuccess && staged == MPI_SUCCESS) return MPI_SUCCESS;
  if (r != spcclSuccess) {
    logLine(kWarn, "spccl %s failed: %s: %s", kCollNames[c], spcclGetErrorString(r), spcclGetLastError(sc));
    staged = MPI_ERR_OTHER;
  } else {
    logLine(kWarn, "%s: copying this rank's data through a contiguous buffer failed (MPI error %d)", kCollNames[c],
            staged);
  }
  // The communicator's error handler decides, as for any failed MPI call.
  PMPI_Comm_call_errhandler(comm, staged);
  return staged;
}

// Datatypes. MPI matches type signatures, not handles: one rank may send
// MPI_FLOAT x n where another sends MPI_Type_contiguous(n, MPI_FLOAT) x 1, or
// a strided vector of floats. Eligibility is decided on the signature, which
// is the same on every rank of a correct program; the layout is this rank's
// own business (stageFloats).

// A derived datatype's constructor and arguments; frees the derived types
// MPI_Type_get_contents returned (named ones must not be freed).
struct Decoded {
  int combiner = MPI_COMBINER_NAMED;
  std::vector<int> ints;
  std::vector<MPI_Aint> addrs;
  std::vector<MPI_Datatype> types;
  Decoded() = default;
  Decoded(const Decoded&) = delete;
  Decoded& operator=(const Decoded&) = delete;
  ~Decoded() {
    for (MPI_Datatype& t : types) {
      int ni = 0, na = 0, nd = 0, kind = MPI_COMBINER_NAMED;
      if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &kind) == MPI_SUCCESS && kind != MPI_COMBINER_NAMED)
        PMPI_Type_free(&t);
    }
  }
};

// false: t is predefined (or not a datatype); d->combiner says which constructor made t.
bool decode(MPI_Datatype t, Decoded* d) {
  int ni = 0, na = 0, nd = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_get_envelope(t, &ni, &na, &nd, &d->combiner) != MPI_SUCCESS ||
      d->combiner == MPI_COMBINER_NAMED)
    return false;
  d->ints.resize(static_cast<size_t>(ni));
  d->addrs.resize(static_cast<size_t>(na));
  d->types.assign(static_cast<size_t>(nd), MPI_DATATYPE_NULL);
  if (PMPI_Type_get_contents(t, ni, na, nd, d->ints.data(), d->addrs.data(), d->types.data()) != MPI_SUCCESS) {
    d->types.clear();
    return false;
  }
  return true;
}

// Whether t's type signature is a sequence of MPI_FLOAT (possibly empty).
// No depth limit: any limit could decide differently on two ranks that
// spell one signature differently (a hang). `seen` memoises the subtypes of
// one query (a struct of the same type twice would otherwise be decoded
// once per occurrence: time linear in the signature's length); their
// handles stay valid while the queried type holds them.
bool floatSignature(MPI_Datatype t, std::unordered_map<MPI_Datatype, bool>* seen) {
  if (t == MPI_FLOAT) return true;
  if (const auto it = seen->find(t); it != seen->end()) return it->second;
  MPI_Count size = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_size_x(t, &size) != MPI_SUCCESS) return false;
  bool all = true;
  Decoded d;
  if (size == 0) {
    all = true;  // empty signature: adds nothing, whatever its base types
  } else if (!decode(t, &d)) {
    all = false;  // predefined, not MPI_FLOAT
  } else {
    switch (d.combiner) {
      case MPI_COMBINER_DUP:
      case MPI_COMBINER_CONTIGUOUS:
      case MPI_COMBINER_VECTOR:
      case MPI_COMBINER_HVECTOR:
      case MPI_COMBINER_INDEXED:
      case MPI_COMBINER_HINDEXED:
      case MPI_COMBINER_INDEXED_BLOCK:
      case MPI_COMBINER_HINDEXED_BLOCK:
      case MPI_COMBINER_STRUCT:
      case MPI_COMBINER_SUBARRAY:
      case MPI_COMBINER_DARRAY:
      case MPI_COMBINER_RESIZED:
        break;
      default:
        all = false;  // Fortran parameterised types and the like: not MPI_FLOAT
    }
    for (size_t i = 0; all && i < d.types.size(); ++i) {
      // A struct's block of length 0 adds nothing to the signature (ints: count, then the lengths).
      if (d.combiner == MPI_COMBINER_STRUCT && i + 1 < d.ints.size() && d.ints[i + 1] == 0) continue;
      all = floatSignature(d.types[i], seen);
    }
  }
  (*seen)[t] = all;
  return all;
}

// Floats in `count` items of `type`: the same on every rank of a correct
// program. -1 when the signature is not all MPI_FLOAT or the count is invalid.
long long floatCount(int count, MPI_Datatype type) {
  if (count < 0) return -1;
  if (type == MPI_FLOAT) return count;
  MPI_Count size = 0;
  std::unordered_map<MPI_Datatype, bool> seen;
  if (!floatSignature(type, &seen) || PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size < 0) return -1;
  const long long perItem = static_cast<long long>(size) / static_cast<long long>(sizeof(float));
  if (count > 0 && perItem > LLONG_MAX / count) return -1;
  return perItem * count;
}

// Whether items of t lie in memory as contiguous floats from the buffer's
// start (MPI_FLOAT, and contiguous types and duplicates of such). Anything
// else is staged, even layouts that happen to be dense: a permuted indexed
// type has the extent of contiguous floats, not their order.
bool plainFloats(MPI_Datatype t, int depth = 0) {
  if (t == MPI_FLOAT) return true;
  Decoded d;
  // Past 64 levels: staged (this rank's own choice; the result is the same).
  if (depth > 64 || !decode(t, &d)) return false;
  if (d.combiner != MPI_COMBINER_DUP && d.combiner != MPI_COMBINER_CONTIGUOUS) return false;
  return d.types.size() == 1 && plainFloats(d.types[0], depth + 1);
}

// A temporary of n floats for a layout that is not contiguous floats; null
// when memory is short.
float* temporary(std::unique_ptr<float[]>* owner, size_t n) {
  owner->reset(new (std::nothrow) float[n]);
  return owner->get();
}

// No memory for a temporary: MPI_ERR_NO_MEM on the communicator's error
// handler (fatal by default: the job stops, as when MPI itself runs out),
// rather than an exception through MPI's C interface.
int noMemory(Coll c, MPI_Comm comm, size_t floats) {
  logLine(kWarn, "%s: no memory for a %zu-byte contiguous copy of this rank's data", kCollNames[c],
          floats * sizeof(float));
  PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
  return MPI_ERR_NO_MEM;
}

// Copies `blocks` blocks, from block `first`, between a typed buffer (block b:
// `count` items of `type` from typed + b * count * extent) and a flat one
// (block b: `floats` floats from flat + b * floats); toFlat says which way.
// MPI's datatype engine does the copy, as a message to self on a private
// communicator, so any layout MPI accepts is handled, the type matching rules
// guarantee the order, and no program message can interfere.
int stageFloats(bool toFlat, const void* typed, int count, MPI_Datatype type, int first, int blocks, float* flat,
                int floats) {
  const MPI_Comm self = state().self;
  if (self == MPI_COMM_NULL) return MPI_ERR_COMM;
  MPI_Aint lb = 0, extent = 0;
  int rc = PMPI_Type_get_extent(type, &lb, &extent);
  for (int b = first; rc == MPI_SUCCESS && b < first + blocks; ++b) {
    char* t = const_cast<char*>(static_cast<const char*>(typed)) + static_cast<MPI_Aint>(b) * count * extent;
    float* f = flat + static_cast<size_t>(b) * static_cast<size_t>(floats);
    rc = toFlat ? PMPI_Sendrecv(t, count, type, 0, 0, f, floats, MPI_FLOAT, 0, 0, self, MPI_STATUS_IGNORE)
                : PMPI_Sendrecv(f, floats, MPI_FLOAT, 0, 0, t, count, type, 0, 0, self, MPI_STATUS_IGNORE);
  }
  return rc;
}

// After the call (rc): the `size` blocks received into the temporary `flat`
// (null: received in place) copied into this rank's layout of recvbuf; a
// failed copy goes to the communicator's error handler.
int unstage(int rc, MPI_Comm comm, float* flat, void* recvbuf, int recvcount, MPI_Datatype recvtype, int size,
            int floats) {
  if (rc != MPI_SUCCESS || flat == nullptr) return rc;
  rc = stageFloats(false, recvbuf, recvcount, recvtype, 0, size, flat, floats);
  if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
  return rc;
}

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
    logLine(kInfo,
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
    if (s.self != MPI_COMM_NULL) PMPI_Comm_free(&s.self);
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
  // The datatype handle itself: MPI requires the same datatype on every rank
  // (and Open MPI rejects MPI_SUM on derived ones). Aliased buffers without
  // MPI_IN_PLACE are erroneous: MPI says so.
  if (count <= 0 || static_cast<unsigned long long>(count) < state().minCount || datatype != MPI_FLOAT ||
      op != MPI_SUM || sendbuf == recvbuf)
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
  // Floats per peer, from the type signatures (the same on every rank).
  const long long n = floatCount(recvcount, recvtype);
  const bool eligible = n > 0 && n <= INT_MAX && (inPlace || floatCount(sendcount, sendtype) == n) &&
                        static_cast<unsigned long long>(n) * static_cast<unsigned long long>(size) >= state().minCount;
  spcclComm_t sc = eligible ? commFor(comm) : nullptr;
  if (sc == nullptr) return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  // spccl sees contiguous floats: other layouts go through temporaries.
  const int floats = static_cast<int>(n);
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(size);
  std::unique_ptr<float[]> sendTmp, recvTmp;
  int staged = MPI_SUCCESS;
  float* recv = static_cast<float*>(recvbuf);
  if (!plainFloats(recvtype)) {
    if ((recv = temporary(&recvTmp, total)) == nullptr) return noMemory(kAlltoall, comm, total);
    if (inPlace) staged = stageFloats(true, recvbuf, recvcount, recvtype, 0, size, recv, floats);
  }
  const void* send = inPlace ? recv : sendbuf;
  if (!inPlace && !plainFloats(sendtype)) {
    if ((send = temporary(&sendTmp, total)) == nullptr) return noMemory(kAlltoall, comm, total);
    staged = stageFloats(true, sendbuf, sendcount, sendtype, 0, size, sendTmp.get(), floats);
  }
  const int rc = runSpccl(
      kAlltoall, sc, comm, [&] { return spcclAlltoAll(send, recv, static_cast<size_t>(n), spcclFloat, sc, nullptr); },
      staged);
  return unstage(rc, comm, recvTmp.get(), recvbuf, recvcount, recvtype, size, floats);
}

__attribute__((visibility("default"))) int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                         void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                                         MPI_Comm comm) {
  if (!intercepts(kAllgather)) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  drainPending();
  tally(kAllgather, kCalls, 1);
  const bool inPlace = sendbuf == MPI_IN_PLACE;
  // Floats per rank, from the type signatures (the same on every rank).
  const long long n = floatCount(recvcount, recvtype);
  const bool eligible = n > 0 && n <= INT_MAX && (inPlace || floatCount(sendcount, sendtype) == n) &&
                        static_cast<unsigned long long>(n) >= state().minCount;
  spcclComm_t sc = eligible ? commFor(comm) : nullptr;
  if (sc == nullptr) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  int rank = 0, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  // spccl sees contiguous floats: other layouts go through temporaries.
  const int floats = static_cast<int>(n);
  std::unique_ptr<float[]> sendTmp, recvTmp;
  int staged = MPI_SUCCESS;
  float* recv = static_cast<float*>(recvbuf);
  if (!plainFloats(recvtype)) {
    const size_t total = static_cast<size_t>(n) * static_cast<size_t>(size);
    if ((recv = temporary(&recvTmp, total)) == nullptr) return noMemory(kAllgather, comm, total);
    if (inPlace) staged = stageFloats(true, recvbuf, recvcount, recvtype, rank, 1, recv, floats);
  }
  // In place: this rank's block already sits at its slot, as spcclAllGather expects.
  const void* send = inPlace ? recv + static_cast<size_t>(rank) * static_cast<size_t>(n) : sendbuf;
  if (!inPlace && !plainFloats(sendtype)) {
    if ((send = temporary(&sendTmp, static_cast<size_t>(n))) == nullptr)
      return noMemory(kAllgather, comm, static_cast<size_t>(n));
    staged = stageFloats(true, sendbuf, sendcount, sendtype, 0, 1, sendTmp.get(), floats);
  }
  const int rc = runSpccl(
      kAllgather, sc, comm, [&] { return spcclAllGather(send, recv, static_cast<size_t>(n), spcclFloat, sc, nullptr); },
      staged);
  return unstage(rc, comm, recvTmp.get(), recvbuf, recvcount, recvtype, size, floats);
}

}  // extern "C"
