// Kernels of the sparse ops (graph/sparse_ops.hpp): GatherV2 and ResourceGather copy whole
// rows (ResourceGather under the variable's shared lock and its rows' stripe locks, holding no
// share of its buffer, so updates stay in place), the scatters change only the given rows of a
// variable (in place under the same locks when no reader holds its buffer, see
// VariableResource::RowAccess; otherwise a copy under its exclusive lock), Unique hashes the
// values once,
// UnsortedSegmentSum and IndexedSlicesToDense add rows into a zeroed result. Every id is checked
// before a row is read or written, so a bad id fails the step with nothing applied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/sparse_ops.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/row_stripes.hpp"

namespace psflow {

namespace detail {

// The ids of `indices` (int32 or int64), each checked to lie in [0, rows); `what` names the
// table in the error, e.g. "table 'emb/read:0'" (the executor adds the op and the node).
inline std::vector<std::int64_t> checked_ids(const Tensor& indices, std::size_t rows,
                                             const std::string& what) {
  std::vector<std::int64_t> ids(indices.size());
  auto copy = [&](const auto* values) {
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(values[i]);
  };
  if (indices.dtype() == DType::int32)
    copy(indices.data<std::int32_t>());
  else if (indices.dtype() == DType::int64)
    copy(indices.data<std::int64_t>());
  else
    throw InvalidArgument(what + ": ids must be int32 or int64, got " + indices.summary());
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= rows)
      throw InvalidArgument(what + ": id " + std::to_string(ids[i]) + " (position " +
                            std::to_string(i) + " of the ids) is out of range: the table has " +
                            std::to_string(rows) + " rows, so ids must be in [0, " +
                            std::to_string(rows) + ")");
  return ids;
}

// indices.shape + table.shape[1:]
inline Shape rows_shape(const Shape& indices, const Shape& table) {
  Shape shape = indices;
  shape.insert(shape.end(), table.begin() + 1, table.end());
  return shape;
}

// The rows of a sparse write: row ids[k] of the variable gets row k of the update, row_size
// elements each, for every k of `at` (every k when `at` is empty).
struct SparseRows {
  std::span<const std::int64_t> ids;
  std::span<const std::size_t> at;
  std::size_t row_size = 0;

  // Calls fn(dst, src) with the offsets of each row's first element in the variable and in the
  // update.
  template <class Fn>
  void for_each_row(Fn&& fn) const {
    auto row = [&](std::size_t k) {
      fn(static_cast<std::size_t>(ids[k]) * row_size, k * row_size);
    };
    if (at.empty())
      for (std::size_t k = 0; k < ids.size(); ++k) row(k);
    else
      for (const std::size_t k : at) row(k);
  }
  // Calls fn(e, i) for each element written: e is its place in the variable (and in each slot),
  // i its place in the update.
  template <class Fn>
  void for_each_element(Fn&& fn) const {
    for_each_row([&](std::size_t dst, std::size_t src) {
      for (std::size_t j = 0; j < row_size; ++j) fn(dst + j, src + j);
    });
  }
};

// The checked ids of a sparse write and the size of a row of the variable.
struct CheckedRows {
  std::vector<std::int64_t> ids;
  std::size_t row_size = 0;
  SparseRows all() const { return {ids, {}, row_size}; }
};

inline std::size_t row_size_of(const Tensor& table) {
  return table.shape()[0] == 0 ? 0 : table.size() / table.shape()[0];
}

// Fails unless every variable of `vars` is a different one.
template <std::size_t N>
void check_distinct_variables(const std::string& op, const std::array<VariableResource*, N>& vars) {
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j)
      if (vars[i] == vars[j])
        throw InvalidArgument(op + ": variable '" + vars[i]->name() +
                              "' is passed twice; the variable and each slot must be distinct");
}

// Writes some rows of `vars` (a variable, then its slots; distinct) in place under the
// variables' shared locks: check(buffers) validates the write against the current values and
// returns its CheckedRows, then write(rows, buffers) runs stripe by stripe with that stripe's
// lock held in every variable (taken in array order). Returns false, having done nothing, when
// a reader holds one of the buffers: the caller then writes under the exclusive locks, where
// the value is copied first.
template <std::size_t N, class Check, class Write>
bool write_rows_in_place(const std::array<VariableResource*, N>& vars, Check&& check,
                         Write&& write) {
  std::array<std::optional<VariableResource::RowAccess>, N> access;
  std::array<Tensor*, N> buffers{};
  for (std::size_t i = 0; i < N; ++i) {
    access[i].emplace(*vars[i]);
    if (!access[i]->writable()) return false;
    buffers[i] = &access[i]->buffer();
  }
  const CheckedRows checked = check(buffers);
  RowStripes(checked.ids).for_each([&](std::size_t stripe, std::span<const std::size_t> at) {
    std::array<std::unique_lock<std::mutex>, N> held;
    for (std::size_t i = 0; i < N; ++i) held[i] = std::unique_lock(access[i]->stripe(stripe));
    write(SparseRows{checked.ids, at, checked.row_size}, buffers);
  });
  return true;
}

// Copies rows `indices` of `params` into output 0 of ctx. for_rows(ids, copy) calls copy(k) for
// every position k of ids, in any order, under whatever locks the rows need.
template <class ForRows>
void gather_rows(OpKernelContext& ctx, const Tensor& params, const Tensor& indices,
                 const std::string& what, ForRows&& for_rows) {
  if (params.rank() == 0)
    throw InvalidArgument(what + ": params must have rows, got " + params.summary());
  const std::size_t rows = params.shape()[0];
  const auto ids = checked_ids(indices, rows, what);
  Tensor& out = ctx.allocate_output(0, params.dtype(), rows_shape(indices.shape(), params.shape()));
  const std::size_t row = rows == 0 ? 0 : params.size() / rows;  // in elements
  for_rows(std::span<const std::int64_t>(ids), [&](std::size_t k) {
    copy_elements(out, k * row, params, static_cast<std::size_t>(ids[k]) * row, row);
  });
}

inline void gather_rows(OpKernelContext& ctx, const Tensor& params, const Tensor& indices,
                        const std::string& what) {
  gather_rows(ctx, params, indices, what, [](std::span<const std::int64_t> ids, auto copy) {
    for (std::size_t k = 0; k < ids.size(); ++k) copy(k);
  });
}

class GatherKernel : public OpKernel {
 public:
  explicit GatherKernel(const OpKernelConstruction& c) : what_("table '" + c.input_name(0) + "'") {}
  void compute(OpKernelContext& ctx) override {
    gather_rows(ctx, ctx.input(0), ctx.input(1), what_);
  }

 private:
  std::string what_;
};

class ResourceGatherKernel : public OpKernel {
 public:
  explicit ResourceGatherKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource::RowAccess access(var);
    gather_rows(
        ctx, access.value(), ctx.input(1), "variable '" + var.name() + "'",
        [&](std::span<const std::int64_t> ids, auto copy) {
          RowStripes(ids).for_each([&](std::size_t stripe, std::span<const std::size_t> at) {
            std::lock_guard lock(access.stripe(stripe));
            for (const std::size_t k : at) copy(k);
          });
        });
  }
};

// out[ids[i]] += rows[i] for a zeroed `out` of `out_rows` rows; every id checked first.
inline Tensor& add_rows_into(OpKernelContext& ctx, const Tensor& rows, const Tensor& ids_in,
                             std::size_t out_rows, const std::string& what) {
  const std::size_t n = ids_in.size();
  if (rows.rank() < ids_in.rank() ||
      !std::equal(ids_in.shape().begin(), ids_in.shape().end(), rows.shape().begin()))
    throw InvalidArgument(what + ": the rows " + rows.summary() +
                          " must start with the shape of the ids " + ids_in.summary());
  const auto ids = checked_ids(ids_in, out_rows, what);
  Shape shape{out_rows};
  shape.insert(shape.end(), rows.shape().begin() + static_cast<std::ptrdiff_t>(ids_in.rank()),
               rows.shape().end());
  Tensor& out = ctx.allocate_output(0, rows.dtype(), shape);
  const std::size_t row_size =
      n == 0 ? num_elements(shape) / std::max<std::size_t>(out_rows, 1) : rows.size() / n;
  visit_numeric_dtype(rows.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    std::fill_n(dst, out.size(), T(0));
    const T* src = rows.data<T>();
    for (std::size_t i = 0; i < n; ++i) {
      T* row = dst + static_cast<std::size_t>(ids[i]) * row_size;
      const T* in = src + i * row_size;
      for (std::size_t j = 0; j < row_size; ++j) row[j] += in[j];
    }
  });
  return out;
}

// The value of an int32/int64 scalar or of element `at` of a vector, as a size.
inline std::size_t size_input(const Tensor& t, std::size_t at, const std::string& what) {
  if (at >= t.size()) throw InvalidArgument(what + " has too few elements: " + t.summary());
  const std::int64_t v = visit_index_dtype(t.dtype(), what, [&](auto tag) {
    return static_cast<std::int64_t>(t.data<typename decltype(tag)::type>()[at]);
  });
  if (v < 0) throw InvalidArgument(what + " must not be negative, got " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

class UnsortedSegmentSumKernel : public OpKernel {
 public:
  explicit UnsortedSegmentSumKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const std::string what = "UnsortedSegmentSum '" + ctx.name() + "'";
    add_rows_into(ctx, ctx.input(0), ctx.input(1),
                  size_input(ctx.input(2), 0, what + ": num_segments"), what);
  }
};

class IndexedSlicesToDenseKernel : public OpKernel {
 public:
  explicit IndexedSlicesToDenseKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const std::string what = "IndexedSlices '" + ctx.name() + "'";
    const Tensor& values = ctx.input(0);
    const Tensor& dense_shape = ctx.input(2);
    Shape expected;
    for (std::size_t d = 0; d < dense_shape.size(); ++d)
      expected.push_back(size_input(dense_shape, d, what + ": dense_shape"));
    const Tensor& out = add_rows_into(ctx, values, ctx.input(1),
                                      size_input(dense_shape, 0, what + ": dense_shape"), what);
    if (out.shape() != expected)
      throw InvalidArgument(what + ": values " + values.summary() + " do not fit dense_shape " +
                            shape_string(expected));
  }
};

enum class ScatterKind { add, sub, update };

template <ScatterKind Kind>
class ScatterKernel : public OpKernel {
 public:
  explicit ScatterKernel(const OpKernelConstruction& c) : type_(c.node().type) {}
  // Errors name the variable and the id; the executor adds the op type and the node.
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    const std::string what = "variable '" + var.name() + "'";
    // Everything is checked before the first row changes: nothing is half-applied.
    auto check = [&](const Tensor& current) {
      if (current.rank() == 0)
        throw InvalidArgument(what + ": the variable must have rows, got " + current.summary());
      if (updates.dtype() != current.dtype() ||
          updates.shape() != rows_shape(indices.shape(), current.shape()))
        throw InvalidArgument(what + ": updates must be " +
                              std::string(dtype_name(current.dtype())) +
                              shape_string(rows_shape(indices.shape(), current.shape())) +
                              " (indices.shape + variable.shape[1:]), got " + updates.summary());
      return CheckedRows{checked_ids(indices, current.shape()[0], what), row_size_of(current)};
    };
    auto write = [&](const SparseRows& rows, Tensor& table) {
      auto apply = [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* values = table.data<T>();
        const T* rows_in = updates.data<T>();
        rows.for_each_element([&](std::size_t e, std::size_t i) {
          if constexpr (Kind == ScatterKind::add)
            values[e] += rows_in[i];
          else if constexpr (Kind == ScatterKind::sub)
            values[e] -= rows_in[i];
          else
            values[e] = rows_in[i];
        });
      };
      if constexpr (Kind == ScatterKind::update)
        visit_dtype(table.dtype(), apply);
      else
        visit_numeric_dtype(table.dtype(), type_, apply);
    };
    auto whole = [&](const Tensor& current, Tensor& result) {
      const CheckedRows checked = check(current);
      if (result.raw_data() != current.raw_data())  // a reader holds the old value: copy it
        std::memcpy(result.raw_data(), current.raw_data(), current.nbytes());
      write(checked.all(), result);
    };
    if (!detail::uses_locking(ctx.node()))
      var.update_lock_free(whole);
    else if (!write_rows_in_place<1>(
                 {&var}, [&](const std::array<Tensor*, 1>& values) { return check(*values[0]); },
                 [&](const SparseRows& rows, const std::array<Tensor*, 1>& values) {
                   write(rows, *values[0]);
                 }))
      var.update(whole);
    ctx.set_output_ref(0, &var);
  }

 private:
  std::string type_;
};

// Open addressing over the positions of first occurrences, in a table at least twice the input's
// size: two allocations per run, none per value (a std::unordered_map allocated a node per
// distinct value, which was most of an embedding lookup's time in the worker). Values compare
// with == and hash with std::hash, as before: 0.0 and -0.0 are one value, every NaN its own.
class UniqueKernel : public OpKernel {
 public:
  explicit UniqueKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 1)
      throw InvalidArgument("Unique '" + ctx.name() + "': x must be a vector, got " + x.summary());
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* values = x.data<T>();
      const std::size_t n = x.size();
      Tensor& idx = ctx.allocate_output(1, DType::int32, x.shape());
      std::int32_t* out_idx = idx.data<std::int32_t>();
      unsigned bits = 4;
      while ((std::size_t{1} << bits) < 2 * n) ++bits;
      const std::size_t mask = (std::size_t{1} << bits) - 1;
      std::vector<std::int32_t> slots(mask + 1, -1);  // a distinct value's number, or -1
      std::vector<std::size_t> first;                 // where each distinct value first occurs
      first.reserve(n);
      const std::hash<T> hash;
      for (std::size_t i = 0; i < n; ++i) {
        // Fibonacci hashing: std::hash of an integer is the integer itself.
        std::size_t h = static_cast<std::size_t>(
            (static_cast<std::uint64_t>(hash(values[i])) * 0x9e3779b97f4a7c15ull) >> (64 - bits));
        for (;; h = (h + 1) & mask) {
          const std::int32_t slot = slots[h];
          if (slot < 0) {
            slots[h] = out_idx[i] = static_cast<std::int32_t>(first.size());
            first.push_back(i);
            break;
          }
          if (values[first[static_cast<std::size_t>(slot)]] == values[i]) {
            out_idx[i] = slot;
            break;
          }
        }
      }
      Tensor& y = ctx.allocate_output(0, x.dtype(), {first.size()});
      T* out_y = y.data<T>();
      for (std::size_t k = 0; k < first.size(); ++k) out_y[k] = values[first[k]];
    });
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool sparse_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<GatherKernel>("GatherV2");
  r.add<ResourceGatherKernel>("ResourceGather");
  r.add<UnsortedSegmentSumKernel>("UnsortedSegmentSum");
  r.add<IndexedSlicesToDenseKernel>("IndexedSlicesToDense");
  r.add<ScatterKernel<ScatterKind::add>>("ScatterAdd");
  r.add<ScatterKernel<ScatterKind::sub>>("ScatterSub");
  r.add<ScatterKernel<ScatterKind::update>>("ScatterUpdate");
  r.add<UniqueKernel>("Unique");
  return true;
}();

}  // namespace detail

}  // namespace psflow
