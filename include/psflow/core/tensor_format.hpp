// Printing a Tensor exactly as numpy 1.24 prints an ndarray.
//
// `os << t` is numpy's `str(arr)` and `repr(t)` is numpy's `repr(arr)` under numpy's default
// print options (precision 8, threshold 1000, edgeitems 3, linewidth 75, floatmode 'maxprec',
// suppress=False, sign '-'), so a psflow program prints the same text as the TF/numpy program it
// mirrors, and tests can compare against strings produced by numpy itself. The algorithm is a
// port of numpy/core/arrayprint.py (FloatingFormat, IntegerFormat, BoolFormat, _formatArray,
// array_repr); digits come from std::to_chars, which, like numpy's Dragon4, yields the shortest
// round-trip digits of the value's own type (so 0.4f prints "0.4", not "0.4000000059604645").
//
// All functions are pure and thread-safe; they only read the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/shape.hpp"
#include "psflow/core/tensor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <type_traits>
#include <utility>
#endif

namespace psflow {

// numpy's str(arr): "[[7. 7.]\n [7. 7.]]"; a rank-0 tensor prints like a numpy scalar ("0.4");
// an empty (default-constructed) Tensor prints "<empty tensor>".
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// The same text as `os << tensor`, as a string.
std::string to_string(const Tensor& tensor);

// Python's repr of a bytes object, as numpy prints the elements of a string tensor (an array of
// dtype=object): b'ab', b"it's", b'x\x00y'.
std::string bytes_repr(std::string_view bytes);

// numpy's repr(arr): "array([[7., 7.],\n       [7., 7.]], dtype=float32)". As in numpy, the
// dtype is left out for float64, int64 and bool unless the tensor has no elements.
std::string repr(const Tensor& tensor);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

// numpy's default print options (np.get_printoptions() in a fresh interpreter).
struct PrintOptions {
  static constexpr int precision = 8;             // digits after the point, at most
  static constexpr std::size_t threshold = 1000;  // more elements than this: summarise
  static constexpr std::size_t edgeitems = 3;     // items kept at each end when summarising
  static constexpr std::ptrdiff_t linewidth = 75;
};

// A finite, non-negative number as decimal digits: value = d0.d1d2... * 10^exponent.
struct Decimal {
  std::string digits;  // no leading zeros except for the value zero ("0")
  int exponent = 0;
};

// Parses std::to_chars' scientific output of a non-negative number ("1.25e-05", "7e+00").
PSFLOW_DECL Decimal parse_scientific(std::string_view text) {
  Decimal d;
  const auto e = text.find('e');
  for (char c : text.substr(0, e))
    if (c != '.') d.digits += c;
  const char* first = text.data() + e + 1;
  if (*first == '+') ++first;  // from_chars takes '-' but not '+'
  std::from_chars(first, text.data() + text.size(), d.exponent);
  return d;
}

// Shortest digits that read back as exactly `x` in its own type (float stays float).
template <class T>
Decimal shortest_decimal(T x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  return parse_scientific({buf, r.ptr});
}

// The exact binary value of `x` rounded to `frac_digits` digits after the first one.
template <class T>
Decimal rounded_decimal(T x, int frac_digits) {
  char buf[128];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific,
                               frac_digits);
  return parse_scientific({buf, r.ptr});
}

// Integer and fraction digits of a Decimal in positional notation ("0.0012" -> "0", "0012").
struct Positional {
  std::string int_part;
  std::string frac_part;
};

PSFLOW_DECL Positional to_positional(const Decimal& d) {
  if (d.exponent < 0)
    return {"0", std::string(static_cast<std::size_t>(-d.exponent - 1), '0') + d.digits};
  const auto int_digits = static_cast<std::size_t>(d.exponent) + 1;
  if (d.digits.size() <= int_digits)
    return {d.digits + std::string(int_digits - d.digits.size(), '0'), ""};
  return {d.digits.substr(0, int_digits), d.digits.substr(int_digits)};
}

// numpy's dragon4_positional(x, precision, unique=True, fractional=True, trim='.'): the shortest
// digits that read back as `x` when they need at most `precision` digits after the point, else
// the exact value rounded there with trailing zeros dropped. With `exact_integer` (numpy's
// min_digits=0, used when printing elements) the digits before the point are the value's exact
// ones: float32 80635024 prints "80635024." although "8.063502e7" would round-trip. Carries the
// sign ("-0." for negative zero).
template <class T>
Positional positional_digits(T x, int precision, bool exact_integer) {
  const Decimal shortest = shortest_decimal(x);
  Positional p = to_positional(shortest);
  const bool too_long = static_cast<int>(p.frac_part.size()) > precision;
  const bool implied_zeros = shortest.exponent >= static_cast<int>(shortest.digits.size());
  if (too_long || (exact_integer && implied_zeros)) {
    char buf[512];
    const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::fixed,
                                 too_long ? precision : 0);
    const std::string_view text(buf, r.ptr);
    const auto dot = text.find('.');
    p.int_part = std::string(text.substr(0, dot));
    p.frac_part = dot == std::string_view::npos ? "" : std::string(text.substr(dot + 1));
    while (!p.frac_part.empty() && p.frac_part.back() == '0') p.frac_part.pop_back();
  }
  if (std::signbit(x)) p.int_part.insert(0, "-");
  return p;
}

// "e+05", "e-100": the exponent with at least `min_digits` digits.
PSFLOW_DECL std::string exponent_string(int exponent, int min_digits) {
  std::string digits = std::to_string(exponent < 0 ? -exponent : exponent);
  if (static_cast<int>(digits.size()) < min_digits)
    digits.insert(0, static_cast<std::size_t>(min_digits) - digits.size(), '0');
  return std::string(exponent < 0 ? "e-" : "e+") + digits;
}

// numpy's FloatingFormat in 'maxprec' mode: chooses positional or scientific notation for the
// whole array, then pads every element to a common width so that the decimal points line up.
template <class T>
class FloatFormat {
 public:
  // `shown` are the values that will be printed (after summarisation), as numpy measures them.
  explicit FloatFormat(std::span<const T> shown) {
    std::vector<T> finite;
    bool has_nonfinite = false, has_neg_inf = false;
    for (T v : shown) {
      if (std::isfinite(v)) {
        finite.push_back(v);
      } else {
        has_nonfinite = true;
        has_neg_inf = has_neg_inf || (std::isinf(v) && v < 0);
      }
    }
    choose_notation(finite);
    measure(finite);
    // nan/inf are right-aligned in the common width, which may have to grow for them.
    if (has_nonfinite) {
      const int offset = pad_right_ + 1;
      pad_left_ = std::max({pad_left_, 3 - offset, 3 + (has_neg_inf ? 1 : 0) - offset});
    }
  }

  std::string operator()(T x) const {
    if (!std::isfinite(x)) {
      const std::string text = std::isnan(x) ? "nan" : x < 0 ? "-inf" : "inf";
      return pad_to(text, pad_left_ + pad_right_ + 1);
    }
    if (exp_format_) {
      // Every element shows exactly precision_ digits after the point (numpy's min_digits).
      const Decimal d = rounded_decimal(x, precision_);
      std::string mantissa = (std::signbit(x) ? "-" : "") + d.digits.substr(0, 1) + "." +
                             d.digits.substr(1) + exponent_string(d.exponent, exp_size_);
      return pad_to(mantissa,
                    pad_left_ + static_cast<int>(mantissa.size()) - (std::signbit(x) ? 2 : 1));
    }
    const Positional p = positional_digits(x, PrintOptions::precision, true);
    return pad_to(p.int_part, pad_left_) + "." + p.frac_part +
           std::string(static_cast<std::size_t>(pad_right_) - p.frac_part.size(), ' ');
  }

 private:
  // numpy switches the whole array to scientific notation when positional would need too many
  // digits: a large maximum, a tiny minimum, or a wide range. Zeros and non-finite values do not
  // count. numpy compares the minimum in double but divides in the element type.
  void choose_notation(const std::vector<T>& finite) {
    bool any = false;
    T max_val = 0, min_val = 0;
    for (T v : finite) {
      if (v == 0) continue;
      const T a = std::fabs(v);
      if (!any || a > max_val) max_val = a;
      if (!any || a < min_val) min_val = a;
      any = true;
    }
    if (!any) return;
    const T ratio = max_val / min_val;
    exp_format_ = static_cast<double>(max_val) >= 1e8 || static_cast<double>(min_val) < 1e-4 ||
                  static_cast<double>(ratio) > 1000.0;
  }

  // First pass over the values, as FloatingFormat.fillFormat: widths and digit counts.
  void measure(const std::vector<T>& finite) {
    if (finite.empty()) return;
    if (exp_format_) {
      int exp_digits = 0;
      for (T v : finite) {
        Decimal d = shortest_decimal(v);
        if (static_cast<int>(d.digits.size()) - 1 > PrintOptions::precision) {
          d = rounded_decimal(v, PrintOptions::precision);
          while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
        }
        precision_ = std::max(precision_, static_cast<int>(d.digits.size()) - 1);
        pad_left_ = std::max(pad_left_, std::signbit(v) ? 2 : 1);
        const int e = d.exponent < 0 ? -d.exponent : d.exponent;
        exp_digits = std::max({exp_digits, 2, static_cast<int>(std::to_string(e).size())});
      }
      exp_size_ = exp_digits;
      pad_right_ = exp_size_ + 2 + precision_;  // only used to size nan/inf
    } else {
      for (T v : finite) {
        const Positional p = positional_digits(v, PrintOptions::precision, false);
        pad_left_ = std::max(pad_left_, static_cast<int>(p.int_part.size()));
        pad_right_ = std::max(pad_right_, static_cast<int>(p.frac_part.size()));
      }
    }
  }

  static std::string pad_to(const std::string& text, int width) {
    const int fill = width - static_cast<int>(text.size());
    return fill > 0 ? std::string(static_cast<std::size_t>(fill), ' ') + text : text;
  }

  bool exp_format_ = false;
  int precision_ = 0;  // digits after the point in scientific notation
  int exp_size_ = 0;   // exponent digits in scientific notation
  int pad_left_ = 0;   // characters before the point, sign included
  int pad_right_ = 0;  // characters after the point
};

// numpy's IntegerFormat: right-aligned to the widest of the minimum and the maximum.
template <class T>
class IntFormat {
 public:
  explicit IntFormat(std::span<const T> shown) {
    if (shown.empty()) return;
    const auto [lo, hi] = std::minmax_element(shown.begin(), shown.end());
    width_ = std::max(std::to_string(*lo).size(), std::to_string(*hi).size());
  }
  std::string operator()(T x) const {
    std::string text = std::to_string(x);
    if (text.size() < width_) text.insert(0, width_ - text.size(), ' ');
    return text;
  }

 private:
  std::size_t width_ = 0;
};

// numpy's BoolFormat: " True" lines up with "False", except in a rank-0 array.
class BoolFormat {
 public:
  explicit BoolFormat(bool rank0) : true_text_(rank0 ? "True" : " True") {}
  std::string operator()(bool x) const { return x ? true_text_ : "False"; }

 private:
  std::string true_text_;
};

// Row-major strides, in elements.
PSFLOW_DECL std::vector<std::size_t> strides_of(const Shape& shape) {
  std::vector<std::size_t> strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Flat offsets of the elements numpy shows (its _leading_trailing): along each axis longer
// than 2*edgeitems only the first and last edgeitems when summarising, everything otherwise.
PSFLOW_DECL std::vector<std::size_t> shown_offsets(const Shape& shape, bool summarise) {
  const auto strides = strides_of(shape);
  std::vector<std::size_t> offsets{0};
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    const std::size_t n = shape[axis], edge = PrintOptions::edgeitems;
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < n; ++i)
      if (!summarise || n <= 2 * edge || i < edge || i >= n - edge) indices.push_back(i);
    std::vector<std::size_t> next;
    next.reserve(offsets.size() * indices.size());
    for (std::size_t base : offsets)
      for (std::size_t i : indices) next.push_back(base + i * strides[axis]);
    offsets = std::move(next);
  }
  return offsets;
}

PSFLOW_DECL std::string_view rstrip(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// numpy's _formatArray: nested brackets, `separator` between items, rows wrapped before
// `linewidth` with continuation lines indented under the first item. `format(offset)` prints
// the element at a flat offset.
template <class Format>
class ArrayPrinter {
 public:
  ArrayPrinter(const Shape& shape, const Format& format, std::string_view separator, bool summarise)
      : shape_(shape),
        strides_(strides_of(shape)),
        format_(format),
        separator_(separator),
        summarise_(summarise) {}

  std::string print(const std::string& next_line_prefix, std::ptrdiff_t linewidth) const {
    return recurse(0, 0, next_line_prefix, linewidth);
  }

 private:
  std::string recurse(std::size_t axis, std::size_t offset, const std::string& hanging_indent,
                      std::ptrdiff_t curr_width) const {
    const std::size_t axes_left = shape_.size() - axis;
    if (axes_left == 0) return format_(offset);

    // Inner levels sit one column further right, behind their own '['.
    const std::string next_hanging_indent = hanging_indent + ' ';
    const std::ptrdiff_t next_width = curr_width - 1;
    const std::size_t len = shape_[axis], edge = PrintOptions::edgeitems;
    const bool show_summary = summarise_ && 2 * edge < len;
    const std::size_t leading = show_summary ? edge : 0;
    const std::size_t trailing = show_summary ? edge : len;
    auto item = [&](std::size_t i) {
      return recurse(axis + 1, offset + i * strides_[axis], next_hanging_indent, next_width);
    };

    std::string s;
    if (axes_left == 1) {
      // Leave room for the ',' or ']' that follows an item.
      const std::ptrdiff_t elem_width =
          curr_width - std::max<std::ptrdiff_t>(std::ssize(rstrip(separator_)), 1);
      std::string line = hanging_indent;
      for (std::size_t i = 0; i < leading; ++i) {
        extend_line(s, line, item(i), elem_width, hanging_indent);
        line += separator_;
      }
      if (show_summary) {
        extend_line(s, line, "...", elem_width, hanging_indent);
        line += separator_;
      }
      for (std::size_t i = trailing; i > 1; --i) {
        extend_line(s, line, item(len - i), elem_width, hanging_indent);
        line += separator_;
      }
      extend_line(s, line, item(len - 1), elem_width, hanging_indent);
      s += line;
    } else {
      // Higher axes are separated by one more blank line per level.
      const std::string line_sep =
          std::string(rstrip(separator_)) + std::string(axes_left - 1, '\n');
      for (std::size_t i = 0; i < leading; ++i) s += hanging_indent + item(i) + line_sep;
      if (show_summary) s += hanging_indent + "..." + line_sep;
      for (std::size_t i = trailing; i > 1; --i) s += hanging_indent + item(len - i) + line_sep;
      s += hanging_indent + item(len - 1);
    }
    return "[" + s.substr(hanging_indent.size()) + "]";
  }

  // numpy's _extendLine: wrap before `word` if it would cross `line_width`, unless the line
  // holds nothing but its indentation (wrapping would not help).
  static void extend_line(std::string& s, std::string& line, const std::string& word,
                          std::ptrdiff_t line_width, const std::string& next_line_prefix) {
    const bool needs_wrap = static_cast<std::ptrdiff_t>(line.size() + word.size()) > line_width &&
                            line.size() > next_line_prefix.size();
    if (needs_wrap) {
      s += rstrip(line);
      s += '\n';
      line = next_line_prefix;
    }
    line += word;
  }

  const Shape& shape_;
  std::vector<std::size_t> strides_;
  const Format& format_;
  std::string_view separator_;
  bool summarise_;
};

// numpy's array2string for a tensor with at least one element.
PSFLOW_DECL std::string array_to_string(const Tensor& t, std::string_view separator,
                                        const std::string& prefix, std::ptrdiff_t linewidth) {
  const bool summarise = t.size() > PrintOptions::threshold;
  return visit_any_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = t.data<T>();
    auto print = [&](const auto& element_format) {
      auto format = [&](std::size_t off) { return element_format(data[off]); };
      ArrayPrinter<decltype(format)> printer(t.shape(), format, separator, summarise);
      // All blanks: one for the opening bracket and one per prefix character. Built in one
      // piece, not as " " + string, which GCC 12 at -O3 flags with a false -Wrestrict.
      return printer.print(std::string(prefix.size() + 1, ' '), linewidth);
    };
    if constexpr (std::is_same_v<T, bool>) {
      return print(BoolFormat(t.rank() == 0));
    } else if constexpr (std::is_same_v<T, std::string>) {
      return print([](const std::string& x) { return bytes_repr(x); });  // unpadded, as numpy
    } else {
      // The formatter measures only the elements that will be shown, as numpy does.
      std::vector<T> corners;
      if (summarise)
        for (std::size_t off : shown_offsets(t.shape(), true)) corners.push_back(data[off]);
      const auto shown =
          summarise ? std::span<const T>(corners) : std::span<const T>(data, t.size());
      if constexpr (std::is_floating_point_v<T>)
        return print(FloatFormat<T>(shown));
      else
        return print(IntFormat<T>(shown));
    }
  });
}

// str() of a numpy scalar: full shortest precision, positional for 1e-4 <= |x| < 1e16 ("7.0",
// "0.4"), scientific otherwise ("1e-05", "1.5e+16").
template <class T>
std::string scalar_to_string(const T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x ? "True" : "False";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return bytes_repr(x);
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(x);
  } else {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    const std::string sign = std::signbit(x) ? "-" : "";
    const Decimal d = shortest_decimal(x);
    const double a = std::fabs(static_cast<double>(x));
    if (a == 0 || (a >= 1e-4 && a < 1e16)) {
      const Positional p = to_positional(d);
      return sign + p.int_part + "." + (p.frac_part.empty() ? "0" : p.frac_part);
    }
    std::string mantissa = d.digits.substr(0, 1);
    if (d.digits.size() > 1) mantissa += "." + d.digits.substr(1);
    return sign + mantissa + exponent_string(d.exponent, 2);
  }
}

// Python's repr of a shape tuple: "(2, 0)", "(0,)".
PSFLOW_DECL std::string shape_tuple(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

inline constexpr std::string_view empty_tensor_text = "<empty tensor>";

}  // namespace detail

PSFLOW_DECL std::string bytes_repr(std::string_view bytes) {
  const bool double_quotes =
      bytes.find('\'') != std::string_view::npos && bytes.find('"') == std::string_view::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == quote || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + quote;
}

PSFLOW_DECL std::string to_string(const Tensor& tensor) {
  if (tensor.empty()) return std::string(detail::empty_tensor_text);
  if (tensor.rank() == 0) {
    return visit_any_dtype(tensor.dtype(), [&](auto tag) {
      return detail::scalar_to_string(*tensor.data<typename decltype(tag)::type>());
    });
  }
  if (tensor.size() == 0) return "[]";
  return detail::array_to_string(tensor, " ", "", detail::PrintOptions::linewidth);
}

PSFLOW_DECL std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  return os << to_string(tensor);
}

PSFLOW_DECL std::string repr(const Tensor& tensor) {
  if (tensor.empty()) return std::string(detail::empty_tensor_text);
  // numpy leaves out the dtypes a literal implies (float64, int64, bool), unless empty.
  const DType dtype = tensor.dtype();
  const bool implied = dtype == DType::float64 || dtype == DType::int64 || dtype == DType::boolean;
  const bool skip_dtype = implied && tensor.size() > 0;
  const std::string prefix = "array(";
  const std::string suffix = skip_dtype ? ")" : ",";

  std::string body;
  if (tensor.size() > 0) {
    // The suffix must fit on the last line too.
    body = detail::array_to_string(
        tensor, ", ", prefix,
        detail::PrintOptions::linewidth - static_cast<std::ptrdiff_t>(suffix.size()));
  } else if (tensor.shape() == Shape{0}) {
    body = "[]";
  } else {
    body = "[], shape=" + detail::shape_tuple(tensor.shape());
  }
  std::string out = prefix + body + suffix;
  if (skip_dtype) return out;

  // The dtype goes on its own line when it would push the last line past the line width.
  // numpy holds bytes in an array of Python objects.
  const std::string_view shown_dtype = dtype == DType::string ? "object" : dtype_name(dtype);
  const std::string dtype_text = "dtype=" + std::string(shown_dtype) + ")";
  const auto newline = out.rfind('\n');
  const std::size_t last_line = out.size() - (newline == std::string::npos ? 0 : newline + 1);
  const bool own_line = static_cast<std::ptrdiff_t>(last_line + dtype_text.size() + 1) >
                        detail::PrintOptions::linewidth;
  return out + (own_line ? "\n" + std::string(prefix.size(), ' ') : " ") + dtype_text;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow
