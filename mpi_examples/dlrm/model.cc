#include "model.h"

#include <cmath>
#include <random>

namespace dlrm {

void Mlp::init(const std::vector<int>& sizes, bool lastRelu, uint64_t seed) {
  layers_.clear();
  std::mt19937_64 gen(seed);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    Layer layer;
    layer.in = sizes[l];
    layer.out = sizes[l + 1];
    layer.relu = lastRelu || l + 2 < sizes.size();
    const size_t n = static_cast<size_t>(layer.in) * layer.out + static_cast<size_t>(layer.out);
    layer.param.resize(n);
    layer.grad.assign(n, 0.0f);
    layer.accum.assign(n, 0.0f);
    // DLRM's initialisation: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out).
    std::normal_distribution<float> w(0.0f, std::sqrt(2.0f / static_cast<float>(layer.in + layer.out)));
    std::normal_distribution<float> b(0.0f, std::sqrt(1.0f / static_cast<float>(layer.out)));
    const size_t nw = static_cast<size_t>(layer.in) * layer.out;
    for (size_t i = 0; i < nw; ++i) layer.param[i] = w(gen);
    for (size_t i = nw; i < n; ++i) layer.param[i] = b(gen);
    layers_.push_back(std::move(layer));
  }
}

const Matrix& Mlp::forward(const Matrix& x) {
  const Matrix* in = &x;
  for (Layer& layer : layers_) {
    layer.input = *in;
    layer.output.noalias() = layer.input * layer.weight();
    layer.output.rowwise() += layer.bias();
    if (layer.relu) layer.output = layer.output.cwiseMax(0.0f);
    in = &layer.output;
  }
  return *in;
}

Matrix Mlp::backward(const Matrix& dy) {
  Matrix d = dy;
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& layer = layers_[l];
    if (layer.relu) d = (layer.output.array() > 0.0f).select(d, 0.0f);
    layer.weightGrad().noalias() = layer.input.transpose() * d;
    layer.biasGrad() = d.colwise().sum();
    if (l > 0) {
      Matrix prev = d * layer.weight().transpose();
      d.swap(prev);
    } else {
      return d * layer.weight().transpose();
    }
  }
  return d;
}

void Mlp::step(Optimizer opt, float lr) {
  for (Layer& layer : layers_) {
    const size_t n = layer.param.size();
    if (opt == Optimizer::kSgd) {
      for (size_t i = 0; i < n; ++i) layer.param[i] -= lr * layer.grad[i];
    } else {
      for (size_t i = 0; i < n; ++i) {
        const float g = layer.grad[i];
        layer.accum[i] += g * g;
        layer.param[i] -= lr * g / (std::sqrt(layer.accum[i]) + 1e-8f);
      }
    }
  }
}

void interactForward(const Matrix& z, const Matrix& emb, int tables, int dim, Matrix* out) {
  const int n = static_cast<int>(z.rows());
  const int vecs = tables + 1;
  const int pairs = vecs * (vecs - 1) / 2;
  out->resize(n, dim + pairs);
  Matrix v(vecs, dim), gram(vecs, vecs);
  for (int s = 0; s < n; ++s) {
    v.row(0) = z.row(s);
    v.bottomRows(tables) = ConstMatrixMap(emb.row(s).data(), tables, dim);
    gram.noalias() = v * v.transpose();
    out->row(s).head(dim) = z.row(s);
    int c = dim;
    for (int i = 0; i < vecs; ++i)
      for (int j = i + 1; j < vecs; ++j) (*out)(s, c++) = gram(i, j);
  }
}

void interactBackward(const Matrix& z, const Matrix& emb, int tables, int dim, const Matrix& dout, Matrix* dz,
                      Matrix* demb) {
  const int n = static_cast<int>(z.rows());
  const int vecs = tables + 1;
  dz->resize(n, dim);
  demb->resize(n, static_cast<Eigen::Index>(tables) * dim);
  Matrix v(vecs, dim), dgram(vecs, vecs), dv(vecs, dim);
  for (int s = 0; s < n; ++s) {
    v.row(0) = z.row(s);
    v.bottomRows(tables) = ConstMatrixMap(emb.row(s).data(), tables, dim);
    dgram.setZero();
    int c = dim;
    for (int i = 0; i < vecs; ++i)
      for (int j = i + 1; j < vecs; ++j) {
        const float g = dout(s, c++);
        dgram(i, j) = g;
        dgram(j, i) = g;
      }
    dv.noalias() = dgram * v;  // d<v_i, v_j> = g (v_j on i, v_i on j)
    dz->row(s) = dout.row(s).head(dim) + dv.row(0);
    MatrixMap(demb->row(s).data(), tables, dim) = dv.bottomRows(tables);
  }
}

void bceForwardBackward(const Matrix& logits, const float* labels, float scale, double* lossSum, Matrix* dlogit,
                        std::vector<float>* probs) {
  const int n = static_cast<int>(logits.rows());
  dlogit->resize(n, 1);
  probs->resize(n);
  for (int i = 0; i < n; ++i) {
    const float l = logits(i, 0), y = labels[i];
    const float p = 1.0f / (1.0f + std::exp(-l));
    (*probs)[i] = p;
    *lossSum += std::max(l, 0.0f) - l * y + std::log1p(std::exp(-std::fabs(l)));
    (*dlogit)(i, 0) = (p - y) * scale;
  }
}

}  // namespace dlrm
