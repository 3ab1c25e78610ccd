// Kernels of the array ops (graph/array_ops.hpp): Const, Placeholder, Fill, Identity, Reshape,
// ConcatV2, Slice, Shape, Size, Range.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "psflow/graph/array_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class ConstKernel : public OpKernel {
 public:
  explicit ConstKernel(const OpKernelConstruction& c) : value_(c.attr<Tensor>("value")) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, value_); }
  bool is_expensive() const override { return false; }

 private:
  Tensor value_;  // shared with every step's output: never written
};

// Runs only when the placeholder was not fed (the session checks first; this is the backstop).
class PlaceholderKernel : public OpKernel {
 public:
  explicit PlaceholderKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const auto& spec = ctx.node().outputs[0];
    throw InvalidArgument("You must feed a value for placeholder tensor '" + ctx.name() +
                          "' with dtype " + std::string(dtype_name(spec.dtype)) + " and shape " +
                          spec.shape.to_string());
  }
  bool is_expensive() const override { return false; }
};

class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const OpKernelConstruction& c)
      : dtype_(c.attr<DType>("dtype")), value_(c.attr<double>("value")) {
    for (auto d : c.attr<std::vector<std::int64_t>>("shape")) {
      if (d < 0) throw InvalidArgument("Fill needs a fully known shape");
      shape_.push_back(static_cast<std::size_t>(d));
    }
  }
  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, dtype_, shape_);
    visit_dtype(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill_n(out.data<T>(), out.size(), static_cast<T>(value_));
    });
  }

 private:
  DType dtype_;
  Shape shape_;
  double value_;
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, ctx.input(0)); }
  bool is_expensive() const override { return false; }
};

class ReshapeKernel : public OpKernel {
 public:
  explicit ReshapeKernel(const OpKernelConstruction& c)
      : target_(c.attr<std::vector<std::int64_t>>("shape")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Shape shape;
    std::size_t known = 1;
    int unknown = -1;
    for (std::size_t i = 0; i < target_.size(); ++i) {
      if (target_[i] < 0) {
        unknown = static_cast<int>(i);
        shape.push_back(0);
      } else {
        shape.push_back(static_cast<std::size_t>(target_[i]));
        known *= shape.back();
      }
    }
    if (unknown >= 0) {
      if (known == 0 || x.size() % known != 0)
        throw InvalidArgument("cannot reshape " + x.summary() + " to " + shape_string(target_));
      shape[static_cast<std::size_t>(unknown)] = x.size() / known;
    }
    ctx.set_output(0, x.reshaped(std::move(shape)));
  }
  bool is_expensive() const override { return false; }

 private:
  std::vector<std::int64_t> target_;
};

// Copies blocks between row-major tensors viewed as [outer, extent, inner] along one axis.
class ConcatKernel : public OpKernel {
 public:
  explicit ConcatKernel(const OpKernelConstruction& c) : axis_(c.attr<std::int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    if (axis_ < 0 || static_cast<std::size_t>(axis_) >= first.rank())
      throw InvalidArgument("concat axis " + std::to_string(axis_) + " is out of range for " +
                            first.summary());
    const auto axis = static_cast<std::size_t>(axis_);
    Shape shape = first.shape();
    shape[axis] = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      bool same = t.dtype() == first.dtype() && t.rank() == first.rank();
      for (std::size_t d = 0; same && d < t.rank(); ++d)
        same = d == axis || t.shape()[d] == first.shape()[d];
      if (!same)
        throw InvalidArgument("concat: value " + std::to_string(i) + " is " + t.summary() +
                              ", value 0 is " + first.summary() +
                              "; values must agree in dtype and in every dimension but axis " +
                              std::to_string(axis));
      shape[axis] += t.shape()[axis];
    }
    Tensor& out = ctx.allocate_output(0, first.dtype(), shape);
    std::size_t outer = 1, inner = dtype_size(first.dtype());
    for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
    for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    auto* dst = static_cast<unsigned char*>(out.raw_data());
    const std::size_t out_row = shape[axis] * inner;
    std::size_t column = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      const std::size_t block = t.shape()[axis] * inner;
      const auto* src = static_cast<const unsigned char*>(t.raw_data());
      for (std::size_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * out_row + column, src + o * block, block);
      column += block;
    }
  }

 private:
  std::int64_t axis_;
};

class SliceKernel : public OpKernel {
 public:
  explicit SliceKernel(const OpKernelConstruction& c)
      : begin_(c.attr<std::vector<std::int64_t>>("begin")),
        size_(c.attr<std::vector<std::int64_t>>("size")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (begin_.size() != x.rank() || size_.size() != x.rank())
      throw InvalidArgument("slice of " + x.summary() + ": begin " + shape_string(begin_) +
                            " and size " + shape_string(size_) + " need one entry per axis");
    const std::size_t rank = x.rank();
    Shape shape(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      const auto extent = static_cast<std::int64_t>(x.shape()[d]);
      const std::int64_t len = size_[d] < 0 ? extent - begin_[d] : size_[d];
      if (begin_[d] < 0 || len < 0 || begin_[d] + len > extent)
        throw InvalidArgument("slice begin " + shape_string(begin_) + " size " +
                              shape_string(size_) + " reaches outside " + x.summary());
      shape[d] = static_cast<std::size_t>(len);
    }
    Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
    if (out.size() == 0) return;
    const std::size_t elem = dtype_size(x.dtype());
    std::vector<std::size_t> strides(rank, elem);
    for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * x.shape()[d];
    const std::size_t row_bytes = rank == 0 ? elem : shape[rank - 1] * elem;
    const std::size_t rows = rank == 0 ? 1 : out.size() / shape[rank - 1];
    const auto* src = static_cast<const unsigned char*>(x.raw_data());
    auto* dst = static_cast<unsigned char*>(out.raw_data());
    std::vector<std::size_t> coord(rank, 0);
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t at = 0;
      for (std::size_t d = 0; d < rank; ++d)
        at += (coord[d] + static_cast<std::size_t>(begin_[d])) * strides[d];
      std::memcpy(dst + r * row_bytes, src + at, row_bytes);
      for (std::size_t d = rank - 1; rank > 0 && d-- > 0;) {
        if (++coord[d] < shape[d]) break;
        coord[d] = 0;
      }
    }
  }

 private:
  std::vector<std::int64_t> begin_, size_;
};

class ShapeKernel : public OpKernel {
 public:
  explicit ShapeKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, DType::int64, {x.rank()});
    for (std::size_t d = 0; d < x.rank(); ++d)
      out.data<std::int64_t>()[d] = static_cast<std::int64_t>(x.shape()[d]);
  }
  bool is_expensive() const override { return false; }
};

class SizeKernel : public OpKernel {
 public:
  explicit SizeKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(ctx.input(0).size())));
  }
  bool is_expensive() const override { return false; }
};

class RangeKernel : public OpKernel {
 public:
  explicit RangeKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& start_in = ctx.input(0);
    auto fill = [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto scalar = [&](int i, const char* what) {
        const Tensor& t = ctx.input(i);
        if (t.dtype() != start_in.dtype() || t.size() != 1)
          throw InvalidArgument(std::string("range: ") + what + " must be a scalar of the dtype " +
                                "of start, got " + t.summary());
        return static_cast<std::int64_t>(*t.data<T>());
      };
      const std::int64_t start = scalar(0, "start"), limit = scalar(1, "limit"),
                         delta = scalar(2, "delta");
      if (delta == 0) throw InvalidArgument("range: delta must not be 0");
      const std::int64_t span = limit - start;
      const std::int64_t count = (span > 0) == (delta > 0) && span != 0
                                     ? (span + delta - (delta > 0 ? 1 : -1)) / delta
                                     : 0;
      Tensor& out = ctx.allocate_output(0, start_in.dtype(), {static_cast<std::size_t>(count)});
      for (std::int64_t i = 0; i < count; ++i) out.data<T>()[i] = static_cast<T>(start + i * delta);
    };
    visit_index_dtype(start_in.dtype(), "range: start", fill);
  }
};

inline const bool array_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ConstKernel>("Const");
  r.add<PlaceholderKernel>("Placeholder");
  r.add<FillKernel>("Fill");
  r.add<IdentityKernel>("Identity");
  r.add<ReshapeKernel>("Reshape");
  r.add<ConcatKernel>("ConcatV2");
  r.add<SliceKernel>("Slice");
  r.add<ShapeKernel>("Shape");
  r.add<SizeKernel>("Size");
  r.add<RangeKernel>("Range");
  return true;
}();

}  // namespace detail

}  // namespace psflow
