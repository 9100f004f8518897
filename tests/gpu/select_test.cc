// cuda::kthLargestMagnitude and cuda::selectPack against kernels/host on
// fresh random data: tau, the packed pairs, the counts and the residual must
// be bit-identical (a NaN made by arithmetic matches any NaN: see
// gpu_test_util.h), for every input type, wire type, residual mode, tie
// budget and capacity, including sizes around the tile boundaries.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
constexpr spcclDataType_t kTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};
constexpr core::ValueType kWires[] = {core::ValueType::kFloat32, core::ValueType::kFloat16, core::ValueType::kBfloat16};
constexpr Dist kDists[] = {Dist::kNormal,    Dist::kWide,     Dist::kAllEqual,  Dist::kFewValues,
                           Dist::kNonFinite, Dist::kDenormal, Dist::kRandomBits};
// 0, 1, odd, just above a warp / a block of threads / a tile (4096), and 2^20 + 7.
constexpr size_t kSizes[] = {0, 1, 7, 33, 257, 4097, 3 * 4096 + 5, (size_t{1} << 20) + 7};

enum class ResMode { kNone, kInOnly, kOutOnly, kSeparate, kInPlace };
enum class Budget { kUnlimited, kFromThreshold, kZero, kSmall };
enum class Cap { kAmple, kTight, kZero };

const char* resName(ResMode m) {
  switch (m) {
    case ResMode::kNone:
      return "no_residual";
    case ResMode::kInOnly:
      return "residual_in_only";
    case ResMode::kOutOnly:
      return "residual_out_only";
    case ResMode::kSeparate:
      return "residual_in_out";
    default:
      return "residual_in_place";
  }
}

struct Case {
  size_t n;
  spcclDataType_t type;
  core::ValueType wire;
  Dist dist;
  ResMode res;
  Budget budget;
  Cap cap;
  bool deviceTau;             // tau and budget read from the device ThresholdOut
  size_t offset = 0;          // elements to misalign send and residuals by
  uint64_t k = 0;             // 0: n/100 + 1
  bool keepOverflow = false;  // entries past the capacity stay in the residual
  bool halfMax = false;       // fp16 input: every 5th element +-65504 (fp16's largest)
};

std::string describe(const Case& c) {
  return "n=" + std::to_string(c.n) + " in=" + typeName(c.type) + " wire=" + wireName(c.wire) +
         " dist=" + distName(c.dist) + " " + resName(c.res) + " budget=" + std::to_string(static_cast<int>(c.budget)) +
         " cap=" + std::to_string(static_cast<int>(c.cap)) + " deviceTau=" + std::to_string(c.deviceTau) +
         " offset=" + std::to_string(c.offset) + " keepOverflow=" + std::to_string(c.keepOverflow) +
         (c.halfMax ? " halfMax" : "") + " " + seedTrace();
}

struct HostInput {
  std::vector<unsigned char> send;  // n elements of the type
  std::vector<float> residual;      // n, or empty
};

HostInput makeInput(const Case& c, std::mt19937_64& g) {
  HostInput in;
  const std::vector<float> f = makeFloats(c.n, c.dist, g);
  in.send = encodeUser(f, c.type, c.dist, g);
  if (c.halfMax && c.type == spcclFloat16)
    for (size_t i = 0; i < c.n; i += 5) {
      const uint16_t h = (i / 5) % 2 ? 0xfbffu : 0x7bffu;  // -65504, +65504
      std::memcpy(in.send.data() + 2 * i, &h, sizeof h);
    }
  const bool hasIn = c.res == ResMode::kInOnly || c.res == ResMode::kSeparate || c.res == ResMode::kInPlace;
  if (hasIn) {
    if (c.dist == Dist::kAllEqual || c.dist == Dist::kFewValues) {
      in.residual.assign(c.n, 0.125f);  // keeps v's ties
    } else {
      in.residual = makeFloats(c.n, c.dist == Dist::kRandomBits ? Dist::kRandomBits : Dist::kNormal, g);
      if (c.dist != Dist::kRandomBits)
        for (float& r : in.residual) r *= 0.1f;
    }
  }
  return in;
}

// Reusable device state of one selectPack test (the workspace persists
// across calls on purpose: each pass must leave it ready for the next).
struct SelectWorkspace {
  DeviceBuffer<unsigned char> ws;
  DeviceBuffer<unsigned char> thresholdWs;
  size_t capacityFor = 0;
  bool ensure(size_t n) {
    if (capacityFor >= n && ws.get() != nullptr) return true;
    const size_t bytes = cuda::selectPackWorkspaceBytes(n);
    if (ws.resize(bytes) != cudaSuccess) return false;
    if (!cuda::initSelectPackWorkspace(ws.get(), bytes, nullptr).isOk()) return false;
    if (thresholdWs.resize(cuda::thresholdWorkspaceBytes(n)) != cudaSuccess) return false;
    capacityFor = n;
    return true;
  }
};

void checkThreshold(const Case& c, const HostInput& in, uint64_t k, SelectWorkspace& w,
                    host::ThresholdResult* hostOut = nullptr, DeviceBuffer<cuda::ThresholdOut>* devOut = nullptr) {
  SCOPED_TRACE(describe(c) + " k=" + std::to_string(k));
  const size_t esize = elementBytes(c.type);
  std::vector<uint32_t> scratch(std::max<size_t>(c.n, 1));
  const float* res = in.residual.empty() ? nullptr : in.residual.data();
  const host::ThresholdResult h = host::kthLargestMagnitude(in.send.data(), c.type, res, c.n, k, &scratch);
  if (hostOut) *hostOut = h;

  ASSERT_TRUE(w.ensure(c.n));
  DeviceBuffer<unsigned char> send((c.n + c.offset) * esize);
  DeviceBuffer<float> residual(c.n + c.offset);
  CUDA_ASSERT(cudaMemcpy(send.get() + c.offset * esize, in.send.data(), c.n * esize, cudaMemcpyHostToDevice));
  if (res) {
    CUDA_ASSERT(cudaMemcpy(residual.get() + c.offset, res, c.n * sizeof(float), cudaMemcpyHostToDevice));
  }
  DeviceBuffer<cuda::ThresholdOut> local(1);
  DeviceBuffer<cuda::ThresholdOut>& out = devOut ? *devOut : local;
  CUDA_ASSERT(out.poison());
  STATUS_ASSERT(cuda::kthLargestMagnitude(send.get() + c.offset * esize, c.type,
                                          res ? residual.get() + c.offset : nullptr, c.n, k, out.get(),
                                          w.thresholdWs.get(), w.thresholdWs.bytes(), nullptr));
  SYNC_ASSERT();
  std::vector<cuda::ThresholdOut> d;
  CUDA_ASSERT(out.download(d));
  EXPECT_EQ(d[0].tauKey, h.tauKey);
  EXPECT_EQ(d[0].above, h.above);
  EXPECT_EQ(d[0].finite, h.finite);
}

void checkSelect(const Case& c, std::mt19937_64& g, SelectWorkspace& w) {
  SCOPED_TRACE(describe(c));
  const HostInput in = makeInput(c, g);
  const size_t n = c.n, esize = elementBytes(c.type);
  const uint32_t vb = core::wireValueBytes(c.wire);
  const uint64_t k = c.k ? c.k : n / 100 + 1;
  const bool hasIn = !in.residual.empty();
  const bool hasOut = c.res == ResMode::kOutOnly || c.res == ResMode::kSeparate || c.res == ResMode::kInPlace;

  // tau on both sides (and checked against each other).
  host::ThresholdResult ht{};
  DeviceBuffer<cuda::ThresholdOut> dThreshold(1);
  checkThreshold(c, in, k, w, &ht, &dThreshold);
  if (::testing::Test::HasFatalFailure()) return;

  const uint64_t tieCapacity = k;
  uint64_t budget = kNoLimit;
  switch (c.budget) {
    case Budget::kFromThreshold:
      budget = tieCapacity > ht.above ? tieCapacity - ht.above : 0;
      break;
    case Budget::kZero:
      budget = 0;
      break;
    case Budget::kSmall:
      budget = 3;
      break;
    default:
      break;
  }
  const uint64_t capacity = c.cap == Cap::kAmple ? n : c.cap == Cap::kTight ? k / 2 + 1 : 0;
  // fp8: the compressor's scale for this tau (tau's binade at e4m3's smallest
  // normal one); a tau of 0 or NaN/Inf has none, so a fixed scale.
  const bool fp8 = c.wire == core::ValueType::kFloat8e4m3;
  const int scaleExp =
      fp8 && ht.tauKey != 0 && !core::isNonFiniteKey(ht.tauKey) ? core::fp8ScaleForTau(ht.tauKey) : (fp8 ? -3 : 0);

  // Host reference.
  std::vector<float> hostRes = in.residual;  // in place: the host updates its copy
  std::vector<float> hostOut(hasOut ? n : 0);
  std::vector<uint32_t> hIdx(capacity);
  std::vector<unsigned char> hVal(capacity * vb);
  host::SelectArgs ha{in.send.data(),
                      c.type,
                      hasIn ? hostRes.data() : nullptr,
                      hasOut ? (c.res == ResMode::kInPlace ? hostRes.data() : hostOut.data()) : nullptr,
                      n,
                      ht.tauKey,
                      budget,
                      capacity,
                      c.wire,
                      capacity ? hIdx.data() : nullptr,
                      capacity ? hVal.data() : nullptr,
                      c.keepOverflow,
                      scaleExp};
  const host::SelectResult hr = host::selectPack(ha);
  const std::vector<float>& hostResult = c.res == ResMode::kInPlace ? hostRes : hostOut;

  // Device, twice with each kernel (SelectArgs::storeEarly off, then on);
  // every pass after the first reuses the workspace the one before left.
  DeviceBuffer<unsigned char> send((n + c.offset) * esize);
  DeviceBuffer<float> resIn(n + c.offset), resOut(n + c.offset);
  DeviceBuffer<uint32_t> idx(capacity);
  DeviceBuffer<unsigned char> val(capacity * vb);
  DeviceBuffer<cuda::SelectCounts> counts(1);
  DeviceBuffer<uint32_t> maxKey(1);
  CUDA_ASSERT(cudaMemcpy(send.get() + c.offset * esize, in.send.data(), n * esize, cudaMemcpyHostToDevice));
  for (int pass = 0; pass < 4; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass) + (pass >= 2 ? " (storeEarly)" : ""));
    if (hasIn) {
      CUDA_ASSERT(cudaMemcpy(resIn.get() + c.offset, in.residual.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_ASSERT(resOut.poison());
    CUDA_ASSERT(idx.poison());
    CUDA_ASSERT(val.poison());
    CUDA_ASSERT(counts.poison());
    CUDA_ASSERT(maxKey.poison());
    cuda::SelectArgs da{};
    da.send = send.get() + c.offset * esize;
    da.inType = c.type;
    da.residualIn = hasIn ? resIn.get() + c.offset : nullptr;
    da.residualOut = hasOut ? (c.res == ResMode::kInPlace ? resIn.get() : resOut.get()) + c.offset : nullptr;
    da.n = n;
    da.tauKey = ht.tauKey;
    da.tieBudget = budget;
    if (c.deviceTau) {
      da.threshold = dThreshold.get();
      da.tieCapacity = c.budget == Budget::kFromThreshold ? tieCapacity : kNoLimit;
    }
    da.capacity = capacity;
    da.keepOverflow = c.keepOverflow;
    da.wireType = c.wire;
    da.scaleExp = scaleExp;
    if (fp8) da.maxFiniteKey = maxKey.get();
    da.indices = capacity ? idx.get() : nullptr;
    da.values = capacity ? val.get() : nullptr;
    da.result = counts.get();
    da.storeEarly = pass >= 2;
    STATUS_ASSERT(cuda::selectPack(da, w.ws.get(), w.ws.bytes(), nullptr));
    SYNC_ASSERT();

    std::vector<cuda::SelectCounts> dc;
    CUDA_ASSERT(counts.download(dc));
    ASSERT_EQ(dc[0].selected, hr.selected);
    ASSERT_EQ(dc[0].finiteSelected, hr.finiteSelected);
    if (fp8) {
      std::vector<uint32_t> dm;
      CUDA_ASSERT(maxKey.download(dm));
      ASSERT_EQ(dm[0], hr.maxFiniteKey) << "the selection's largest finite key";
    }
    const size_t m = static_cast<size_t>(std::min<uint64_t>(hr.selected, capacity));
    std::vector<uint32_t> dIdx;
    std::vector<unsigned char> dVal;
    CUDA_ASSERT(idx.download(dIdx));
    CUDA_ASSERT(val.download(dVal));
    const size_t badIdx = firstBitMismatch(dIdx.data(), hIdx.data(), m, 4);
    ASSERT_EQ(badIdx, m) << "pair " << badIdx << ": index " << dIdx[badIdx] << ", host " << hIdx[badIdx];
    const size_t badVal = firstWireMismatch(dVal.data(), hVal.data(), m, c.wire);
    ASSERT_EQ(badVal, m) << "value of pair " << badVal << " differs";
    // Nothing written past the pairs (capacity respected, no stray slots).
    for (size_t j = m; j < capacity; ++j) ASSERT_EQ(dIdx[j], 0xa5a5a5a5u) << "slot " << j << " written";
    if (hasOut) {
      std::vector<float> dRes;
      const DeviceBuffer<float>& outBuf = c.res == ResMode::kInPlace ? resIn : resOut;
      CUDA_ASSERT(outBuf.download(dRes, n + c.offset));
      const size_t bad = firstFloatMismatch(dRes.data() + c.offset, hostResult.data(), n);
      ASSERT_EQ(bad, n) << "residual[" << bad << "] = 0x" << std::hex << bitsOf(dRes[c.offset + bad]) << ", host 0x"
                        << bitsOf(hostResult[bad]);
    }
  }
}

TEST(GpuThreshold, MatchesHostExactly) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuThreshold.MatchesHostExactly");
  for (size_t n : kSizes)
    for (spcclDataType_t t : kTypes)
      for (Dist d : kDists)
        for (bool withResidual : {false, true}) {
          Case c{n,
                 t,
                 core::ValueType::kFloat32,
                 d,
                 withResidual ? ResMode::kSeparate : ResMode::kNone,
                 Budget::kUnlimited,
                 Cap::kAmple,
                 false};
          const HostInput in = makeInput(c, g);
          for (uint64_t k :
               {uint64_t{0}, uint64_t{1}, uint64_t{n / 100 + 1}, uint64_t{n / 2 + 1}, uint64_t{n}, uint64_t{n + 3}}) {
            checkThreshold(c, in, k, w);
            if (HasFatalFailure()) return;
          }
        }
}

TEST(GpuSelectPack, MatchesHostAcrossTypesWiresAndResiduals) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.MatchesHostAcrossTypesWiresAndResiduals");
  const ResMode modes[] = {ResMode::kNone, ResMode::kInOnly, ResMode::kOutOnly, ResMode::kSeparate, ResMode::kInPlace};
  int i = 0;
  for (size_t n : kSizes)
    for (spcclDataType_t t : kTypes)
      for (core::ValueType wire : kWires)
        for (Dist d : kDists) {
          // All residual modes on the small sizes; one (rotating) on the large one.
          for (ResMode m : modes) {
            ++i;
            if (n > 100000 && (i % 5) != 0) continue;
            checkSelect(Case{n, t, wire, d, m, Budget::kUnlimited, Cap::kAmple, false}, g, w);
            if (HasFatalFailure()) return;
          }
        }
}

TEST(GpuSelectPack, HalfMaxOnNarrowerWiresMatchesHost) {
  SPCCL_REQUIRE_DEVICE();
  // An fp16 buffer's 65504 rounds to 65536 on a bf16 wire (and fp16 outputs
  // would take it as Inf): the host bounds the wire value at 65504 and keeps
  // the excess in the residual; the device must send and keep the same bits.
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.HalfMaxOnNarrowerWiresMatchesHost");
  for (size_t n : {size_t{257}, size_t{3 * 4096 + 5}})
    for (core::ValueType wire : kWires)
      for (ResMode m : {ResMode::kNone, ResMode::kSeparate, ResMode::kInPlace}) {
        Case c{n, spcclFloat16, wire, Dist::kNormal, m, Budget::kUnlimited, Cap::kAmple, false};
        c.halfMax = true;
        c.k = n / 5 + 1;  // every +-65504 and a few more
        checkSelect(c, g, w);
        if (HasFatalFailure()) return;
      }
}

// fp8 codes at a given scale, and the selection's largest finite key (what
// the compressor's max rule reads), on the same inputs as the other wires.
TEST(GpuSelectPack, Fp8WireMatchesHost) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.Fp8WireMatchesHost");
  int i = 0;
  for (size_t n : kSizes)
    for (spcclDataType_t t : kTypes)
      for (Dist d : kDists)
        for (ResMode m : {ResMode::kNone, ResMode::kSeparate, ResMode::kInPlace}) {
          if (n > 100000 && (++i % 3) != 0) continue;
          checkSelect(Case{n, t, core::ValueType::kFloat8e4m3, d, m, Budget::kUnlimited, Cap::kAmple, false}, g, w);
          if (HasFatalFailure()) return;
        }
  for (Budget b : {Budget::kFromThreshold, Budget::kSmall})
    for (Cap cap : {Cap::kTight, Cap::kZero})
      for (bool keep : {false, true}) {
        Case c{3 * 4096 + 5,
               spcclFloat32,
               core::ValueType::kFloat8e4m3,
               Dist::kNonFinite,
               ResMode::kSeparate,
               b,
               cap,
               b == Budget::kFromThreshold};
        c.keepOverflow = keep;
        checkSelect(c, g, w);
        if (HasFatalFailure()) return;
      }
}

TEST(GpuSelectPack, TieBudgetAndCapacity) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.TieBudgetAndCapacity");
  for (size_t n : {size_t{4097}, size_t{3 * 4096 + 5}, size_t{100003}})
    for (Dist d : {Dist::kFewValues, Dist::kAllEqual, Dist::kNonFinite, Dist::kNormal})
      for (Budget b : {Budget::kUnlimited, Budget::kFromThreshold, Budget::kZero, Budget::kSmall})
        for (Cap cap : {Cap::kAmple, Cap::kTight, Cap::kZero})
          for (bool deviceTau : {false, true})
            for (bool keep : {false, true}) {
              if (deviceTau && b != Budget::kFromThreshold && b != Budget::kUnlimited) continue;
              if (keep && cap == Cap::kAmple) continue;  // nothing overflows
              Case c{n, spcclFloat32, core::ValueType::kFloat16, d, ResMode::kSeparate, b, cap, deviceTau};
              c.keepOverflow = keep;
              checkSelect(c, g, w);
              if (HasFatalFailure()) return;
            }
}

TEST(GpuSelectPack, UnalignedBuffersTakeTheScalarPath) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.UnalignedBuffersTakeTheScalarPath");
  for (size_t offset : {size_t{1}, size_t{3}})
    for (spcclDataType_t t : kTypes)
      for (ResMode m : {ResMode::kSeparate, ResMode::kInPlace}) {
        checkSelect(Case{2 * 4096 + 3, t, core::ValueType::kBfloat16, Dist::kNonFinite, m, Budget::kFromThreshold,
                         Cap::kAmple, true, offset},
                    g, w);
        if (HasFatalFailure()) return;
      }
}

TEST(GpuSelectPack, WorkspaceReusedAcrossSizesWithoutReset) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  ASSERT_TRUE(w.ensure((size_t{1} << 20) + 7));
  auto g = rngFor("GpuSelectPack.WorkspaceReusedAcrossSizesWithoutReset");
  for (size_t n :
       {(size_t{1} << 20) + 7, size_t{5}, size_t{4097}, (size_t{1} << 20), size_t{300001}, size_t{0}, size_t{8192}}) {
    checkSelect(Case{n, spcclFloat32, core::ValueType::kFloat32, Dist::kWide, ResMode::kSeparate,
                     Budget::kFromThreshold, Cap::kTight, true},
                g, w);
    if (HasFatalFailure()) return;
  }
}

// One workspace, sized for a 300-tile pass, alternately serves a 2-tile pass
// whose tile 0 keeps 4 x (g + 1) + 1 entries (g: its generation, one per pass
// since the init), a count that reads as an aggregate flag of the next
// generation, and the 300-tile pass. The workspace is laid out from its size
// (select_pack_layout.h) because a layout from the pass's tile count would put
// the small pass's counts in the large pass's flag region, and a look-back that
// met one before the real flag would take an old prefix: wrong pairs and a
// wrong count, depending on tile timing. The large
// pass must match the host on every round.
TEST(GpuSelectPack, SmallPassCountsNeverReadAsFlags) {
  SPCCL_REQUIRE_DEVICE();
  constexpr size_t kTileElements = 4096;  // select_pack.cu: 256 threads x 16 elements
  const size_t big = 300 * kTileElements, small = 2 * kTileElements;
  const size_t bytes = cuda::selectPackWorkspaceBytes(big);
  DeviceBuffer<unsigned char> ws(bytes);
  STATUS_ASSERT(cuda::initSelectPackWorkspace(ws.get(), bytes, nullptr));
  auto g = rngFor("GpuSelectPack.SmallPassCountsNeverReadAsFlags");
  std::normal_distribution<float> normal;
  std::vector<float> bigIn(big);
  for (float& x : bigIn) x = normal(g);
  const uint32_t tauKey = core::magnitudeKey(1.0f);
  std::vector<uint32_t> hIdx(big);
  std::vector<float> hVal(big);
  const host::SelectResult hr =
      host::selectPack(host::SelectArgs{bigIn.data(), spcclFloat32, nullptr, nullptr, big, tauKey, kNoLimit, big,
                                        core::ValueType::kFloat32, hIdx.data(), hVal.data(), false});
  DeviceBuffer<float> dBig(big), dSmall(small);
  DeviceBuffer<uint32_t> idx(big);
  DeviceBuffer<float> val(big);
  DeviceBuffer<cuda::SelectCounts> counts(1);
  CUDA_ASSERT(dBig.upload(bigIn));
  auto pass = [&](const float* send, size_t n) {
    cuda::SelectArgs a{};
    a.send = send;
    a.inType = spcclFloat32;
    a.n = n;
    a.tauKey = tauKey;
    a.tieBudget = kNoLimit;
    a.capacity = big;
    a.wireType = core::ValueType::kFloat32;
    a.indices = idx.get();
    a.values = val.get();
    a.result = counts.get();
    return cuda::selectPack(a, ws.get(), bytes, nullptr);
  };
  uint64_t generation = 0;
  for (int round = 0; round < 32; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t keep = 4 * (generation + 1) + 1;
    std::vector<float> smallIn(small, 0.0f);
    for (uint64_t j = 0; j < keep; ++j) smallIn[j] = 2.0f;  // tile 0 only
    CUDA_ASSERT(dSmall.upload(smallIn));
    STATUS_ASSERT(pass(dSmall.get(), small));
    SYNC_ASSERT();
    ++generation;
    std::vector<cuda::SelectCounts> c;
    CUDA_ASSERT(counts.download(c));
    ASSERT_EQ(c[0].selected, keep);

    STATUS_ASSERT(pass(dBig.get(), big));
    SYNC_ASSERT();
    ++generation;
    CUDA_ASSERT(counts.download(c));
    ASSERT_EQ(c[0].selected, hr.selected);
    std::vector<uint32_t> dIdx;
    CUDA_ASSERT(idx.download(dIdx, hr.selected));
    const size_t bad = firstBitMismatch(dIdx.data(), hIdx.data(), hr.selected, 4);
    ASSERT_EQ(bad, hr.selected) << "pair " << bad;
  }
}

TEST(GpuSelectPack, HighDensityAndEverythingSelected) {
  SPCCL_REQUIRE_DEVICE();
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.HighDensityAndEverythingSelected");
  const size_t n = 200003;
  for (uint64_t k : {n / 2, n, n + 10}) {  // k > finite: tau = 0, every non-zero entry goes
    Case c{
        n,           spcclFloat32, core::ValueType::kFloat32, Dist::kNormal, ResMode::kSeparate, Budget::kFromThreshold,
        Cap::kAmple, true};
    c.k = k;
    checkSelect(c, g, w);
    if (HasFatalFailure()) return;
  }
}

// 2^26 elements: the size where scheduling effects show. Needs ~3 GB on the
// device; skipped on smaller GPUs.
TEST(GpuSelectPack, Huge2To26) {
  SPCCL_REQUIRE_DEVICE();
  const size_t n = size_t{1} << 26;
  if (freeDeviceBytes() < (size_t{6} << 30)) GTEST_SKIP() << "needs 6 GiB of free device memory";
  SelectWorkspace w;
  auto g = rngFor("GpuSelectPack.Huge2To26");
  checkSelect(Case{n, spcclFloat32, core::ValueType::kFloat32, Dist::kNormal, ResMode::kSeparate, Budget::kUnlimited,
                   Cap::kAmple, false},
              g, w);
  if (HasFatalFailure()) return;
  checkSelect(Case{n, spcclFloat16, core::ValueType::kBfloat16, Dist::kNonFinite, ResMode::kInPlace,
                   Budget::kFromThreshold, Cap::kTight, true},
              g, w);
  if (HasFatalFailure()) return;
  checkSelect(Case{n, spcclBfloat16, core::ValueType::kFloat16, Dist::kFewValues, ResMode::kSeparate,
                   Budget::kFromThreshold, Cap::kTight, true},
              g, w);
}

}  // namespace
}  // namespace spccl::gputest
