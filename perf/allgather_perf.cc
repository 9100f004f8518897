// allgather_perf: the drop-in spcclAllGather with SPCCL_ALLGATHER_DENSITY (each
// rank's block sparsified by its own top-k) against plain MPI_Allgather (-B
// nccl: ncclAllGather) of the same input, one row per size. See README.md.
//
// The library reads SPCCL_ALLGATHER_DENSITY when the communicator is created,
// so this binary sets it from -D (and SPCCL_VALUE_TYPE from -V) on every rank
// before creating it, overriding the caller's environment.
#include <string>

#include "harness.h"

namespace spccl::perf {
namespace {

class AllGather final : public Collective {
 public:
  const char* name() const override { return "allgather"; }
  unsigned flags() const override { return kFlagEncoding; }

  std::string describe(const Options& opts) const override {
    return "compressed: spcclAllGather (drop-in, SPCCL_ALLGATHER_DENSITY: each rank's top-k)\n"
           "dense: " +
           denseCallName(opts, "MPI_Allgather", "ncclAllGather") +
           "; size: gathered bytes per rank (ranks x send size)";
  }

  Environment environment(const Options& opts) const override {
    Environment env{{"SPCCL_ALLGATHER_DENSITY", floatText(opts.density)}};
    for (auto& entry : wireEnvironment(opts)) env.push_back(entry);
    return env;
  }

  BufferCounts bufferCounts(const Options& /*opts*/, size_t count, int nRanks) const override {
    const size_t sendCount = count / static_cast<size_t>(nRanks);
    return {sendCount * static_cast<size_t>(nRanks), sendCount, sendCount * static_cast<size_t>(nRanks)};
  }
  double busBwFactor(int nRanks) const override { return (nRanks - 1.0) / nRanks; }
  bool outputReplicated() const override { return true; }

  void prepare(const Context& ctx, size_t count) override { sendCount_ = count / static_cast<size_t>(ctx.nRanks); }

  void runCompressed(const Context& ctx, const void* send, void* recv) override {
    SPCCL_PERF_CHECK(spcclAllGather(send, recv, sendCount_, ctx.opts.datatype, ctx.comm, ctx.stream));
  }

  void runDense(const Context& ctx, const void* send, void* recv) override {
    ctx.dense.allGather(send, recv, sendCount_, ctx.opts.datatype);
  }

  // Block r of the output is rank r's block with all but its top-k zeroed
  // (k = ceil(density * sendcount)), the kept values as the wire carries them;
  // an exact call (the library may take one for a small block) is the dense output.
  bool outputOk(const Context& ctx, const CheckInput& check) const override {
    const size_t keep = check.compressed ? keptPerRow(ctx.opts.density, sendCount_) : sendCount_;
    const spcclDataType_t wire = check.compressed ? ctx.wireValueType : ctx.opts.datatype;
    return isTopkMasked(check.got, check.want, check.want, static_cast<size_t>(ctx.nRanks), sendCount_, keep,
                        ctx.opts.datatype, wire);
  }

  void release() override {}

 private:
  size_t sendCount_ = 0;
};

}  // namespace
}  // namespace spccl::perf

int main(int argc, char** argv) {
  spccl::perf::AllGather allGather;
  return spccl::perf::runBenchmark(argc, argv, allGather);
}
