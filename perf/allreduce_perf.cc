// allreduce_perf: spcclAllReduceCompressed against a plain MPI_Allreduce (or,
// with -B nccl, ncclAllReduce) of the same input, one row per size. See README.md.
#include "harness.h"

namespace spccl::perf {
namespace {

class AllReduce final : public Collective {
 public:
  const char* name() const override { return "allreduce"; }
  unsigned flags() const override { return kFlagOp | kFlagAlgo | kFlagEncoding; }
  const char* densityVariable() const override { return "SPCCL_ALLREDUCE_DENSITY"; }

  // -a and -D not given: SPCCL_ALGO and SPCCL_ALLREDUCE_DENSITY where set, as a compressor's config
  // takes them (spcclCompressConfigInit: the library's own parse, any case; an invalid value fails the run
  // as it fails the library). prepare() then sets them in every compressor's config.
  void environmentDefaults(Options& opts) const override {
    const bool algo = !opts.algoGiven && environmentValue("SPCCL_ALGO") != nullptr;
    const bool density = !opts.densityGiven && environmentValue(densityVariable()) != nullptr;
    if (!algo && !density) return;
    spcclCompressConfig_t config;
    SPCCL_PERF_CHECK(spcclCompressConfigInit(&config));
    if (algo) {
      opts.algorithm = config.algorithm;
      opts.algoFrom = "SPCCL_ALGO";
    }
    if (density) {
      opts.density = config.density;
      opts.densityFrom = densityVariable();
    }
  }
  std::string describe(const Options& opts) const override {
    const bool mpi = opts.backend == Backend::kMpi;
    return "compressed: spccl, one fresh compressor per size; dense: " +
           denseCallName(opts, "plain MPI_Allreduce", "ncclAllReduce") +
           (mpi && opts.datatype != spcclFloat ? " (user-defined fp32-accumulating sum op)" : "");
  }
  BufferCounts bufferCounts(const Options& /*opts*/, size_t count, int /*nRanks*/) const override {
    return {count, count, count};
  }
  double busBwFactor(int nRanks) const override { return 2.0 * (nRanks - 1) / nRanks; }
  bool outputReplicated() const override { return true; }

  void prepare(const Context& ctx, size_t count) override {
    release();
    spcclCompressConfig_t config;
    SPCCL_PERF_CHECK(spcclCompressConfigInit(&config));
    config.density = ctx.opts.density;
    config.algorithm = ctx.opts.algorithm;
    if (ctx.opts.wireValueType) config.wireValueType = *ctx.opts.wireValueType;
    SPCCL_PERF_CHECK(spcclCompressorCreate(ctx.comm, count, ctx.opts.datatype, &config, &compressor_));
    count_ = count;
  }

  void runCompressed(const Context& ctx, const void* send, void* recv) override {
    SPCCL_PERF_CHECK(spcclAllReduceCompressed(send, recv, ctx.opts.op, compressor_, ctx.stream));
  }

  void runDense(const Context& ctx, const void* send, void* recv) override {
    ctx.dense.allReduce(send, recv, count_, ctx.opts.datatype, ctx.opts.op);
  }

  // This compressor's calls only.
  spcclStats_t stats(const Context& /*ctx*/) const override {
    spcclStats_t stats{};
    SPCCL_PERF_CHECK(spcclCompressorGetStats(compressor_, &stats));
    return stats;
  }

  std::string algoLabel(Pass /*pass*/, const spcclStats_t& timed) const override {
    return std::string(allreduceAlgorithmName(timed.lastAlgorithm));
  }

  void release() override {
    if (compressor_ == nullptr) return;
    SPCCL_PERF_CHECK(spcclCompressorDestroy(compressor_));
    compressor_ = nullptr;
  }

 private:
  spcclCompressor_t compressor_ = nullptr;
  size_t count_ = 0;
};

}  // namespace
}  // namespace spccl::perf

int main(int argc, char** argv) {
  spccl::perf::AllReduce allReduce;
  return spccl::perf::runBenchmark(argc, argv, allReduce);
}
