// Kernels of the array ops (graph/array_ops.hpp): Const, Placeholder, Fill, Identity, Reshape,
// ConcatV2, Slice, Shape, Size, Range, Transpose, Split, SplitV, Pad, StridedSlice,
// StridedSliceGrad, Pack, Unpack, Tile, ExpandDims, Squeeze, OneHot. Layout ops copy elements
// by dtype (every dtype, bool and string included) or whole rows (copy_elements).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
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
    const auto wrapped = wrap_axis(axis_, static_cast<std::int64_t>(first.rank()));
    if (!wrapped)
      throw InvalidArgument("concat axis " + std::to_string(axis_) + " is out of range for " +
                            first.summary());
    const auto axis = static_cast<std::size_t>(*wrapped);
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
    std::size_t outer = 1, inner = 1;  // in elements
    for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
    for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    const std::size_t out_row = shape[axis] * inner;
    std::size_t column = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      const std::size_t block = t.shape()[axis] * inner;
      for (std::size_t o = 0; o < outer; ++o)
        copy_elements(out, o * out_row + column, t, o * block, block);
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
    std::vector<std::size_t> strides(rank, 1);  // in elements
    for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * x.shape()[d];
    const std::size_t row = rank == 0 ? 1 : shape[rank - 1];
    const std::size_t rows = rank == 0 ? 1 : out.size() / shape[rank - 1];
    std::vector<std::size_t> coord(rank, 0);
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t at = 0;
      for (std::size_t d = 0; d < rank; ++d)
        at += (coord[d] + static_cast<std::size_t>(begin_[d])) * strides[d];
      copy_elements(out, r * row, x, at, row);
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

// Range as TF: ceil((limit - start) / delta) values; delta must not be 0, and start may not
// pass limit in delta's direction.
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
        return *t.data<T>();
      };
      const T start = scalar(0, "start"), limit = scalar(1, "limit"), delta = scalar(2, "delta");
      if (delta == T(0)) throw InvalidArgument("range '" + ctx.name() + "': delta must not be 0");
      if (delta > T(0) ? start > limit : start < limit)
        throw InvalidArgument("range '" + ctx.name() + "': start " + std::to_string(start) +
                              (delta > T(0) ? " > limit " : " < limit ") + std::to_string(limit) +
                              " with delta " + std::to_string(delta));
      std::int64_t count = 0;
      if constexpr (std::is_integral_v<T>) {
        const std::int64_t span = std::abs(static_cast<std::int64_t>(limit) - start);
        const std::int64_t step = std::abs(static_cast<std::int64_t>(delta));
        count = (span + step - 1) / step;
      } else {
        count = static_cast<std::int64_t>(
            std::ceil(std::abs((static_cast<double>(limit) - start) / static_cast<double>(delta))));
      }
      Tensor& out = ctx.allocate_output(0, start_in.dtype(), {static_cast<std::size_t>(count)});
      T* po = out.data<T>();
      for (std::int64_t i = 0; i < count; ++i)
        po[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    };
    visit_numeric_dtype(start_in.dtype(), "range: start", fill);
  }
};

// "Transpose 'name': ", how a kernel's errors name its node.
inline std::string kernel_where(const OpKernelContext& ctx) {
  return ctx.node().type + " '" + ctx.name() + "': ";
}

// Row-major strides of `shape`, in elements.
inline std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * static_cast<std::int64_t>(shape[d]);
  return strides;
}

// out[i] = in[offset(i)] for the flat indices i of `shape` (walk_strided).
inline void gather_strided(const Tensor& in, Tensor& out, const Shape& shape, std::int64_t base,
                           const std::vector<std::int64_t>& strides) {
  if (out.size() == 0) return;
  visit_any_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    walk_strided(shape, base, strides, [&](std::size_t i, std::int64_t at) { dst[i] = src[at]; });
  });
}

// out[offset(i)] = in[i] for the flat indices i of `shape` (walk_strided).
inline void scatter_strided(const Tensor& in, Tensor& out, const Shape& shape, std::int64_t base,
                            const std::vector<std::int64_t>& strides) {
  if (in.size() == 0) return;
  visit_any_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    walk_strided(shape, base, strides, [&](std::size_t i, std::int64_t at) { dst[at] = src[i]; });
  });
}

class TransposeKernel : public OpKernel {
 public:
  explicit TransposeKernel(const OpKernelConstruction& c)
      : perm_(c.attr<std::vector<std::int64_t>>("perm")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const std::size_t rank = x.rank();
    std::vector<std::int64_t> perm = perm_;
    if (perm.empty())
      for (std::size_t d = rank; d-- > 0;) perm.push_back(static_cast<std::int64_t>(d));
    if (perm.size() != rank || !is_permutation(perm))
      throw InvalidArgument(kernel_where(ctx) + "perm " + int_list(perm_) +
                            " is not a permutation of the axes of " + x.summary());
    const auto in_strides = row_major_strides(x.shape());
    Shape shape(rank);
    std::vector<std::int64_t> strides(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      const auto from = static_cast<std::size_t>(perm[d]);
      shape[d] = x.shape()[from];
      strides[d] = in_strides[from];
    }
    Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
    gather_strided(x, out, shape, 0, strides);
  }

 private:
  std::vector<std::int64_t> perm_;
};

// Split and SplitV: blocks of x along the axis, copied row by row.
class SplitKernel : public OpKernel {
 public:
  explicit SplitKernel(const OpKernelConstruction& c)
      : axis_(c.attr<std::int64_t>("axis")),
        num_outputs_(static_cast<std::int64_t>(c.node().outputs.size())),
        sizes_(c.has_attr("size_splits") ? c.attr<std::vector<std::int64_t>>("size_splits")
                                         : std::vector<std::int64_t>{}),
        equal_(!c.has_attr("size_splits")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto a = wrap_axis(axis_, static_cast<std::int64_t>(x.rank()));
    if (!a)
      throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis_) +
                            " is out of range for " + x.summary());
    const auto axis = static_cast<std::size_t>(*a);
    const auto dim = static_cast<std::int64_t>(x.shape()[axis]);
    std::vector<std::int64_t> sizes = sizes_;
    if (equal_) {
      if (dim % num_outputs_ != 0)
        throw InvalidArgument(kernel_where(ctx) + "num_split " + std::to_string(num_outputs_) +
                              " does not evenly divide dimension " + std::to_string(axis) +
                              " (size " + std::to_string(dim) + ") of " + x.summary());
      sizes.assign(static_cast<std::size_t>(num_outputs_), dim / num_outputs_);
    } else {
      std::int64_t sum = 0;
      std::int64_t* rest = nullptr;
      for (auto& s : sizes)
        if (s < 0)
          rest = &s;
        else
          sum += s;
      if (rest && sum <= dim) *rest = dim - sum;
      if (rest ? sum > dim : sum != dim)
        throw InvalidArgument(kernel_where(ctx) + "size_splits " + int_list(sizes_) +
                              " do not add up to dimension " + std::to_string(axis) + " (size " +
                              std::to_string(dim) + ") of " + x.summary());
    }
    std::size_t outer = 1, inner = 1;  // in elements
    for (std::size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
    for (std::size_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
    const std::size_t in_row = static_cast<std::size_t>(dim) * inner;
    std::size_t column = 0;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      Shape shape = x.shape();
      shape[axis] = static_cast<std::size_t>(sizes[j]);
      Tensor& out = ctx.allocate_output(static_cast<int>(j), x.dtype(), shape);
      const std::size_t block = shape[axis] * inner;
      if (block > 0)
        for (std::size_t o = 0; o < outer; ++o)
          copy_elements(out, o * block, x, o * in_row + column, block);
      column += block;
    }
  }

 private:
  std::int64_t axis_, num_outputs_;
  std::vector<std::int64_t> sizes_;
  bool equal_;
};

class PadKernel : public OpKernel {
 public:
  explicit PadKernel(const OpKernelConstruction& c)
      : paddings_(c.attr<std::vector<std::int64_t>>("paddings")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (paddings_.size() != 2 * x.rank())
      throw InvalidArgument(kernel_where(ctx) + "paddings " + paddings_string(paddings_) +
                            " need one (before, after) pair per axis of " + x.summary());
    Shape shape(x.rank());
    for (std::size_t d = 0; d < x.rank(); ++d)
      shape[d] = x.shape()[d] + static_cast<std::size_t>(paddings_[2 * d] + paddings_[2 * d + 1]);
    Tensor out(x.dtype(), shape);  // zero-filled
    const auto strides = row_major_strides(shape);
    std::int64_t base = 0;
    for (std::size_t d = 0; d < x.rank(); ++d) base += paddings_[2 * d] * strides[d];
    scatter_strided(x, out, x.shape(), base, strides);
    ctx.set_output(0, std::move(out));
  }

 private:
  std::vector<std::int64_t> paddings_;
};

// A strided slice resolved against a run-time shape: the walk over the sliced elements (shrunk
// axes included with size 1), its start and strides in the input, and the output shape.
struct StridedSliceWalk {
  Shape walk_shape, out_shape;
  std::int64_t base = 0;
  std::vector<std::int64_t> strides;
};

inline StridedSliceWalk strided_slice_walk(const OpKernelContext& ctx, const Shape& in_shape,
                                           const StridedSliceAttrs& attrs) {
  const auto resolved =
      resolve_strided_slice(std::vector<std::int64_t>(in_shape.begin(), in_shape.end()), attrs,
                            [&](const std::string& message) {
                              throw InvalidArgument(kernel_where(ctx) + message + " (input " +
                                                    shape_string(in_shape) + ")");
                            });
  const auto in_strides = row_major_strides(in_shape);
  StridedSliceWalk w;
  for (std::size_t d = 0; d < resolved.size(); ++d) {
    const auto& r = resolved[d];
    w.walk_shape.push_back(static_cast<std::size_t>(r.size));
    if (!r.shrink) w.out_shape.push_back(static_cast<std::size_t>(r.size));
    if (r.size > 0) w.base += r.begin * in_strides[d];
    w.strides.push_back(r.stride * in_strides[d]);
  }
  return w;
}

class StridedSliceKernel : public OpKernel {
 public:
  explicit StridedSliceKernel(const OpKernelConstruction& c)
      : attrs_(StridedSliceAttrs::of(c.node().attrs, c.name())) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto w = strided_slice_walk(ctx, x.shape(), attrs_);
    Tensor& out = ctx.allocate_output(0, x.dtype(), w.out_shape);
    gather_strided(x, out, w.walk_shape, w.base, w.strides);
  }

 private:
  StridedSliceAttrs attrs_;
};

// StridedSliceGrad(like, dy): dy written where the slice of `like` took its elements.
class StridedSliceGradKernel : public OpKernel {
 public:
  explicit StridedSliceGradKernel(const OpKernelConstruction& c)
      : attrs_(StridedSliceAttrs::of(c.node().attrs, c.name())) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& like = ctx.input(0);
    const Tensor& dy = ctx.input(1);
    const auto w = strided_slice_walk(ctx, like.shape(), attrs_);
    if (dy.shape() != w.out_shape)
      throw InvalidArgument(kernel_where(ctx) + "the gradient " + dy.summary() +
                            " does not have the slice's shape " + shape_string(w.out_shape));
    Tensor out(dy.dtype(), like.shape());  // zero-filled
    scatter_strided(dy, out, w.walk_shape, w.base, w.strides);
    ctx.set_output(0, std::move(out));
  }

 private:
  StridedSliceAttrs attrs_;
};

// Pack: value j becomes index j of the new axis.
class PackKernel : public OpKernel {
 public:
  explicit PackKernel(const OpKernelConstruction& c) : axis_(c.attr<std::int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    const int n = ctx.num_inputs();
    for (int i = 1; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype() || t.shape() != first.shape())
        throw InvalidArgument(kernel_where(ctx) + "value " + std::to_string(i) + " is " +
                              t.summary() + ", value 0 is " + first.summary() +
                              "; stacked values must have one dtype and shape");
    }
    const auto rank = static_cast<std::int64_t>(first.rank());
    if (axis_ < -(rank + 1) || axis_ > rank)
      throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis_) +
                            " is out of range for stacking values of " + first.summary());
    const auto axis = static_cast<std::size_t>(axis_ < 0 ? axis_ + rank + 1 : axis_);
    Shape shape = first.shape();
    shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), static_cast<std::size_t>(n));
    Tensor& out = ctx.allocate_output(0, first.dtype(), shape);
    std::size_t outer = 1, inner = 1;  // in elements
    for (std::size_t d = 0; d < axis; ++d) outer *= first.shape()[d];
    for (std::size_t d = axis; d < first.rank(); ++d) inner *= first.shape()[d];
    if (inner == 0) return;
    for (int j = 0; j < n; ++j)
      for (std::size_t o = 0; o < outer; ++o)
        copy_elements(out, (o * static_cast<std::size_t>(n) + static_cast<std::size_t>(j)) * inner,
                      ctx.input(j), o * inner, inner);
  }

 private:
  std::int64_t axis_;
};

// Unpack: output j is index j of the axis.
class UnpackKernel : public OpKernel {
 public:
  explicit UnpackKernel(const OpKernelConstruction& c)
      : axis_(c.attr<std::int64_t>("axis")), num_(c.attr<std::int64_t>("num")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto a = wrap_axis(axis_, static_cast<std::int64_t>(x.rank()));
    if (!a)
      throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis_) +
                            " is out of range for " + x.summary());
    const auto axis = static_cast<std::size_t>(*a);
    if (static_cast<std::int64_t>(x.shape()[axis]) != num_)
      throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis) + " of " +
                            x.summary() + " does not have size num " + std::to_string(num_));
    Shape shape = x.shape();
    shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
    std::size_t outer = 1, inner = 1;  // in elements
    for (std::size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
    for (std::size_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
    const auto n = static_cast<std::size_t>(num_);
    for (std::size_t j = 0; j < n; ++j) {
      Tensor& out = ctx.allocate_output(static_cast<int>(j), x.dtype(), shape);
      if (inner > 0)
        for (std::size_t o = 0; o < outer; ++o)
          copy_elements(out, o * inner, x, (o * n + j) * inner, inner);
    }
  }

 private:
  std::int64_t axis_, num_;
};

// Tile: the output viewed as [m0, d0, m1, d1, ...] reads x with stride 0 along the m axes.
class TileKernel : public OpKernel {
 public:
  explicit TileKernel(const OpKernelConstruction& c)
      : multiples_(c.attr<std::vector<std::int64_t>>("multiples")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (multiples_.size() != x.rank())
      throw InvalidArgument(kernel_where(ctx) + "multiples " + int_list(multiples_) +
                            " needs one entry per axis of " + x.summary());
    const auto in_strides = row_major_strides(x.shape());
    Shape shape, walk;
    std::vector<std::int64_t> strides;
    for (std::size_t d = 0; d < x.rank(); ++d) {
      if (multiples_[d] < 0)
        throw InvalidArgument(kernel_where(ctx) + "multiples " + int_list(multiples_) +
                              " must be non-negative");
      const auto m = static_cast<std::size_t>(multiples_[d]);
      shape.push_back(x.shape()[d] * m);
      walk.insert(walk.end(), {m, x.shape()[d]});
      strides.insert(strides.end(), {0, in_strides[d]});
    }
    Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
    gather_strided(x, out, walk, 0, strides);
  }

 private:
  std::vector<std::int64_t> multiples_;
};

class ExpandDimsKernel : public OpKernel {
 public:
  explicit ExpandDimsKernel(const OpKernelConstruction& c) : axis_(c.attr<std::int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    if (axis_ < -(rank + 1) || axis_ > rank)
      throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis_) +
                            " is out of range for " + x.summary());
    Shape shape = x.shape();
    shape.insert(shape.begin() + (axis_ < 0 ? axis_ + rank + 1 : axis_), 1);
    ctx.set_output(0, x.reshaped(std::move(shape)));
  }
  bool is_expensive() const override { return false; }

 private:
  std::int64_t axis_;
};

class SqueezeKernel : public OpKernel {
 public:
  explicit SqueezeKernel(const OpKernelConstruction& c)
      : axes_(c.attr<std::vector<std::int64_t>>("squeeze_dims")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<bool> squeezed(x.rank(), false);
    for (std::size_t d = 0; d < x.rank() && axes_.empty(); ++d) squeezed[d] = x.shape()[d] == 1;
    for (auto axis : axes_) {
      const auto a = wrap_axis(axis, static_cast<std::int64_t>(x.rank()));
      if (!a)
        throw InvalidArgument(kernel_where(ctx) + "axis " + std::to_string(axis) +
                              " is out of range for " + x.summary());
      if (x.shape()[static_cast<std::size_t>(*a)] != 1)
        throw InvalidArgument(kernel_where(ctx) + "cannot squeeze axis " + std::to_string(axis) +
                              " of " + x.summary() + ": its size is not 1");
      squeezed[static_cast<std::size_t>(*a)] = true;
    }
    Shape shape;
    for (std::size_t d = 0; d < x.rank(); ++d)
      if (!squeezed[d]) shape.push_back(x.shape()[d]);
    ctx.set_output(0, x.reshaped(std::move(shape)));
  }
  bool is_expensive() const override { return false; }

 private:
  std::vector<std::int64_t> axes_;
};

class OneHotKernel : public OpKernel {
 public:
  explicit OneHotKernel(const OpKernelConstruction& c)
      : depth_(c.attr<std::int64_t>("depth")),
        axis_(c.attr<std::int64_t>("axis")),
        on_(c.attr<double>("on_value")),
        off_(c.attr<double>("off_value")),
        dtype_(c.attr<DType>("dtype")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& indices = ctx.input(0);
    const auto rank = static_cast<std::int64_t>(indices.rank());
    if (depth_ < 0 || axis_ < -1 || axis_ > rank)
      throw InvalidArgument(kernel_where(ctx) + "depth " + std::to_string(depth_) + " or axis " +
                            std::to_string(axis_) + " is invalid for indices " + indices.summary());
    const auto axis = static_cast<std::size_t>(axis_ < 0 ? rank : axis_);
    Shape shape = indices.shape();
    shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis),
                 static_cast<std::size_t>(depth_));
    std::size_t outer = 1, inner = 1;
    for (std::size_t d = 0; d < axis; ++d) outer *= indices.shape()[d];
    for (std::size_t d = axis; d < indices.rank(); ++d) inner *= indices.shape()[d];
    Tensor& out = ctx.allocate_output(0, dtype_, shape);
    const auto depth = static_cast<std::size_t>(depth_);
    visit_index_dtype(indices.dtype(), kernel_where(ctx) + "indices", [&](auto itag) {
      using I = typename decltype(itag)::type;
      const I* idx = indices.data<I>();
      visit_dtype(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* po = out.data<T>();
        std::fill_n(po, out.size(), static_cast<T>(off_));
        for (std::size_t o = 0; o < outer; ++o)
          for (std::size_t i = 0; i < inner; ++i) {
            const auto k = static_cast<std::int64_t>(idx[o * inner + i]);
            if (k >= 0 && k < depth_)
              po[(o * depth + static_cast<std::size_t>(k)) * inner + i] = static_cast<T>(on_);
          }
      });
    });
  }

 private:
  std::int64_t depth_, axis_;
  double on_, off_;
  DType dtype_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool array_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ConstKernel>("Const");
  r.add<PlaceholderKernel>("Placeholder");
  r.add<FillKernel>("Fill");
  r.add<IdentityKernel>("Identity");
  r.add<IdentityKernel>("StopGradient");
  r.add<IdentityKernel>("PlaceholderWithDefault");  // runs only when nothing is fed in its place
  r.add<ReshapeKernel>("Reshape");
  r.add<ConcatKernel>("ConcatV2");
  r.add<SliceKernel>("Slice");
  r.add<ShapeKernel>("Shape");
  r.add<SizeKernel>("Size");
  r.add<RangeKernel>("Range");
  r.add<TransposeKernel>("Transpose");
  r.add<SplitKernel>("Split");
  r.add<SplitKernel>("SplitV");
  r.add<PadKernel>("Pad");
  r.add<StridedSliceKernel>("StridedSlice");
  r.add<StridedSliceGradKernel>("StridedSliceGrad");
  r.add<PackKernel>("Pack");
  r.add<UnpackKernel>("Unpack");
  r.add<TileKernel>("Tile");
  r.add<ExpandDimsKernel>("ExpandDims");
  r.add<SqueezeKernel>("Squeeze");
  r.add<OneHotKernel>("OneHot");
  return true;
}();

}  // namespace detail

}  // namespace psflow
