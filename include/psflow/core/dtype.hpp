// Element types a Tensor can hold, their sizes and names, and a compile-time dispatch from a
// runtime DType to the C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "psflow/core/error.hpp"

namespace psflow {

// string: byte strings of any length (embedded NULs too), held as std::string elements.
enum class DType { float32, float64, int32, int64, boolean, string };

// Every DType, in enum order.
inline constexpr DType kAllDTypes[] = {DType::float32, DType::float64, DType::int32,
                                       DType::int64,   DType::boolean, DType::string};

template <class T>
inline constexpr bool is_tensor_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool> || std::is_same_v<T, std::string>;

template <class T>
concept TensorElement = is_tensor_element_v<T>;

template <TensorElement T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::float32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::float64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::int32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::int64;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::boolean;
  else
    return DType::string;
}

// numpy's / TF's names: "float32", "float64", "int32", "int64", "bool".
constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    case DType::boolean:
      return "bool";
    case DType::string:
      return "string";
  }
  return "unknown";
}

constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::float64:
      return 8;
    case DType::int32:
      return 4;
    case DType::int64:
      return 8;
    case DType::boolean:
      return 1;
    case DType::string:
      return sizeof(std::string);  // the element object; its bytes live on the heap
  }
  return 0;
}

// TF's DataType enum number of `dtype` (types.proto: DT_FLOAT 1, DT_DOUBLE 2, DT_INT32 3,
// DT_STRING 7, DT_INT64 9, DT_BOOL 10), as checkpoints and GraphDefs store it.
constexpr std::uint32_t tf_data_type(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 1;
    case DType::float64:
      return 2;
    case DType::int32:
      return 3;
    case DType::int64:
      return 9;
    case DType::boolean:
      return 10;
    case DType::string:
      return 7;
  }
  return 0;
}

// The DType of TF DataType number `code`, nullopt for one psflow has no type for.
constexpr std::optional<DType> dtype_from_tf_data_type(std::uint32_t code) {
  for (DType d : kAllDTypes)
    if (tf_data_type(d) == code) return d;
  return std::nullopt;
}

// TF's name of `dtype`'s DataType ("DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_INT64", "DT_BOOL",
// "DT_STRING"),
// as TF Serving's metadata shows it.
constexpr std::string_view tf_data_type_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "DT_FLOAT";
    case DType::float64:
      return "DT_DOUBLE";
    case DType::int32:
      return "DT_INT32";
    case DType::int64:
      return "DT_INT64";
    case DType::boolean:
      return "DT_BOOL";
    case DType::string:
      return "DT_STRING";
  }
  return "DT_INVALID";
}

constexpr bool is_floating(DType dtype) {
  return dtype == DType::float32 || dtype == DType::float64;
}
constexpr bool is_numeric(DType dtype) { return dtype != DType::boolean && dtype != DType::string; }

// Parses "float32", "float64", "int32", "int64", "bool", "string" (also "float"/"double");
// throws otherwise.
inline DType parse_dtype(std::string_view name) {
  if (name == "float32" || name == "float") return DType::float32;
  if (name == "float64" || name == "double") return DType::float64;
  if (name == "int32") return DType::int32;
  if (name == "int64") return DType::int64;
  if (name == "bool") return DType::boolean;
  if (name == "string") return DType::string;
  throw InvalidArgument("unknown dtype '" + std::string(name) +
                        "': use one of float32, float64, int32, int64, bool, string");
}

template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the C++ type of `dtype`, for numbers and bool; a string tensor
// is InvalidArgument (kernels of numbers are never instantiated for std::string).
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::float32:
      return fn(TypeTag<float>{});
    case DType::float64:
      return fn(TypeTag<double>{});
    case DType::int32:
      return fn(TypeTag<std::int32_t>{});
    case DType::int64:
      return fn(TypeTag<std::int64_t>{});
    case DType::boolean:
      return fn(TypeTag<bool>{});
    case DType::string:
      throw InvalidArgument(
          "this operation is not defined for string tensors: convert them first "
          "(string_to_number, string_to_hash_bucket_fast)");
  }
  throw Internal("visit_dtype: corrupt DType value");
}

// Like visit_dtype, with std::string for DType::string: for code that only moves, compares
// or prints elements.
template <class Fn>
decltype(auto) visit_any_dtype(DType dtype, Fn&& fn) {
  if (dtype == DType::string) return fn(TypeTag<std::string>{});
  return visit_dtype(dtype, std::forward<Fn>(fn));
}

// Like visit_dtype, for kernels defined on numbers only (never instantiated for bool or string);
// `what` names the op in the error.
template <class Fn>
decltype(auto) visit_numeric_dtype(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::float32:
      return fn(TypeTag<float>{});
    case DType::float64:
      return fn(TypeTag<double>{});
    case DType::int32:
      return fn(TypeTag<std::int32_t>{});
    case DType::int64:
      return fn(TypeTag<std::int64_t>{});
    default:
      throw InvalidArgument(std::string(what) + " is not defined for " +
                            std::string(dtype_name(dtype)) + " tensors: use a number type");
  }
}

// Like visit_dtype, for ids and sizes: int32 or int64 only; `what` names the input in the error.
template <class Fn>
decltype(auto) visit_index_dtype(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::int32:
      return fn(TypeTag<std::int32_t>{});
    case DType::int64:
      return fn(TypeTag<std::int64_t>{});
    default:
      throw InvalidArgument(std::string(what) + " must be int32 or int64, got " +
                            std::string(dtype_name(dtype)));
  }
}

// Like visit_dtype, for kernels defined on float32/float64 only.
template <class Fn>
decltype(auto) visit_floating_dtype(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::float32:
      return fn(TypeTag<float>{});
    case DType::float64:
      return fn(TypeTag<double>{});
    default:
      throw InvalidArgument(std::string(what) + " needs float32 or float64 inputs, got " +
                            std::string(dtype_name(dtype)));
  }
}

}  // namespace psflow
