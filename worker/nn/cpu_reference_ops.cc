// File: worker/nn/cpu_reference_ops.cc (see cpu_reference_ops.h).
#include "worker/nn/cpu_reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/nn/op_checks.h"

namespace downpour {
namespace cpu_ops {
namespace {

// The cells of one pooling window inside the image: rows [h0, h1), columns
// [w0, w1). Never empty: pad <= window / 2 (ValidatePool).
struct Window {
  int h0, h1, w0, w1;
};
inline Window WindowAt(const PoolDesc& d, int oh, int ow) {
  const int s = d.Stride();
  const int hs = oh * s - d.pad, ws = ow * s - d.pad;
  return Window{std::max(hs, 0), std::min(hs + d.window, d.in_h),
                std::max(ws, 0), std::min(ws + d.window, d.in_w)};
}

// Windows that tile the image from its corner (stride = window, no
// padding): every cell is in at most one window.
inline bool Tiled(const PoolDesc& d) {
  return d.Stride() == d.window && d.pad == 0;
}

// Index (in the plane) of the window's first maximum, row-major, strict >.
inline int64_t ArgMax(const float* xp, int w, const Window& win) {
  int64_t best = int64_t{win.h0} * w + win.w0;
  for (int i = win.h0; i < win.h1; ++i) {
    for (int j = win.w0; j < win.w1; ++j) {
      const int64_t idx = int64_t{i} * w + j;
      if (xp[idx] > xp[best]) best = idx;
    }
  }
  return best;
}

// The tiled case's 2x2 windows: the common pooling, worth a loop of its own.
void MaxPool2x2Forward(const PoolDesc& d, const float* xp, float* yp) {
  const int oh_n = d.OutH(), ow_n = d.OutW(), w = d.in_w;
  for (int oh = 0; oh < oh_n; ++oh, yp += ow_n) {
    const float* r0 = xp + int64_t{oh} * 2 * w;
    const float* r1 = r0 + w;
    for (int ow = 0; ow < ow_n; ++ow) {
      yp[ow] = std::max(std::max(r0[2 * ow], r0[2 * ow + 1]),
                        std::max(r1[2 * ow], r1[2 * ow + 1]));
    }
  }
}

// The tiled case's backward: every element of the plane written once.
void MaxPoolTiledBackward(const PoolDesc& d, const float* xp, const float* dyp,
                          float* dxp) {
  const int oh_n = d.OutH(), ow_n = d.OutW(), win = d.window, w = d.in_w;
  const int64_t plane = int64_t{d.in_h} * w;
  const int covered_w = ow_n * win;
  for (int oh = 0; oh < oh_n; ++oh, dyp += ow_n) {
    const int64_t row0 = int64_t{oh} * win * w;
    if (win == 2) {
      const float* a = xp + row0;
      const float* b = a + w;
      float* da = dxp + row0;
      float* db = da + w;
      for (int ow = 0; ow < ow_n; ++ow) {
        const int j = 2 * ow;
        // Index 0..3 of the first maximum of (a[j], a[j+1], b[j], b[j+1]).
        int best = 0;
        float m = a[j];
        if (a[j + 1] > m) {
          best = 1;
          m = a[j + 1];
        }
        if (b[j] > m) {
          best = 2;
          m = b[j];
        }
        if (b[j + 1] > m) best = 3;
        const float g = dyp[ow];
        da[j] = best == 0 ? g : 0.f;
        da[j + 1] = best == 1 ? g : 0.f;
        db[j] = best == 2 ? g : 0.f;
        db[j + 1] = best == 3 ? g : 0.f;
      }
    } else {
      for (int ow = 0; ow < ow_n; ++ow) {
        const Window wd{oh * win, oh * win + win, ow * win, ow * win + win};
        const int64_t best = ArgMax(xp, w, wd);
        for (int i = wd.h0; i < wd.h1; ++i) {
          std::fill(dxp + int64_t{i} * w + wd.w0, dxp + int64_t{i} * w + wd.w1,
                    0.f);
        }
        dxp[best] = dyp[ow];
      }
    }
    // Columns past the last full window.
    for (int i = 0; i < win; ++i) {
      float* r = dxp + row0 + int64_t{i} * w;
      for (int c = covered_w; c < w; ++c) r[c] = 0.f;
    }
  }
  // Rows past the last full window.
  std::fill(dxp + int64_t{oh_n} * win * w, dxp + plane, 0.f);
}

inline int64_t Index(const BatchNormDesc& d, int n, int c) {
  return (int64_t{n} * d.channels + c) * d.spatial;
}

}  // namespace

void MaxPoolForward(const PoolDesc& d, const float* x, float* y, int64_t begin,
                    int64_t end) {
  const int64_t in_plane = int64_t{d.in_h} * d.in_w;
  const int64_t out_plane = int64_t{d.OutH()} * d.OutW();
  for (int64_t pl = begin; pl < end; ++pl) {
    const float* xp = x + pl * in_plane;
    float* yp = y + pl * out_plane;
    if (Tiled(d) && d.window == 2) {
      MaxPool2x2Forward(d, xp, yp);
      continue;
    }
    for (int oh = 0; oh < d.OutH(); ++oh) {
      for (int ow = 0; ow < d.OutW(); ++ow) {
        *yp++ = xp[ArgMax(xp, d.in_w, WindowAt(d, oh, ow))];
      }
    }
  }
}

void MaxPoolBackward(const PoolDesc& d, const float* x, const float* dy,
                     float* dx, int64_t begin, int64_t end) {
  const int64_t in_plane = int64_t{d.in_h} * d.in_w;
  const int64_t out_plane = int64_t{d.OutH()} * d.OutW();
  for (int64_t pl = begin; pl < end; ++pl) {
    const float* xp = x + pl * in_plane;
    const float* dyp = dy + pl * out_plane;
    float* dxp = dx + pl * in_plane;
    if (Tiled(d)) {
      MaxPoolTiledBackward(d, xp, dyp, dxp);
      continue;
    }
    // Overlapping windows: a cell may be the maximum of several.
    std::fill(dxp, dxp + in_plane, 0.f);
    for (int oh = 0; oh < d.OutH(); ++oh) {
      for (int ow = 0; ow < d.OutW(); ++ow) {
        dxp[ArgMax(xp, d.in_w, WindowAt(d, oh, ow))] += *dyp++;
      }
    }
  }
}

void AvgPoolForward(const PoolDesc& d, const float* x, float* y, int64_t begin,
                    int64_t end) {
  const int64_t in_plane = int64_t{d.in_h} * d.in_w;
  const int64_t out_plane = int64_t{d.OutH()} * d.OutW();
  // count_include_pad: every window counts window^2 cells (with ceil_mode
  // off no window reaches past the padding).
  const float inv = 1.f / static_cast<float>(d.window * d.window);
  for (int64_t pl = begin; pl < end; ++pl) {
    const float* xp = x + pl * in_plane;
    float* yp = y + pl * out_plane;
    for (int oh = 0; oh < d.OutH(); ++oh) {
      for (int ow = 0; ow < d.OutW(); ++ow) {
        const Window wd = WindowAt(d, oh, ow);
        float sum = 0.f;
        for (int i = wd.h0; i < wd.h1; ++i) {
          for (int j = wd.w0; j < wd.w1; ++j)
            sum += xp[int64_t{i} * d.in_w + j];
        }
        *yp++ = sum * inv;
      }
    }
  }
}

void AvgPoolBackward(const PoolDesc& d, const float* dy, float* dx,
                     int64_t begin, int64_t end) {
  const int64_t in_plane = int64_t{d.in_h} * d.in_w;
  const int64_t out_plane = int64_t{d.OutH()} * d.OutW();
  const float inv = 1.f / static_cast<float>(d.window * d.window);
  for (int64_t pl = begin; pl < end; ++pl) {
    const float* dyp = dy + pl * out_plane;
    float* dxp = dx + pl * in_plane;
    std::fill(dxp, dxp + in_plane, 0.f);
    for (int oh = 0; oh < d.OutH(); ++oh) {
      for (int ow = 0; ow < d.OutW(); ++ow) {
        const Window wd = WindowAt(d, oh, ow);
        const float g = *dyp++ * inv;
        for (int i = wd.h0; i < wd.h1; ++i) {
          for (int j = wd.w0; j < wd.w1; ++j) dxp[int64_t{i} * d.in_w + j] += g;
        }
      }
    }
  }
}

void BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                              const float* gamma, const float* beta,
                              float momentum, float* running_mean,
                              float* running_var, float* y, float* save_mean,
                              float* save_invstd, int c_begin, int c_end) {
  const int64_t m = int64_t{d.batch} * d.spatial;
  for (int c = c_begin; c < c_end; ++c) {
    double sum = 0;
    for (int n = 0; n < d.batch; ++n) {
      const float* xr = x + Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) sum += xr[s];
    }
    const double mean = sum / m;
    double sq = 0;  // Two passes: no cancellation.
    for (int n = 0; n < d.batch; ++n) {
      const float* xr = x + Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) {
        const double t = xr[s] - mean;
        sq += t * t;
      }
    }
    const double var = sq / m;  // Biased: what normalizes.
    const double invstd = 1.0 / std::sqrt(var + d.eps);
    const float scale = static_cast<float>(gamma[c] * invstd);
    const float shift = static_cast<float>(beta[c] - mean * gamma[c] * invstd);
    for (int n = 0; n < d.batch; ++n) {
      const int64_t at = Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) y[at + s] = x[at + s] * scale + shift;
    }
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    if (running_mean != nullptr) {
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] +
                                           momentum * mean);
    }
    if (running_var != nullptr) {
      const double unbiased = sq / (m - 1);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] +
                                          momentum * unbiased);
    }
  }
}

void BatchNormForwardInference(const BatchNormDesc& d, const float* x,
                               const float* gamma, const float* beta,
                               const float* running_mean,
                               const float* running_var, float* y, int c_begin,
                               int c_end) {
  for (int c = c_begin; c < c_end; ++c) {
    const double invstd = 1.0 / std::sqrt(double{running_var[c]} + d.eps);
    const float scale = static_cast<float>(gamma[c] * invstd);
    const float shift =
        static_cast<float>(beta[c] - running_mean[c] * gamma[c] * invstd);
    for (int n = 0; n < d.batch; ++n) {
      const int64_t at = Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) y[at + s] = x[at + s] * scale + shift;
    }
  }
}

// With xhat = (x - mean) * invstd and M = batch * spatial:
//   dbeta = sum dy, dgamma = sum dy * xhat,
//   dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
void BatchNormBackward(const BatchNormDesc& d, const float* x, const float* dy,
                       const float* gamma, const float* save_mean,
                       const float* save_invstd, float* dx, float* dgamma,
                       float* dbeta, int c_begin, int c_end) {
  const double m = static_cast<double>(int64_t{d.batch} * d.spatial);
  for (int c = c_begin; c < c_end; ++c) {
    const double mean = save_mean[c], invstd = save_invstd[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int n = 0; n < d.batch; ++n) {
      const int64_t at = Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) {
        sum_dy += dy[at + s];
        sum_dy_xhat += dy[at + s] * ((x[at + s] - mean) * invstd);
      }
    }
    const double k = gamma[c] * invstd;
    const double mean_dy = sum_dy / m, mean_dy_xhat = sum_dy_xhat / m;
    for (int n = 0; n < d.batch; ++n) {
      const int64_t at = Index(d, n, c);
      for (int s = 0; s < d.spatial; ++s) {
        const double xhat = (x[at + s] - mean) * invstd;
        dx[at + s] = static_cast<float>(
            k * (dy[at + s] - mean_dy - xhat * mean_dy_xhat));
      }
    }
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
  }
}

void DropoutMask(float rate, uint64_t seed, float* mask, int64_t begin,
                 int64_t end) {
  const float keep = DropoutScale(rate);
  for (int64_t i = begin; i < end; ++i) {
    mask[i] =
        DropoutUniform(seed, static_cast<uint64_t>(i)) < rate ? 0.f : keep;
  }
}

void Multiply(const float* a, const float* b, float* y, int64_t begin,
              int64_t end) {
  for (int64_t i = begin; i < end; ++i) y[i] = a[i] * b[i];
}

void CopyRows(int64_t rows, int64_t cols, const float* src, int64_t src_stride,
              float* dst, int64_t dst_stride) {
  if (cols == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride,
                sizeof(float) * static_cast<size_t>(cols));
  }
}

}  // namespace cpu_ops
}  // namespace downpour
