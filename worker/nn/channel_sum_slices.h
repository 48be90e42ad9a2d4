// File: worker/nn/channel_sum_slices.h
//
// How cuda_kernels::ChannelSum (a convolution's bias gradient: db[c] = sum
// over n, h, w of dy) splits the batch: block (c, p) sums channel c over
// images [p * per, min(batch, (p + 1) * per)), then one thread per channel
// adds the `parts` slices in order. The split depends on the shape alone,
// so the sum's order (and its bits) does too. Plain C++ (nvcc includes it
// too) so the limits are unit-tested without a GPU: parts <= 65535 (grid
// y), per * hw <= INT_MAX (a slice's element count is 32-bit), and
// per * parts >= batch.
//
//   ChannelSumSlices s = PlanChannelSum(batch, hw);  // s.per, s.parts
#ifndef DOWNPOUR_WORKER_NN_CHANNEL_SUM_SLICES_H_
#define DOWNPOUR_WORKER_NN_CHANNEL_SUM_SLICES_H_

#include <climits>
#include <cstdint>

namespace downpour {

struct ChannelSumSlices {
  int per = 1;    // Images per slice.
  int parts = 0;  // Slices: ceil(batch / per); 0 for an empty batch.
};

// About 16K elements per block, so a large batch spreads over many blocks.
// A batch of 0 (or hw <= 0) has no slices. Slices never split an image, so
// a shape beyond the limits (hw > INT_MAX, or more than 65535 slices of at
// most INT_MAX elements each: terabytes, beyond any device's memory)
// cannot be planned: parts stays 0 and the caller refuses it.
inline ChannelSumSlices PlanChannelSum(int batch, int64_t hw) {
  ChannelSumSlices s;
  if (batch <= 0 || hw <= 0 || hw > INT_MAX) return s;
  int64_t per = (int64_t{16384} + hw - 1) / hw;
  const int64_t min_per = (int64_t{batch} + 65534) / 65535;  // parts <= 65535
  if (per < min_per) per = min_per;
  const int64_t max_per = INT_MAX / hw;  // per * hw <= INT_MAX.
  if (per > max_per) per = max_per;
  if (per > batch) per = batch;
  const int64_t parts = (batch + per - 1) / per;
  if (parts > 65535) return s;
  s.per = static_cast<int>(per);
  s.parts = static_cast<int>(parts);
  return s;
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CHANNEL_SUM_SLICES_H_
