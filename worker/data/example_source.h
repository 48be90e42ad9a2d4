// File: worker/data/example_source.h
//
// Where the Batcher (batcher.h) takes its examples from: anything that can
// produce example i as NCHW floats in [0, 1] and its label, from any thread.
// An in-memory Dataset is one (DatasetSource); an image folder, which
// decodes a file per example (image_folder_reader.h), and a mapped tensor
// file (tensor_file_reader.h) are others. The Batcher's threads call Read
// in parallel, so a source that decodes is decoded in parallel.
//
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> src,
//                       OpenImageFolder(dir + "/train", options));
//   DP_ASSIGN_OR_RETURN(auto batcher, Batcher::Create(src.get(), o));
//   DP_ASSIGN_OR_RETURN(Dataset test, ReadAllExamples(*src, 2));
#ifndef DOWNPOUR_WORKER_DATA_EXAMPLE_SOURCE_H_
#define DOWNPOUR_WORKER_DATA_EXAMPLE_SOURCE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace downpour {

// The shape of the examples a reader produces: the model's input.
struct ImageShape {
  int channels = 1, height = 28, width = 28;
  int64_t Size() const { return int64_t{channels} * height * width; }
};

// Thread-safety: every method may be called from several threads at once.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int channels() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  int64_t ExampleSize() const { return int64_t{channels()} * height() * width(); }

  // Writes example `index` (0 <= index < size()) as ExampleSize() floats to
  // `dst` and its label to *label. DataLoss naming the file when the example
  // cannot be read or decoded (a corrupt image: the caller may skip it),
  // another code for anything that should stop the job.
  virtual absl::Status Read(int64_t index, float* dst,
                            int32_t* label) const = 0;
};

// A source over an in-memory Dataset, which must outlive it (or which it
// owns, from the second constructor). Read never fails.
class DatasetSource : public ExampleSource {
 public:
  explicit DatasetSource(const Dataset* data) : data_(data) {}
  explicit DatasetSource(Dataset data)
      : owned_(std::make_unique<Dataset>(std::move(data))),
        data_(owned_.get()) {}
  int64_t size() const override { return data_->size; }
  int channels() const override { return data_->channels; }
  int height() const override { return data_->height; }
  int width() const override { return data_->width; }
  absl::Status Read(int64_t index, float* dst, int32_t* label) const override;
  const Dataset& dataset() const { return *data_; }

 private:
  const std::unique_ptr<Dataset> owned_;
  const Dataset* const data_;  // owned_ or not owned.
};

// u8 pixels as the models take them, p / 255 (as a division: every reader
// of u8 pixels gives these bits), vectorized as widely as the CPU allows.
void PixelsToFloats(const unsigned char* p, size_t n, float* dst);

namespace data_internal {
// Tests: PixelsToFloats's baseline (SSE4.1) version, whatever the CPU has.
void PixelsToFloatsBaseline(const unsigned char* p, size_t n, float* dst);
}  // namespace data_internal

// Every example of `source` in order, read by `threads` threads, as an
// in-memory Dataset of `num_classes` classes (for the evaluation). With
// `skip_bad`, examples whose Read fails with DataLoss are left out and
// counted in *skipped (may be null); otherwise the first error is returned.
absl::StatusOr<Dataset> ReadAllExamples(const ExampleSource& source,
                                        int threads, int num_classes,
                                        bool skip_bad = false,
                                        int64_t* skipped = nullptr);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_EXAMPLE_SOURCE_H_
