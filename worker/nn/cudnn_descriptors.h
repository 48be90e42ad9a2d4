// File: worker/nn/cudnn_descriptors.h
//
// The cuDNN descriptors the CUDA backend (cuda_backend.cc, cuda_layer_ops.cc)
// runs convolutions, pooling and batch normalization with: RAII owners for
// single descriptors (Desc<T>), and the complete, checked descriptor sets
// for one ConvDesc, PoolDesc or BatchNormDesc shape (backend.h). Building
// descriptors needs the cuDNN library but no GPU, no driver and no cuDNN
// handle.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> cd,
//                       ConvDescriptors::Create(conv_desc));
//   cudnnConvolutionForward(handle, &one, cd->x(), x, cd->w(), w, cd->conv(),
//                           ...);
//
// Layouts: all tensors are fp32 NCHW, filters OIHW, as backend.h says.
// Convolutions are cross-correlations (no kernel flip, as on the CPU backend
// and in PyTorch) in CUDNN_FMA_MATH, so cuDNN never uses TF32 tensor cores
// for them (CUDNN_DEFAULT_MATH would on Ampere and newer), unless the caller
// allows TF32. Pooling is max pooling or average pooling counting the
// padding (PyTorch's count_include_pad), with PoolDesc's stride and padding.
//
// Ownership: each object owns its descriptors and destroys them in its
// destructor; the raw handles returned by the accessors are borrowed and
// valid as long as the object lives. Objects are neither copyable nor
// movable (hold them through std::unique_ptr).
//
// Thread-safety: descriptors are not synchronized; a set is built by one
// thread and may then be read by one thread at a time (the backend's owner).
#ifndef DOWNPOUR_WORKER_NN_CUDNN_DESCRIPTORS_H_
#define DOWNPOUR_WORKER_NN_CUDNN_DESCRIPTORS_H_

#include <cudnn.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/nn/backend.h"

namespace downpour {

// How Desc<T> creates and destroys a descriptor of handle type T.
template <typename T>
struct DescTraits;
template <>
struct DescTraits<cudnnTensorDescriptor_t> {
  static cudnnStatus_t Create(cudnnTensorDescriptor_t* d) {
    return cudnnCreateTensorDescriptor(d);
  }
  static void Destroy(cudnnTensorDescriptor_t d) {
    cudnnDestroyTensorDescriptor(d);
  }
};
template <>
struct DescTraits<cudnnFilterDescriptor_t> {
  static cudnnStatus_t Create(cudnnFilterDescriptor_t* d) {
    return cudnnCreateFilterDescriptor(d);
  }
  static void Destroy(cudnnFilterDescriptor_t d) {
    cudnnDestroyFilterDescriptor(d);
  }
};
template <>
struct DescTraits<cudnnConvolutionDescriptor_t> {
  static cudnnStatus_t Create(cudnnConvolutionDescriptor_t* d) {
    return cudnnCreateConvolutionDescriptor(d);
  }
  static void Destroy(cudnnConvolutionDescriptor_t d) {
    cudnnDestroyConvolutionDescriptor(d);
  }
};
template <>
struct DescTraits<cudnnPoolingDescriptor_t> {
  static cudnnStatus_t Create(cudnnPoolingDescriptor_t* d) {
    return cudnnCreatePoolingDescriptor(d);
  }
  static void Destroy(cudnnPoolingDescriptor_t d) {
    cudnnDestroyPoolingDescriptor(d);
  }
};

// Owns one cuDNN descriptor (null until Create succeeds).
template <typename T>
class Desc {
 public:
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d_ != nullptr) DescTraits<T>::Destroy(d_);
  }
  // The cuDNN error (cuda_status.h) when creation fails. Call once.
  absl::Status Create();
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

// Sets `d` to a packed fp32 NCHW tensor of shape (n, c, h, w).
absl::Status SetTensor4d(cudnnTensorDescriptor_t d, int n, int c, int h,
                         int w);

// "x NxCxHxW, w OxCxKHxKW, stride S, pad P": a convolution shape for error
// messages.
std::string ConvShape(const ConvDesc& d);

// The descriptors of one convolution shape: x is (N, C, H, W), y is
// (N, O, OH, OW), w is (O, C, KH, KW), bias is (1, O, 1, 1).
class ConvDescriptors {
 public:
  // Errors: the failing cuDNN call's status; Internal when cuDNN's output
  // size differs from ConvDesc::OutH/OutW. `d` must pass ValidateConv.
  // `allow_tf32`: CUDNN_DEFAULT_MATH instead of CUDNN_FMA_MATH.
  static absl::StatusOr<std::unique_ptr<ConvDescriptors>> Create(
      const ConvDesc& d, bool allow_tf32 = false);

  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t y() const { return y_.get(); }
  cudnnTensorDescriptor_t bias() const { return bias_.get(); }
  cudnnFilterDescriptor_t w() const { return w_.get(); }
  // The convolution descriptor with the math type it was last given: use it
  // for the rankings and workspace queries only after
  // WithMathType(ranking_math_type()).
  cudnnConvolutionDescriptor_t conv() const { return conv_.get(); }

  // Sets the convolution descriptor's math type (a cudnnMathType_t value)
  // and returns it. An algorithm runs with the math type of the ranking
  // entry it was chosen from (ConvAlgoChoice::math_type; PyTorch sets
  // perf.mathType before each run): a TF32 ranking mixes entries of several
  // math types, and cuDNN runs the kernel the descriptor's math type allows.
  absl::StatusOr<cudnnConvolutionDescriptor_t> WithMathType(
      int math_type) const;
  // The math type rankings are asked for: CUDNN_DEFAULT_MATH (every math
  // type) with allow_tf32, else CUDNN_FMA_MATH.
  int ranking_math_type() const { return ranking_math_type_; }

 private:
  ConvDescriptors() = default;

  int ranking_math_type_ = 0;

  Desc<cudnnTensorDescriptor_t> x_, y_, bias_;
  Desc<cudnnFilterDescriptor_t> w_;
  Desc<cudnnConvolutionDescriptor_t> conv_;
};

// The descriptors of one pooling shape: x is (N, C, H, W), y is
// (N, C, OutH, OutW).
class PoolDescriptors {
 public:
  // `mode`: CUDNN_POOLING_MAX or CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING.
  // Errors: the failing cuDNN call's status; Internal when cuDNN's output
  // size differs from PoolDesc::OutH/OutW. `d` must pass ValidatePool.
  static absl::StatusOr<std::unique_ptr<PoolDescriptors>> Create(
      const PoolDesc& d, cudnnPoolingMode_t mode = CUDNN_POOLING_MAX);

  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t y() const { return y_.get(); }
  cudnnPoolingDescriptor_t pool() const { return pool_.get(); }

 private:
  PoolDescriptors() = default;

  Desc<cudnnTensorDescriptor_t> x_, y_;
  Desc<cudnnPoolingDescriptor_t> pool_;
};

// The descriptors of one batch-normalization shape: x (and y, dy, dx) is
// (N, C, spatial, 1), the per-channel vectors (1, C, 1, 1), as
// CUDNN_BATCHNORM_SPATIAL wants them.
class BatchNormDescriptors {
 public:
  // Errors: the failing cuDNN call's status. `d` must pass ValidateBatchNorm.
  static absl::StatusOr<std::unique_ptr<BatchNormDescriptors>> Create(
      const BatchNormDesc& d);

  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t channels() const { return channels_.get(); }

 private:
  BatchNormDescriptors() = default;

  Desc<cudnnTensorDescriptor_t> x_, channels_;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDNN_DESCRIPTORS_H_
