// Tensor: a dtype, a shape and a ref-counted, 64-byte-aligned buffer (16-byte for up to 16 bytes).
// A string tensor's buffer holds std::string objects (constructed and destroyed with it), so it
// has no flat bytes: raw_data() refuses it, and code that moves elements uses copy_elements.
//
// Copies share the buffer (like TF's Tensor). `as<T>()` gives an xtensor adaptor over the
// buffer without copying; this header is the one place xtensor enters psflow. A Tensor is not
// synchronised: sharing one between threads is fine for reading; writers must own the buffer
// (see `is_sole_owner`).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "psflow/core/buffer_allocator.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/shape.hpp"

namespace psflow {

namespace detail {

// Raw storage of a tensor. Aligned to 64 bytes so SIMD kernels and BLAS get full-speed loads;
// the memory comes from, and goes back to, buffer_allocator.hpp's caches. Up to 16 bytes
// (scalars, short vectors) live inside this object instead, 16-byte aligned: one allocation per
// small tensor instead of two, and none on glibc's slow aligned path.
class TensorBuffer {
 public:
  static constexpr std::size_t alignment = kBufferAlignment;
  static constexpr std::size_t inline_bytes = 16;

  // `strings`: how many std::string objects to construct in the buffer (0 for other dtypes).
  explicit TensorBuffer(std::size_t nbytes, std::size_t strings = 0)
      : block_(nbytes <= inline_bytes ? Block{inline_data_, inline_bytes} : allocate_block(nbytes)),
        nbytes_(nbytes),
        strings_(strings) {
    if (strings_) std::uninitialized_value_construct_n(static_cast<std::string*>(data()), strings_);
  }
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;
  ~TensorBuffer() {
    if (strings_) std::destroy_n(static_cast<std::string*>(data()), strings_);
    if (block_.data != inline_data_) free_block(block_);
  }

  void* data() const noexcept { return block_.data; }
  std::size_t nbytes() const noexcept { return nbytes_; }

 private:
  alignas(16) unsigned char inline_data_[inline_bytes];
  Block block_;
  std::size_t nbytes_;
  std::size_t strings_;
};

}  // namespace detail

class Tensor {
 public:
  // Empty tensor: no dtype-bearing buffer; `empty()` is true.
  Tensor() = default;

  // Zero-filled tensor of the given dtype and shape (empty strings for DType::string).
  Tensor(DType dtype, Shape shape) : Tensor(uninitialized(dtype, std::move(shape))) {
    if (dtype != DType::string) std::memset(raw_data(), 0, nbytes());
  }

  // Copies the values of an xtensor array in.
  template <TensorElement T>
  Tensor(const xt::xarray<T>& values)  // NOLINT: implicit, like TF's conversions
      : Tensor(uninitialized(dtype_of<T>(), Shape(values.shape().begin(), values.shape().end()))) {
    std::copy(values.begin(), values.end(), data<T>());
  }

  // Rank-0 tensor holding `value`.
  template <TensorElement T>
  Tensor(T value)  // NOLINT: implicit, like TF's conversions
      : Tensor(uninitialized(dtype_of<T>(), Shape{})) {
    *data<T>() = value;
  }

  // A tensor whose contents are unspecified: for kernels that overwrite every element
  // (a string tensor's elements are empty strings).
  static Tensor uninitialized(DType dtype, Shape shape) {
    Tensor t;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    t.size_ = num_elements(t.shape_);
    t.buffer_ = std::make_shared<detail::TensorBuffer>(
        checked_product(t.size_, dtype_size(dtype), "the byte size of a tensor"),
        dtype == DType::string ? t.size_ : 0);
    return t;
  }

  // A tensor of `shape` holding `values` (row-major); sizes must agree.
  template <TensorElement T>
  static Tensor from_vector(std::vector<T> values, Shape shape) {
    if (values.size() != num_elements(shape))
      throw InvalidArgument("Tensor::from_vector: " + std::to_string(values.size()) +
                            " values cannot fill shape " + shape_string(shape) + " (" +
                            std::to_string(num_elements(shape)) + " elements)");
    Tensor t = uninitialized(dtype_of<T>(), std::move(shape));
    std::move(values.begin(), values.end(), t.data<T>());
    return t;
  }
  // A rank-1 tensor holding `values`.
  template <TensorElement T>
  static Tensor from_vector(std::vector<T> values) {
    const std::size_t n = values.size();
    return from_vector(std::move(values), Shape{n});
  }

  // A tensor of `shape` whose every element is `value`.
  template <TensorElement T>
  static Tensor filled(T value, Shape shape) {
    Tensor t = uninitialized(dtype_of<T>(), std::move(shape));
    std::fill_n(t.data<T>(), t.size(), value);
    return t;
  }

  bool empty() const noexcept { return buffer_ == nullptr; }
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::size_t size() const noexcept { return size_; }
  // Bytes of element storage; a string tensor's characters are on the heap, not counted here.
  std::size_t nbytes() const noexcept { return size_ * dtype_size(dtype_); }

  // Typed pointer to the first element; throws InvalidArgument when T does not match dtype().
  template <TensorElement T>
  T* data() {
    check_dtype<T>();
    return static_cast<T*>(buffer_->data());
  }
  template <TensorElement T>
  const T* data() const {
    check_dtype<T>();
    return static_cast<const T*>(buffer_->data());
  }
  template <TensorElement T>
  std::span<T> values() {
    return {data<T>(), size_};
  }
  template <TensorElement T>
  std::span<const T> values() const {
    return {data<T>(), size_};
  }

  // The flat bytes of a number or bool tensor. A string tensor has none: InvalidArgument.
  void* raw_data() {
    check_flat();
    return buffer_ ? buffer_->data() : nullptr;
  }
  const void* raw_data() const {
    check_flat();
    return buffer_ ? buffer_->data() : nullptr;
  }

  // xtensor adaptor over the buffer, no copy; throws InvalidArgument on dtype mismatch.
  template <TensorElement T>
  auto as() {
    return xt::adapt(data<T>(), size_, xt::no_ownership(), shape_);
  }
  template <TensorElement T>
  auto as() const {
    return xt::adapt(data<T>(), size_, xt::no_ownership(), shape_);
  }

  // The single element of a tensor with one element (any rank).
  template <TensorElement T>
  T scalar() const {
    if (size_ != 1)
      throw InvalidArgument("Tensor::scalar() needs exactly one element, this tensor has shape " +
                            shape_string(shape_));
    return *data<T>();
  }

  // Same buffer, new shape with the same element count.
  Tensor reshaped(Shape shape) const {
    if (num_elements(shape) != size_)
      throw InvalidArgument("cannot reshape a tensor of shape " + shape_string(shape_) + " (" +
                            std::to_string(size_) + " elements) to " + shape_string(shape));
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
  }

  // A copy with its own buffer.
  Tensor deep_copy() const {
    if (empty()) return {};
    Tensor t = uninitialized(dtype_, shape_);
    copy_elements(t, 0, *this, 0, size_);
    return t;
  }

  // True when no other Tensor shares this buffer, so it may be written in place.
  // use_count() is a relaxed load. The owners that let go did so with a release decrement;
  // acquiring after seeing 1 orders their last reads of the buffer before our writes to it.
  bool is_sole_owner() const noexcept {
    if (!buffer_ || buffer_.use_count() != 1) return false;
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer does not model fences (GCC warns): an acquire-release read-modify-write
    // of the same count (copying the pointer) orders the same, visibly to it.
    [[maybe_unused]] const auto acquire = buffer_;
#else
    std::atomic_thread_fence(std::memory_order_acquire);
#endif
    return true;
  }

  // True when both tensors view the same buffer.
  bool shares_buffer_with(const Tensor& other) const noexcept { return buffer_ == other.buffer_; }

  // Same dtype, shape and bytes (for strings: the same strings).
  bool equals(const Tensor& other) const {
    if (empty() || other.empty()) return empty() == other.empty();
    if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
    if (dtype_ == DType::string)
      return std::ranges::equal(values<std::string>(), other.values<std::string>());
    return std::memcmp(raw_data(), other.raw_data(), nbytes()) == 0;
  }

  // Copies `count` elements of `src` from element `src_at` to `dst` at element `dst_at`: bytes
  // for numbers, string assignment for strings. Both must have the same dtype; the caller
  // checks the ranges.
  friend void copy_elements(Tensor& dst, std::size_t dst_at, const Tensor& src, std::size_t src_at,
                            std::size_t count) {
    if (count == 0) return;
    if (src.dtype_ == DType::string) {
      const auto* from = static_cast<const std::string*>(src.buffer_->data()) + src_at;
      std::copy(from, from + count, static_cast<std::string*>(dst.buffer_->data()) + dst_at);
      return;
    }
    const std::size_t elem = dtype_size(src.dtype_);
    std::memcpy(static_cast<unsigned char*>(dst.buffer_->data()) + dst_at * elem,
                static_cast<const unsigned char*>(src.buffer_->data()) + src_at * elem,
                count * elem);
  }

  // As copy_elements, but strings are moved out of `src` when no other tensor shares its buffer
  // (a pipeline stacking elements it owns); `src` keeps its shape, its moved strings empty.
  friend void move_elements(Tensor& dst, std::size_t dst_at, Tensor& src, std::size_t src_at,
                            std::size_t count) {
    if (src.dtype_ != DType::string || src.buffer_.use_count() != 1)
      return copy_elements(dst, dst_at, src, src_at, count);
    auto* from = static_cast<std::string*>(src.buffer_->data()) + src_at;
    std::move(from, from + count, static_cast<std::string*>(dst.buffer_->data()) + dst_at);
  }

  // "float32[2,2]", for error messages.
  std::string summary() const {
    if (empty()) return "<empty tensor>";
    return std::string(dtype_name(dtype_)) + shape_string(shape_);
  }

 private:
  void check_flat() const {
    if (dtype_ == DType::string)
      throw InvalidArgument(
          "a string tensor has no flat bytes: this operation handles numbers "
          "and bool only");
  }

  template <class T>
  void check_dtype() const {
    if (empty()) throw InvalidArgument("accessing the elements of an empty Tensor");
    if (dtype_of<T>() != dtype_)
      throw InvalidArgument("tensor holds " + std::string(dtype_name(dtype_)) + ", accessed as " +
                            std::string(dtype_name(dtype_of<T>())));
  }

  DType dtype_ = DType::float32;
  Shape shape_;
  std::size_t size_ = 0;
  std::shared_ptr<detail::TensorBuffer> buffer_;
};

}  // namespace psflow
