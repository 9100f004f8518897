// cuda::unpackAccumulate (against its rule written out below), denseAccumulate, loadFloats and storeFloats
// against kernels/host, bit for bit (sums that make a NaN: any NaN); and the untrusted-stream checks of the unpack.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

constexpr core::ValueType kWires[] = {core::ValueType::kFloat32, core::ValueType::kFloat16, core::ValueType::kBfloat16};
constexpr spcclDataType_t kTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};
constexpr size_t kSizes[] = {0, 1, 7, 257, 4097, (size_t{1} << 20) + 7};

// Wire values as the sender writes them (core::storeWireValue).
std::vector<unsigned char> wireValues(const std::vector<float>& f, core::ValueType vt) {
  std::vector<unsigned char> out(f.size() * core::wireValueBytes(vt));
  for (size_t i = 0; i < f.size(); ++i) core::storeWireValue(out.data(), i, f[i], vt);
  return out;
}

// acc[index - base] += value for each pair, in pair order: what the host
// path's host::accumulateSection does with a 32-bit-index stream.
void hostUnpack(const std::vector<uint32_t>& idx, const std::vector<unsigned char>& vals, core::ValueType vt,
                std::vector<float>& acc, uint64_t base) {
  for (size_t j = 0; j < idx.size(); ++j) acc[idx[j] - base] += core::loadWireValue(vals.data(), j, vt, 0);
}

TEST(GpuUnpackAccumulate, MatchesHostExactly) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuUnpackAccumulate.MatchesHostExactly");
  for (size_t len : kSizes)
    for (core::ValueType vt : kWires)
      for (Dist d : {Dist::kNormal, Dist::kWide, Dist::kDenormal, Dist::kNonFinite}) {
        SCOPED_TRACE("len=" + std::to_string(len) + " wire=" + wireName(vt) + " dist=" + distName(d) + " " +
                     seedTrace());
        const uint64_t base = 1000;
        std::vector<uint32_t> idx;
        const uint64_t every = 1 + g() % 7;
        for (uint64_t i = 0; i < len; ++i)
          if (g() % every == 0) idx.push_back(static_cast<uint32_t>(base + i));
        const std::vector<unsigned char> vals = wireValues(makeFloats(idx.size(), d, g), vt);
        std::vector<float> acc = makeFloats(len, Dist::kNormal, g), hostAcc = acc;
        hostUnpack(idx, vals, vt, hostAcc, base);

        // Device, with pads behind the real pairs (fixed-capacity mode).
        const size_t pads = 5;
        std::vector<uint32_t> padded = idx;
        padded.insert(padded.end(), pads, cuda::kPadIndex);
        std::vector<unsigned char> paddedVals = vals;
        paddedVals.resize((idx.size() + pads) * core::wireValueBytes(vt), 0x7f);
        DeviceBuffer<uint32_t> dIdx(padded.size());
        DeviceBuffer<unsigned char> dVals(paddedVals.size());
        DeviceBuffer<float> dAcc(len);
        DeviceBuffer<uint32_t> bad(1);
        DeviceBuffer<uint64_t> nnzDev(1);
        CUDA_ASSERT(dIdx.upload(padded));
        CUDA_ASSERT(dVals.upload(paddedVals));
        CUDA_ASSERT(dAcc.upload(acc));
        CUDA_ASSERT(cudaMemset(bad.get(), 0, 4));
        const uint64_t sent = padded.size();  // the sender's count may include the pads
        CUDA_ASSERT(nnzDev.upload(&sent, 1));
        STATUS_ASSERT(cuda::unpackAccumulate(dIdx.get(), dVals.get(), vt, padded.size(), nnzDev.get(), dAcc.get(), base,
                                             len, bad.get(), nullptr));
        SYNC_ASSERT();
        std::vector<float> got;
        std::vector<uint32_t> flag;
        CUDA_ASSERT(dAcc.download(got));
        CUDA_ASSERT(bad.download(flag));
        EXPECT_EQ(flag[0], 0u);
        const size_t at = firstFloatMismatch(got.data(), hostAcc.data(), len);
        ASSERT_EQ(at, len) << "acc[" << at << "]";
      }
}

TEST(GpuUnpackAccumulate, RejectsBadStreamsWithoutWritingOutOfBounds) {
  SPCCL_REQUIRE_DEVICE();
  const uint64_t base = 100, len = 64;
  struct Bad {
    const char* what;
    std::vector<uint32_t> idx;
  };
  const Bad cases[] = {{"below the range", {99, 100, 101}},
                       {"past the range", {100, 150, 164}},
                       {"not increasing", {100, 120, 120, 130}},
                       {"decreasing", {110, 105}},
                       {"real pair after a pad", {100, cuda::kPadIndex, 120}}};
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    // The accumulator sits inside a larger guarded buffer: nothing around it may change.
    DeviceBuffer<float> guarded(len + 256);
    std::vector<float> init(len + 256, 1.5f);
    CUDA_ASSERT(guarded.upload(init));
    std::vector<float> vals(b.idx.size(), 2.0f);
    DeviceBuffer<uint32_t> dIdx(b.idx.size());
    DeviceBuffer<float> dVals(vals.size());
    DeviceBuffer<uint32_t> bad(1);
    CUDA_ASSERT(dIdx.upload(b.idx));
    CUDA_ASSERT(dVals.upload(vals));
    CUDA_ASSERT(cudaMemset(bad.get(), 0, 4));
    STATUS_ASSERT(cuda::unpackAccumulate(dIdx.get(), dVals.get(), core::ValueType::kFloat32, b.idx.size(), nullptr,
                                         guarded.get() + 128, base, len, bad.get(), nullptr));
    SYNC_ASSERT();
    std::vector<uint32_t> flag;
    std::vector<float> after;
    CUDA_ASSERT(bad.download(flag));
    CUDA_ASSERT(guarded.download(after));
    EXPECT_EQ(flag[0], 1u);
    for (size_t i = 0; i < 128; ++i) ASSERT_EQ(after[i], 1.5f) << "guard before, " << i;
    for (size_t i = 128 + len; i < after.size(); ++i) ASSERT_EQ(after[i], 1.5f) << "guard after, " << i;
  }
}

TEST(GpuDenseAccumulate, MatchesHostExactly) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuDenseAccumulate.MatchesHostExactly");
  for (size_t len : kSizes)
    for (core::ValueType vt : kWires)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE("len=" + std::to_string(len) + " wire=" + wireName(vt) + " offset=" + std::to_string(offset) +
                     " " + seedTrace());
        const std::vector<unsigned char> vals = wireValues(makeFloats(len, Dist::kWide, g), vt);
        std::vector<float> dst = makeFloats(len, Dist::kNormal, g), hostDst = dst;
        host::denseAccumulate(vals.data(), vt, len, hostDst.data());
        DeviceBuffer<unsigned char> dVals(vals.size());
        DeviceBuffer<float> dDst(len + offset);
        CUDA_ASSERT(dVals.upload(vals));
        CUDA_ASSERT(cudaMemcpy(dDst.get() + offset, dst.data(), len * 4, cudaMemcpyHostToDevice));
        STATUS_ASSERT(cuda::denseAccumulate(dVals.get(), vt, len, dDst.get() + offset, nullptr));
        SYNC_ASSERT();
        std::vector<float> got;
        CUDA_ASSERT(dDst.download(got));
        const size_t at = firstFloatMismatch(got.data() + offset, hostDst.data(), len);
        ASSERT_EQ(at, len) << "dst[" << at << "]";
      }
}

TEST(GpuConversions, LoadAndStoreFloatsMatchHost) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuConversions.LoadAndStoreFloatsMatchHost");
  for (size_t n : kSizes)
    for (spcclDataType_t t : kTypes)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " type=" + typeName(t) + " offset=" + std::to_string(offset) + " " +
                     seedTrace());
        const size_t es = elementBytes(t);
        // load: any bit pattern of the user type
        const std::vector<unsigned char> user =
            encodeUser(makeFloats(n, Dist::kRandomBits, g), t, Dist::kRandomBits, g);
        std::vector<float> hostF(n);
        host::loadFloats(user.data(), t, n, hostF.data());
        DeviceBuffer<unsigned char> dUser((n + offset) * es);
        DeviceBuffer<float> dF(n + offset);
        CUDA_ASSERT(cudaMemcpy(dUser.get() + offset * es, user.data(), n * es, cudaMemcpyHostToDevice));
        CUDA_ASSERT(dF.poison());
        STATUS_ASSERT(cuda::loadFloats(dUser.get() + offset * es, t, n, dF.get() + offset, nullptr));
        SYNC_ASSERT();
        std::vector<float> got;
        CUDA_ASSERT(dF.download(got));
        ASSERT_EQ(firstBitMismatch(got.data() + offset, hostF.data(), n, 4), n) << "loadFloats";

        // store: any fp32 bit pattern, plus values near the fp16/bf16 rounding edges
        std::vector<float> f = makeFloats(n, (n % 2) ? Dist::kRandomBits : Dist::kWide, g);
        std::vector<unsigned char> hostU(n * es);
        host::storeFloats(f.data(), n, t, hostU.data());
        CUDA_ASSERT(cudaMemcpy(dF.get() + offset, f.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_ASSERT(dUser.poison());
        STATUS_ASSERT(cuda::storeFloats(dF.get() + offset, n, t, dUser.get() + offset * es, nullptr));
        SYNC_ASSERT();
        std::vector<unsigned char> gotU;
        CUDA_ASSERT(dUser.download(gotU));
        ASSERT_EQ(firstBitMismatch(gotU.data() + offset * es, hostU.data(), n, es), n) << "storeFloats";
      }
}
}  // namespace
}  // namespace spccl::gputest
