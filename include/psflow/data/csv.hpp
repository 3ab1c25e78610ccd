// decode_csv: TF's tf.decode_csv on a string tensor of CSV records, with TF's
// rules: fields are split at field_delim; with use_quote_delim a field may be
// quoted ("a,b"), a quote inside written twice (""); an empty field, or one
// equal to na_value, takes its column's default; a column whose default has no
// element is required. The result is one tensor per column, of the column
// default's dtype and the records' shape.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <type_traits>

#include "psflow/core/parse_number.hpp"
#include "psflow/core/tensor_format.hpp"
#endif

namespace psflow::data {

// `record_defaults[i]` gives column i's dtype (float32, float64, int32, int64
// or string) and its default: a scalar or a one-element vector, or an empty
// vector for a required column. InvalidArgument names the record, the column
// and what is wrong with it.
std::vector<Tensor> decode_csv(const Tensor& records, const std::vector<Tensor>& record_defaults,
                               char field_delim = ',', bool use_quote_delim = true,
                               std::string_view na_value = "");

namespace detail {
// The fields of one record; InvalidArgument (naming `where`) for a malformed
// quote.
std::vector<std::string> split_csv_record(std::string_view record, char field_delim,
                                          bool use_quote_delim, const std::string& where);
}  // namespace detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

PSFLOW_DECL std::vector<std::string> split_csv_record(std::string_view record, char field_delim,
                                                      bool use_quote_delim,
                                                      const std::string& where) {
  std::vector<std::string> fields;
  std::size_t i = 0;
  for (;;) {
    std::string field;
    if (use_quote_delim && i < record.size() && record[i] == '"') {
      ++i;  // a quoted field: up to the closing quote, "" inside is one quote
      for (;;) {
        if (i >= record.size())
          throw InvalidArgument(where + ": a quoted field has no closing quote");
        if (record[i] == '"') {
          if (i + 1 < record.size() && record[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += record[i++];
      }
      if (i < record.size() && record[i] != field_delim)
        throw InvalidArgument(where +
                              ": a quoted field must be followed by the delimiter or the "
                              "end of the record, found " +
                              bytes_repr(record.substr(i, 1)));
    } else {
      const std::size_t end = std::min(record.find(field_delim, i), record.size());
      field.assign(record.substr(i, end - i));
      if (use_quote_delim && field.find('"') != std::string::npos)
        throw InvalidArgument(where + ": an unquoted field holds a quote: " + bytes_repr(field));
      i = end;
    }
    fields.push_back(std::move(field));
    if (i >= record.size()) return fields;
    ++i;  // past the delimiter; a delimiter at the very end leaves one empty
          // field
    if (i == record.size()) {
      fields.emplace_back();
      return fields;
    }
  }
}

}  // namespace detail

PSFLOW_DECL std::vector<Tensor> decode_csv(const Tensor& records,
                                           const std::vector<Tensor>& record_defaults,
                                           char field_delim, bool use_quote_delim,
                                           std::string_view na_value) {
  if (records.dtype() != DType::string)
    throw InvalidArgument("decode_csv: records must be strings, got " + records.summary());
  const std::size_t columns = record_defaults.size();
  for (std::size_t c = 0; c < columns; ++c) {
    const Tensor& d = record_defaults[c];
    if (d.empty() || d.rank() > 1 || d.size() > 1 || d.dtype() == DType::boolean)
      throw InvalidArgument("decode_csv: the default of column " + std::to_string(c) + " is " +
                            d.summary() +
                            "; a default is a scalar or a vector of at most one element, of "
                            "float32, float64, int32, int64 or string");
  }
  std::vector<Tensor> out;
  for (const Tensor& d : record_defaults) out.push_back(Tensor(d.dtype(), records.shape()));
  const auto lines = records.values<std::string>();
  for (std::size_t r = 0; r < lines.size(); ++r) {
    const std::string where = "decode_csv: record " + std::to_string(r);
    const auto fields = detail::split_csv_record(lines[r], field_delim, use_quote_delim, where);
    if (fields.size() != columns)
      throw InvalidArgument(where + " has " + std::to_string(fields.size()) + " fields, expected " +
                            std::to_string(columns) + ": " + bytes_repr(lines[r]));
    for (std::size_t c = 0; c < columns; ++c) {
      const Tensor& fallback = record_defaults[c];
      const std::string& field = fields[c];
      const bool missing = field.empty() || (!na_value.empty() && field == na_value);
      if (missing && fallback.size() == 0)
        throw InvalidArgument(where + ", column " + std::to_string(c) +
                              ": the field is empty and the column has no default (it is "
                              "required)");
      visit_any_dtype(fallback.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        T& slot = out[c].data<T>()[r];
        if (missing) {
          slot = *fallback.data<T>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          slot = field;
        } else if constexpr (!std::is_same_v<T, bool>) {
          const auto v = parse_number<T>(field);
          if (!v)
            throw InvalidArgument(where + ", column " + std::to_string(c) + ": " +
                                  bytes_repr(field) + " is not a valid " +
                                  std::string(dtype_name(fallback.dtype())));
          slot = *v;
        }
      });
    }
  }
  return out;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
