// parse_number: one number from text, as TF's safe_strto* functions read it (StringToNumber,
// decode_csv): blanks around it allowed, a leading '+' too, and nothing else; "inf" and "nan"
// for floats. nullopt when the text is not one number of T in range.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace psflow {

template <class T>
std::optional<T> parse_number(std::string_view text) {
  auto blank = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace psflow
