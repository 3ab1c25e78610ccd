// Kernels of the embedding ops (graph/embedding_ops.hpp): ShardIds, DynamicPartition,
// DynamicStitch and the SparseSegment combiners with their gradients. All of them copy or add
// whole rows; every id and index is checked before anything is written.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/embedding_ops.hpp"
#include "psflow/graph/partitioner.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/sparse_kernels.hpp"

namespace psflow {

namespace detail {

class ShardIdsKernel : public OpKernel {
 public:
  explicit ShardIdsKernel(const OpKernelConstruction& c)
      : shards_(c.attr<std::int64_t>("num_shards")),
        rows_(c.attr<std::int64_t>("rows")),
        mod_(c.attr<std::string>("strategy") == "mod"),
        what_("embedding table '" + c.attr<std::string>("table") + "'") {
    if (shards_ < 1 || rows_ < shards_)
      throw InvalidArgument(what_ + ": cannot split " + std::to_string(rows_) + " rows into " +
                            std::to_string(shards_) + " shards");
  }
  void compute(OpKernelContext& ctx) override {
    const Tensor& ids_in = ctx.input(0);
    const auto ids = checked_ids(ids_in, static_cast<std::size_t>(rows_), what_);
    Tensor& shard = ctx.allocate_output(0, DType::int32, ids_in.shape());
    Tensor& local = ctx.allocate_output(1, ids_in.dtype(), ids_in.shape());
    visit_index_dtype(ids_in.dtype(), what_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out_local = local.data<T>();
      std::int32_t* out_shard = shard.data<std::int32_t>();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const ShardRow at =
            route_id(mod_, static_cast<std::size_t>(shards_), static_cast<std::size_t>(rows_),
                     static_cast<std::size_t>(ids[i]));
        out_shard[i] = static_cast<std::int32_t>(at.shard);
        out_local[i] = static_cast<T>(at.row);
      }
    });
  }

 private:
  std::int64_t shards_, rows_;
  bool mod_;
  std::string what_;
};

class DynamicPartitionKernel : public OpKernel {
 public:
  explicit DynamicPartitionKernel(const OpKernelConstruction& c)
      : n_(static_cast<std::size_t>(c.attr<std::int64_t>("num_partitions"))) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& partitions = ctx.input(1);
    const std::string what = "DynamicPartition '" + ctx.name() + "'";
    if (partitions.dtype() != DType::int32)
      throw InvalidArgument(what + ": partitions must be int32, got " + partitions.summary());
    if (data.rank() < partitions.rank() ||
        !std::equal(partitions.shape().begin(), partitions.shape().end(), data.shape().begin()))
      throw InvalidArgument(what + ": data " + data.summary() +
                            " must start with the shape of partitions " + partitions.summary());
    const std::int32_t* p = partitions.data<std::int32_t>();
    const std::size_t count = partitions.size();
    std::vector<std::size_t> sizes(n_, 0);
    for (std::size_t i = 0; i < count; ++i) {
      if (p[i] < 0 || static_cast<std::size_t>(p[i]) >= n_)
        throw InvalidArgument(what + ": partition " + std::to_string(p[i]) + " at position " +
                              std::to_string(i) + " is outside [0, " + std::to_string(n_) + ")");
      ++sizes[static_cast<std::size_t>(p[i])];
    }
    Shape row_shape(data.shape().begin() + static_cast<std::ptrdiff_t>(partitions.rank()),
                    data.shape().end());
    const std::size_t row_bytes = dtype_size(data.dtype()) * num_elements(row_shape);
    std::vector<unsigned char*> dst(n_);
    for (std::size_t k = 0; k < n_; ++k) {
      Shape shape{sizes[k]};
      shape.insert(shape.end(), row_shape.begin(), row_shape.end());
      dst[k] = static_cast<unsigned char*>(
          ctx.allocate_output(static_cast<int>(k), data.dtype(), shape).raw_data());
    }
    const auto* src = static_cast<const unsigned char*>(data.raw_data());
    for (std::size_t i = 0; i < count; ++i) {
      auto& out = dst[static_cast<std::size_t>(p[i])];
      std::memcpy(out, src + i * row_bytes, row_bytes);
      out += row_bytes;
    }
  }

 private:
  std::size_t n_;
};

class DynamicStitchKernel : public OpKernel {
 public:
  explicit DynamicStitchKernel(const OpKernelConstruction& c)
      : n_(static_cast<std::size_t>(c.attr<std::int64_t>("N"))) {}
  void compute(OpKernelContext& ctx) override {
    const std::string what = "DynamicStitch '" + ctx.name() + "'";
    std::vector<std::vector<std::int64_t>> indices(n_);
    std::int64_t rows = 0;
    const Tensor& first = ctx.input(static_cast<int>(n_));
    const Tensor& first_indices = ctx.input(0);
    Shape row_shape(first.shape().begin() +
                        static_cast<std::ptrdiff_t>(std::min(first_indices.rank(), first.rank())),
                    first.shape().end());
    for (std::size_t m = 0; m < n_; ++m) {
      const Tensor& ix = ctx.input(static_cast<int>(m));
      const Tensor& data = ctx.input(static_cast<int>(n_ + m));
      Shape expected = ix.shape();
      expected.insert(expected.end(), row_shape.begin(), row_shape.end());
      if (data.dtype() != first.dtype() || data.shape() != expected)
        throw InvalidArgument(what + ": data " + std::to_string(m) + " is " + data.summary() +
                              ", it must be " + std::string(dtype_name(first.dtype())) +
                              shape_string(expected) + " (indices.shape + row shape)");
      indices[m] = checked_ids(ix, static_cast<std::size_t>(INT64_MAX), what);
      for (auto i : indices[m]) rows = std::max(rows, i + 1);
    }
    Shape shape{static_cast<std::size_t>(rows)};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    Tensor& out = ctx.allocate_output(0, first.dtype(), shape);
    const std::size_t row_bytes = dtype_size(first.dtype()) * num_elements(row_shape);
    std::memset(out.raw_data(), 0, out.nbytes());
    auto* dst = static_cast<unsigned char*>(out.raw_data());
    for (std::size_t m = 0; m < n_; ++m) {
      const auto* src =
          static_cast<const unsigned char*>(ctx.input(static_cast<int>(n_ + m)).raw_data());
      for (std::size_t i = 0; i < indices[m].size(); ++i)
        std::memcpy(dst + static_cast<std::size_t>(indices[m][i]) * row_bytes, src + i * row_bytes,
                    row_bytes);
    }
  }

 private:
  std::size_t n_;
};

enum class Combiner { sum, mean, sqrtn };

// The factor of each term of segment_ids[i]'s sum: w_i / norm(segment), norm from the combiner.
template <class T>
std::vector<T> segment_scales(Combiner combiner, const std::vector<std::int64_t>& segments,
                              std::size_t num_segments, const T* weights) {
  const std::size_t n = segments.size();
  std::vector<T> scale(n);
  std::vector<T> norm(num_segments, T(0));
  for (std::size_t i = 0; i < n; ++i) {
    const T w = weights ? weights[i] : T(1);
    scale[i] = w;
    norm[static_cast<std::size_t>(segments[i])] += combiner == Combiner::sqrtn ? w * w : w;
  }
  if (combiner == Combiner::sum) return scale;
  for (std::size_t i = 0; i < n; ++i) {
    const T total = norm[static_cast<std::size_t>(segments[i])];
    const T divisor = combiner == Combiner::sqrtn ? std::sqrt(total) : total;
    scale[i] = divisor != T(0) ? scale[i] / divisor : T(0);
  }
  return scale;
}

// Forward (Grad = false): out[seg[i]] += scale_i * data[idx[i]], out has num_segments rows.
// Gradient (Grad = true): out[idx[i]] += scale_i * grad[seg[i]], out shaped like data.
template <bool Grad>
class SparseSegmentKernel : public OpKernel {
 public:
  SparseSegmentKernel(const OpKernelConstruction& c, Combiner combiner)
      : combiner_(combiner), what_(c.node().type + " '" + c.node().name + "'") {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& source = ctx.input(0);  // data (forward) or grad
    const Tensor& idx_in = ctx.input(1);
    const Tensor& seg_in = ctx.input(2);
    const bool weighted = ctx.num_inputs() == 5;
    if (idx_in.rank() != 1 || seg_in.shape() != idx_in.shape())
      throw InvalidArgument(what_ + ": indices " + idx_in.summary() + " and segment_ids " +
                            seg_in.summary() + " must be vectors of one length");
    std::size_t out_rows;
    Shape row_shape;
    if constexpr (Grad) {
      const Tensor& like = ctx.input(3);
      if (like.rank() == 0) throw InvalidArgument(what_ + ": data must have rows");
      out_rows = like.shape()[0];
      row_shape.assign(like.shape().begin() + 1, like.shape().end());
    } else {
      out_rows = size_input(ctx.input(3), 0, what_ + ": num_segments");
      if (source.rank() == 0) throw InvalidArgument(what_ + ": data must have rows");
      row_shape.assign(source.shape().begin() + 1, source.shape().end());
    }
    const std::size_t source_rows = source.rank() == 0 ? 0 : source.shape()[0];
    const std::size_t segments_bound = Grad ? source_rows : out_rows;
    const std::size_t data_bound = Grad ? out_rows : source_rows;
    const auto idx = checked_ids(idx_in, data_bound, what_ + ": indices");
    const auto seg = checked_ids(seg_in, segments_bound, what_ + ": segment_ids");
    if (weighted && ctx.input(4).shape() != idx_in.shape())
      throw InvalidArgument(what_ + ": weights " + ctx.input(4).summary() +
                            " must have one value per index");
    Shape shape{out_rows};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    Tensor& out = ctx.allocate_output(0, source.dtype(), shape);
    const std::size_t row = num_elements(row_shape);
    visit_floating_dtype(source.dtype(), what_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (weighted && ctx.input(4).dtype() != source.dtype())
        throw InvalidArgument(what_ + ": weights must have the dtype of data, got " +
                              ctx.input(4).summary());
      const T* weights = weighted ? ctx.input(4).data<T>() : nullptr;
      const std::size_t num_segments = Grad ? source_rows : out_rows;
      const std::vector<T> scale = segment_scales<T>(combiner_, seg, num_segments, weights);
      T* dst = out.data<T>();
      std::fill_n(dst, out.size(), T(0));
      const T* src = source.data<T>();
      for (std::size_t i = 0; i < idx.size(); ++i) {
        const auto from = static_cast<std::size_t>(Grad ? seg[i] : idx[i]);
        const auto to = static_cast<std::size_t>(Grad ? idx[i] : seg[i]);
        for (std::size_t j = 0; j < row; ++j) dst[to * row + j] += scale[i] * src[from * row + j];
      }
    });
  }

 private:
  Combiner combiner_;
  std::string what_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool embedding_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ShardIdsKernel>("ShardIds");
  r.add<DynamicPartitionKernel>("DynamicPartition");
  r.add<DynamicStitchKernel>("DynamicStitch");
  const std::pair<const char*, Combiner> combiners[] = {
      {"Sum", Combiner::sum}, {"Mean", Combiner::mean}, {"SqrtN", Combiner::sqrtn}};
  for (const auto& [suffix, combiner_of_suffix] : combiners) {
    const Combiner combiner = combiner_of_suffix;  // a plain variable: lambdas capture it
    r.add(std::string("SparseSegment") + suffix, [combiner](const OpKernelConstruction& c) {
      return std::make_unique<SparseSegmentKernel<false>>(c, combiner);
    });
    r.add(std::string("SparseSegment") + suffix + "Grad",
          [combiner](const OpKernelConstruction& c) {
            return std::make_unique<SparseSegmentKernel<true>>(c, combiner);
          });
  }
  return true;
}();

}  // namespace detail

}  // namespace psflow
