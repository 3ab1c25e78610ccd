// Kernels of the string ops (graph/string_ops.hpp): hash buckets, number parsing and printing,
// splitting, joining and substrings, with TF1's rules.
#pragma once

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/fingerprint.hpp"
#include "psflow/core/parse_number.hpp"
#include "psflow/core/siphash.hpp"
#include "psflow/core/tensor_format.hpp"
#include "psflow/graph/string_ops.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/array_kernels.hpp"

namespace psflow::detail {

// Fingerprint64 (fast) or SipHash-2-4 under the node's key (strong), mod num_buckets.
template <bool Strong>
class HashBucketKernel : public OpKernel {
 public:
  explicit HashBucketKernel(const OpKernelConstruction& c)
      : buckets_(static_cast<std::uint64_t>(c.attr<std::int64_t>("num_buckets"))) {
    if constexpr (Strong) {
      const auto& key = c.attr<std::vector<std::int64_t>>("key");
      if (key.size() != 2)
        throw InvalidArgument("StringToHashBucketStrong: the key must have 2 elements, got " +
                              std::to_string(key.size()));
      key_ = {static_cast<std::uint64_t>(key[0]), static_cast<std::uint64_t>(key[1])};
    }
  }
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const auto strings = in.values<std::string>();
    auto out = ctx.allocate_output(0, DType::int64, in.shape()).values<std::int64_t>();
    for (std::size_t i = 0; i < strings.size(); ++i) {
      const std::uint64_t h = Strong ? siphash24(key_, strings[i]) : fingerprint64(strings[i]);
      out[i] = static_cast<std::int64_t>(h % buckets_);
    }
  }

 private:
  std::uint64_t buckets_;
  std::array<std::uint64_t, 2> key_{};
};

// The pattern is compiled once, when the kernel is made; RE2 matching is thread-safe.
class RegexFullMatchKernel : public OpKernel {
 public:
  explicit RegexFullMatchKernel(const OpKernelConstruction& c)
      : re_(compile_regex(c.attr<std::string>("pattern"))) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const auto strings = in.values<std::string>();
    bool* out = ctx.allocate_output(0, DType::boolean, in.shape()).data<bool>();
    for (std::size_t i = 0; i < strings.size(); ++i) out[i] = re2::RE2::FullMatch(strings[i], *re_);
  }

 private:
  std::unique_ptr<re2::RE2> re_;
};

class StringToNumberKernel : public OpKernel {
 public:
  explicit StringToNumberKernel(const OpKernelConstruction& c) : out_(c.attr<DType>("out_type")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const auto strings = in.values<std::string>();
    Tensor& out = ctx.allocate_output(0, out_, in.shape());
    visit_numeric_dtype(out_, "StringToNumber", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* po = out.data<T>();
      for (std::size_t i = 0; i < strings.size(); ++i) {
        const auto v = parse_number<T>(strings[i]);
        if (!v)
          throw InvalidArgument(kernel_where(ctx) + "cannot convert the string " +
                                bytes_repr(strings[i]) + " to " + std::string(dtype_name(out_)));
        po[i] = *v;
      }
    });
  }

 private:
  DType out_;
};

// printf formats as TF's AsString builds them: "%" fill width .precision conversion.
class AsStringKernel : public OpKernel {
 public:
  explicit AsStringKernel(const OpKernelConstruction& c)
      : precision_(c.attr<std::int64_t>("precision")),
        scientific_(c.attr<bool>("scientific")),
        shortest_(c.attr<bool>("shortest")),
        width_(c.attr<std::int64_t>("width")),
        fill_(c.attr<std::string>("fill")) {
    if (!(fill_.empty() || fill_ == " " || fill_ == "0"))
      throw InvalidArgument("AsString: fill must be empty, \" \" or \"0\", got \"" + fill_ + "\"");
  }
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    auto out = ctx.allocate_output(0, DType::string, in.shape()).values<std::string>();
    if (in.dtype() == DType::boolean) {
      const bool* pb = in.data<bool>();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = pb[i] ? "true" : "false";
      return;
    }
    visit_numeric_dtype(in.dtype(), "AsString", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool floating = std::is_floating_point_v<T>;
      if (!floating && (precision_ > -1 || scientific_ || shortest_))
        throw InvalidArgument(kernel_where(ctx) +
                              "precision, scientific and shortest apply to floats only, the "
                              "input is " +
                              in.summary());
      std::string format = "%" + fill_;
      if (width_ > -1) format += std::to_string(width_);
      if (precision_ > -1) format += "." + std::to_string(precision_);
      format += floating ? (shortest_ ? "g" : scientific_ ? "e" : "f") : "lld";
      const T* px = in.data<T>();
      char buffer[512];
      for (std::size_t i = 0; i < out.size(); ++i) {
        int n;
        if constexpr (std::is_floating_point_v<T>)
          n = std::snprintf(buffer, sizeof buffer, format.c_str(), static_cast<double>(px[i]));
        else
          n = std::snprintf(buffer, sizeof buffer, format.c_str(), static_cast<long long>(px[i]));
        if (n < 0 || static_cast<std::size_t>(n) >= sizeof buffer)
          throw InvalidArgument(kernel_where(ctx) + "the formatted number is longer than " +
                                std::to_string(sizeof buffer - 1) + " characters (width " +
                                std::to_string(width_) + ", precision " +
                                std::to_string(precision_) + ")");
        out[i].assign(buffer, static_cast<std::size_t>(n));
      }
    });
  }

 private:
  std::int64_t precision_;
  bool scientific_, shortest_;
  std::int64_t width_;
  std::string fill_;
};

class StringSplitKernel : public OpKernel {
 public:
  explicit StringSplitKernel(const OpKernelConstruction& c)
      : delimiter_(c.attr<std::string>("delimiter")), skip_empty_(c.attr<bool>("skip_empty")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    if (in.rank() != 1)
      throw InvalidArgument(kernel_where(ctx) + "input must be a vector of strings, got " +
                            in.summary());
    const auto strings = in.values<std::string>();
    std::vector<std::int64_t> indices;
    std::vector<std::string> tokens;
    std::int64_t widest = 0;
    for (std::size_t row = 0; row < strings.size(); ++row) {
      std::int64_t position = 0;
      auto add = [&](std::string_view token) {
        if (skip_empty_ && token.empty()) return;
        indices.insert(indices.end(), {static_cast<std::int64_t>(row), position++});
        tokens.emplace_back(token);
      };
      const std::string_view s = strings[row];
      if (delimiter_.empty()) {  // one token per byte
        for (std::size_t i = 0; i < s.size(); ++i) add(s.substr(i, 1));
      } else if (!s.empty()) {
        std::size_t start = 0;
        for (std::size_t i = 0; i <= s.size(); ++i)
          if (i == s.size() || delimiter_.find(s[i]) != std::string::npos) {
            add(s.substr(start, i - start));
            start = i + 1;
          }
      }
      widest = std::max(widest, position);
    }
    const std::size_t n = tokens.size();
    ctx.set_output(0, Tensor::from_vector(std::move(indices), Shape{n, 2}));
    ctx.set_output(1, Tensor::from_vector(std::move(tokens)));
    ctx.set_output(2, Tensor::from_vector(std::vector<std::int64_t>{
                          static_cast<std::int64_t>(strings.size()), widest}));
  }

 private:
  std::string delimiter_;
  bool skip_empty_;
};

class StringJoinKernel : public OpKernel {
 public:
  explicit StringJoinKernel(const OpKernelConstruction& c)
      : separator_(c.attr<std::string>("separator")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor* shaped = nullptr;  // the first input that is not a scalar
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      if (t.rank() == 0) continue;
      if (shaped && t.shape() != shaped->shape())
        throw InvalidArgument(kernel_where(ctx) + "inputs must have one shape or be scalars, got " +
                              shaped->summary() + " and " + t.summary());
      if (!shaped) shaped = &t;
    }
    const Shape shape = shaped ? shaped->shape() : Shape{};
    auto out = ctx.allocate_output(0, DType::string, shape).values<std::string>();
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const auto in = ctx.input(i).values<std::string>();
      const bool scalar = ctx.input(i).rank() == 0;
      for (std::size_t k = 0; k < out.size(); ++k) {
        if (i > 0) out[k] += separator_;
        out[k] += in[scalar ? 0 : k];
      }
    }
  }

 private:
  std::string separator_;
};

class SubstrKernel : public OpKernel {
 public:
  explicit SubstrKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const Tensor& pos = ctx.input(1);
    const Tensor& len = ctx.input(2);
    for (const Tensor* t : {&pos, &len})
      if (t->rank() != 0 && t->shape() != in.shape())
        throw InvalidArgument(kernel_where(ctx) +
                              "pos and len must be scalars or have the input's shape " +
                              in.summary() + ", got " + t->summary());
    const auto strings = in.values<std::string>();
    auto out = ctx.allocate_output(0, DType::string, in.shape()).values<std::string>();
    visit_index_dtype(pos.dtype(), kernel_where(ctx) + "pos", [&](auto tag) {
      using I = typename decltype(tag)::type;
      const I* pp = pos.data<I>();
      const I* pl = len.data<I>();
      for (std::size_t i = 0; i < strings.size(); ++i) {
        const auto size = static_cast<std::int64_t>(strings[i].size());
        std::int64_t p = pp[pos.rank() == 0 ? 0 : i];
        const std::int64_t l = pl[len.rank() == 0 ? 0 : i];
        if (p < -size || p > size)
          throw InvalidArgument(kernel_where(ctx) + "pos " + std::to_string(p) +
                                " is out of range for the string " + bytes_repr(strings[i]) +
                                " at index " + std::to_string(i));
        if (p < 0) p += size;
        const std::int64_t take = l < 0 ? size - p : std::min(l, size - p);
        out[i] = strings[i].substr(static_cast<std::size_t>(p), static_cast<std::size_t>(take));
      }
    });
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool string_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<HashBucketKernel<false>>("StringToHashBucketFast");
  r.add<HashBucketKernel<true>>("StringToHashBucketStrong");
  r.add<StringToNumberKernel>("StringToNumber");
  r.add<AsStringKernel>("AsString");
  r.add<StringSplitKernel>("StringSplit");
  r.add<StringJoinKernel>("StringJoin");
  r.add<SubstrKernel>("Substr");
  r.add<RegexFullMatchKernel>("StaticRegexFullMatch");
  return true;
}();

}  // namespace psflow::detail
