// Host kernels against memcpy, side by side in one run, one thread: the fused
// selection pass (selectPack), the exact threshold estimate, the alltoall's
// per-row top-k (selectRowTopK over the same floats as rows) and a plain
// memcpy of the same n floats. Bytes are counted as kernel_bench counts them
// on the device (each input read once, each output written once):
//   memcpy      4n read + 4n written
//   selectPack  send 4n + residual 4n read, residual 4n written, pairs 8 B each written
//   threshold   send 4n + residual 4n read once (what one pass must stream); radix: the same
//               estimate by the two-pass radix select alone (its fallback), same bytes
//   rowTopK     send 4n read (2n for --row-type fp16/bf16: the same values rounded; the positions it
//               writes are not counted); also in ns an element. rowTopKAvx2, rowTopKBase: the same
//               rows on the AVX2 and baseline (SSE2) paths where the CPU has a wider one (AVX-512,
//               AVX2); all must keep the same positions (checked)
//   unpackAdd   the allgather algorithm's unpack of 4 received streams (each 2k pairs over the
//               whole buffer, varint gaps, as the stored tau sends them): zero the 4n-byte output,
//               then add every stream; unpackBlock: host::reduceSections, what the algorithm
//               runs (the same sums a 16 KiB block of the output at a time, or as unpackAdd
//               below one pair in kScatterBelow elements). Bytes: the output, 4n, once. Both
//               must give the same bits (checked).
// Median of --iters rounds after one warm-up, all interleaved; tau is the exact k-th largest
// |v|, so selectPack writes k pairs as in a call right after an estimate.
//   build/perf/host_kernel_bench [--floats 64M] [--iters 9] [--density 0.01] [--row-len 128] [--row-keep 8]
//                                [--row-type fp32|fp16|bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "codec/codec.h"
#include "kernels/host/sections.h"
#include "size_arg.h"

namespace {

template <typename F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = size_t{64} << 20;
  int iters = 9;
  double density = 0.01;
  uint32_t rowLen = 128, rowKeep = 8;
  std::string rowType = "fp32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--floats" && i + 1 < argc) {
      if (!spccl::perf::parseSizeArg(argv[++i], &n)) {
        std::fprintf(stderr, "--floats: expected a count with an optional K/M/G suffix, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--density" && i + 1 < argc) {
      density = std::strtod(argv[++i], nullptr);
    } else if ((a == "--row-len" || a == "--row-keep") && i + 1 < argc) {
      (a == "--row-len" ? rowLen : rowKeep) = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
    } else if (a == "--row-type" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "fp32" || std::string(argv[i + 1]) == "fp16" ||
                std::string(argv[i + 1]) == "bf16")) {
      rowType = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--floats 64M] [--iters 9] [--density 0.01] [--row-len 128] [--row-keep 8] "
                   "[--row-type fp32|fp16|bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  if (n == 0 || !(density > 0 && density <= 1) || rowLen == 0 || rowLen > n) {
    std::fprintf(stderr, "need --floats > 0, --density in (0, 1] and --row-len in [1, floats]\n");
    return 2;
  }
  std::vector<float> send(n), residualIn(n), residualOut(n), copy(n);
  std::mt19937 gen(20261129);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    send[i] = g(gen);
    residualIn[i] = 0.1f * g(gen);
  }
  const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(density * static_cast<double>(n)));
  std::vector<uint32_t> scratch, indices(2 * k);  // scratch: grown by the threshold estimate
  std::vector<float> values(2 * k);

  spccl::host::ThresholdResult thr =
      spccl::host::kthLargestMagnitude(send.data(), spcclFloat32, residualIn.data(), n, k, &scratch);
  spccl::host::SelectArgs a{send.data(),
                            spcclFloat32,
                            residualIn.data(),
                            residualOut.data(),
                            n,
                            thr.tauKey,
                            ~uint64_t{0},
                            indices.size(),
                            spccl::core::ValueType::kFloat32,
                            indices.data(),
                            values.data()};
  spccl::host::SelectResult sel = spccl::host::selectPack(a);  // warm-up: page faults out of the way
  std::memcpy(copy.data(), send.data(), n * sizeof(float));
  // Interleaved, so the three see the same load on a shared machine.
  const size_t rows = n / rowLen;
  std::vector<uint32_t> positions(rowLen);
  std::vector<uint64_t> rowScratch(rowLen);
  // The rows in --row-type: the same values, rounded for fp16/bf16.
  const spcclDataType_t rowDataType = rowType == "fp16"   ? spcclFloat16
                                      : rowType == "bf16" ? spcclBfloat16
                                                          : spcclFloat32;
  const size_t rowElemBytes = rowDataType == spcclFloat32 ? 4 : 2;
  std::vector<uint16_t> halves(rowDataType == spcclFloat32 ? 0 : n);
  if (!halves.empty()) spccl::host::storeFloats(send.data(), n, rowDataType, halves.data());
  const auto* rowData = rowDataType == spcclFloat32 ? reinterpret_cast<const unsigned char*>(send.data())
                                                    : reinterpret_cast<const unsigned char*>(halves.data());
  // rowTopK runs with the widest host SIMD (spccl::host::hostSimd()); every
  // narrower level the CPU has (AVX2, the SSE2 baseline) runs on the same rows
  // too (rowTopKAvx2, rowTopKBase), and all must keep the same positions (a
  // hash of every row's, in an untimed pass).
  using spccl::host::HostSimd;
  const HostSimd widest = spccl::host::hostSimd();
  std::vector<HostSimd> narrower;
  for (HostSimd simd : {HostSimd::kAvx2, HostSimd::kBaseline})
    if (simd != widest && spccl::host::hostSimdAvailable(simd) &&
        (simd == HostSimd::kBaseline || widest == HostSimd::kAvx512))
      narrower.push_back(simd);
  uint64_t kept = 0;
  const auto rowTopKWith = [&](HostSimd simd, bool hash) {
    spccl::host::setHostSimd(simd);
    kept = 0;
    uint64_t h = 1469598103934665603ull;
    for (size_t r = 0; r < rows; ++r) {
      const uint32_t c = spccl::host::selectRowTopK(rowData + r * rowLen * rowElemBytes, rowDataType, rowLen, rowKeep,
                                                    positions.data(), rowScratch.data());
      kept += c;
      if (hash)
        for (uint32_t j = 0; j < c; ++j) h = (h ^ (r * rowLen + positions[j])) * 1099511628211ull;
    }
    return h;
  };
  bool rowPathsAgree = true;
  const uint64_t widestHash = rowTopKWith(widest, true);
  for (HostSimd simd : narrower) rowPathsAgree = rowPathsAgree && rowTopKWith(simd, true) == widestHash;
  const auto rowTopK = [&] { rowTopKWith(widest, false); };
  // Four streams of 2k sorted distinct positions each, Gaussian values, varint gaps.
  constexpr int kStreams = 4;
  std::vector<std::vector<unsigned char>> streams(kStreams);
  std::vector<spccl::StreamView> views(kStreams);
  for (int r = 0; r < kStreams; ++r) {
    std::vector<uint32_t> at;
    std::uniform_int_distribution<uint64_t> pos(0, n - 1);
    while (at.size() < std::min<uint64_t>(2 * k, n)) {
      for (size_t j = at.size(); j < std::min<uint64_t>(2 * k, n); ++j) at.push_back(static_cast<uint32_t>(pos(gen)));
      std::sort(at.begin(), at.end());
      at.erase(std::unique(at.begin(), at.end()), at.end());
    }
    std::vector<float> val(at.size());
    for (float& v : val) v = g(gen);
    spccl::StreamInfo info{
        n, 0, n, at.size(), 1, SPCCL_ALGO_ALLGATHER, spccl::core::ValueType::kFloat32, spccl::StreamKind::kPairs};
    info.encoding = spccl::IndexEncoding::kDelta;
    streams[r].resize(spccl::encodedPairsBytes(info.encoding, at.data(), at.size(), 0, n, info.valueType));
    spccl::encodePairs(streams[r].data(), info, at.data(), val.data());
    const spccl::StreamExpect expect{n, 0, n, 1, SPCCL_ALGO_ALLGATHER, info.valueType, false};
    if (!spccl::parseStream(streams[r].data(), streams[r].size(), expect, r, &views[r]).isOk()) {
      std::fprintf(stderr, "could not parse the unpack benchmark's stream %d\n", r);
      return 1;
    }
  }
  std::vector<float>& unpacked = residualOut;  // selectPack's output: rewritten by it on every round anyway
  const auto unpackAdd = [&] {
    std::fill(copy.begin(), copy.end(), 0.0f);
    for (const spccl::StreamView& v : views) spccl::host::accumulateSection(v, copy.data(), 0);
  };
  std::vector<spccl::host::PairCursor> cursors;
  const std::vector<spccl::WireSection> sections(views.begin(), views.end());
  const auto unpackBlock = [&] {
    spccl::host::reduceSections(sections.data(), sections.size(), unpacked.data(), 0, &cursors);
  };

  spccl::host::ThresholdResult radix = thr;
  std::vector<double> tCopies, tSelects, tThresholds, tRadix, tRows, tAdds, tBlocks;
  std::vector<std::vector<double>> tRowsNarrower(narrower.size());
  for (int it = 0; it < iters; ++it) {
    tCopies.push_back(seconds([&] { std::memcpy(copy.data(), send.data(), n * sizeof(float)); }));
    tSelects.push_back(seconds([&] { sel = spccl::host::selectPack(a); }));
    tThresholds.push_back(seconds(
        [&] { thr = spccl::host::kthLargestMagnitude(send.data(), spcclFloat32, residualIn.data(), n, k, &scratch); }));
    tRadix.push_back(seconds([&] {
      radix = spccl::host::kthLargestMagnitudeRadix(send.data(), spcclFloat32, residualIn.data(), n, k, &scratch);
    }));
    tRows.push_back(seconds(rowTopK));
    for (size_t l = 0; l < narrower.size(); ++l)
      tRowsNarrower[l].push_back(seconds([&] { rowTopKWith(narrower[l], false); }));
    tAdds.push_back(seconds(unpackAdd));
    tBlocks.push_back(seconds(unpackBlock));
  }
  // Compared before selectPack writes residualOut again; copy holds unpackAdd's result.
  const bool unpacksAgree = std::memcmp(copy.data(), unpacked.data(), n * sizeof(float)) == 0;
  const double tCopy = median(tCopies), tSelect = median(tSelects), tThreshold = median(tThresholds);
  const double nb = static_cast<double>(n);
  const double copyBytes = 8 * nb, selectBytes = 12 * nb + 8.0 * static_cast<double>(sel.selected),
               thresholdBytes = 8 * nb;
  const double copyGbs = copyBytes / tCopy / 1e9;
  std::printf("# host kernels, %zu floats (%.0f MiB), density %g (k %llu), one thread, median of %d\n", n,
              nb * 4 / (1 << 20), density, static_cast<unsigned long long>(k), iters);
  std::printf("%-11s %10s %10s %8s %9s\n", "kernel", "time (ms)", "bytes (MB)", "GB/s", "of memcpy");
  auto row = [&](const char* name, double t, double bytes) {
    const double gbs = bytes / t / 1e9;
    std::printf("%-11s %10.2f %10.1f %8.2f %8.0f%%\n", name, 1e3 * t, bytes / 1e6, gbs, 100 * gbs / copyGbs);
  };
  row("memcpy", tCopy, copyBytes);
  row("selectPack", tSelect, selectBytes);
  row("threshold", tThreshold, thresholdBytes);
  row("radix", median(tRadix), thresholdBytes);
  const double tRow = median(tRows);
  row("rowTopK", tRow, static_cast<double>(rowElemBytes) * static_cast<double>(rows) * rowLen);
  const double rowElems = static_cast<double>(rows) * rowLen;
  for (size_t l = 0; l < narrower.size(); ++l)
    row(narrower[l] == HostSimd::kAvx2 ? "rowTopKAvx2" : "rowTopKBase", median(tRowsNarrower[l]),
        static_cast<double>(rowElemBytes) * rowElems);
  std::printf("# rowTopK: %zu rows of %u %s, keep %u, host SIMD %s: %.2f ns an element", rows, rowLen, rowType.c_str(),
              rowKeep, spccl::host::hostSimdName(widest), 1e9 * tRow / rowElems);
  for (size_t l = 0; l < narrower.size(); ++l)
    std::printf(" (%s %.2f)", spccl::host::hostSimdName(narrower[l]), 1e9 * median(tRowsNarrower[l]) / rowElems);
  std::printf(", %llu kept\n", static_cast<unsigned long long>(kept));
  row("unpackAdd", median(tAdds), 4 * nb);
  row("unpackBlock", median(tBlocks), 4 * nb);
  std::printf("# selectPack selected %llu pairs (k %llu)\n", static_cast<unsigned long long>(sel.selected),
              static_cast<unsigned long long>(k));
  const bool rowsOk = kept == rows * std::min(rowKeep, rowLen);  // Gaussian rows: no NaN/Inf beyond keep
  const bool thresholdsAgree = thr.tauKey == radix.tauKey && thr.above == radix.above && thr.finite == radix.finite;
  if (!thresholdsAgree) std::printf("# threshold and radix disagree\n");
  if (!unpacksAgree) std::printf("# unpackAdd and unpackBlock disagree\n");
  if (!rowPathsAgree) std::printf("# the row top-k kept different positions on different host SIMD levels\n");
  return sel.selected >= k && sel.selected <= indices.size() && rowsOk && thresholdsAgree && unpacksAgree &&
                 rowPathsAgree
             ? 0
             : 1;
}
