// Scalar summaries, TF1's tf.summary.scalar / tf.summary.merge_all and the Summary message
// TensorBoard reads.
//
// TF's summary ops produce a serialized Summary as a string tensor; psflow has no string
// tensors, so here a summary is a graph-level record instead of an op: summary::scalar(name,
// tensor) adds (tag, tensor) to the graph's "summaries" collection (TF's
// GraphKeys.SUMMARIES) and returns that record; summary::merge_all(graph) collects them into a
// MergedSummary whose fetches() a hook runs with the training step, and whose evaluate() turns
// the fetched values into a Summary. Its serialize() is the protocol-buffer bytes of TF's
// Summary message (summary.proto):
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }      // TF1's scalar summaries
//
// Tags follow TF1's rules: characters outside [A-Za-z0-9_.\-/] become '_' and a leading '/' is
// dropped (TF's clean_tag), the current name scope prefixes the tag ("train/loss" inside
// name_scope("train")), and a tag already used by another summary gets "_1", "_2", ... . One
// difference: TF1 makes the tag unique against op names too (its summary is an op under a
// name scope, so scalar("loss", loss) where an op is already named "loss" gives the tag
// "loss_1"); psflow's summary creates no op, so the tag stays "loss".
//
// Graph building is single-threaded (as for every graph builder); evaluate() and serialize()
// are const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/graph.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <memory>

#include "psflow/core/error.hpp"
#include "psflow/observe/proto_writer.hpp"
#endif

namespace psflow::summary {

// The summaries collection's key (TF's tf.GraphKeys.SUMMARIES).
inline constexpr const char* kSummariesCollection = "summaries";

// One value of a Summary: TF1's Summary.Value with simple_value.
struct SummaryValue {
  std::string tag;
  float simple_value = 0;
};

// TF's Summary message, scalars only.
struct Summary {
  std::vector<SummaryValue> values;

  Summary& add(std::string tag, double value);
  // The protocol-buffer bytes of the Summary message.
  std::string serialize() const;
};

// A scalar summary: the tag it is written under and the tensor whose value is written.
struct ScalarSummary {
  std::string tag;
  Output tensor;
};

// TF's clean_tag: characters outside [A-Za-z0-9_.\-/] become '_', a leading '/' is dropped.
std::string clean_tag(std::string_view name);

// TF1's tf.summary.scalar(name, tensor): records a summary of `tensor` (a number: float32,
// float64, int32 or int64, with one element) in the graph's summaries collection under the tag
// made from `name` (see the rules above) and returns it. Throws InvalidArgument for an empty
// name or tensor, a bool tensor or a shape known to hold more than one element.
ScalarSummary scalar(std::string_view name, const Output& tensor);

// Every summary recorded in `graph`, in the order they were made.
std::vector<ScalarSummary> all_summaries(const Graph& graph);

// Several summaries fetched together (TF1's merged summary op).
class MergedSummary {
 public:
  MergedSummary() = default;
  explicit MergedSummary(std::vector<ScalarSummary> scalars) : scalars_(std::move(scalars)) {}

  bool empty() const noexcept { return scalars_.empty(); }
  const std::vector<ScalarSummary>& scalars() const noexcept { return scalars_; }
  // The tensors to fetch, in order.
  std::vector<Output> fetches() const;
  // The Summary of the fetched values (`values[i]` is the value of fetches()[i]). Throws
  // InvalidArgument when the counts differ or a value does not hold exactly one number.
  Summary evaluate(const std::vector<Tensor>& values) const;

 private:
  std::vector<ScalarSummary> scalars_;
};

// TF1's tf.summary.merge_all(): every summary of `graph` (empty when there is none, where TF
// returns None).
inline MergedSummary merge_all(const Graph& graph) { return MergedSummary(all_summaries(graph)); }

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL Summary& Summary::add(std::string tag, double value) {
  values.push_back({std::move(tag), static_cast<float>(value)});
  return *this;
}

PSFLOW_DECL std::string Summary::serialize() const {
  observe::ProtoWriter summary;
  for (const SummaryValue& v : values) {
    observe::ProtoWriter value;
    value.bytes(1, v.tag).float32(2, v.simple_value);
    summary.message(1, value);
  }
  return summary.str();
}

PSFLOW_DECL std::string clean_tag(std::string_view name) {
  std::string tag;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == '/';
    tag.push_back(ok ? c : '_');
  }
  const auto first = tag.find_first_not_of('/');
  return first == std::string::npos ? std::string() : tag.substr(first);
}

PSFLOW_DECL std::vector<ScalarSummary> all_summaries(const Graph& graph) {
  std::vector<ScalarSummary> out;
  for (const auto& record : graph.collection<ScalarSummary>(kSummariesCollection))
    out.push_back(*record);
  return out;
}

PSFLOW_DECL ScalarSummary scalar(std::string_view name, const Output& tensor) {
  const std::string what = "summary::scalar('" + std::string(name) + "')";
  if (!tensor.valid()) throw InvalidArgument(what + ": the tensor is empty (default-constructed)");
  std::string tag = clean_tag(name);
  if (tag.empty()) throw InvalidArgument(what + ": give a name made of letters, digits, _.-/");
  if (!is_numeric(tensor.dtype()))
    throw InvalidArgument(what + ": tensor '" + tensor.name() +
                          "' is bool; summarize a number (e.g. ops::cast it to float32)");
  const PartialShape shape = tensor.shape();
  if (shape.fully_defined() && num_elements(shape.to_shape()) != 1)
    throw InvalidArgument(what + ": tensor '" + tensor.name() + "' has shape " +
                          shape_string(shape.to_shape()) +
                          "; a scalar summary needs one value (reduce it, e.g. ops::reduce_mean)");
  Graph& graph = tensor.graph();
  const std::string scope = graph.current_name_scope();
  if (!scope.empty()) tag = scope + "/" + tag;
  std::vector<std::string> taken;
  for (const auto& s : all_summaries(graph)) taken.push_back(s.tag);
  auto used = [&](const std::string& t) {
    return std::find(taken.begin(), taken.end(), t) != taken.end();
  };
  if (used(tag)) {
    int i = 1;
    while (used(tag + "_" + std::to_string(i))) ++i;
    tag += "_" + std::to_string(i);
  }
  auto record = std::make_shared<ScalarSummary>(ScalarSummary{tag, tensor});
  graph.add_to_collection(kSummariesCollection, record);
  return *record;
}

PSFLOW_DECL std::vector<Output> MergedSummary::fetches() const {
  std::vector<Output> out;
  for (const auto& s : scalars_) out.push_back(s.tensor);
  return out;
}

PSFLOW_DECL Summary MergedSummary::evaluate(const std::vector<Tensor>& values) const {
  if (values.size() != scalars_.size())
    throw InvalidArgument("MergedSummary::evaluate: " + std::to_string(values.size()) +
                          " values for " + std::to_string(scalars_.size()) + " summaries");
  Summary summary;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Tensor& t = values[i];
    if (t.size() != 1)
      throw InvalidArgument("summary '" + scalars_[i].tag + "': tensor '" +
                            scalars_[i].tensor.name() + "' has shape " + shape_string(t.shape()) +
                            ", a scalar summary needs exactly one value");
    const double value = visit_numeric_dtype(t.dtype(), "a scalar summary", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return static_cast<double>(*t.data<T>());
    });
    summary.add(scalars_[i].tag, value);
  }
  return summary;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::summary
