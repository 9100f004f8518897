// Throughput of the two CRC32C paths behind SPCCL_CHECKSUM (kernels/host/crc32c.cc),
// side by side in one run: slicing-by-8 tables and the SSE4.2 instruction.
// A 1 MiB buffer (a large stream), best of 200 passes each, so a pass fits in
// one scheduler time slice on a loaded machine.
//   build/perf/crc32c_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "codec/codec.h"

int main() {
  std::vector<unsigned char> b(size_t{1} << 20);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 131 + 7);
  auto best = [&](auto f) {
    double t = 1e9;
    uint32_t sink = 0;
    for (int rep = 0; rep < 200; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      sink ^= f();
      t = std::min(t, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return std::make_pair(t, sink);
  };
  const auto sw = best([&] { return spccl::crc32cSoftware(0, b.data(), b.size()); });
  const auto hw = best([&] { return spccl::crc32cHardware(0, b.data(), b.size()); });
  std::printf("CRC32C of 1 MiB, best of 200: slicing-by-8 %.2f GB/s, SSE4.2 %.2f GB/s%s; the library uses %s\n",
              b.size() / sw.first / 1e9, b.size() / hw.first / 1e9,
              spccl::crc32cHardwareAvailable() ? "" : " (not available: the table path again)",
              spccl::crc32cHardwareAvailable() ? "SSE4.2" : "slicing-by-8");
  (void)sw.second;
  (void)hw.second;
  // Both paths must agree.
  return spccl::crc32cSoftware(0, b.data(), b.size()) == spccl::crc32cHardware(0, b.data(), b.size()) ? 0 : 1;
}
