// alltoall_perf: DCT-MP's compressed alltoall, forward and backward, against
// plain MPI_Alltoall (-B nccl: ncclAlltoAll) of the same buffers, one row per
// size and pass. See README.md.
//   fwd: spcclAlltoAllRowsCompressed, keeping the selection;
//   bwd: spcclAlltoAllRowsBackward of a gradient through that selection.
#include <cctype>
#include <cstdio>
#include <string>

#include "harness.h"

namespace spccl::perf {
namespace {

class AlltoAll final : public Collective {
 public:
  const char* name() const override { return "alltoall"; }
  unsigned flags() const override { return kFlagRowLen; }
  // 8 of 128 per row, DCT-MP's regime; 0.01 would keep 2 of 128.
  float defaultDensity() const override { return 0.0625f; }

  std::string describe(const Options& opts) const override {
    const size_t indexBits = opts.rowLen <= 256 ? 8 : opts.rowLen <= 65536 ? 16 : 32;
    return "fwd: spcclAlltoAllRowsCompressed, top-" + std::to_string(keptPerRow(opts.density, opts.rowLen)) + " of " +
           std::to_string(opts.rowLen) + " per row (" + std::to_string(indexBits) +
           "-bit indices), selection kept\n"
           "bwd: spcclAlltoAllRowsBackward of a gradient through that selection (its forward "
           "runs untimed)\n"
           "dense: " +
           denseCallName(opts, "MPI_Alltoall", "ncclAlltoAll") + " of the same buffers; size: send bytes per rank";
  }

  Environment environment(const Options& opts) const override { return wireEnvironment(opts); }

  // Whole rows for every peer: rowsPerPeer = count / (nRanks * rowLen).
  BufferCounts bufferCounts(const Options& opts, size_t count, int nRanks) const override {
    const size_t peers = static_cast<size_t>(nRanks);
    const size_t total = count / (peers * opts.rowLen) * peers * opts.rowLen;
    return {total, total, total};
  }
  double busBwFactor(int nRanks) const override { return (nRanks - 1.0) / nRanks; }
  // Each rank receives different blocks.
  bool outputReplicated() const override { return false; }
  bool hasBackward() const override { return true; }

  void prepare(const Context& ctx, size_t count) override {
    release();
    rowsPerPeer_ = count / (static_cast<size_t>(ctx.nRanks) * ctx.opts.rowLen);
  }

  // A selection serves one backward; the next forward makes a new one.
  void discardCallState() override { release(); }

  // A training step destroys each selection after its backward; under -z 0
  // the forwards run back to back, so each destroys the last one's here.
  void runCompressed(const Context& ctx, const void* send, void* recv) override {
    release();
    SPCCL_PERF_CHECK(spcclAlltoAllRowsCompressed(send, recv, rowsPerPeer_, ctx.opts.rowLen, ctx.opts.datatype,
                                                 ctx.opts.density, &selection_, ctx.comm, ctx.stream));
  }

  void runDense(const Context& ctx, const void* send, void* recv) override {
    ctx.dense.allToAll(send, recv, rowsPerPeer_ * ctx.opts.rowLen, ctx.opts.datatype);
  }

  void runCompressedBackward(const Context& ctx, const void* grad, void* gradOut) override {
    SPCCL_PERF_CHECK(spcclAlltoAllRowsBackward(grad, gradOut, selection_, ctx.stream));
  }

  void runDenseBackward(const Context& ctx, const void* grad, void* gradOut) override { runDense(ctx, grad, gradOut); }

  // Density 1 keeps every entry, but the values still travel in the wire
  // type: bit-exact only where that type holds the input's values.
  bool exactAtDensityOne(const Context& ctx) const override {
    return ctx.wireValueType == spcclFloat32 || ctx.wireValueType == ctx.opts.datatype;
  }

  std::string algoLabel(Pass pass, const spcclStats_t& /*timed*/) const override {
    return pass == Pass::kForward ? "fwd" : "bwd";
  }

  // Forward: every received row is the sender's row with all but its top-k
  // (by magnitude, ties to the lower index) zeroed, the kept values as the
  // wire carries them; the sender's row is the dense output's. Backward: the
  // dense gradient alltoall masked by this rank's own forward rows' top-k.
  // SPCCL_ROWS_CODEC (docs/ENV.md) sets how the kept values travel: a
  // value type in place of the wire's, int8 codes (both passes), or bounded
  // codes (the forward; its backward is exact in the wire type).
  bool outputOk(const Context& ctx, const CheckInput& check) const override {
    const Options& opts = ctx.opts;
    const size_t rows = static_cast<size_t>(ctx.nRanks) * rowsPerPeer_;
    const size_t keep = check.compressed ? keptPerRow(opts.density, opts.rowLen) : opts.rowLen;
    spcclDataType_t wire = check.compressed ? ctx.wireValueType : opts.datatype;
    KeptValues rule;
    std::string codec = check.compressed ? environmentText("SPCCL_ROWS_CODEC") : "";
    for (char& c : codec)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));  // as the library reads it
    if (codec == "fp16") wire = spcclFloat16;
    if (codec == "bf16") wire = spcclBfloat16;
    if (codec == "fp8") wire = spcclFloat8e4m3;
    if (codec == "int8") rule.kind = KeptValues::kInt8;
    if (codec == "bounded" && check.pass == Pass::kForward) {
      // The check rebuilds an absolute, constant bound only.
      const std::string relative = environmentText("SPCCL_ROWS_ERROR_RELATIVE");
      const std::string decay = environmentText("SPCCL_ROWS_ERROR_DECAY");
      if (!(relative.empty() || relative == "0") || !(decay.empty() || std::stod(decay) == 1.0)) {
        std::fprintf(stderr,
                     "alltoall_perf: -c 1 checks SPCCL_ROWS_CODEC=bounded with an absolute, constant bound only "
                     "(SPCCL_ROWS_ERROR_RELATIVE and SPCCL_ROWS_ERROR_DECAY unset); run with -c 0 to time it\n");
        return false;
      }
      const std::string bound = environmentText("SPCCL_ROWS_ERROR_BOUND");
      rule.kind = KeptValues::kBounded;
      rule.bound = bound.empty() ? 1e-3f : std::stof(bound);
    }
    const void* maskSource = check.pass == Pass::kForward ? check.want : check.input;
    return isTopkMasked(check.got, check.want, maskSource, rows, opts.rowLen, keep, opts.datatype, wire, rule);
  }

  static std::string environmentText(const char* name) {
    const char* v = environmentValue(name);
    return v ? v : "";
  }

  void release() override {
    if (selection_ == nullptr) return;
    SPCCL_PERF_CHECK(spcclSelectionDestroy(selection_));
    selection_ = nullptr;
  }

 private:
  spcclSelection_t selection_ = nullptr;
  size_t rowsPerPeer_ = 0;
};

}  // namespace
}  // namespace spccl::perf

int main(int argc, char** argv) {
  spccl::perf::AlltoAll alltoAll;
  return spccl::perf::runBenchmark(argc, argv, alltoAll);
}
