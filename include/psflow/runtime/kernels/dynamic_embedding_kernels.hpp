// Kernels of the dynamic embedding ops (graph/dynamic_embedding.hpp). Every one of them runs on
// the ps task of its shard: DynamicTable opens the shard's hash table (runtime/dynamic_table.hpp,
// kept by the device's resource manager under the shard's name, created on first use with the
// node's attributes) and outputs a reference to it; the others take that reference as input 0
// and reach the same table.
//   DynamicTableFind(table, keys)            rows of the distinct int64 keys (insert attr)
//   DynamicTableApply(table, grad, keys, step, hyper...)   one optimizer step on those rows
//   DynamicTableSize / DynamicTableEvict     live rows / rows evicted now (int64 scalars)
//   DynamicTableClear(table)                 empties the table (its initializer)
//   DynamicTableExport / DynamicTableImport  the rows, slots and admission counts, for the Saver
//   DynamicShardIds(keys)                    each key's shard (a worker-side op)
//
// DynamicTableApply's rules, one row at a time, the equations of the optimizers' sparse kernels
// (runtime/kernels/training_kernels.hpp) so that a dynamic table trains exactly like a
// partitioned variable (Adam is the lazy one: only the given rows move):
//   GradientDescent (lr)                              w -= lr g
//   Momentum (lr, momentum; slot momentum)            a = a mu + g; w -= lr a (Nesterov: lr g + lr
//   mu a) Adagrad (lr; slot accumulator)                    a += g^2; w -= lr g / sqrt(a) Adam
//   (beta1_power, beta2_power, lr, beta1, beta2, epsilon; slots m, v) Ftrl (lr, l1, l2, lr_power;
//   slots accum, linear)  ftrl_step, as ApplyFtrl
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/runtime/dynamic_table.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/training_kernels.hpp"

namespace psflow {

namespace detail {

// The table of DynamicTable node `table`, made on first use on this device. Throws
// InvalidArgument when a table of that name exists there with another dtype or dim.
inline std::shared_ptr<DynamicTable> open_dynamic_table(Device& device, const Node& table) {
  const AttrMap& attrs = table.attrs;
  auto int_attr = [&](const char* key) {
    return attr_or_throw<std::int64_t>(attrs, key, table.name);
  };
  DynamicTableConfig config;
  config.name = table.name;
  config.dtype = attr_or_throw<DType>(attrs, "dtype", table.name);
  config.dim = static_cast<std::size_t>(int_attr("dim"));
  config.capacity = static_cast<std::size_t>(int_attr("capacity"));
  config.eviction = attr_or_throw<std::string>(attrs, "eviction", table.name) == "lfu"
                        ? EvictionPolicy::lfu
                        : EvictionPolicy::lru;
  config.min_count = int_attr("min_count");
  config.ttl_steps = int_attr("ttl_steps");
  const std::string& kind = attr_or_throw<std::string>(attrs, "initializer", table.name);
  config.initializer.kind = kind == "normal"    ? RowInitializer::Kind::normal
                            : kind == "uniform" ? RowInitializer::Kind::uniform
                                                : RowInitializer::Kind::constant;
  config.initializer.a = attr_or_throw<double>(attrs, "init_a", table.name);
  config.initializer.b = attr_or_throw<double>(attrs, "init_b", table.name);
  config.initializer.seed = static_cast<std::uint64_t>(int_attr("init_seed"));
  auto opened = device.resources().lookup_or_create_resource<DynamicTable>(
      table.name, [&] { return new DynamicTable(config); });
  const auto& have = opened->config();
  if (have.dtype != config.dtype || have.dim != config.dim)
    throw InvalidArgument("dynamic table '" + table.name + "' on " + device.name() +
                          " already exists as " + std::string(dtype_name(have.dtype)) +
                          " rows of " + std::to_string(have.dim) + ", a graph now declares it " +
                          std::string(dtype_name(config.dtype)) + " rows of " +
                          std::to_string(config.dim) + ": give one of them another name");
  return opened;
}

// The slots named by a node's slot_names / slot_initials attributes.
inline std::vector<RowSlot> slots_attr(const OpKernelConstruction& c) {
  std::vector<RowSlot> slots;
  const std::string& names = c.attr<std::string>("slot_names");
  const Tensor& initials = c.attr<Tensor>("slot_initials");
  std::size_t start = 0;
  for (std::size_t s = 0; s < initials.size(); ++s) {
    const std::size_t end = std::min(names.find(',', start), names.size());
    slots.push_back({names.substr(start, end - start), initials.data<double>()[s]});
    start = end + 1;
  }
  return slots;
}

class DynamicTableKernel : public OpKernel {
 public:
  explicit DynamicTableKernel(const OpKernelConstruction& c)
      : table_(open_dynamic_table(c.device(), c.node())),
        handle_(c.device().resources().lookup_or_create(
            c.name(), table_->config().dtype,
            PartialShape::of({-1, static_cast<std::int64_t>(table_->config().dim)}))) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output_ref(0, handle_.get()); }
  bool is_expensive() const override { return false; }

 private:
  std::shared_ptr<DynamicTable> table_;  // kept open while the graph runs
  std::shared_ptr<VariableResource> handle_;
};

// A kernel working on the table of its input 0.
class DynamicTableUser : public OpKernel {
 public:
  explicit DynamicTableUser(const OpKernelConstruction& c)
      : table_(open_dynamic_table(c.device(), c.input_node(0))) {}

 protected:
  // Input i as a vector of int64 keys; InvalidArgument naming the table otherwise.
  const Tensor& keys_input(OpKernelContext& ctx, int i, const char* what = "keys") const {
    const Tensor& keys = ctx.input(i);
    if (keys.dtype() != DType::int64 || keys.rank() != 1)
      throw InvalidArgument(ctx.node().type + " on dynamic table '" + table_->name() +
                            "': " + what + " must be an int64 vector, got " + keys.summary());
    return keys;
  }
  std::shared_ptr<DynamicTable> table_;
};

class DynamicTableFindKernel : public DynamicTableUser {
 public:
  explicit DynamicTableFindKernel(const OpKernelConstruction& c)
      : DynamicTableUser(c), insert_(c.attr<bool>("insert")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& keys = keys_input(ctx, 1);
    const std::size_t n = keys.size();
    Tensor& rows = ctx.allocate_output(0, table_->config().dtype, {n, table_->config().dim});
    visit_floating_dtype(rows.dtype(), "DynamicTableFind", [&](auto tag) {
      using T = typename decltype(tag)::type;
      table_->lookup(keys.data<std::int64_t>(), n, rows.data<T>(), insert_);
    });
  }

 private:
  bool insert_;
};

class DynamicTableSizeKernel : public DynamicTableUser {
 public:
  using DynamicTableUser::DynamicTableUser;
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(table_->size())));
  }
  bool is_expensive() const override { return false; }
};

class DynamicTableEvictKernel : public DynamicTableUser {
 public:
  using DynamicTableUser::DynamicTableUser;
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(table_->evict())));
  }
};

class DynamicTableClearKernel : public DynamicTableUser {
 public:
  using DynamicTableUser::DynamicTableUser;
  void compute(OpKernelContext&) override { table_->clear(); }
};

// The live rows of `table` as DynamicTableExport outputs them: keys, values, steps,
// frequencies, admission counts, then one tensor per slot of `slots`.
inline std::vector<Tensor> export_table_rows(const DynamicTable& table,
                                             const std::vector<RowSlot>& slots) {
  DynamicTableRows rows = table.export_rows(slots);
  const std::size_t n = rows.keys.size();
  std::vector<Tensor> out;
  out.push_back(Tensor::from_vector(std::move(rows.keys), {n}));
  out.push_back(std::move(rows.values));
  out.push_back(Tensor::from_vector(std::move(rows.steps), {n}));
  out.push_back(Tensor::from_vector(std::move(rows.frequencies), {n}));
  const auto counts = table.admission_counts();
  std::vector<std::int64_t> wide(counts.begin(), counts.end());
  out.push_back(Tensor::from_vector(std::move(wide), {counts.size()}));
  for (auto& slot : rows.slots) out.push_back(std::move(slot));
  return out;
}

class DynamicTableExportKernel : public DynamicTableUser {
 public:
  bool runs_long() const override { return true; }  // walks the whole table
  explicit DynamicTableExportKernel(const OpKernelConstruction& c)
      : DynamicTableUser(c), slots_(slots_attr(c)) {}
  void compute(OpKernelContext& ctx) override {
    std::vector<Tensor> exported = export_table_rows(*table_, slots_);
    for (std::size_t i = 0; i < exported.size(); ++i)
      ctx.set_output(static_cast<int>(i), std::move(exported[i]));
  }

 private:
  std::vector<RowSlot> slots_;
};

// Replaces every row of `table` with `exported`, laid out as DynamicTableExport's outputs (keys,
// values, steps, frequencies, admission counts, one tensor per slot), and merges the admission
// counts (several shards' counts when restoring into another shard count). InvalidArgument
// naming the table for tensors of the wrong kind; the table is unchanged then.
inline void import_exported_rows(DynamicTable& table, const std::vector<Tensor>& exported,
                                 const std::vector<RowSlot>& slots) {
  if (exported.size() != 5 + slots.size())
    throw InvalidArgument("restoring dynamic table '" + table.name() + "': expected " +
                          std::to_string(5 + slots.size()) + " tensors, got " +
                          std::to_string(exported.size()));
  auto int64_vector = [&](const Tensor& t, const char* what) {
    if (t.dtype() != DType::int64 || t.rank() != 1)
      throw InvalidArgument("restoring dynamic table '" + table.name() + "': " + what +
                            " must be an int64 vector, got " + t.summary());
    return std::vector<std::int64_t>(t.data<std::int64_t>(), t.data<std::int64_t>() + t.size());
  };
  DynamicTableRows rows;
  rows.keys = int64_vector(exported[0], "keys");
  rows.values = exported[1];
  rows.steps = int64_vector(exported[2], "row steps");
  rows.frequencies = int64_vector(exported[3], "row frequencies");
  const std::vector<std::int64_t> counts = int64_vector(exported[4], "admission counts");
  rows.slots.assign(exported.begin() + 5, exported.end());
  table.import_rows(rows, slots);
  std::vector<std::uint32_t> narrow(counts.size());
  for (std::size_t i = 0; i < narrow.size(); ++i)
    narrow[i] = static_cast<std::uint32_t>(std::clamp<std::int64_t>(counts[i], 0, UINT32_MAX));
  // A checkpoint written without admission (min_count 1) has none: counting starts afresh.
  if (!narrow.empty() && !table.admission_counts().empty())
    table.merge_admission(narrow.data(), narrow.size());
}

// Inputs as DynamicTableExport's outputs, after the table: import_exported_rows.
class DynamicTableImportKernel : public DynamicTableUser {
 public:
  bool runs_long() const override { return true; }  // fills a whole table
  explicit DynamicTableImportKernel(const OpKernelConstruction& c)
      : DynamicTableUser(c), slots_(slots_attr(c)) {}
  void compute(OpKernelContext& ctx) override {
    std::vector<Tensor> exported;
    for (int i = 1; i < ctx.num_inputs(); ++i) exported.push_back(ctx.input(i));
    import_exported_rows(*table_, exported, slots_);
  }

 private:
  std::vector<RowSlot> slots_;
};

class DynamicTableApplyKernel : public DynamicTableUser {
 public:
  explicit DynamicTableApplyKernel(const OpKernelConstruction& c)
      : DynamicTableUser(c),
        rule_(c.attr<std::string>("rule")),
        slots_(slots_attr(c)),
        use_nesterov_(c.attr<bool>("use_nesterov")) {
    const std::size_t hyper = rule_ == "GradientDescent" ? 1
                              : rule_ == "Momentum"      ? 2
                              : rule_ == "Adagrad"       ? 1
                              : rule_ == "Adam"          ? 6
                              : rule_ == "Ftrl"          ? 4
                                                         : 0;
    const std::size_t slots = rule_ == "Momentum" || rule_ == "Adagrad" ? 1
                              : rule_ == "Adam" || rule_ == "Ftrl"      ? 2
                                                                        : 0;
    if (hyper == 0)
      throw InvalidArgument("DynamicTableApply '" + c.name() + "': unknown rule '" + rule_ +
                            "': GradientDescent, Momentum, Adagrad, Adam or Ftrl");
    if (c.node().inputs.size() != 4 + hyper || slots_.size() != slots)
      throw InvalidArgument("DynamicTableApply '" + c.name() + "': rule " + rule_ + " takes " +
                            std::to_string(hyper) + " hyper-parameters and " +
                            std::to_string(slots) + " slots");
  }

  void compute(OpKernelContext& ctx) override {
    const std::string what = "DynamicTableApply on dynamic table '" + table_->name() + "'";
    const Tensor& grad = ctx.input(1);
    const Tensor& keys = keys_input(ctx, 2);
    const std::size_t n = keys.size(), dim = table_->config().dim;
    if (grad.dtype() != table_->config().dtype || grad.shape() != Shape{n, dim})
      throw InvalidArgument(what + ": the gradient rows are " + grad.summary() + ", they must be " +
                            std::string(dtype_name(table_->config().dtype)) + "[" +
                            std::to_string(n) + "," + std::to_string(dim) + "]");
    const Tensor& step_in = ctx.input(3);
    if (step_in.size() != 1 || (step_in.dtype() != DType::int64 && step_in.dtype() != DType::int32))
      throw InvalidArgument(what + ": step must be an int32 or int64 scalar, got " +
                            step_in.summary());
    const std::int64_t step = step_in.dtype() == DType::int64
                                  ? step_in.data<std::int64_t>()[0]
                                  : std::int64_t{step_in.data<std::int32_t>()[0]};
    visit_floating_dtype(grad.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> h;
      for (int i = 4; i < ctx.num_inputs(); ++i)
        h.push_back(scalar_input<T>(what, ctx.input(i), grad.dtype(),
                                    "hyper-parameter " + std::to_string(i - 4),
                                    /*any_float=*/true));
      const std::int64_t* k = keys.data<std::int64_t>();
      const T* g = grad.data<T>();
      auto run = [&](auto&& rule) { table_->apply(k, n, g, slots_, step, rule); };
      if (rule_ == "GradientDescent") {
        run([&, lr = h[0]](T* w, T* const*, const T* d) {
          for (std::size_t j = 0; j < dim; ++j) w[j] -= d[j] * lr;
        });
      } else if (rule_ == "Momentum") {
        run([&, lr = h[0], mu = h[1]](T* w, T* const* s, const T* d) {
          for (std::size_t j = 0; j < dim; ++j) {
            const T acc = s[0][j] * mu + d[j];
            s[0][j] = acc;
            w[j] -= use_nesterov_ ? d[j] * lr + acc * mu * lr : acc * lr;
          }
        });
      } else if (rule_ == "Adagrad") {
        run([&, lr = h[0]](T* w, T* const* s, const T* d) {
          for (std::size_t j = 0; j < dim; ++j) {
            s[0][j] += d[j] * d[j];
            w[j] -= d[j] * lr * (T(1) / std::sqrt(s[0][j]));
          }
        });
      } else if (rule_ == "Adam") {
        const T beta1 = h[3], beta2 = h[4], epsilon = h[5];
        const T alpha = h[2] * std::sqrt(T(1) - h[1]) / (T(1) - h[0]);
        run([&](T* w, T* const* s, const T* d) {
          for (std::size_t j = 0; j < dim; ++j) {
            s[0][j] = beta1 * s[0][j] + (T(1) - beta1) * d[j];
            s[1][j] = beta2 * s[1][j] + (T(1) - beta2) * d[j] * d[j];
            w[j] -= alpha * s[0][j] / (std::sqrt(s[1][j]) + epsilon);
          }
        });
      } else {
        run([&, lr = h[0], l1 = h[1], l2 = h[2], power = h[3]](T* w, T* const* s, const T* d) {
          for (std::size_t j = 0; j < dim; ++j)
            ftrl_step(w[j], s[0][j], s[1][j], d[j], lr, l1, l2, power);
        });
      }
    });
  }

 private:
  std::string rule_;
  std::vector<RowSlot> slots_;
  bool use_nesterov_;
};

class DynamicShardIdsKernel : public OpKernel {
 public:
  explicit DynamicShardIdsKernel(const OpKernelConstruction& c)
      : num_shards_(static_cast<std::size_t>(c.attr<std::int64_t>("num_shards"))) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& keys = ctx.input(0);
    Tensor& shards = ctx.allocate_output(0, DType::int32, keys.shape());
    const std::int64_t* k = keys.data<std::int64_t>();
    std::int32_t* out = shards.data<std::int32_t>();
    for (std::size_t i = 0; i < keys.size(); ++i)
      out[i] = static_cast<std::int32_t>(dynamic_shard_of(k[i], num_shards_));
  }
  bool is_expensive() const override { return false; }

 private:
  std::size_t num_shards_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool dynamic_embedding_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<DynamicTableKernel>(kDynamicTableType);
  r.add<DynamicTableFindKernel>("DynamicTableFind");
  r.add<DynamicTableApplyKernel>("DynamicTableApply");
  r.add<DynamicTableSizeKernel>("DynamicTableSize");
  r.add<DynamicTableEvictKernel>("DynamicTableEvict");
  r.add<DynamicTableClearKernel>("DynamicTableClear");
  r.add<DynamicTableExportKernel>("DynamicTableExport");
  r.add<DynamicTableImportKernel>("DynamicTableImport");
  r.add<DynamicShardIdsKernel>("DynamicShardIds");
  return true;
}();

}  // namespace detail

}  // namespace psflow
