// Open MPI's own count of the bytes a rank sends inside collectives: the
// MPI_T performance variable coll_monitoring_messages_size (bytes to each
// peer, on every communicator), available under
// `mpirun --mca pml_monitoring_enable 1`. It counts what each collective call
// hands to each peer, so traffic spccl moved with point-to-point calls would
// not show: the tests also check that the count covers the payload.
#ifndef SPCCL_TESTS_MONITORING_MONITOR_H_
#define SPCCL_TESTS_MONITORING_MONITOR_H_

#include <vector>

#include "spccl_mpi.h"

namespace spccl::monitoring {

struct Monitor {
  MPI_T_pvar_session session;
  MPI_T_pvar_handle handle;
  int count = 0;

  bool open() {
    int provided = 0, index = -1;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
    if (MPI_T_pvar_get_index("coll_monitoring_messages_size", MPI_T_PVAR_CLASS_SIZE, &index) != MPI_SUCCESS)
      return false;
    if (MPI_T_pvar_session_create(&session) != MPI_SUCCESS) return false;
    MPI_Comm world = MPI_COMM_WORLD;
    if (MPI_T_pvar_handle_alloc(session, index, &world, &handle, &count) != MPI_SUCCESS) return false;
    return MPI_T_pvar_start(session, handle) == MPI_SUCCESS;
  }
  // Bytes this rank has sent to all peers so far.
  unsigned long long sent() {
    std::vector<unsigned long long> v(count);
    MPI_T_pvar_read(session, handle, v.data());
    unsigned long long s = 0;
    for (auto x : v) s += x;
    return s;
  }
};

// Margin between MPI's count and spccl's bytesSent. coll_monitoring counts the
// bytes each collective call hands to each peer, without MPI's envelopes, and
// spccl counts its headers and size exchanges too, so the two should agree;
// 4 KiB per peer per collective stage allows for accounting differences and
// is still tiny next to the data.
inline unsigned long long slackBytes(int ranks) {
  return 6ull * 4096ull * static_cast<unsigned long long>(ranks) * static_cast<unsigned long long>(ranks - 1);
}

}  // namespace spccl::monitoring

#endif  // SPCCL_TESTS_MONITORING_MONITOR_H_
