#include "worker/nn/cudnn_descriptors.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/nn/cuda_status.h"

namespace downpour {

template <typename T>
absl::Status Desc<T>::Create() {
  DP_CUDNN_RETURN_IF_ERROR(DescTraits<T>::Create(&d_));
  return absl::OkStatus();
}

// The handle types DescTraits knows.
template class Desc<cudnnTensorDescriptor_t>;
template class Desc<cudnnFilterDescriptor_t>;
template class Desc<cudnnConvolutionDescriptor_t>;
template class Desc<cudnnPoolingDescriptor_t>;

absl::Status SetTensor4d(cudnnTensorDescriptor_t d, int n, int c, int h,
                         int w) {
  DP_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return absl::OkStatus();
}

std::string ConvShape(const ConvDesc& d) {
  return absl::StrCat("x ", d.batch, "x", d.in_channels, "x", d.in_h, "x",
                      d.in_w, ", w ", d.out_channels, "x", d.in_channels, "x",
                      d.kernel_h, "x", d.kernel_w, ", stride ", d.stride,
                      ", pad ", d.pad);
}

absl::StatusOr<std::unique_ptr<ConvDescriptors>> ConvDescriptors::Create(
    const ConvDesc& d, bool allow_tf32) {
  std::unique_ptr<ConvDescriptors> cd(new ConvDescriptors());
  DP_RETURN_IF_ERROR(cd->x_.Create());
  DP_RETURN_IF_ERROR(cd->y_.Create());
  DP_RETURN_IF_ERROR(cd->bias_.Create());
  DP_RETURN_IF_ERROR(cd->w_.Create());
  DP_RETURN_IF_ERROR(cd->conv_.Create());
  DP_RETURN_IF_ERROR(
      SetTensor4d(cd->x(), d.batch, d.in_channels, d.in_h, d.in_w));
  DP_RETURN_IF_ERROR(
      SetTensor4d(cd->y(), d.batch, d.out_channels, d.OutH(), d.OutW()));
  DP_RETURN_IF_ERROR(SetTensor4d(cd->bias(), 1, d.out_channels, 1, 1));
  DP_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      cd->w(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d.out_channels,
      d.in_channels, d.kernel_h, d.kernel_w));
  // Cross-correlation (no kernel flip), like the CPU backend and PyTorch.
  DP_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      cd->conv(), d.pad, d.pad, d.stride, d.stride, /*dilation_h=*/1,
      /*dilation_w=*/1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // FMA math: no TF32 tensor cores (CUDNN_DEFAULT_MATH allows them for
  // fp32 on Ampere and newer, which is what allow_tf32 asks for).
  cd->ranking_math_type_ =
      static_cast<int>(allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  DP_RETURN_IF_ERROR(cd->WithMathType(cd->ranking_math_type_).status());

  int n = 0, c = 0, h = 0, w = 0;
  DP_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
      cd->conv(), cd->x(), cd->w(), &n, &c, &h, &w));
  if (n != d.batch || c != d.out_channels || h != d.OutH() || w != d.OutW()) {
    return absl::InternalError(absl::StrCat(
        "convolution ", ConvShape(d), ": cuDNN output ", n, "x", c, "x", h,
        "x", w, " differs from the expected ", d.batch, "x", d.out_channels,
        "x", d.OutH(), "x", d.OutW()));
  }
  return cd;
}

absl::StatusOr<cudnnConvolutionDescriptor_t> ConvDescriptors::WithMathType(
    int math_type) const {
  DP_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
      conv_.get(), static_cast<cudnnMathType_t>(math_type)));
  return conv_.get();
}

absl::StatusOr<std::unique_ptr<PoolDescriptors>> PoolDescriptors::Create(
    const PoolDesc& d, cudnnPoolingMode_t mode) {
  std::unique_ptr<PoolDescriptors> pd(new PoolDescriptors());
  DP_RETURN_IF_ERROR(pd->x_.Create());
  DP_RETURN_IF_ERROR(pd->y_.Create());
  DP_RETURN_IF_ERROR(pd->pool_.Create());
  DP_RETURN_IF_ERROR(
      SetTensor4d(pd->x(), d.batch, d.channels, d.in_h, d.in_w));
  DP_RETURN_IF_ERROR(
      SetTensor4d(pd->y(), d.batch, d.channels, d.OutH(), d.OutW()));
  DP_CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
      pd->pool(), mode, CUDNN_NOT_PROPAGATE_NAN, d.window, d.window, d.pad,
      d.pad, d.Stride(), d.Stride()));
  int n = 0, c = 0, h = 0, w = 0;
  DP_CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(
      pd->pool(), pd->x(), &n, &c, &h, &w));
  if (n != d.batch || c != d.channels || h != d.OutH() || w != d.OutW()) {
    return absl::InternalError(
        absl::StrCat("pooling ", d.batch, "x", d.channels, "x", d.in_h,
                     "x", d.in_w, " window ", d.window, " stride ",
                     d.Stride(), " pad ", d.pad, ": cuDNN output ", n,
                     "x", c, "x", h, "x", w, " differs from the expected ",
                     d.batch, "x", d.channels, "x", d.OutH(), "x", d.OutW()));
  }
  return pd;
}

absl::StatusOr<std::unique_ptr<BatchNormDescriptors>>
BatchNormDescriptors::Create(const BatchNormDesc& d) {
  std::unique_ptr<BatchNormDescriptors> bd(new BatchNormDescriptors());
  DP_RETURN_IF_ERROR(bd->x_.Create());
  DP_RETURN_IF_ERROR(bd->channels_.Create());
  DP_RETURN_IF_ERROR(SetTensor4d(bd->x(), d.batch, d.channels, d.spatial, 1));
  DP_RETURN_IF_ERROR(SetTensor4d(bd->channels(), 1, d.channels, 1, 1));
  return bd;
}

}  // namespace downpour
