// The replicated (data-parallel) half of DLRM: MLPs and the pairwise
// dot-product interaction, dense math in Eigen. Each layer's weights and bias
// live in one flat buffer, and so do their gradients: one gradient bucket per
// layer, allreduced as one buffer.
#ifndef SPCCL_DLRM_MODEL_H_
#define SPCCL_DLRM_MODEL_H_

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

namespace dlrm {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;

enum class Optimizer { kSgd, kAdagrad };

struct Layer {
  int in = 0, out = 0;
  bool relu = true;
  std::vector<float> param;  // W (in x out, row-major), then b (out)
  std::vector<float> grad;   // same layout
  std::vector<float> accum;  // Adagrad's sum of squared gradients
  Matrix input, output;      // kept from the forward for the backward

  MatrixMap weight() { return MatrixMap(param.data(), in, out); }
  RowVectorMap bias() { return RowVectorMap(param.data() + static_cast<size_t>(in) * out, out); }
  MatrixMap weightGrad() { return MatrixMap(grad.data(), in, out); }
  RowVectorMap biasGrad() { return RowVectorMap(grad.data() + static_cast<size_t>(in) * out, out); }
};

class Mlp {
 public:
  // sizes = {in, h1, ..., out}; ReLU after every layer unless lastRelu is false.
  void init(const std::vector<int>& sizes, bool lastRelu, uint64_t seed);
  const Matrix& forward(const Matrix& x);
  // dy: gradient w.r.t. the forward's output; fills every layer's grad and
  // returns the gradient w.r.t. the input.
  Matrix backward(const Matrix& dy);
  std::vector<Layer>& layers() { return layers_; }
  const std::vector<Layer>& layers() const { return layers_; }
  void step(Optimizer opt, float lr);

 private:
  std::vector<Layer> layers_;
};

// z: n x D (bottom MLP output), emb: n x (T*D) (pooled embeddings, table-major
// per sample). Output n x (D + (T+1)T/2): z, then <v_i, v_j> for i < j over
// v = [z, e_0, ..., e_{T-1}].
void interactForward(const Matrix& z, const Matrix& emb, int tables, int dim, Matrix* out);
// dout: gradient of the output; fills dz and demb.
void interactBackward(const Matrix& z, const Matrix& emb, int tables, int dim, const Matrix& dout, Matrix* dz,
                      Matrix* demb);

// Mean binary cross-entropy terms: per-sample loss summed into *lossSum,
// dlogit[i] = (sigmoid(logit) - y) * scale.
void bceForwardBackward(const Matrix& logits, const float* labels, float scale, double* lossSum, Matrix* dlogit,
                        std::vector<float>* probs);

}  // namespace dlrm

#endif  // SPCCL_DLRM_MODEL_H_
