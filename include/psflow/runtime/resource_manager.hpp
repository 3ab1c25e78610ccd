// Per-device state that outlives a step: variables, keyed by name.
//
// A VariableResource is updated copy-on-write: readers take a Tensor sharing the current
// buffer; an in-place update happens only when nobody else holds that buffer, otherwise the
// update writes a fresh buffer and swaps it in. So a reader never sees a torn value, and
// concurrent updates from several workers are each applied whole.
//
// Locking: one reader-writer lock per variable, and kRowStripes row-stripe mutexes. Reads,
// assignments and dense updates hold the variable's lock exclusively. Work on a few rows
// (sparse updates, gathers) holds it shared (RowAccess) and locks only the stripes of its rows,
// so updates of different rows from several workers run at once and updates of one row stay
// exact. The exclusive holders take no stripe lock and the shared ones never copy the value, so
// while a RowAccess is held the buffer stays where it is and no new reader can share it.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/partial_shape.hpp"
#include "psflow/runtime/row_stripes.hpp"

namespace psflow {

class VariableResource {
 public:
  VariableResource(std::string name, std::string device, DType dtype, PartialShape shape)
      : name_(std::move(name)),
        device_(std::move(device)),
        dtype_(dtype),
        shape_(std::move(shape)) {}

  const std::string& name() const noexcept { return name_; }
  const std::string& device() const noexcept { return device_; }
  DType dtype() const noexcept { return dtype_; }
  const PartialShape& declared_shape() const noexcept { return shape_; }

  bool initialized() const {
    std::shared_lock lock(mutex_);
    return !value_.empty();
  }

  // The current value (shares the buffer); throws FailedPrecondition when uninitialized.
  Tensor read() const {
    std::lock_guard lock(mutex_);
    if (value_.empty()) throw_uninitialized();
    return value_;
  }

  // Shared access for work on a few rows at a time: holds the variable's lock shared, and the
  // holder locks the stripe of each row it reads or writes (stripe(row_stripe(row))), one
  // stripe at a time. The buffer may be written in place only when writable(): no reader holds
  // a share of it (otherwise update() copies it first). Throws FailedPrecondition when
  // uninitialized.
  class RowAccess {
   public:
    explicit RowAccess(VariableResource& var) : var_(&var), lock_(var.mutex_) {
      if (var.value_.empty()) var.throw_uninitialized();
    }
    const Tensor& value() const noexcept { return var_->value_; }
    bool writable() const noexcept { return var_->value_.is_sole_owner(); }
    // The buffer to write rows into, under their stripes' locks; only when writable().
    Tensor& buffer() noexcept { return var_->value_; }
    std::mutex& stripe(std::size_t s) const noexcept { return var_->stripes_[s]; }

   private:
    VariableResource* var_;
    std::shared_lock<std::shared_mutex> lock_;
  };

  // Replaces the value. Throws InvalidArgument for a dtype mismatch, or a shape that differs from
  // the declared one when validate_shape is set.
  Tensor assign(Tensor value, bool validate_shape = true) {
    check_value(value, validate_shape);
    std::lock_guard lock(mutex_);
    value_ = std::move(value);
    return value_;
  }

  // Applies `update(T* dst, const T* src, n)`-style work atomically. `fn(current, writable)`
  // gets the current value and a tensor to write the result into (the same buffer when
  // nobody else holds it). Returns the new value.
  template <class Fn>
  Tensor update(Fn&& fn) {
    std::lock_guard lock(mutex_);
    if (value_.empty()) throw_uninitialized();
    Tensor target =
        value_.is_sole_owner() ? value_ : Tensor::uninitialized(value_.dtype(), value_.shape());
    fn(static_cast<const Tensor&>(value_), target);
    value_ = std::move(target);
    return value_;
  }

  // A lock-free update (an optimizer's use_locking = false, TF's Hogwild): the buffer to write
  // the new value into in place, with no lock held while writing, racing with other lock-free
  // writers as TF's updates without use_locking do (an update may be lost, a reader may see a
  // half-written value). The lock is taken only to pick the buffer: when readers hold it and no
  // lock-free writer is at work, the value is copied first, so tensors read before are never
  // changed. Keep the returned writer alive while writing.
  class LockFreeWriter {
   public:
    explicit LockFreeWriter(VariableResource& var) : var_(&var) {
      std::lock_guard lock(var.mutex_);
      if (var.value_.empty()) var.throw_uninitialized();
      if (var.lock_free_writers_ == 0 && !var.value_.is_sole_owner())
        var.value_ = var.value_.deep_copy();
      buffer_ = var.value_;
      ++var.lock_free_writers_;
    }
    ~LockFreeWriter() {
      std::lock_guard lock(var_->mutex_);
      --var_->lock_free_writers_;
    }
    LockFreeWriter(const LockFreeWriter&) = delete;
    LockFreeWriter& operator=(const LockFreeWriter&) = delete;
    Tensor& buffer() noexcept { return buffer_; }

   private:
    VariableResource* var_;
    Tensor buffer_;
  };

  // update() without the lock (use_locking = false): fn(buffer, buffer) writes the value in
  // place, no lock held while it runs (see LockFreeWriter).
  template <class Fn>
  void update_lock_free(Fn&& fn) {
    LockFreeWriter writer(*this);
    fn(static_cast<const Tensor&>(writer.buffer()), writer.buffer());
  }

  // Drops the value (the variable becomes uninitialized).
  void reset() {
    std::lock_guard lock(mutex_);
    value_ = Tensor();
  }

 private:
  void check_value(const Tensor& value, bool validate_shape) const {
    if (value.dtype() != dtype_)
      throw InvalidArgument("cannot assign a " + value.summary() + " value to variable '" + name_ +
                            "' of dtype " + std::string(dtype_name(dtype_)));
    if (validate_shape && !shape_.is_compatible_with(value.shape()))
      throw InvalidArgument("cannot assign a value of shape " + shape_string(value.shape()) +
                            " to variable '" + name_ + "' of shape " + shape_.to_string());
  }
  [[noreturn]] void throw_uninitialized() const {
    throw FailedPrecondition("Attempting to use uninitialized value " + name_ + " (on " + device_ +
                             "): run its initializer (global_variables_initializer()) or restore "
                             "it from a checkpoint first");
  }

  const std::string name_;
  const std::string device_;
  const DType dtype_;
  const PartialShape shape_;
  mutable std::shared_mutex mutex_;  // see the file comment
  Tensor value_;
  std::array<std::mutex, kRowStripes> stripes_;  // rows' locks under a shared mutex_
  int lock_free_writers_ = 0;                    // LockFreeWriters alive, under mutex_
};

// Variables of one device, by name. Thread-safe; returned pointers stay valid until clear().
class ResourceManager {
 public:
  explicit ResourceManager(std::string device = "") : device_(std::move(device)) {}

  // The variable `name`, created uninitialized on first use. Throws InvalidArgument when it
  // exists with another dtype or an incompatible declared shape.
  std::shared_ptr<VariableResource> lookup_or_create(const std::string& name, DType dtype,
                                                     const PartialShape& shape) {
    std::lock_guard lock(mutex_);
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      auto var = std::make_shared<VariableResource>(name, device_, dtype, shape);
      variables_.emplace(name, var);
      return var;
    }
    const auto& existing = *it->second;
    if (existing.dtype() != dtype || existing.declared_shape() != shape)
      throw InvalidArgument("variable '" + name + "' on " + device_ + " already exists as " +
                            std::string(dtype_name(existing.dtype())) +
                            existing.declared_shape().to_string() + ", a graph now declares it " +
                            std::string(dtype_name(dtype)) + shape.to_string() +
                            ": give one of them another name");
    return it->second;
  }

  std::shared_ptr<VariableResource> find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = variables_.find(name);
    return it == variables_.end() ? nullptr : it->second;
  }

  std::vector<std::shared_ptr<VariableResource>> variables() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<VariableResource>> out;
    for (const auto& [name, var] : variables_) out.push_back(var);
    return out;
  }

  // Any other shared state of type T (a gradient accumulator, a queue), by name: created with
  // `make()` on first use, shared by every graph that names it the same way.
  template <class T, class Make>
  std::shared_ptr<T> lookup_or_create_resource(const std::string& name, Make make) {
    std::lock_guard lock(mutex_);
    auto& slot = others_[std::string(typeid(T).name()) + "/" + name];
    if (!slot) slot = std::shared_ptr<T>(make());
    return std::static_pointer_cast<T>(slot);
  }

  void clear() {
    std::lock_guard lock(mutex_);
    variables_.clear();
    others_.clear();
  }

 private:
  std::string device_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<VariableResource>> variables_;
  std::map<std::string, std::shared_ptr<void>> others_;
};

}  // namespace psflow
