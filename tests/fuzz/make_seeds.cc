// Writes the seed corpus of every fuzz target: valid streams made by the
// library's own encoders (encodePairs, encodeDense, encodeError, encodeRows,
// encodeValues, encodeIdRows) with the receiver expectation that accepts them
// as the prefix, plus a few truncated and corrupted variants of each.
// Deterministic (its own generator, no std:: distributions), so rerunning it
// rewrites the same files:
//
//   build-fuzz/spccl_fuzz_make_seeds tests/fuzz/corpus
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "include/spccl.h"
#include "tests/fuzz/fuzz_common.h"

namespace spccl::fuzz {
namespace {

using Bytes = std::vector<uint8_t>;
using core::ValueType;

constexpr ValueType kTypes[] = {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBfloat16, ValueType::kFloat8e4m3};
constexpr size_t kNumTypes = sizeof kTypes / sizeof kTypes[0];
// fp8 seeds carry a non-zero scale exponent (values near 2^-8 .. 2^0 survive).
constexpr int kFp8SeedScale = -8;
int seedScale(ValueType vt) { return vt == ValueType::kFloat8e4m3 ? kFp8SeedScale : 0; }
const char* typeName(ValueType vt) {
  return vt == ValueType::kFloat32    ? "f32"
         : vt == ValueType::kFloat16  ? "f16"
         : vt == ValueType::kBfloat16 ? "bf16"
                                      : "f8";
}

// splitmix64: the same numbers on every platform and standard library.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  // NaN, +-Inf, zeros, fp16/bf16 limits, and ordinary values.
  float value() {
    static const float kSpecial[] = {
        __builtin_nanf(""), __builtin_inff(), -__builtin_inff(), 0.0f, -0.0f, 65504.0f, 1e-8f, 3.0e38f};
    if (below(6) == 0) return kSpecial[below(8)];
    return static_cast<float>(static_cast<int64_t>(below(2001)) - 1000) / 64.0f;
  }
  // n distinct sorted values in [0, range).
  std::vector<uint32_t> sortedPick(uint64_t range, uint64_t n) {
    std::vector<uint32_t> out;
    for (uint64_t i = 0; i < range && out.size() < n; ++i)
      if (below(range - i) < n - out.size()) out.push_back(static_cast<uint32_t>(i));
    return out;
  }
  // Per row of counts->size() rows of rowLen: `keep` entries (0: 1 to 5),
  // their sorted positions appended to *positions.
  void rows(uint64_t rowLen, uint64_t keep, std::vector<uint32_t>* counts, std::vector<uint32_t>* positions) {
    for (uint32_t& count : *counts) {
      count = static_cast<uint32_t>(keep ? keep : 1 + below(rowLen < 5 ? rowLen : 5));
      const std::vector<uint32_t> pick = sortedPick(rowLen, count);
      positions->insert(positions->end(), pick.begin(), pick.end());
    }
  }
};

class Writer {
 public:
  explicit Writer(std::filesystem::path root) : root_(std::move(root)) {}
  void put(const char* target, const std::string& name, const Bytes& bytes) {
    const std::filesystem::path dir = root_ / target;
    std::filesystem::create_directories(dir);
    const std::filesystem::path file = dir / name;
    FILE* f = std::fopen(file.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "cannot write %s\n", file.c_str());
      std::exit(1);
    }
    ++files_;
  }
  int files() const { return files_; }

 private:
  std::filesystem::path root_;
  int files_ = 0;
};

// A valid seed must be accepted by its decoder under the expectation read
// back from its own prefix: checks the prefix encoding and the seed at once.
void mustAccept(const Status& st, const std::string& name) {
  if (!st.isOk()) {
    std::fprintf(stderr, "seed %s is rejected: %s\n", name.c_str(), st.message().c_str());
    std::exit(1);
  }
}
const unsigned char* streamOf(const std::vector<uint8_t>& b, size_t prefixBytes) { return b.data() + prefixBytes; }

Bytes join(const uint8_t* prefix, size_t prefixBytes, const std::vector<unsigned char>& stream) {
  Bytes b(prefix, prefix + prefixBytes);
  b.insert(b.end(), stream.begin(), stream.end());
  return b;
}

// Variants of a valid input: truncated by `cut` bytes, and one byte or word
// of the stream changed (offsets are inside the stream, after the prefix).
Bytes truncated(Bytes b, size_t cut) {
  b.resize(b.size() > cut ? b.size() - cut : 0);
  return b;
}
template <typename T>
Bytes patched(Bytes b, size_t prefixBytes, size_t offset, T value) {
  if (prefixBytes + offset + sizeof(T) <= b.size()) std::memcpy(b.data() + prefixBytes + offset, &value, sizeof value);
  return b;
}

// Header fields the variants change.
constexpr size_t kStatusAt = offsetof(StreamHeader, status);
constexpr size_t kRangeEndAt = offsetof(StreamHeader, rangeEnd);
constexpr size_t kNnzAt = offsetof(StreamHeader, nnz);
constexpr size_t kSeqAt = offsetof(StreamHeader, seq);
constexpr size_t kRowsAt = offsetof(RowsHeader, rows);
static_assert(offsetof(RowsHeader, nnz) == kNnzAt, "row streams keep nnz where pairs streams do");

// ---- parseStream: pairs, dense, error ----
struct RangeCase {
  uint64_t count, begin, end, nnz;
};
constexpr RangeCase kRanges[] = {
    {0, 0, 0, 0}, {1, 0, 1, 1}, {100, 0, 100, 10}, {1000, 250, 500, 50}, {70000, 0, 70000, 40}};

void pairsSeeds(Writer& w) {
  Rng rng{1};
  for (ValueType vt : kTypes) {
    for (const RangeCase& c : kRanges) {
      const uint64_t seq = rng.below(1000);
      StreamInfo info{c.count, c.begin, c.end, c.nnz, seq, SPCCL_ALGO_SPLIT, vt, StreamKind::kPairs};
      info.scaleExp = seedScale(vt);
      const std::vector<uint32_t> idx = rng.sortedPick(c.end - c.begin, c.nnz);
      std::vector<uint32_t> indices(idx.size());
      for (size_t j = 0; j < idx.size(); ++j) indices[j] = static_cast<uint32_t>(c.begin + idx[j]);
      std::vector<unsigned char> values(c.nnz * core::wireValueBytes(vt));
      for (uint64_t j = 0; j < c.nnz; ++j) core::storeWireValue(values.data(), j, rng.value(), vt, info.scaleExp);
      std::vector<unsigned char> stream(pairsStreamBytes(c.nnz, vt));
      encodePairs(stream.data(), info, indices.data(), values.data());
      uint8_t prefix[StreamPrefix::kBytes];
      writeStreamPrefix(prefix, {c.count, c.begin, c.end, seq, SPCCL_ALGO_SPLIT, vt, (c.nnz & 1) != 0});
      const Bytes b = join(prefix, sizeof prefix, stream);
      const std::string name =
          std::string("pairs-") + typeName(vt) + "-c" + std::to_string(c.count) + "-n" + std::to_string(c.nnz);
      StreamView view;
      mustAccept(parseStream(streamOf(b, sizeof prefix), stream.size(), readStreamPrefix(b.data()).expect, 1, &view),
                 name);
      w.put("pairs_stream", name, b);
      if (c.nnz == 0) continue;
      w.put("pairs_stream", name + "-truncated", truncated(b, 8));
      w.put("pairs_stream", name + "-nnz-plus-1", patched<uint64_t>(b, sizeof prefix, kNnzAt, c.nnz + 1));
      const size_t lastIndexAt = sizeof(StreamHeader) + (c.nnz - 1) * sizeof(uint32_t);
      w.put("pairs_stream", name + "-index-past-end",
            patched<uint32_t>(b, sizeof prefix, lastIndexAt, static_cast<uint32_t>(c.end)));
      if (c.nnz > 1)
        w.put("pairs_stream", name + "-index-repeated",
              patched<uint32_t>(b, sizeof prefix, lastIndexAt, indices[c.nnz - 2]));
      // The compact index encodings of the same pairs (bitmap only where the range is small).
      for (IndexEncoding enc : {IndexEncoding::kDelta, IndexEncoding::kBitmap}) {
        if (enc == IndexEncoding::kBitmap && c.end - c.begin > 4096) continue;
        StreamInfo compact = info;
        compact.encoding = enc;
        std::vector<unsigned char> cs(encodedPairsBytes(enc, indices.data(), c.nnz, c.begin, c.end, vt));
        encodePairs(cs.data(), compact, indices.data(), values.data());
        const Bytes cb = join(prefix, sizeof prefix, cs);
        const std::string cname = name + (enc == IndexEncoding::kDelta ? "-delta" : "-bitmap");
        mustAccept(parseStream(streamOf(cb, sizeof prefix), cs.size(), readStreamPrefix(cb.data()).expect, 1, &view),
                   cname);
        w.put("pairs_stream", cname, cb);
        w.put("pairs_stream", cname + "-truncated", truncated(cb, 8));
        w.put("pairs_stream", cname + "-nnz-plus-1", patched<uint64_t>(cb, sizeof prefix, kNnzAt, c.nnz + 1));
      }
    }
  }
}

void denseSeeds(Writer& w) {
  Rng rng{2};
  for (ValueType vt : kTypes) {
    for (const RangeCase& c : kRanges) {
      if (c.end - c.begin > 1000) continue;  // seeds stay small
      const uint64_t seq = rng.below(1000);
      StreamInfo info{c.count, c.begin, c.end, 0, seq, SPCCL_ALGO_SPLIT, vt, StreamKind::kDense};
      info.scaleExp = seedScale(vt);
      std::vector<float> values(c.end - c.begin);
      for (float& v : values) v = rng.value();
      std::vector<unsigned char> stream(denseStreamBytes(values.size(), vt));
      encodeDense(stream.data(), info, values.data(), nullptr);
      uint8_t prefix[StreamPrefix::kBytes];
      writeStreamPrefix(prefix, {c.count, c.begin, c.end, seq, SPCCL_ALGO_SPLIT, vt, true});
      const Bytes b = join(prefix, sizeof prefix, stream);
      const std::string name = std::string("dense-") + typeName(vt) + "-c" + std::to_string(c.count) + "-len" +
                               std::to_string(values.size());
      StreamView view;
      mustAccept(parseStream(streamOf(b, sizeof prefix), stream.size(), readStreamPrefix(b.data()).expect, 1, &view),
                 name);
      w.put("dense_stream", name, b);
      w.put("dense_stream", name + "-truncated", truncated(b, 8));
      w.put("dense_stream", name + "-range-end-plus-1", patched<uint64_t>(b, sizeof prefix, kRangeEndAt, c.end + 1));
      w.put("dense_stream", name + "-seq-mismatch", patched<uint64_t>(b, sizeof prefix, kSeqAt, seq + 1));
    }
  }
}

void errorSeeds(Writer& w) {
  Rng rng{3};
  for (int code = 0; code <= spcclNumResults; ++code) {
    const RangeCase& c = kRanges[static_cast<size_t>(code) % (sizeof kRanges / sizeof kRanges[0])];
    const ValueType vt = kTypes[static_cast<size_t>(code) % kNumTypes];
    const uint64_t seq = rng.below(1000);
    const StreamInfo info{c.count, c.begin, c.end, 0, seq, SPCCL_ALGO_SPLIT, vt, StreamKind::kPairs};
    std::vector<unsigned char> stream(kErrorStreamBytes);
    encodeError(stream.data(), info, static_cast<spcclResult_t>(code));
    uint8_t prefix[StreamPrefix::kBytes];
    writeStreamPrefix(prefix, {c.count, c.begin, c.end, seq, SPCCL_ALGO_SPLIT, vt, true, true});
    const Bytes b = join(prefix, sizeof prefix, stream);
    const std::string name = "error-code" + std::to_string(code);
    StreamView view;
    mustAccept(parseStream(streamOf(b, sizeof prefix), stream.size(), readStreamPrefix(b.data()).expect, 1, &view),
               name);
    w.put("error_stream", name, b);
    w.put("error_stream", name + "-truncated", truncated(b, 1));
    Bytes longer = b;
    longer.resize(b.size() + 8, 0);
    w.put("error_stream", name + "-trailing-bytes", longer);
    w.put("error_stream", name + "-status-" + std::to_string(200), patched<uint8_t>(b, sizeof prefix, kStatusAt, 200));
  }
}

// ---- checkDescriptors ----
void descriptorSeeds(Writer& w) {
  Rng rng{4};
  struct Shape {
    const char* name;
    uint8_t op, algorithm, valueType, dataType;
    uint64_t count, nnz;  // nnz: shape (rows collectives) or an upper bound (allreduce, allgather)
    bool nnzIsShape;
  };
  const Shape shapes[] = {
      {"allreduce", spcclSum, SPCCL_ALGO_SPLIT, spcclFloat32, spcclFloat32, 100000, 1000, false},
      {"allreduce-avg-fp16", spcclAvg, SPCCL_ALGO_ALLGATHER, spcclFloat16, spcclFloat16, 65536, 655, false},
      {"rows", kOtherCollective | static_cast<uint8_t>(Collective::kAlltoAllRows), 0, spcclFloat32, spcclFloat32, 4096,
       64, true},
      {"rows-backward", kOtherCollective | static_cast<uint8_t>(Collective::kAlltoAllRowsBackward), 0, spcclBfloat16,
       spcclFloat32, 4096, 64, true},
      {"allgather", kOtherCollective | static_cast<uint8_t>(Collective::kAllGather), 0, spcclFloat32, spcclFloat32,
       5000, 500, false},
      {"rowsparse", kOtherCollective | static_cast<uint8_t>(Collective::kRowSparse), 1, spcclFloat64, spcclFloat64, 16,
       16, true},
      // An auto compressor's line-up and settling exchange: nnz is the trial's index, equal everywhere.
      {"auto-lineup", spcclSum, kAutoLineUp, spcclFloat32, spcclFloat32, 4096, 5, true},
      {"auto-settle", spcclAvg, kAutoSettle, spcclFloat16, spcclBfloat16, 65536, 21, true},
  };
  const int rankCounts[] = {1, 2, 3, 16};
  for (const Shape& sh : shapes) {
    for (int ranks : rankCounts) {
      const uint64_t seq = rng.below(1 << 20);
      std::vector<CallDescriptor> all(static_cast<size_t>(ranks));
      for (CallDescriptor& d : all)
        d = CallDescriptor{kStreamMagic, sh.algorithm, sh.valueType, sh.dataType,
                           sh.op,        seq,          sh.count,     sh.nnzIsShape ? sh.nnz : rng.below(sh.nnz + 1)};
      auto bytesOf = [&](const std::vector<CallDescriptor>& ds) {
        Bytes b(1, static_cast<uint8_t>(ranks - 1));
        const auto* p = reinterpret_cast<const uint8_t*>(ds.data());
        b.insert(b.end(), p, p + ds.size() * sizeof(CallDescriptor));
        return b;
      };
      const std::string name = std::string("desc-") + sh.name + "-p" + std::to_string(ranks);
      mustAccept(checkDescriptors(all.data(), ranks, all[0]), name);
      w.put("descriptors", name, bytesOf(all));
      if (ranks != 3) continue;
      std::vector<CallDescriptor> bad = all;
      bad.back().count += 1;
      w.put("descriptors", name + "-count-mismatch", bytesOf(bad));
      bad = all;
      bad[1].seq += 1;
      w.put("descriptors", name + "-seq-mismatch", bytesOf(bad));
      bad = all;
      bad.back().nnz = sh.count + 1;
      w.put("descriptors", name + "-nnz-over-count", bytesOf(bad));
      if (sh.op == (kOtherCollective | static_cast<uint8_t>(Collective::kAlltoAllRows)) ||
          sh.op == (kOtherCollective | static_cast<uint8_t>(Collective::kAlltoAllRowsBackward))) {
        // Kept per row (forward) or the forward's seq (backward): equal everywhere.
        bad = all;
        for (CallDescriptor& d : bad) d.streamBytes = 8;
        mustAccept(checkDescriptors(bad.data(), ranks, bad[0]), name + "-agreed");
        w.put("descriptors", name + "-agreed", bytesOf(bad));
        bad[1].streamBytes = 9;
        w.put("descriptors", name + "-agreed-mismatch", bytesOf(bad));
      }
    }
  }
}

// ---- parseRows ----
void rowsSeeds(Writer& w) {
  Rng rng{5};
  struct Case {
    uint64_t rows, rowLen, keep;  // keep 0: per-row counts, 1..keep+1 each
  };
  const Case cases[] = {{0, 8, 2},     {1, 1, 1},     {3, 7, 0},     {2, 200, 0},   {8, 256, 4}, {4, 257, 0},
                        {3, 1000, 10}, {2, 65536, 0}, {2, 65537, 3}, {3, 66000, 0}, {16, 64, 64}};
  size_t i = 0;
  for (const Case& c : cases) {
    const ValueType vt = kTypes[i++ % kNumTypes];
    const uint64_t seq = rng.below(1000);
    std::vector<uint32_t> counts(c.rows), positions;
    std::vector<float> values;
    rng.rows(c.rowLen, c.keep, &counts, &positions);
    for (size_t j = 0; j < positions.size(); ++j) values.push_back(rng.value());
    const uint64_t nnz = positions.size();
    std::vector<unsigned char> stream(rowsStreamBytes(c.rows, c.rowLen, nnz, c.keep == 0, vt));
    encodeRows(stream.data(), c.rows, c.rowLen, c.keep, counts.data(), positions.data(), values.data(),
               ValueType::kFloat32, nnz, vt, seq);
    uint8_t prefix[RowsPrefix::kBytes];
    writeRowsPrefix(prefix, c.rows, c.rowLen, vt, seq);
    const Bytes b = join(prefix, sizeof prefix, stream);
    const std::string name = std::string("rows-") + typeName(vt) + "-r" + std::to_string(c.rows) + "-len" +
                             std::to_string(c.rowLen) + (c.keep ? "-keep" + std::to_string(c.keep) : "-counts");
    const RowsPrefix x = readRowsPrefix(b.data());
    if (x.rows != c.rows || x.rowLen != c.rowLen) {
      std::fprintf(stderr, "seed %s: the prefix does not hold its shape\n", name.c_str());
      std::exit(1);
    }
    RowsView view;
    mustAccept(parseRows(streamOf(b, sizeof prefix), stream.size(), x.rows, x.rowLen, x.vt, x.seq, 1, &view), name);
    w.put("rows_stream", name, b);
    if (nnz == 0) continue;
    w.put("rows_stream", name + "-truncated", truncated(b, 8));
    w.put("rows_stream", name + "-nnz-plus-1", patched<uint64_t>(b, sizeof prefix, kNnzAt, nnz + 1));
    const size_t positionsAt = sizeof(RowsHeader) + (c.keep ? 0 : c.rows * sizeof(uint32_t));
    // The first position set to rowLen (its low bytes): out of range, or out of order.
    w.put("rows_stream", name + "-position-past-row",
          patched<uint32_t>(b, sizeof prefix, positionsAt, static_cast<uint32_t>(c.rowLen)));
    if (c.keep == 0) {
      w.put("rows_stream", name + "-zero-count", patched<uint32_t>(b, sizeof prefix, sizeof(RowsHeader), 0));
      // The last row's count overruns nnz by one more position than the
      // stream holds, and every byte from its first position to the end reads
      // as increasing positions: a decoder that walks the counts without
      // bounding them by nnz reads one position past the stream.
      const uint32_t ib = rowIndexBytes(c.rowLen);
      const size_t lastAt = sizeof(RowsHeader) + c.rows * sizeof(uint32_t) + (nnz - counts.back()) * ib;
      const uint64_t overrun = (stream.size() - lastAt) / ib + 1;
      if (overrun <= c.rowLen) {
        Bytes o = patched<uint32_t>(b, sizeof prefix, sizeof(RowsHeader) + (c.rows - 1) * sizeof(uint32_t),
                                    static_cast<uint32_t>(overrun));
        for (uint64_t k = 0; k + 1 < overrun; ++k) {
          const uint32_t pos = static_cast<uint32_t>(k);
          std::memcpy(o.data() + sizeof prefix + lastAt + k * ib, &pos, ib);
        }
        w.put("rows_stream", name + "-overrun", o);
      }
    }
  }
}

// ---- parseValues ----
void valuesSeeds(Writer& w) {
  Rng rng{6};
  const uint64_t sizes[] = {0, 1, 5, 100};
  for (ValueType vt : kTypes) {
    for (uint64_t nnz : sizes) {
      const uint64_t seq = rng.below(1000);
      std::vector<float> values(nnz);
      for (float& v : values) v = rng.value();
      std::vector<unsigned char> stream(valuesStreamBytes(nnz, vt));
      encodeValues(stream.data(), values.data(), ValueType::kFloat32, nnz, 4, 64, vt, seq);
      uint8_t prefix[ValuesPrefix::kBytes];
      writeValuesPrefix(prefix, nnz, vt, seq);
      const Bytes b = join(prefix, sizeof prefix, stream);
      const std::string name = std::string("values-") + typeName(vt) + "-n" + std::to_string(nnz);
      const ValuesPrefix x = readValuesPrefix(b.data());
      const void* view = nullptr;
      mustAccept(parseValues(streamOf(b, sizeof prefix), stream.size(), x.nnz, x.vt, x.seq, 1, &view), name);
      w.put("values_stream", name, b);
      w.put("values_stream", name + "-truncated", truncated(b, 8));
      w.put("values_stream", name + "-nnz-plus-1", patched<uint64_t>(b, sizeof prefix, kNnzAt, nnz + 1));
    }
  }
}

// ---- the int8 row codec: parseRowsCoded and parseValuesInt8 ----
void rowsInt8Seeds(Writer& w) {
  Rng rng{8};
  struct Case {
    uint64_t rows, rowLen, keep;  // keep 0: per-row counts
  };
  const Case cases[] = {{0, 8, 2}, {1, 1, 1}, {3, 7, 0}, {8, 64, 4}, {4, 300, 0}, {2, 65537, 3}, {16, 64, 64}};
  for (const Case& c : cases) {
    const uint64_t seq = rng.below(1000);
    std::vector<uint32_t> counts(c.rows), positions;
    std::vector<float> values;
    rng.rows(c.rowLen, c.keep, &counts, &positions);
    for (size_t j = 0; j < positions.size(); ++j) values.push_back(rng.value());
    const uint64_t nnz = positions.size();
    const std::string shape = "-r" + std::to_string(c.rows) + "-len" + std::to_string(c.rowLen) +
                              (c.keep ? "-keep" + std::to_string(c.keep) : "-counts");
    std::vector<unsigned char> stream(rowsStreamBytesInt8(c.rows, c.rowLen, nnz, c.keep == 0));
    encodeRowsInt8(stream.data(), c.rows, c.rowLen, c.keep, counts.data(), positions.data(), values.data(), nnz, seq);
    uint8_t prefix[RowsPrefix::kBytes];
    writeRowsPrefix(prefix, c.rows, c.rowLen, ValueType::kFloat32, seq);
    const Bytes b = join(prefix, sizeof prefix, stream);
    const std::string name = "rows-int8" + shape;
    const RowsPrefix x = readRowsPrefix(b.data());
    RowsView view;
    mustAccept(parseRowsCoded(streamOf(b, sizeof prefix), stream.size(), x.rows, x.rowLen, ValueType::kFloat32,
                              kRowsCodecInt8, x.seq, 1, &view),
               name);
    w.put("rows_int8_stream", name, b);
    // The backward's values stream of the same rows: bit 7 of byte 1, nnz in bytes 6-7.
    std::vector<unsigned char> vs(valuesStreamBytesInt8(c.rows, nnz));
    encodeValuesInt8(vs.data(), values.data(), counts.data(), c.rows, c.rowLen, nnz, seq);
    uint8_t vprefix[RowsPrefix::kBytes];
    std::memcpy(vprefix, prefix, sizeof vprefix);
    vprefix[1] |= 0x80;
    storeLE<uint16_t>(vprefix + 6, static_cast<uint16_t>(nnz));
    const Bytes vb = join(vprefix, sizeof vprefix, vs);
    const unsigned char* scales = nullptr;
    const int8_t* codes = nullptr;
    mustAccept(parseValuesInt8(streamOf(vb, sizeof vprefix), vs.size(), x.rows, nnz, x.seq, 1, &scales, &codes),
               "values-int8" + shape);
    w.put("rows_int8_stream", "values-int8" + shape, vb);
    if (nnz == 0) continue;
    w.put("rows_int8_stream", name + "-truncated", truncated(b, 8));
    w.put("rows_int8_stream", name + "-nnz-plus-1", patched<uint64_t>(b, sizeof prefix, kNnzAt, nnz + 1));
    w.put("rows_int8_stream", name + "-wire-version",
          patched<uint16_t>(b, sizeof prefix, offsetof(RowsHeader, version), kStreamVersion));
    // Row 0's scale made negative (a NaN, an Inf and a negative scale are refused alike).
    const size_t scalesAt =
        (sizeof(RowsHeader) + (c.keep ? 0 : c.rows * sizeof(uint32_t)) + nnz * rowIndexBytes(c.rowLen) + 3) &
        ~size_t{3};
    w.put("rows_int8_stream", name + "-negative-scale", patched<float>(b, sizeof prefix, scalesAt, -1.0f));
    w.put("rows_int8_stream", "values-int8" + shape + "-truncated", truncated(vb, 8));
    w.put("rows_int8_stream", "values-int8" + shape + "-nan-scale",
          patched<float>(vb, sizeof vprefix, sizeof(RowsHeader), std::numeric_limits<float>::quiet_NaN()));
  }
}

// ---- the error-bounded row codec: parseRowsBounded ----
void rowsBoundedSeeds(Writer& w) {
  Rng rng{9};
  struct Case {
    uint64_t rows, rowLen, keep;  // keep 0: per-row counts; keep == rowLen: positions implied
    ValueType raw;
    float bound;
  };
  const Case cases[] = {{0, 8, 2, ValueType::kFloat32, 1e-3f},    {1, 1, 1, ValueType::kFloat32, 0.1f},
                        {3, 7, 0, ValueType::kFloat16, 1e-2f},    {8, 64, 4, ValueType::kFloat32, 1e-3f},
                        {4, 300, 0, ValueType::kBfloat16, 0.5f},  {2, 65537, 3, ValueType::kFloat32, 1e-6f},
                        {16, 64, 64, ValueType::kFloat32, 1e-2f}, {5, 16, 16, ValueType::kFloat16, 0.0f}};
  for (const Case& c : cases) {
    const uint64_t seq = rng.below(1000);
    std::vector<uint32_t> counts(c.rows), positions;
    std::vector<float> values;
    rng.rows(c.rowLen, c.keep, &counts, &positions);
    for (size_t j = 0; j < positions.size(); ++j) values.push_back(core::roundToWire(rng.value(), c.raw));
    if (values.size() > 3) values[2] = std::numeric_limits<float>::quiet_NaN();  // one raw row
    const uint64_t nnz = positions.size();
    const std::string shape = "-r" + std::to_string(c.rows) + "-len" + std::to_string(c.rowLen) +
                              (c.keep ? "-keep" + std::to_string(c.keep) : "-counts") + "-t" +
                              std::to_string(static_cast<int>(c.raw));
    std::vector<unsigned char> stream(rowsStreamMaxBytesBounded(c.rows, c.rowLen, c.keep, nnz, c.raw));
    stream.resize(encodeRowsBounded(stream.data(), c.rows, c.rowLen, c.keep, counts.data(), positions.data(),
                                    values.data(), nnz, c.bound, c.raw, seq));
    uint8_t prefix[RowsPrefix::kBytes];
    writeRowsPrefix(prefix, c.rows, c.rowLen, c.raw, seq);
    const Bytes b = join(prefix, sizeof prefix, stream);
    const std::string name = "rows-bounded" + shape;
    const RowsPrefix x = readRowsPrefix(b.data());
    RowsView view;
    std::vector<float> decoded;
    mustAccept(parseRowsBounded(streamOf(b, sizeof prefix), stream.size(), x.rows, x.rowLen, c.raw, x.seq, 1, &view,
                                nullptr, &decoded),
               name);
    w.put("rows_bounded_stream", name, b);
    if (nnz == 0) continue;
    w.put("rows_bounded_stream", name + "-truncated", truncated(b, 8));
    w.put("rows_bounded_stream", name + "-nnz-plus-1", patched<uint64_t>(b, sizeof prefix, kNnzAt, nnz + 1));
    w.put("rows_bounded_stream", name + "-wire-version",
          patched<uint16_t>(b, sizeof prefix, offsetof(RowsHeader, version), kStreamVersion));
  }
}

// ---- parseIdRows ----
void idRowsSeeds(Writer& w) {
  Rng rng{7};
  const uint64_t rowLens[] = {1, 16, 100};
  const uint64_t idCounts[] = {0, 1, 5};
  for (uint32_t vb : {4u, 8u}) {
    for (uint64_t rowLen : rowLens) {
      for (uint64_t nIds : idCounts) {
        const uint64_t seq = rng.below(1000);
        std::vector<int64_t> ids;
        int64_t id = static_cast<int64_t>(rng.below(100)) - 50;
        for (uint64_t i = 0; i < nIds; ++i) ids.push_back(id += 1 + static_cast<int64_t>(rng.below(1000)));
        std::vector<unsigned char> rows(nIds * rowLen * vb);
        for (uint64_t e = 0; e < nIds * rowLen; ++e) {
          const float f = rng.value();
          if (vb == 8) {
            const double d = f;
            std::memcpy(rows.data() + e * 8, &d, 8);
          } else {
            std::memcpy(rows.data() + e * 4, &f, 4);
          }
        }
        std::vector<unsigned char> stream(idRowsStreamBytes(nIds, rowLen, vb));
        encodeIdRows(stream.data(), ids.data(), rows.data(), nIds, rowLen, vb, seq);
        uint8_t prefix[IdRowsPrefix::kBytes];
        writeIdRowsPrefix(prefix, rowLen, vb, seq);
        const Bytes b = join(prefix, sizeof prefix, stream);
        const std::string name = std::string("idrows-") + (vb == 8 ? "f64" : "f32") + "-len" + std::to_string(rowLen) +
                                 "-n" + std::to_string(nIds);
        const IdRowsPrefix x = readIdRowsPrefix(b.data());
        IdRowsView view;
        mustAccept(parseIdRows(streamOf(b, sizeof prefix), stream.size(), x.rowLen, x.valueBytes, x.seq, 1, &view),
                   name);
        w.put("idrows_stream", name, b);
        if (nIds == 0) continue;
        w.put("idrows_stream", name + "-truncated", truncated(b, 8));
        w.put("idrows_stream", name + "-ids-plus-1", patched<uint64_t>(b, sizeof prefix, kRowsAt, nIds + 1));
        if (nIds > 1)
          w.put("idrows_stream", name + "-id-repeated",
                patched<int64_t>(b, sizeof prefix, sizeof(RowsHeader) + 8, ids[0]));
      }
    }
  }
}

}  // namespace
}  // namespace spccl::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus root, e.g. tests/fuzz/corpus>\n", argv[0]);
    return 2;
  }
  spccl::fuzz::Writer w(argv[1]);
  spccl::fuzz::pairsSeeds(w);
  spccl::fuzz::denseSeeds(w);
  spccl::fuzz::errorSeeds(w);
  spccl::fuzz::descriptorSeeds(w);
  spccl::fuzz::rowsSeeds(w);
  spccl::fuzz::valuesSeeds(w);
  spccl::fuzz::idRowsSeeds(w);
  spccl::fuzz::rowsInt8Seeds(w);
  spccl::fuzz::rowsBoundedSeeds(w);
  std::printf("%d seed files under %s\n", w.files(), argv[1]);
  return 0;
}
