// The host executor (kernels/host/host_executor.h): its operations give what
// the host kernels give, and in guarded mode its memory is out of reach
// everywhere but inside its own calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "kernels/host/host_executor.h"
#include "kernels/host/host_kernels.h"
#include "kernels/host/sections.h"

namespace spccl::test {
namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  v[7] = std::numeric_limits<float>::quiet_NaN();
  v[11] = -std::numeric_limits<float>::infinity();
  return v;
}

class HostExecutorTest : public ::testing::TestWithParam<bool> {};

// Every operation, on executor memory, equals the host kernel on plain memory.
TEST_P(HostExecutorTest, OperationsEqualTheHostKernels) {
  host::HostExecutor ex(GetParam());
  const size_t n = 70000;  // past the threshold's sampling floor (2^16)
  const std::vector<float> v = randomFloats(n, 3);
  ExecMemory send, indices, values, staged, wire;
  ASSERT_TRUE(send.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.fromHost(send.get(), v.data(), n * sizeof(float)).isOk());

  const uint64_t k = 700;
  ThresholdStats th;
  ASSERT_TRUE(ex.kthLargestMagnitude(send.get(), spcclFloat32, nullptr, n, k, &th).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  std::vector<uint32_t> scratch;
  const host::ThresholdResult ref = host::kthLargestMagnitude(v.data(), spcclFloat32, nullptr, n, k, &scratch);
  EXPECT_EQ(th.tauKey, ref.tauKey);
  EXPECT_EQ(th.above, ref.above);
  EXPECT_EQ(th.finite, ref.finite);

  const uint64_t slots = 1000;
  ASSERT_TRUE(indices.ensure(ex, slots * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(values.ensure(ex, slots * 2).isOk());
  const SelectSpec spec{send.get(),
                        spcclFloat32,
                        nullptr,
                        nullptr,
                        n,
                        th.tauKey,
                        3,
                        slots,
                        core::ValueType::kFloat16,
                        indices.get<uint32_t>(),
                        values.get()};
  SelectStats sel;
  ASSERT_TRUE(ex.selectPack(spec, &sel).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  std::vector<uint32_t> refIdx(slots), gotIdx(slots);
  std::vector<uint16_t> refVal(slots), gotVal(slots);
  const host::SelectArgs a{
      v.data(),      spcclFloat32, nullptr, nullptr, n, th.tauKey, 3, slots, core::ValueType::kFloat16,
      refIdx.data(), refVal.data()};
  const host::SelectResult r = host::selectPack(a);
  EXPECT_EQ(sel.selected, r.selected);
  EXPECT_EQ(sel.finiteSelected, r.finiteSelected);
  ASSERT_LE(r.selected, slots);
  ASSERT_TRUE(ex.toHost(gotIdx.data(), indices.get(), slots * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.toHost(gotVal.data(), values.get(), slots * 2).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  gotIdx.resize(r.selected), refIdx.resize(r.selected), gotVal.resize(r.selected), refVal.resize(r.selected);
  EXPECT_EQ(gotIdx, refIdx);
  EXPECT_EQ(gotVal, refVal);

  uint64_t deltaBytes = 0;
  ASSERT_TRUE(ex.deltaIndexBytes(indices.get<uint32_t>(), r.selected, 0, &deltaBytes).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(deltaBytes, host::deltaIndexBytes(refIdx.data(), r.selected, 0));
  EXPECT_GT(deltaBytes, r.selected);  // gaps of about n / k: two-byte varints among them

  uint32_t maxKey = 0;
  ASSERT_TRUE(ex.maxFiniteKey(send.get(), spcclFloat32, nullptr, n, &maxKey).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(maxKey, host::maxFiniteMagnitudeKey(v.data(), spcclFloat32, nullptr, n));
  EXPECT_NE(maxKey, 0u);

  const int scaleExp = core::fp8ScaleForMax(maxKey);
  ASSERT_TRUE(wire.ensure(ex, n).isOk());
  ASSERT_TRUE(ex.toWire(send.get<float>(), n, core::ValueType::kFloat8e4m3, scaleExp, wire.get()).isOk());
  std::vector<unsigned char> got(n), want(n);
  ASSERT_TRUE(ex.toHost(got.data(), wire.get(), n).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  host::toWire(v.data(), n, core::ValueType::kFloat8e4m3, scaleExp, want.data());
  EXPECT_EQ(got, want);

  ASSERT_TRUE(ex.fill(wire.get(), 0x5a, n).isOk());
  ASSERT_TRUE(ex.toHost(got.data(), wire.get(), n).isOk());
  EXPECT_EQ(got, std::vector<unsigned char>(n, 0x5a));
}

// Memory survives growth of other buffers and release; withMemory runs its
// function and returns its status.
TEST_P(HostExecutorTest, WithMemoryRunsItsFunction) {
  host::HostExecutor ex(GetParam());
  ExecMemory a, b;
  ASSERT_TRUE(a.ensure(ex, 64).isOk());
  ASSERT_TRUE(ex.withMemory([&]() -> Status {
                  std::memset(a.get(), 7, 64);
                  return Status::ok();
                }).isOk());
  ASSERT_TRUE(b.ensure(ex, 1 << 20).isOk());  // another allocation: a is still there
  unsigned char first = 0;
  ASSERT_TRUE(ex.withMemory([&]() -> Status {
                  first = a.get<unsigned char>()[63];
                  return Status::ok();
                }).isOk());
  EXPECT_EQ(first, 7);
  EXPECT_EQ(ex.withMemory([] { return invalidUsage("from the function"); }).code(), spcclInvalidUsage);
  ASSERT_TRUE(a.ensure(ex, 1 << 16).isOk());  // growth: a new allocation
  EXPECT_GE(a.bytes(), size_t{1} << 16);
}

// The fixed-capacity operations: an estimate left in executor memory drives
// the pass as the same tau given by value does; a pass that overflows its
// slots keeps the overflow in the residual and leaves its counts in
// executor memory; accumulatePairs sums the first min(count, capacity)
// pairs and refuses a peer's index out of range.
TEST_P(HostExecutorTest, FixedCapacityOperations) {
  host::HostExecutor ex(GetParam());
  const size_t n = 70000;
  const std::vector<float> v = randomFloats(n, 5);
  const uint64_t k = 700, capacity = 500;  // fewer slots than k: the pass overflows
  ExecMemory send, tau, counts, indices, values, residual, acc;
  ASSERT_TRUE(send.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.fromHost(send.get(), v.data(), n * sizeof(float)).isOk());
  ASSERT_TRUE(tau.ensure(ex, sizeof(ThresholdStats)).isOk());
  ASSERT_TRUE(counts.ensure(ex, sizeof(PairCounts)).isOk());
  ASSERT_TRUE(indices.ensure(ex, capacity * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(values.ensure(ex, capacity * sizeof(float)).isOk());
  ASSERT_TRUE(residual.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(acc.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(
      ex.kthLargestMagnitudeInMemory(send.get(), spcclFloat32, nullptr, n, k, tau.get<ThresholdStats>()).isOk());
  const SelectSpec spec = fixedCapacitySpec(send.get(), spcclFloat32, nullptr, residual.get<float>(), n, capacity,
                                            capacity, core::ValueType::kFloat32, tau.get<ThresholdStats>(),
                                            indices.get<uint32_t>(), values.get(), counts.get<PairCounts>());
  SelectStats untouched{12345, 0, 0};
  ASSERT_TRUE(ex.selectPack(spec, &untouched).isOk());
  EXPECT_EQ(untouched.selected, 12345u);  // the counts went to executor memory

  std::vector<uint32_t> scratch, refIdx(capacity);
  std::vector<float> refVal(capacity), refRes(n);
  const host::ThresholdResult th = host::kthLargestMagnitude(v.data(), spcclFloat32, nullptr, n, k, &scratch);
  const host::SelectArgs a{v.data(),
                           spcclFloat32,
                           nullptr,
                           refRes.data(),
                           n,
                           th.tauKey,
                           capacity > th.above ? capacity - th.above : 0,
                           capacity,
                           core::ValueType::kFloat32,
                           refIdx.data(),
                           refVal.data(),
                           true};
  const host::SelectResult r = host::selectPack(a);
  ASSERT_GT(r.selected, capacity);
  PairCounts got{};
  std::vector<uint32_t> gotIdx(capacity);
  std::vector<float> gotVal(capacity), gotRes(n);
  ASSERT_TRUE(ex.toHost(&got, counts.get(), sizeof got).isOk());
  ASSERT_TRUE(ex.toHost(gotIdx.data(), indices.get(), capacity * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.toHost(gotVal.data(), values.get(), capacity * sizeof(float)).isOk());
  ASSERT_TRUE(ex.toHost(gotRes.data(), residual.get(), n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(got.selected, r.selected);
  EXPECT_EQ(got.finiteSelected, r.finiteSelected);
  EXPECT_EQ(gotIdx, refIdx);
  EXPECT_EQ(std::memcmp(gotVal.data(), refVal.data(), capacity * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gotRes.data(), refRes.data(), n * sizeof(float)), 0);

  ASSERT_TRUE(ex.fill(acc.get(), 0, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.accumulatePairs(indices.get<uint32_t>(), values.get(), core::ValueType::kFloat32, capacity,
                                 &counts.get<PairCounts>()->selected, acc.get<float>(), n)
                  .isOk());
  std::vector<float> gotAcc(n), refAcc(n, 0.0f);
  for (uint64_t i = 0; i < capacity; ++i) refAcc[refIdx[i]] += refVal[i];
  ASSERT_TRUE(ex.toHost(gotAcc.data(), acc.get(), n * sizeof(float)).isOk());
  EXPECT_EQ(std::memcmp(gotAcc.data(), refAcc.data(), n * sizeof(float)), 0);

  const uint32_t outOfRange = static_cast<uint32_t>(n);
  ASSERT_TRUE(ex.fromHost(indices.get<uint32_t>() + 3, &outOfRange, sizeof outOfRange).isOk());
  EXPECT_EQ(ex.accumulatePairs(indices.get<uint32_t>(), values.get(), core::ValueType::kFloat32, capacity,
                               &counts.get<PairCounts>()->selected, acc.get<float>(), n)
                .code(),
            spcclRemoteError);
}

// The partition's split by owner: every id in its owner's group
// (core::rowOwner), the groups in owner order, input order kept in each, the
// row with its id, and the groups' sizes.
TEST_P(HostExecutorTest, SplitByOwner) {
  host::HostExecutor ex(GetParam());
  const uint64_t n = 3001, rowLen = 3;
  const int ranks = 5;
  std::vector<int64_t> ids(n);
  std::vector<double> rows(n * rowLen);
  for (uint64_t i = 0; i < n; ++i) {
    ids[i] = static_cast<int64_t>(i * 7919) - 1000000;
    for (uint64_t e = 0; e < rowLen; ++e) rows[i * rowLen + e] = static_cast<double>(ids[i]) + 0.25 * e;
  }
  ExecMemory inIds, inRows, outIds, outRows;
  ASSERT_TRUE(inIds.ensure(ex, n * 8).isOk());
  ASSERT_TRUE(inRows.ensure(ex, rows.size() * 8).isOk());
  ASSERT_TRUE(outIds.ensure(ex, n * 8).isOk());
  ASSERT_TRUE(outRows.ensure(ex, rows.size() * 8).isOk());
  ASSERT_TRUE(ex.fromHost(inIds.get(), ids.data(), n * 8).isOk());
  ASSERT_TRUE(ex.fromHost(inRows.get(), rows.data(), rows.size() * 8).isOk());
  std::vector<uint64_t> perOwner(ranks);
  ASSERT_TRUE(ex.splitByOwner(inIds.get<int64_t>(), inRows.get(), spcclFloat64, n, rowLen, ranks, outIds.get<int64_t>(),
                              outRows.get(), perOwner.data())
                  .isOk());
  std::vector<int64_t> gotIds(n);
  std::vector<double> gotRows(rows.size());
  ASSERT_TRUE(ex.toHost(gotIds.data(), outIds.get(), n * 8).isOk());
  ASSERT_TRUE(ex.toHost(gotRows.data(), outRows.get(), rows.size() * 8).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  std::vector<int64_t> want;
  for (int r = 0; r < ranks; ++r) {
    uint64_t inGroup = 0;
    for (int64_t id : ids)
      if (static_cast<int>(core::rowOwner(id, ranks)) == r) {
        want.push_back(id);
        ++inGroup;
      }
    EXPECT_EQ(perOwner[r], inGroup) << r;
    EXPECT_GT(inGroup, n / ranks / 2) << "the hash spreads the ids";
  }
  EXPECT_EQ(gotIds, want);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t e = 0; e < rowLen; ++e)
      ASSERT_EQ(gotRows[j * rowLen + e], static_cast<double>(gotIds[j]) + 0.25 * e) << j;
}

// Stream checksums through the executor: sealCrc32c writes what the host's
// Integrity::seal writes (flag, CRC, and the test's flip), streamCrc32c
// computes the CRC a stream carries, and verifyStreamsOn accepts a sealed
// stream and refuses one with a bit flipped, naming the rank.
TEST_P(HostExecutorTest, StreamChecksums) {
  host::HostExecutor ex(GetParam());
  std::mt19937_64 g(3);
  for (size_t bytes : {sizeof(StreamHeader), size_t{1000}, size_t{70001}}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> plain(bytes);
    for (auto& b : plain) b = static_cast<unsigned char>(g());
    plain[kFlagsOffset] = 0;
    for (bool flip : {false, true}) {
      std::vector<unsigned char> want = plain;
      Integrity integrity{true, flip ? 1u : 0u};
      integrity.seal(want.data(), bytes);
      ExecMemory stream;
      ASSERT_TRUE(stream.ensure(ex, bytes).isOk());
      ASSERT_TRUE(ex.fromHost(stream.get(), plain.data(), bytes).isOk());
      ASSERT_TRUE(
          ex.sealCrc32c(stream.get(), bytes, kFlagsOffset, kChecksumFlag, kCrcOffset, flip ? bytes / 2 : SIZE_MAX)
              .isOk());
      std::vector<unsigned char> got(bytes);
      uint32_t crc = 0;
      ASSERT_TRUE(ex.toHost(got.data(), stream.get(), bytes).isOk());
      ASSERT_TRUE(ex.streamCrc32c(stream.get(), bytes, kCrcOffset, &crc).isOk());
      ASSERT_TRUE(ex.settle().isOk());
      EXPECT_EQ(got, want);
      uint32_t carried;
      std::memcpy(&carried, got.data() + kCrcOffset, sizeof carried);
      EXPECT_EQ(crc == carried, !flip);
      const size_t offsets[1] = {0}, sizes[1] = {bytes};
      std::vector<uint32_t> scratch;
      const Status v = verifyStreamsOn(ex, stream.get<unsigned char>(), offsets, sizes, 1, got.data(), 3, &scratch);
      EXPECT_EQ(v.code(), flip ? spcclRemoteError : spcclSuccess) << v.message();
      if (flip) {
        EXPECT_NE(v.message().find("rank 3"), std::string::npos) << v.message();
      }
    }
  }
}

// The in-band call agreement of the fixed policy: records that all equal
// record 0 in their checked bytes pass untouched; one that differs anywhere
// in them zeroes every record's counts and fails the call. Bytes past the
// checked ones may differ. storeSmall writes up to 64 bytes, no more.
TEST_P(HostExecutorTest, AgreeInBand) {
  host::HostExecutor ex(GetParam());
  struct Record {
    unsigned char call[40];
    PairCounts counts;
  };
  const size_t ranks = 3, checked = sizeof(Record::call);
  ExecMemory records;
  ASSERT_TRUE(records.ensure(ex, ranks * sizeof(Record)).isOk());
  auto* dev = records.get<Record>();
  const auto store = [&](size_t at, unsigned char fill) {
    Record r{};
    std::memset(r.call, fill, sizeof r.call);
    r.counts = PairCounts{100 + at, 50 + at};
    ASSERT_TRUE(ex.storeSmall(dev + at, &r, sizeof r).isOk());
  };
  const auto countsOf = [&](size_t at) {
    PairCounts c{};
    EXPECT_TRUE(ex.toHost(&c, &dev[at].counts, sizeof c).isOk());
    EXPECT_TRUE(ex.settle().isOk());
    return c;
  };
  for (size_t r = 0; r < ranks; ++r) ASSERT_NO_FATAL_FAILURE(store(r, 7));
  ASSERT_TRUE(ex.agreeInBand(dev, sizeof(Record), checked, offsetof(Record, counts), ranks).isOk());
  for (size_t r = 0; r < ranks; ++r) EXPECT_EQ(countsOf(r).selected, 100 + r) << r;
  for (size_t byte : {size_t{0}, checked - 1}) {
    SCOPED_TRACE(byte);
    for (size_t r = 0; r < ranks; ++r) ASSERT_NO_FATAL_FAILURE(store(r, 7));
    const unsigned char other = 8;
    ASSERT_TRUE(ex.fromHost(dev[2].call + byte, &other, 1).isOk());
    const Status s = ex.agreeInBand(dev, sizeof(Record), checked, offsetof(Record, counts), ranks);
    EXPECT_EQ(s.code(), spcclInvalidUsage);
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
    for (size_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(countsOf(r).selected, 0u) << r;
      EXPECT_EQ(countsOf(r).finiteSelected, 0u) << r;
    }
  }
  EXPECT_TRUE(ex.asyncFindings().isOk());  // the host reported it in the call
  unsigned char big[Executor::kSmallStoreBytes + 1] = {};
  EXPECT_EQ(ex.storeSmall(dev, big, sizeof big).code(), spcclInvalidArgument);
}

// Streams encoded and summed through the executor (the collectives' path)
// are the bytes and the bits of the codec's host functions, and a corrupt
// stream gets parseStream's verdict.
TEST_P(HostExecutorTest, StreamsThroughTheExecutor) {
  host::HostExecutor ex(GetParam());
  std::mt19937 g(9);
  const uint64_t count = 5000, b = 1000, e = 4000, len = e - b;
  for (core::ValueType vt : {core::ValueType::kFloat32, core::ValueType::kFloat16, core::ValueType::kBfloat16,
                             core::ValueType::kFloat8e4m3}) {
    for (IndexEncoding enc : {IndexEncoding::kCoo32, IndexEncoding::kDelta, IndexEncoding::kBitmap}) {
      SCOPED_TRACE(testing::Message() << "value type " << static_cast<int>(vt) << " encoding "
                                      << static_cast<int>(enc));
      const StreamExpect expect{count, b, e, 42, SPCCL_ALGO_ALLGATHER, vt, false};
      std::vector<std::vector<unsigned char>> want;
      std::vector<size_t> sizes, offsets;
      size_t total = 0;
      ExecMemory idx, val, streams, out;
      for (uint64_t keep : {uint64_t{0}, uint64_t{17}, uint64_t{900}}) {  // empty, sparse, dense enough to block
        std::vector<uint32_t> indices;
        for (uint64_t i = b; i < e; ++i)
          if (std::uniform_int_distribution<uint64_t>(0, len - 1)(g) < keep)
            indices.push_back(static_cast<uint32_t>(i));
        const std::vector<float> v = randomFloats(indices.size() + 12, static_cast<uint32_t>(keep));
        std::vector<unsigned char> wire(indices.size() * core::wireValueBytes(vt));
        for (size_t j = 0; j < indices.size(); ++j) core::storeWireValue(wire.data(), j, v[j], vt, -2);
        StreamInfo info{count, b, e, indices.size(), 42, SPCCL_ALGO_ALLGATHER, vt, StreamKind::kPairs};
        info.encoding = enc;
        info.scaleExp = vt == core::ValueType::kFloat8e4m3 ? -2 : 0;
        const size_t bytes = encodedPairsBytes(enc, indices.data(), indices.size(), b, e, vt);
        std::vector<unsigned char> ref(bytes);
        ASSERT_EQ(encodePairs(ref.data(), info, indices.data(), wire.data()), bytes);
        // Through the executor, into memory full of junk: every byte must be written.
        ASSERT_TRUE(idx.ensure(ex, indices.size() * sizeof(uint32_t) + 4).isOk());
        ASSERT_TRUE(val.ensure(ex, wire.size() + 4).isOk());
        ASSERT_TRUE(streams.ensure(ex, bytes).isOk());
        ASSERT_TRUE(ex.fill(streams.get(), 0xa5, bytes).isOk());
        ASSERT_TRUE(ex.fromHost(idx.get(), indices.data(), indices.size() * sizeof(uint32_t)).isOk());
        ASSERT_TRUE(ex.fromHost(val.get(), wire.data(), wire.size()).isOk());
        ASSERT_TRUE(encodePairsOn(ex, streams.get(), bytes, info, idx.get<uint32_t>(), val.get()).isOk());
        std::vector<unsigned char> got(bytes);
        ASSERT_TRUE(ex.toHost(got.data(), streams.get(), bytes).isOk());
        ASSERT_TRUE(ex.settle().isOk());
        EXPECT_EQ(got, ref) << "keep " << keep;
        want.push_back(ref);
        sizes.push_back(bytes);
        offsets.push_back(total);
        total += bytes;
      }
      // All three in executor memory, summed in rank order.
      std::vector<unsigned char> all;
      for (const auto& w : want) all.insert(all.end(), w.begin(), w.end());
      ASSERT_TRUE(streams.ensure(ex, total).isOk());
      ASSERT_TRUE(ex.fromHost(streams.get(), all.data(), total).isOk());
      ASSERT_TRUE(out.ensure(ex, count * sizeof(float)).isOk());
      std::vector<StreamView> views(want.size());
      for (size_t r = 0; r < want.size(); ++r)
        ASSERT_TRUE(parseStream(all.data() + offsets[r], sizes[r], expect, static_cast<int>(r), &views[r]).isOk());
      const std::vector<WireSection> sections(views.begin(), views.end());
      std::vector<float> ref(count, 7.0f), got(count);
      std::vector<host::PairCursor> cursors;
      host::reduceSections(sections.data(), sections.size(), ref.data(), 0, &cursors);
      StreamsScratch scratch;
      ASSERT_TRUE(ex.fill(out.get(), 0, count * sizeof(float)).isOk());
      ASSERT_TRUE(ex.fromHost(out.get(), ref.data(), b * sizeof(float)).isOk());  // outside the range: untouched
      ASSERT_TRUE(reduceStreamsOn(ex, streams.get<unsigned char>(), offsets.data(), sizes.data(), sizes.size(), expect,
                                  out.get<float>(), 0, &scratch)
                      .isOk());
      ASSERT_TRUE(ex.toHost(got.data(), out.get(), count * sizeof(float)).isOk());
      ASSERT_TRUE(ex.settle().isOk());
      std::fill(ref.begin() + static_cast<std::ptrdiff_t>(e), ref.end(), 0.0f);
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), count * sizeof(float)), 0);

      // Stream 2 corrupted (coo: its first index past the range; compact
      // encodings: its last byte, a cut varint, extra bits or padding set):
      // parseStream's verdict, the range zeroed.
      if (enc == IndexEncoding::kCoo32) {
        const auto past = static_cast<uint32_t>(e);
        std::memcpy(all.data() + offsets[2] + sizeof(StreamHeader), &past, sizeof past);
      } else {
        all[offsets[2] + sizes[2] - 1] = 0xff;
      }
      const Status parsed = parseStream(all.data() + offsets[2], sizes[2], expect, 2, &views[2]);
      EXPECT_FALSE(parsed.isOk());
      ASSERT_TRUE(ex.fromHost(streams.get(), all.data(), total).isOk());
      const Status st = reduceStreamsOn(ex, streams.get<unsigned char>(), offsets.data(), sizes.data(), sizes.size(),
                                        expect, out.get<float>(), 0, &scratch);
      EXPECT_EQ(st.code(), parsed.code());
      EXPECT_EQ(st.message(), parsed.message());
      ASSERT_TRUE(ex.toHost(got.data(), out.get(), count * sizeof(float)).isOk());
      ASSERT_TRUE(ex.settle().isOk());
      for (uint64_t i = b; i < e; ++i) ASSERT_EQ(got[i], 0.0f) << i;
    }
  }
}

// Split's stage-1 cut: std::lower_bound of each key.
TEST_P(HostExecutorTest, LowerBounds) {
  host::HostExecutor ex(GetParam());
  const std::vector<uint32_t> sorted{3, 4, 9, 100, 101, 5000};
  const std::vector<uint64_t> keys{0, 3, 4, 5, 100, 102, 5000, 5001, uint64_t{1} << 40};
  const std::vector<uint64_t> want{0, 0, 1, 2, 3, 5, 5, 6, 6};
  ExecMemory idx, k, o;
  ASSERT_TRUE(idx.ensure(ex, sorted.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(k.ensure(ex, keys.size() * sizeof(uint64_t)).isOk());
  ASSERT_TRUE(o.ensure(ex, keys.size() * sizeof(uint64_t)).isOk());
  ASSERT_TRUE(ex.fromHost(idx.get(), sorted.data(), sorted.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.fromHost(k.get(), keys.data(), keys.size() * sizeof(uint64_t)).isOk());
  ASSERT_TRUE(
      ex.lowerBounds(idx.get<uint32_t>(), sorted.size(), k.get<uint64_t>(), keys.size(), o.get<uint64_t>()).isOk());
  std::vector<uint64_t> got(keys.size());
  ASSERT_TRUE(ex.toHost(got.data(), o.get(), keys.size() * sizeof(uint64_t)).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(got, want);
}

// The split owner's steps: indices gathered through positions with a base,
// and a selection whose sent values are bounded by wireBound instead of by
// the input type (fp32 sums of an fp16 buffer: 70000 goes as 65504 and the
// excess stays behind; without the override it goes as is on an fp32 wire).
TEST_P(HostExecutorTest, GatherIndicesAndWireBound) {
  host::HostExecutor ex(GetParam());
  const std::vector<uint32_t> compacted{2, 5, 6, 40, 41, 90};
  const std::vector<uint32_t> positions{0, 3, 5};
  ExecMemory idx, pos, out;
  ASSERT_TRUE(idx.ensure(ex, compacted.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(pos.ensure(ex, positions.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(out.ensure(ex, positions.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.fromHost(idx.get(), compacted.data(), compacted.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.fromHost(pos.get(), positions.data(), positions.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(
      ex.gatherIndices(idx.get<uint32_t>(), pos.get<uint32_t>(), positions.size(), 1000, out.get<uint32_t>()).isOk());
  std::vector<uint32_t> got(positions.size());
  ASSERT_TRUE(ex.toHost(got.data(), out.get(), got.size() * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(got, (std::vector<uint32_t>{1002, 1040, 1090}));

  const std::vector<float> v{1.0f, -70000.0f, 70000.0f, 3.0f};
  for (float bound : {0.0f, core::kHalfMax}) {
    SCOPED_TRACE(bound);
    ExecMemory send, rest, indices, values;
    ASSERT_TRUE(send.ensure(ex, v.size() * sizeof(float)).isOk());
    ASSERT_TRUE(rest.ensure(ex, v.size() * sizeof(float)).isOk());
    ASSERT_TRUE(indices.ensure(ex, v.size() * sizeof(uint32_t)).isOk());
    ASSERT_TRUE(values.ensure(ex, v.size() * sizeof(float)).isOk());
    ASSERT_TRUE(ex.fromHost(send.get(), v.data(), v.size() * sizeof(float)).isOk());
    SelectSpec spec{send.get(),
                    spcclFloat32,
                    nullptr,
                    rest.get<float>(),
                    v.size(),
                    0,
                    0,
                    v.size(),
                    core::ValueType::kFloat32,
                    indices.get<uint32_t>(),
                    values.get()};
    spec.wireBound = bound;
    SelectStats r;
    ASSERT_TRUE(ex.selectPack(spec, &r).isOk());
    std::vector<float> sent(v.size()), left(v.size());
    ASSERT_TRUE(ex.toHost(sent.data(), values.get(), v.size() * sizeof(float)).isOk());
    ASSERT_TRUE(ex.toHost(left.data(), rest.get(), v.size() * sizeof(float)).isOk());
    ASSERT_TRUE(ex.settle().isOk());
    ASSERT_EQ(r.selected, v.size());
    const float big = bound > 0 ? core::kHalfMax : 70000.0f;
    EXPECT_EQ(sent, (std::vector<float>{1.0f, -big, big, 3.0f}));
    EXPECT_EQ(left, (std::vector<float>{0.0f, big - 70000.0f, 70000.0f - big, 0.0f}));
  }
}

// Row-sparse merges against a plain reference: per id, +0 plus its rows in
// input order (fp32 sums of fp16 rows); the union of sorted lists summed in
// list order; a list whose ids do not increase is named with the position.
TEST_P(HostExecutorTest, RowSparseMerges) {
  host::HostExecutor ex(GetParam());
  const uint64_t rowLen = 3;
  const std::vector<int64_t> ids{5, -2, 5, 7, -2, 5, 1000000000000};
  std::vector<uint16_t> rows(ids.size() * rowLen);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = core::floatToHalfBits(0.1f * static_cast<float>(i) - 0.7f);
  std::map<int64_t, std::vector<float>> want;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float>& acc = want.try_emplace(ids[i], rowLen, 0.0f).first->second;
    for (uint64_t e = 0; e < rowLen; ++e) acc[e] += core::halfBitsToFloat(rows[i * rowLen + e]);
  }
  ExecMemory inIds, inRows, outIds, outRows;
  ASSERT_TRUE(inIds.ensure(ex, ids.size() * 8).isOk());
  ASSERT_TRUE(inRows.ensure(ex, rows.size() * 2).isOk());
  ASSERT_TRUE(outIds.ensure(ex, ids.size() * 8).isOk());
  ASSERT_TRUE(outRows.ensure(ex, ids.size() * rowLen * 4).isOk());
  ASSERT_TRUE(ex.fromHost(inIds.get(), ids.data(), ids.size() * 8).isOk());
  ASSERT_TRUE(ex.fromHost(inRows.get(), rows.data(), rows.size() * 2).isOk());
  uint64_t unique = 0;
  ASSERT_TRUE(ex.mergeRows(inIds.get<int64_t>(), inRows.get(), spcclFloat16, ids.size(), rowLen, outIds.get<int64_t>(),
                           outRows.get(), &unique)
                  .isOk());
  ASSERT_TRUE(ex.settle().isOk());
  // n merged ids and fp32 rows in executor memory against `want`, bit for bit.
  const auto expectWant = [&](const ExecMemory& gotIdsMem, const ExecMemory& gotRowsMem, uint64_t n) {
    ASSERT_EQ(n, want.size());
    std::vector<int64_t> gotIds(n);
    std::vector<float> gotRows(n * rowLen);
    ASSERT_TRUE(ex.toHost(gotIds.data(), gotIdsMem.get(), n * 8).isOk());
    ASSERT_TRUE(ex.toHost(gotRows.data(), gotRowsMem.get(), n * rowLen * 4).isOk());
    size_t j = 0;
    for (const auto& [id, acc] : want) {
      EXPECT_EQ(gotIds[j], id);
      for (uint64_t e = 0; e < rowLen; ++e)
        EXPECT_EQ(core::floatBits(gotRows[j * rowLen + e]), core::floatBits(acc[e]));
      ++j;
    }
  };
  ASSERT_NO_FATAL_FAILURE(expectWant(outIds, outRows, unique));

  // The merged list and a second one, [-2 (shared), 3]: the union in list order.
  const std::vector<int64_t> ids2{-2, 3};
  const std::vector<float> rows2{1, 2, 3, 4, 5, 6};
  ExecMemory list2Ids, list2Rows, unionIds, unionRows;
  ASSERT_TRUE(list2Ids.ensure(ex, 16).isOk());
  ASSERT_TRUE(list2Rows.ensure(ex, rows2.size() * 4).isOk());
  ASSERT_TRUE(unionIds.ensure(ex, (unique + 2) * 8).isOk());
  ASSERT_TRUE(unionRows.ensure(ex, (unique + 2) * rowLen * 4).isOk());
  ASSERT_TRUE(ex.fromHost(list2Ids.get(), ids2.data(), 16).isOk());
  ASSERT_TRUE(ex.fromHost(list2Rows.get(), rows2.data(), rows2.size() * 4).isOk());
  IdRowsSection lists[2] = {{outIds.get<int64_t>(), outRows.get(), unique},
                            {list2Ids.get<int64_t>(), list2Rows.get(), 2}};
  uint64_t merged = 0, unordered[2] = {9, 9};
  ASSERT_TRUE(
      ex.mergeRowLists(lists, 2, spcclFloat32, rowLen, unionIds.get<int64_t>(), unionRows.get(), &merged, unordered)
          .isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(unordered[0], 0u);
  EXPECT_EQ(unordered[1], 0u);
  for (uint64_t e = 0; e < rowLen; ++e) want[-2][e] += rows2[e];
  want[3] = {rows2[3], rows2[4], rows2[5]};
  ASSERT_NO_FATAL_FAILURE(expectWant(unionIds, unionRows, merged));

  // A list that does not increase: reported at its first bad position.
  const std::vector<int64_t> bad{1, 4, 4};
  ExecMemory badIds, badRows;
  ASSERT_TRUE(badIds.ensure(ex, bad.size() * 8).isOk());
  ASSERT_TRUE(badRows.ensure(ex, bad.size() * rowLen * 4).isOk());
  ASSERT_TRUE(ex.fromHost(badIds.get(), bad.data(), bad.size() * 8).isOk());
  ASSERT_TRUE(ex.fill(badRows.get(), 0, bad.size() * rowLen * 4).isOk());
  const IdRowsSection badLists[2] = {{list2Ids.get<int64_t>(), list2Rows.get(), 2},
                                     {badIds.get<int64_t>(), badRows.get(), bad.size()}};
  ASSERT_TRUE(
      ex.mergeRowLists(badLists, 2, spcclFloat32, rowLen, unionIds.get<int64_t>(), unionRows.get(), &merged, unordered)
          .isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(unordered[0], 0u);
  EXPECT_EQ(unordered[1], 2u);
}

// The alltoall rows' operations: the selection against selectRowTopK (rows
// with NaN/Inf past `keep` too), compaction, the positions narrowed and
// widened back with a swapped pair found, int8 codes within half a row's
// scale with a NaN scale found, and fp32 values scattered into zeroed rows.
TEST_P(HostExecutorTest, RowOperations) {
  host::HostExecutor ex(GetParam());
  constexpr uint64_t kRows = 23;
  constexpr uint32_t kLen = 300, kKeep = 5;  // 2-byte positions
  std::vector<float> data = randomFloats(kRows * kLen, 9);
  for (uint64_t r = 0; r < kRows; r += 4)
    for (uint32_t e = 0; e < 7; ++e) data[r * kLen + 40 * e] = std::numeric_limits<float>::infinity();
  ExecMemory in, strided, values, counts, offsets, positions, compact, narrowed, widened, scales, codes, decoded, out;
  ASSERT_TRUE(in.ensure(ex, data.size() * 4).isOk());
  ASSERT_TRUE(ex.fromHost(in.get(), data.data(), data.size() * 4).isOk());
  ASSERT_TRUE(strided.ensure(ex, kRows * kLen * 4).isOk());
  ASSERT_TRUE(values.ensure(ex, kRows * kLen * 4).isOk());
  ASSERT_TRUE(counts.ensure(ex, kRows * 4).isOk());
  ASSERT_TRUE(ex.selectRows(in.get(), spcclFloat32, kRows, kLen, kKeep, core::ValueType::kFloat32,
                            strided.get<uint32_t>(), values.get(), kLen, counts.get<uint32_t>())
                  .isOk());
  std::vector<uint32_t> hCounts(kRows);
  ASSERT_TRUE(ex.toHost(hCounts.data(), counts.get(), kRows * 4).isOk());
  std::vector<uint64_t> off(kRows + 1, 0);
  std::vector<uint32_t> want;
  std::vector<uint32_t> rowPositions(kLen);
  std::vector<uint64_t> scratch(kLen);
  for (uint64_t r = 0; r < kRows; ++r) {
    const uint32_t n =
        host::selectRowTopK(data.data() + r * kLen, spcclFloat32, kLen, kKeep, rowPositions.data(), scratch.data());
    ASSERT_EQ(hCounts[r], n) << "row " << r;
    ASSERT_EQ(n > kKeep, r % 4 == 0) << "row " << r;
    want.insert(want.end(), rowPositions.begin(), rowPositions.begin() + n);
    off[r + 1] = off[r] + n;
  }
  const uint64_t nnz = off[kRows];
  ASSERT_TRUE(offsets.ensure(ex, off.size() * 8).isOk());
  ASSERT_TRUE(ex.fromHost(offsets.get(), off.data(), off.size() * 8).isOk());
  ASSERT_TRUE(positions.ensure(ex, nnz * 4).isOk());
  ASSERT_TRUE(compact.ensure(ex, nnz * 4).isOk());
  ASSERT_TRUE(ex.compactRows(strided.get<uint32_t>(), values.get(), 4, kLen, offsets.get<uint64_t>(), kRows,
                             positions.get<uint32_t>(), compact.get())
                  .isOk());
  std::vector<uint32_t> got(nnz);
  std::vector<float> kept(nnz);
  ASSERT_TRUE(ex.toHost(got.data(), positions.get(), nnz * 4).isOk());
  ASSERT_TRUE(ex.toHost(kept.data(), compact.get(), nnz * 4).isOk());
  ASSERT_EQ(got, want);
  for (uint64_t r = 0; r < kRows; ++r)
    for (uint64_t j = off[r]; j < off[r + 1]; ++j)
      ASSERT_EQ(std::memcmp(&kept[j], &data[r * kLen + want[j]], 4), 0) << "row " << r;

  // Positions, 2 bytes each, and back; then row 6's first two swapped.
  uint64_t bad = 99;
  ASSERT_TRUE(narrowed.ensure(ex, nnz * 2).isOk());
  ASSERT_TRUE(widened.ensure(ex, nnz * 4).isOk());
  ASSERT_TRUE(ex.narrowPositions(positions.get<uint32_t>(), nnz, 2, narrowed.get<unsigned char>()).isOk());
  ASSERT_TRUE(ex.widenPositions(narrowed.get<unsigned char>(), 2, offsets.get<uint64_t>(), kRows, kLen,
                                widened.get<uint32_t>(), &bad)
                  .isOk());
  EXPECT_EQ(bad, 0u);
  ASSERT_TRUE(ex.toHost(got.data(), widened.get(), nnz * 4).isOk());
  EXPECT_EQ(got, want);
  std::vector<unsigned char> section(nnz * 2);
  ASSERT_TRUE(ex.toHost(section.data(), narrowed.get(), nnz * 2).isOk());
  std::swap(section[off[6] * 2], section[off[6] * 2 + 2]);
  std::swap(section[off[6] * 2 + 1], section[off[6] * 2 + 3]);
  ASSERT_TRUE(ex.fromHost(narrowed.get(), section.data(), nnz * 2).isOk());
  ASSERT_TRUE(ex.widenPositions(narrowed.get<unsigned char>(), 2, offsets.get<uint64_t>(), kRows, kLen,
                                widened.get<uint32_t>(), &bad)
                  .isOk());
  EXPECT_EQ(bad, 7u);  // 1 + row 6

  // int8: each kept value within half its row's scale at its position of a
  // zeroed fp32 row, Inf as NaN; then row 3's scale NaN.
  ASSERT_TRUE(scales.ensure(ex, kRows * 4).isOk());
  ASSERT_TRUE(codes.ensure(ex, nnz).isOk());
  ASSERT_TRUE(decoded.ensure(ex, kRows * kLen * 4).isOk());
  ASSERT_TRUE(ex.fill(decoded.get(), 0x5a, kRows * kLen * 4).isOk());
  ASSERT_TRUE(ex.encodeRowsInt8(compact.get<float>(), offsets.get<uint64_t>(), kRows, scales.get<unsigned char>(),
                                codes.get<unsigned char>())
                  .isOk());
  ASSERT_TRUE(ex.scatterRowsInt8(scales.get<unsigned char>(), codes.get<unsigned char>(), positions.get<uint32_t>(),
                                 offsets.get<uint64_t>(), kRows, kLen, spcclFloat32, decoded.get(), &bad)
                  .isOk());
  EXPECT_EQ(bad, 0u);
  std::vector<float> dec(kRows * kLen), hScales(kRows);
  ASSERT_TRUE(ex.toHost(dec.data(), decoded.get(), dec.size() * 4).isOk());
  ASSERT_TRUE(ex.toHost(hScales.data(), scales.get(), kRows * 4).isOk());
  for (uint64_t r = 0; r < kRows; ++r) {
    float largest = 0;
    std::vector<bool> kept8(kLen, false);
    for (uint64_t j = off[r]; j < off[r + 1]; ++j) {
      kept8[want[j]] = true;
      if (std::isfinite(kept[j])) largest = std::max(largest, std::fabs(kept[j]));
    }
    EXPECT_EQ(hScales[r], largest / 127.0f) << "row " << r;
    for (uint64_t j = off[r]; j < off[r + 1]; ++j) {
      const float d = dec[r * kLen + want[j]];
      if (!std::isfinite(kept[j])) {
        EXPECT_TRUE(std::isnan(d)) << "row " << r;
      } else {
        EXPECT_LE(std::fabs(d - kept[j]), 0.5f * hScales[r] * 1.0001f) << "row " << r;
      }
    }
    for (uint32_t e = 0; e < kLen; ++e)
      if (!kept8[e]) {
        EXPECT_EQ(core::floatBits(dec[r * kLen + e]), 0u) << "row " << r << " position " << e;
      }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(ex.fromHost(scales.get<unsigned char>() + 3 * 4, &nan, 4).isOk());
  ASSERT_TRUE(ex.scatterRowsInt8(scales.get<unsigned char>(), codes.get<unsigned char>(), positions.get<uint32_t>(),
                                 offsets.get<uint64_t>(), kRows, kLen, spcclFloat32, decoded.get(), &bad)
                  .isOk());
  EXPECT_EQ(bad, 4u);  // 1 + row 3

  // The kept values back into zeroed rows (fp16 rows: rounded, Inf kept).
  ASSERT_TRUE(out.ensure(ex, kRows * kLen * 2).isOk());
  ASSERT_TRUE(ex.fill(out.get(), 0x5a, kRows * kLen * 2).isOk());
  ASSERT_TRUE(ex.scatterRows(compact.get(), core::ValueType::kFloat32, 0, positions.get<uint32_t>(),
                             offsets.get<uint64_t>(), kRows, kLen, spcclFloat16, out.get())
                  .isOk());
  std::vector<uint16_t> rows(kRows * kLen);
  ASSERT_TRUE(ex.toHost(rows.data(), out.get(), rows.size() * 2).isOk());
  for (uint64_t r = 0; r < kRows; ++r) {
    std::vector<uint16_t> row(kLen, 0);
    for (uint64_t j = off[r]; j < off[r + 1]; ++j) row[want[j]] = core::wireHalfBits(kept[j]);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), rows.begin() + r * kLen)) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(PlainAndGuarded, HostExecutorTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Guarded" : "Plain"; });

// Guarded: executor memory faults when read outside an executor call, and
// nested calls keep it open until the outermost returns.
TEST(HostExecutorGuarded, MemoryFaultsOutsideExecutorCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  host::HostExecutor ex(true);
  ExecMemory m;
  ASSERT_TRUE(m.ensure(ex, 4096).isOk());
  ASSERT_TRUE(ex.fill(m.get(), 1, 4096).isOk());
  EXPECT_DEATH({ std::printf("%d\n", static_cast<int>(*static_cast<volatile unsigned char*>(m.get()))); }, "");
  int seen = 0;
  ASSERT_TRUE(ex.withMemory([&]() -> Status {
                  SPCCL_RETURN_IF_ERROR(ex.fill(m.get(), 2, 16));  // a call inside a call
                  seen = *static_cast<volatile unsigned char*>(m.get());
                  return Status::ok();
                }).isOk());
  EXPECT_EQ(seen, 2);
  EXPECT_DEATH({ *static_cast<volatile unsigned char*>(m.get()) = 3; }, "");
  // Unguarded, the same reads are plain reads.
  host::HostExecutor plain(false);
  ExecMemory q;
  ASSERT_TRUE(q.ensure(plain, 16).isOk());
  ASSERT_TRUE(plain.fill(q.get(), 9, 16).isOk());
  EXPECT_EQ(*static_cast<volatile unsigned char*>(q.get()), 9);
}

}  // namespace
}  // namespace spccl::test
