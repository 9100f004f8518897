// An unmodified NCCL program for the interposer's device check: it knows
// nothing of spccl. One rank, one GPU: gradient descent on a least-squares
// problem whose gradient goes through ncclAllReduce (avg) every step.
// Prints the loss every 10 steps and the final loss. Run it plain and with
//   LD_PRELOAD=libspccl_nccl.so SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO SPCCL_ALLREDUCE_DENSITY=0.1
// (perf/gpu/device_check.sh does both): the compressed gradient (10% of the
// entries per step, error feedback) must still drive the loss down.
//
//   nccl_plain_sgd [learning rate]   (default 0.1)
//
// The learning rate is bounded by the density, not only by the curvature:
// with error feedback an entry that is not selected accumulates its gradient
// for about 1/density steps and is then applied at once, so each update is
// about lr/density times the gradient. Here (unit curvature) lr/density past 2
// overshoots and diverges: 0.5 at density 0.01 grows the loss from 0.5 to
// over 400 in 60 steps, on the device and in perf/ef_sgd_model.py (the
// selection rule written out in Python) alike; 0.1 at density 0.1 trains.
// With DCT's schedule alone (SPCCL_THRESHOLD_WARMUP=0, no low side) it levels
// off above the dense run (measured on an H200: 0.4999 at step 0, 0.0069 at
// step 30, 0.0110 at step 60, against 0.000002 plain), because all 60 steps
// use the tau of step 0 (SPCCL_THRESHOLD_INTERVAL 1000) and once the
// gradients fall below it each update is at least lr * tau. The default
// warm-up (tau also estimated at steps 1, 2, 4, ..., 32 here) is predicted by
// perf/ef_sgd_model.py to reach 0.0042 at step 30 and 0.0038 at 60, still
// levelled off. With SPCCL_THRESHOLD_MIN_FRACTION=0.5 (a stored tau that
// selects fewer than k/2 is re-estimated in that call) the model goes on down
// (0.0004 at step 30, 0.0000 from 40). perf/gpu/device_check.sh runs all three
// (the default, the low side, and the schedule alone).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define PLAIN_CHECK(call, ok, msg)                                 \
  do {                                                             \
    if (!(ok)) {                                                   \
      std::printf("nccl_plain_sgd: FAILED: %s: %s\n", #call, msg); \
      return 1;                                                    \
    }                                                              \
  } while (0)
#define CUDA_CALL(call)                                           \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    PLAIN_CHECK(call, e_ == cudaSuccess, cudaGetErrorString(e_)); \
  } while (0)
#define NCCL_CALL(call)                                           \
  do {                                                            \
    ncclResult_t r_ = (call);                                     \
    PLAIN_CHECK(call, r_ == ncclSuccess, ncclGetErrorString(r_)); \
  } while (0)

int main(int argc, char** argv) {
  const size_t n = size_t{1} << 20;
  const int steps = 60;
  const float lr = argc > 1 ? std::strtof(argv[1], nullptr) : 0.1f;
  if (!(lr > 0.0f)) {
    std::printf("nccl_plain_sgd: the learning rate must be positive, got '%s'\n", argv[1]);
    return 2;
  }
  std::mt19937 g(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> target(n), w(n, 0.0f), grad(n);
  for (float& t : target) t = normal(g);
  ncclComm_t comm;
  int dev = 0;
  NCCL_CALL(ncclCommInitAll(&comm, 1, &dev));
  cudaStream_t stream;
  CUDA_CALL(cudaStreamCreate(&stream));
  float* d = nullptr;
  CUDA_CALL(cudaMalloc(&d, n * sizeof(float)));
  double loss = 0;
  for (int step = 0; step <= steps; ++step) {
    loss = 0;
    for (size_t i = 0; i < n; ++i) {
      grad[i] = w[i] - target[i];
      loss += 0.5 * static_cast<double>(grad[i]) * grad[i];
    }
    loss /= static_cast<double>(n);
    if (step % 10 == 0) std::printf("step %3d loss %.6f\n", step, loss);
    if (step == steps) break;
    CUDA_CALL(cudaMemcpy(d, grad.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    NCCL_CALL(ncclAllReduce(d, d, n, ncclFloat32, ncclAvg, comm, stream));
    CUDA_CALL(cudaStreamSynchronize(stream));
    CUDA_CALL(cudaMemcpy(grad.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) w[i] -= lr * grad[i];
  }
  std::printf("final loss %.6f\n", loss);
  CUDA_CALL(cudaFree(d));
  NCCL_CALL(ncclCommDestroy(comm));
  return std::isfinite(loss) ? 0 : 1;
}
