// Kernels of the image ops (graph/conv_ops.hpp), float32 and float64 (BiasAdd and BiasAddGrad
// also int32 and int64), all NHWC.
//
// Conv2D is im2col + GEMM: each output pixel's receptive field, [KH, KW, C] with zeros where it
// hangs over a SAME edge, becomes one row of a matrix `col` [pixels, KH*KW*C]; the filter read
// as [KH*KW*C, OC] turns it into the output rows, already in NHWC order. Images are processed in
// chunks whose `col` stays under kConvScratchBytes (or holds kConvMinRows rows, whichever is
// more), so memory is bounded for any batch.
// Conv2DBackpropInput multiplies out_backprop by the filter transposed into `col` and scatters it
// back (col2im); Conv2DBackpropFilter sums col^T x out_backprop over the chunks. A 1x1 filter
// with stride 1 needs no `col`: the input already is one. The GEMMs are blas.hpp's.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/conv_ops.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/blas.hpp"

namespace psflow {

namespace detail {

// Upper bound on a convolution's im2col scratch matrix per GEMM (at least one image): small
// enough to stay in L2 between im2col writing it and the GEMM reading it, which measured faster
// (benchmarks/bench_conv.cpp) than one matrix of 1 or 8 MiB.
inline constexpr std::size_t kConvScratchBytes = std::size_t{256} << 10;
// ... unless whole images of this many rows fit: fewer rows per GEMM measured slower.
inline constexpr std::size_t kConvMinRows = 1024;

// The window attributes of a conv or pool node, checked again at run time.
struct WindowAttrs {
  std::size_t stride_h = 1, stride_w = 1;
  std::size_t k_h = 0, k_w = 0;  // pools only (ksize)
  bool same = false;
};

inline std::vector<std::int64_t> nhwc_attr(const OpKernelConstruction& c, const char* key) {
  const auto& v = c.attr<std::vector<std::int64_t>>(key);
  if (v.size() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1)
    throw InvalidArgument("node '" + c.name() + "' (" + c.node().type + "): " + key + " " +
                          int_list(v) + " must be [1, h, w, 1] with h, w >= 1");
  return v;
}

inline WindowAttrs window_attrs_of(const OpKernelConstruction& c, bool pool) {
  WindowAttrs w;
  const auto strides = nhwc_attr(c, "strides");
  w.stride_h = static_cast<std::size_t>(strides[1]);
  w.stride_w = static_cast<std::size_t>(strides[2]);
  if (pool) {
    const auto ksize = nhwc_attr(c, "ksize");
    w.k_h = static_cast<std::size_t>(ksize[1]);
    w.k_w = static_cast<std::size_t>(ksize[2]);
  }
  const auto& padding = c.attr<std::string>("padding");
  if (padding != "SAME" && padding != "VALID")
    throw InvalidArgument("node '" + c.name() + "' (" + c.node().type +
                          "): padding must be \"SAME\" or \"VALID\", got \"" + padding + "\"");
  w.same = padding == "SAME";
  return w;
}

// Sizes of a window sliding over [N, H, W, C] (convolutions: out_c from the filter).
struct WindowGeometry {
  std::size_t batch = 0, in_h = 0, in_w = 0, in_c = 0;
  std::size_t k_h = 0, k_w = 0, out_c = 0;
  std::size_t stride_h = 1, stride_w = 1;
  std::size_t out_h = 0, out_w = 0;
  std::ptrdiff_t pad_top = 0, pad_left = 0;

  std::size_t patch() const { return k_h * k_w * in_c; }
  std::size_t image_size() const { return in_h * in_w * in_c; }
  std::size_t out_pixels() const { return out_h * out_w; }
  Shape input_shape() const { return {batch, in_h, in_w, in_c}; }
  Shape output_shape() const { return {batch, out_h, out_w, out_c}; }
  // A 1x1 filter at stride 1: the input already is the im2col matrix.
  bool pointwise() const { return k_h == 1 && k_w == 1 && stride_h == 1 && stride_w == 1; }
};

[[noreturn]] inline void fail_node(const OpKernelContext& ctx, const std::string& message) {
  throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type + "): " + message);
}

// Geometry of input [N, H, W, C] under a (k_h, k_w) window; out_c stays C (pools).
inline WindowGeometry window_geometry(const OpKernelContext& ctx, const Shape& input,
                                      std::size_t k_h, std::size_t k_w, const WindowAttrs& w) {
  WindowGeometry g;
  g.batch = input[0];
  g.in_h = input[1];
  g.in_w = input[2];
  g.in_c = g.out_c = input[3];
  g.k_h = k_h;
  g.k_w = k_w;
  g.stride_h = w.stride_h;
  g.stride_w = w.stride_w;
  const std::size_t in[2] = {g.in_h, g.in_w}, k[2] = {k_h, k_w}, s[2] = {w.stride_h, w.stride_w};
  WindowedSize out[2];
  for (std::size_t a = 0; a < 2; ++a) {
    auto size = windowed_size(static_cast<std::int64_t>(in[a]), static_cast<std::int64_t>(k[a]),
                              static_cast<std::int64_t>(s[a]), w.same);
    if (!size)
      fail_node(ctx, "a window of " + std::to_string(k[a]) + " does not fit the " +
                         (a == 0 ? "height " : "width ") + std::to_string(in[a]) + " of " +
                         shape_string(input) + " with VALID padding");
    out[a] = *size;
  }
  g.out_h = static_cast<std::size_t>(out[0].out);
  g.out_w = static_cast<std::size_t>(out[1].out);
  g.pad_top = out[0].pad_before;
  g.pad_left = out[1].pad_before;
  return g;
}

// A convolution's geometry from its input and filter shapes.
inline WindowGeometry conv_geometry(const OpKernelContext& ctx, const Shape& input,
                                    const Shape& filter, const WindowAttrs& w) {
  if (input.size() != 4 || filter.size() != 4)
    fail_node(ctx, "needs an NHWC input and a [KH, KW, C, OC] filter of rank 4, got input " +
                       shape_string(input) + " and filter " + shape_string(filter));
  if (input[3] != filter[2])
    fail_node(ctx, "the input's channels must equal the filter's in_channels, got input " +
                       shape_string(input) + " and filter " + shape_string(filter));
  if (filter[0] == 0 || filter[1] == 0)
    fail_node(ctx, "the filter " + shape_string(filter) + " has an empty window");
  WindowGeometry g = window_geometry(ctx, input, filter[0], filter[1], w);
  g.out_c = filter[3];
  return g;
}

// A sizes input (int32/int64 vector of 4, non-negative) as a shape.
inline Shape read_sizes(const OpKernelContext& ctx, const Tensor& sizes, const char* what) {
  if (sizes.rank() != 1 || sizes.size() != 4 ||
      (sizes.dtype() != DType::int32 && sizes.dtype() != DType::int64))
    fail_node(ctx,
              std::string(what) + " must be an int32 or int64 vector of 4, got " + sizes.summary());
  Shape shape(4);
  for (std::size_t d = 0; d < 4; ++d) {
    const std::int64_t v = sizes.dtype() == DType::int32 ? sizes.data<std::int32_t>()[d]
                                                         : sizes.data<std::int64_t>()[d];
    if (v < 0) fail_node(ctx, std::string(what) + " has a negative size: " + sizes.summary());
    shape[d] = static_cast<std::size_t>(v);
  }
  return shape;
}

inline void expect_shape(const OpKernelContext& ctx, const Tensor& t, const Shape& want,
                         const char* what) {
  if (t.shape() != want)
    fail_node(ctx, std::string(what) + " must be " + shape_string(want) + ", got " + t.summary());
}

inline void expect_dtype(const OpKernelContext& ctx, const Tensor& t, DType want,
                         const char* what) {
  if (t.dtype() != want)
    fail_node(ctx, std::string(what) + " must be " + std::string(dtype_name(want)) + ", got " +
                       t.summary());
}

// Images per chunk: the im2col matrix under kConvScratchBytes, or kConvMinRows rows (at least one).
template <class T>
std::size_t images_per_chunk(const WindowGeometry& g) {
  const std::size_t per_image = g.out_pixels() * g.patch() * sizeof(T);
  if (per_image == 0) return std::max<std::size_t>(g.batch, 1);
  const std::size_t min_images = kConvMinRows / g.out_pixels();
  return std::clamp<std::size_t>(std::max(kConvScratchBytes / per_image, min_images), 1,
                                 std::max<std::size_t>(g.batch, 1));
}

template <class T>
Tensor scratch(std::size_t elements) {
  return Tensor::uninitialized(dtype_of<T>(), {elements});
}

// dst[0, n) = src[0, n) for the short runs im2col copies (a filter row: kw * C values): inline
// stores instead of a memmove call per run, which costs more than the copy when C is small.
template <class T>
inline void copy_run(const T* src, std::size_t n, T* dst) {
  if (n > 32) {
    std::copy_n(src, n, dst);
    return;
  }
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    dst[i] = src[i];
    dst[i + 1] = src[i + 1];
    dst[i + 2] = src[i + 2];
    dst[i + 3] = src[i + 3];
  }
  switch (n - i) {
    case 3:
      dst[i + 2] = src[i + 2];
      [[fallthrough]];
    case 2:
      dst[i + 1] = src[i + 1];
      [[fallthrough]];
    case 1:
      dst[i] = src[i];
      break;
    default:
      break;
  }
}

// Rows of `col` for `images` images starting at `input`: one row [KH, KW, C] per output pixel.
template <class T>
void im2col(const T* input, const WindowGeometry& g, std::size_t images, T* col) {
  const std::size_t row_len = g.k_w * g.in_c, patch = g.patch();
  const auto in_h = static_cast<std::ptrdiff_t>(g.in_h), in_w = static_cast<std::ptrdiff_t>(g.in_w);
  const auto k_w = static_cast<std::ptrdiff_t>(g.k_w);
  for (std::size_t n = 0; n < images; ++n) {
    const T* image = input + n * g.image_size();
    for (std::size_t oh = 0; oh < g.out_h; ++oh) {
      const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(oh * g.stride_h) - g.pad_top;
      for (std::size_t ow = 0; ow < g.out_w; ++ow, col += patch) {
        const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(ow * g.stride_w) - g.pad_left;
        const bool inside = w0 >= 0 && w0 + k_w <= in_w;
        for (std::size_t kh = 0; kh < g.k_h; ++kh) {
          T* dst = col + kh * row_len;
          const std::ptrdiff_t h = h0 + static_cast<std::ptrdiff_t>(kh);
          if (h < 0 || h >= in_h) {
            std::fill_n(dst, row_len, T(0));
            continue;
          }
          const T* src = image + static_cast<std::size_t>(h) * g.in_w * g.in_c;
          if (inside) {
            copy_run(src + static_cast<std::size_t>(w0) * g.in_c, row_len, dst);
            continue;
          }
          for (std::ptrdiff_t kw = 0; kw < k_w; ++kw, dst += g.in_c) {
            const std::ptrdiff_t w = w0 + kw;
            if (w < 0 || w >= in_w)
              std::fill_n(dst, g.in_c, T(0));
            else
              copy_run(src + static_cast<std::size_t>(w) * g.in_c, g.in_c, dst);
          }
        }
      }
    }
  }
}

// The reverse of im2col: adds each row of `col` back onto the cells it was read from.
template <class T>
void col2im(const T* col, const WindowGeometry& g, std::size_t images, T* input) {
  const std::size_t row_len = g.k_w * g.in_c, patch = g.patch();
  const auto in_h = static_cast<std::ptrdiff_t>(g.in_h), in_w = static_cast<std::ptrdiff_t>(g.in_w);
  const auto k_w = static_cast<std::ptrdiff_t>(g.k_w);
  for (std::size_t n = 0; n < images; ++n) {
    T* image = input + n * g.image_size();
    for (std::size_t oh = 0; oh < g.out_h; ++oh) {
      const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(oh * g.stride_h) - g.pad_top;
      for (std::size_t ow = 0; ow < g.out_w; ++ow, col += patch) {
        const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(ow * g.stride_w) - g.pad_left;
        const bool inside = w0 >= 0 && w0 + k_w <= in_w;
        for (std::size_t kh = 0; kh < g.k_h; ++kh) {
          const std::ptrdiff_t h = h0 + static_cast<std::ptrdiff_t>(kh);
          if (h < 0 || h >= in_h) continue;
          const T* src = col + kh * row_len;
          T* row = image + static_cast<std::size_t>(h) * g.in_w * g.in_c;
          if (inside) {  // the filter row's cells are contiguous in the image
            T* dst = row + static_cast<std::size_t>(w0) * g.in_c;
            for (std::size_t i = 0; i < row_len; ++i) dst[i] += src[i];
            continue;
          }
          for (std::ptrdiff_t kw = 0; kw < k_w; ++kw, src += g.in_c) {
            const std::ptrdiff_t w = w0 + kw;
            if (w < 0 || w >= in_w) continue;
            T* dst = row + static_cast<std::size_t>(w) * g.in_c;
            for (std::size_t c = 0; c < g.in_c; ++c) dst[c] += src[c];
          }
        }
      }
    }
  }
}

// out [N, OH, OW, OC] = input (*) filter.
template <class T>
void conv2d_forward(const WindowGeometry& g, const T* input, const T* filter, T* out) {
  const std::size_t pixels = g.out_pixels(), patch = g.patch(), oc = g.out_c;
  if (g.batch * pixels * oc == 0) return;
  if (g.pointwise()) {
    blas::gemm<T>(false, false, g.batch * pixels, oc, patch, T(1), input, patch, filter, oc, T(0),
                  out, oc);
    return;
  }
  const std::size_t chunk = images_per_chunk<T>(g);
  Tensor col_buffer = scratch<T>(chunk * pixels * patch);
  T* col = col_buffer.data<T>();
  for (std::size_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const std::size_t images = std::min(chunk, g.batch - n0);
    im2col(input + n0 * g.image_size(), g, images, col);
    blas::gemm<T>(false, false, images * pixels, oc, patch, T(1), col, patch, filter, oc, T(0),
                  out + n0 * pixels * oc, oc);
  }
}

// din [N, H, W, C] = out_backprop x filter^T, scattered back (col2im).
template <class T>
void conv2d_backprop_input(const WindowGeometry& g, const T* filter, const T* out_backprop,
                           T* din) {
  const std::size_t pixels = g.out_pixels(), patch = g.patch(), oc = g.out_c;
  if (g.pointwise()) {
    blas::gemm<T>(false, true, g.batch * pixels, patch, oc, T(1), out_backprop, oc, filter, oc,
                  T(0), din, patch);
    return;
  }
  std::fill_n(din, g.batch * g.image_size(), T(0));
  if (g.batch * pixels * patch == 0) return;
  const std::size_t chunk = images_per_chunk<T>(g);
  Tensor col_buffer = scratch<T>(chunk * pixels * patch);
  T* col = col_buffer.data<T>();
  for (std::size_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const std::size_t images = std::min(chunk, g.batch - n0);
    blas::gemm<T>(false, true, images * pixels, patch, oc, T(1), out_backprop + n0 * pixels * oc,
                  oc, filter, oc, T(0), col, patch);
    col2im(col, g, images, din + n0 * g.image_size());
  }
}

// dfilter [KH*KW*C, OC] = sum over images of col^T x out_backprop.
template <class T>
void conv2d_backprop_filter(const WindowGeometry& g, const T* input, const T* out_backprop,
                            T* dfilter) {
  const std::size_t pixels = g.out_pixels(), patch = g.patch(), oc = g.out_c;
  if (patch * oc == 0) return;
  if (g.batch * pixels == 0) {
    std::fill_n(dfilter, patch * oc, T(0));
    return;
  }
  if (g.pointwise()) {
    blas::gemm<T>(true, false, patch, oc, g.batch * pixels, T(1), input, patch, out_backprop, oc,
                  T(0), dfilter, oc);
    return;
  }
  const std::size_t chunk = images_per_chunk<T>(g);
  Tensor col_buffer = scratch<T>(chunk * pixels * patch);
  T* col = col_buffer.data<T>();
  for (std::size_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const std::size_t images = std::min(chunk, g.batch - n0);
    im2col(input + n0 * g.image_size(), g, images, col);
    blas::gemm<T>(true, false, patch, oc, images * pixels, T(1), col, patch,
                  out_backprop + n0 * pixels * oc, oc, n0 == 0 ? T(0) : T(1), dfilter, oc);
  }
}

class Conv2DKernel : public OpKernel {
 public:
  explicit Conv2DKernel(const OpKernelConstruction& c) : attrs_(window_attrs_of(c, false)) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& input = ctx.input(0);
    const Tensor& filter = ctx.input(1);
    expect_dtype(ctx, filter, input.dtype(), "the filter");
    const WindowGeometry g = conv_geometry(ctx, input.shape(), filter.shape(), attrs_);
    Tensor& out = ctx.allocate_output(0, input.dtype(), g.output_shape());
    visit_floating_dtype(input.dtype(), "Conv2D", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv2d_forward<T>(g, input.data<T>(), filter.data<T>(), out.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

class Conv2DBackpropInputKernel : public OpKernel {
 public:
  explicit Conv2DBackpropInputKernel(const OpKernelConstruction& c)
      : attrs_(window_attrs_of(c, false)) {}
  void compute(OpKernelContext& ctx) override {
    const Shape input_shape = read_sizes(ctx, ctx.input(0), "input_sizes");
    const Tensor& filter = ctx.input(1);
    const Tensor& out_backprop = ctx.input(2);
    expect_dtype(ctx, out_backprop, filter.dtype(), "out_backprop");
    const WindowGeometry g = conv_geometry(ctx, input_shape, filter.shape(), attrs_);
    expect_shape(ctx, out_backprop, g.output_shape(), "out_backprop");
    Tensor& din = ctx.allocate_output(0, filter.dtype(), input_shape);
    visit_floating_dtype(filter.dtype(), "Conv2DBackpropInput", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv2d_backprop_input<T>(g, filter.data<T>(), out_backprop.data<T>(), din.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

class Conv2DBackpropFilterKernel : public OpKernel {
 public:
  explicit Conv2DBackpropFilterKernel(const OpKernelConstruction& c)
      : attrs_(window_attrs_of(c, false)) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& input = ctx.input(0);
    const Shape filter_shape = read_sizes(ctx, ctx.input(1), "filter_sizes");
    const Tensor& out_backprop = ctx.input(2);
    expect_dtype(ctx, out_backprop, input.dtype(), "out_backprop");
    const WindowGeometry g = conv_geometry(ctx, input.shape(), filter_shape, attrs_);
    expect_shape(ctx, out_backprop, g.output_shape(), "out_backprop");
    Tensor& dfilter = ctx.allocate_output(0, input.dtype(), filter_shape);
    visit_floating_dtype(input.dtype(), "Conv2DBackpropFilter", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv2d_backprop_filter<T>(g, input.data<T>(), out_backprop.data<T>(), dfilter.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

// Calls fn(n, oh, ow, h_begin, h_end, w_begin, w_end) for every output cell, with the window
// clipped to the real cells (SAME padding adds none).
template <class Fn>
void for_each_window(const WindowGeometry& g, Fn&& fn) {
  const auto in_h = static_cast<std::ptrdiff_t>(g.in_h), in_w = static_cast<std::ptrdiff_t>(g.in_w);
  for (std::size_t n = 0; n < g.batch; ++n)
    for (std::size_t oh = 0; oh < g.out_h; ++oh) {
      const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(oh * g.stride_h) - g.pad_top;
      const auto h_begin = static_cast<std::size_t>(std::max<std::ptrdiff_t>(h0, 0));
      const auto h_end = static_cast<std::size_t>(
          std::min<std::ptrdiff_t>(h0 + static_cast<std::ptrdiff_t>(g.k_h), in_h));
      for (std::size_t ow = 0; ow < g.out_w; ++ow) {
        const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(ow * g.stride_w) - g.pad_left;
        const auto w_begin = static_cast<std::size_t>(std::max<std::ptrdiff_t>(w0, 0));
        const auto w_end = static_cast<std::size_t>(
            std::min<std::ptrdiff_t>(w0 + static_cast<std::ptrdiff_t>(g.k_w), in_w));
        fn(n, oh, ow, h_begin, h_end, w_begin, w_end);
      }
    }
}

// MaxPool (Grad = false): out = the max of each window. MaxPoolGrad (Grad = true): din gets
// grad at each window's max. Ties and NaN: the first cell in row-major window order wins
// unless a later one is strictly greater, as TF's CPU kernel.
template <class T, bool Grad>
void max_pool(const WindowGeometry& g, const T* input, const T* grad, T* out) {
  const std::size_t c = g.in_c;
  std::vector<T> best(c);
  std::vector<std::size_t> arg(c);
  if constexpr (Grad) std::fill_n(out, g.batch * g.image_size(), T(0));
  std::size_t cell = 0;  // output cell index (n, oh, ow)
  for_each_window(g, [&](std::size_t n, std::size_t, std::size_t, std::size_t h_begin,
                         std::size_t h_end, std::size_t w_begin, std::size_t w_end) {
    const std::size_t image = n * g.image_size();
    bool first = true;
    for (std::size_t h = h_begin; h < h_end; ++h)
      for (std::size_t w = w_begin; w < w_end; ++w) {
        const std::size_t at = image + (h * g.in_w + w) * c;
        const T* x = input + at;
        if (first) {
          for (std::size_t k = 0; k < c; ++k) {
            best[k] = x[k];
            arg[k] = at + k;
          }
          first = false;
          continue;
        }
        for (std::size_t k = 0; k < c; ++k)
          if (x[k] > best[k]) {
            best[k] = x[k];
            arg[k] = at + k;
          }
      }
    if constexpr (Grad) {
      const T* gr = grad + cell * c;
      for (std::size_t k = 0; k < c; ++k) out[arg[k]] += gr[k];
    } else {
      std::copy_n(best.data(), c, out + cell * c);
    }
    ++cell;
  });
}

// AvgPool (Grad = false): out = the mean of each window's real cells. AvgPoolGrad (Grad =
// true): din gets grad / count on each of them.
template <class T, bool Grad>
void avg_pool(const WindowGeometry& g, const T* input, T* out) {
  const std::size_t c = g.in_c;
  if constexpr (Grad) std::fill_n(out, g.batch * g.image_size(), T(0));
  std::size_t cell = 0;
  for_each_window(g, [&](std::size_t n, std::size_t, std::size_t, std::size_t h_begin,
                         std::size_t h_end, std::size_t w_begin, std::size_t w_end) {
    const std::size_t image = n * g.image_size();
    const T count = static_cast<T>((h_end - h_begin) * (w_end - w_begin));
    if constexpr (Grad) {
      const T* gr = input + cell * c;  // the incoming gradient
      for (std::size_t h = h_begin; h < h_end; ++h)
        for (std::size_t w = w_begin; w < w_end; ++w) {
          T* dst = out + image + (h * g.in_w + w) * c;
          for (std::size_t k = 0; k < c; ++k) dst[k] += gr[k] / count;
        }
    } else {
      T* dst = out + cell * c;
      std::fill_n(dst, c, T(0));
      for (std::size_t h = h_begin; h < h_end; ++h)
        for (std::size_t w = w_begin; w < w_end; ++w) {
          const T* x = input + image + (h * g.in_w + w) * c;
          for (std::size_t k = 0; k < c; ++k) dst[k] += x[k];
        }
      for (std::size_t k = 0; k < c; ++k) dst[k] /= count;
    }
    ++cell;
  });
}

inline WindowGeometry pool_geometry(const OpKernelContext& ctx, const Shape& input,
                                    const WindowAttrs& w) {
  if (input.size() != 4)
    fail_node(ctx, "needs an NHWC input of rank 4, got " + shape_string(input));
  return window_geometry(ctx, input, w.k_h, w.k_w, w);
}

template <bool Max>
class PoolKernel : public OpKernel {
 public:
  explicit PoolKernel(const OpKernelConstruction& c) : attrs_(window_attrs_of(c, true)) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& value = ctx.input(0);
    const WindowGeometry g = pool_geometry(ctx, value.shape(), attrs_);
    Tensor& out = ctx.allocate_output(0, value.dtype(), g.output_shape());
    visit_floating_dtype(value.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (Max)
        max_pool<T, false>(g, value.data<T>(), nullptr, out.data<T>());
      else
        avg_pool<T, false>(g, value.data<T>(), out.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

class MaxPoolGradKernel : public OpKernel {
 public:
  explicit MaxPoolGradKernel(const OpKernelConstruction& c) : attrs_(window_attrs_of(c, true)) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& input = ctx.input(0);
    const Tensor& output = ctx.input(1);
    const Tensor& grad = ctx.input(2);
    expect_dtype(ctx, output, input.dtype(), "orig_output");
    expect_dtype(ctx, grad, input.dtype(), "grad");
    const WindowGeometry g = pool_geometry(ctx, input.shape(), attrs_);
    expect_shape(ctx, output, g.output_shape(), "orig_output");
    expect_shape(ctx, grad, g.output_shape(), "grad");
    Tensor& din = ctx.allocate_output(0, input.dtype(), input.shape());
    visit_floating_dtype(input.dtype(), "MaxPoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      max_pool<T, true>(g, input.data<T>(), grad.data<T>(), din.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

class AvgPoolGradKernel : public OpKernel {
 public:
  explicit AvgPoolGradKernel(const OpKernelConstruction& c) : attrs_(window_attrs_of(c, true)) {}
  void compute(OpKernelContext& ctx) override {
    const Shape input_shape = read_sizes(ctx, ctx.input(0), "orig_input_shape");
    const Tensor& grad = ctx.input(1);
    const WindowGeometry g = pool_geometry(ctx, input_shape, attrs_);
    expect_shape(ctx, grad, g.output_shape(), "grad");
    Tensor& din = ctx.allocate_output(0, grad.dtype(), input_shape);
    visit_floating_dtype(grad.dtype(), "AvgPoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      avg_pool<T, true>(g, grad.data<T>(), din.data<T>());
    });
  }
  bool is_expensive() const override { return true; }

 private:
  WindowAttrs attrs_;
};

class BiasAddKernel : public OpKernel {
 public:
  explicit BiasAddKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& value = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    expect_dtype(ctx, bias, value.dtype(), "the bias");
    if (value.rank() < 2 || bias.rank() != 1 || bias.size() != value.shape().back())
      fail_node(ctx,
                "needs a value of rank 2 or more and a bias as long as its last dimension, "
                "got value " +
                    value.summary() + " and bias " + bias.summary());
    Tensor& out = ctx.allocate_output(0, value.dtype(), value.shape());
    visit_numeric_dtype(value.dtype(), "BiasAdd", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const std::size_t c = bias.size();
      if (c == 0) return;
      const T* x = value.data<T>();
      const T* b = bias.data<T>();
      T* y = out.data<T>();
      for (std::size_t row = 0, rows = value.size() / c; row < rows; ++row, x += c, y += c)
        for (std::size_t k = 0; k < c; ++k) y[k] = x[k] + b[k];
    });
  }
  bool is_expensive() const override { return true; }
};

class BiasAddGradKernel : public OpKernel {
 public:
  explicit BiasAddGradKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& grad = ctx.input(0);
    if (grad.rank() < 2)
      fail_node(ctx, "out_backprop must have rank 2 or more, got " + grad.summary());
    const std::size_t c = grad.shape().back();
    Tensor& out = ctx.allocate_output(0, grad.dtype(), {c});
    visit_numeric_dtype(grad.dtype(), "BiasAddGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      std::vector<Acc> acc(c, Acc(0));
      const T* g = grad.data<T>();
      if (c > 0)
        for (std::size_t row = 0, rows = grad.size() / c; row < rows; ++row, g += c)
          for (std::size_t k = 0; k < c; ++k) acc[k] += g[k];
      T* o = out.data<T>();
      for (std::size_t k = 0; k < c; ++k) o[k] = static_cast<T>(acc[k]);
    });
  }
  bool is_expensive() const override { return true; }
};

PSFLOW_REGISTERED_AT_STARTUP const bool conv_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<Conv2DKernel>("Conv2D");
  r.add<Conv2DBackpropInputKernel>("Conv2DBackpropInput");
  r.add<Conv2DBackpropFilterKernel>("Conv2DBackpropFilter");
  r.add<PoolKernel<true>>("MaxPool");
  r.add<PoolKernel<false>>("AvgPool");
  r.add<MaxPoolGradKernel>("MaxPoolGrad");
  r.add<AvgPoolGradKernel>("AvgPoolGrad");
  r.add<BiasAddKernel>("BiasAdd");
  r.add<BiasAddGradKernel>("BiasAddGrad");
  return true;
}();

}  // namespace detail

}  // namespace psflow
