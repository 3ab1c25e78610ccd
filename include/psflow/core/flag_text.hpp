// What command-line flag parsers say (TaskFlags, Flags): the nearest known flag to a mistyped
// one, and the lines of --help. Pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace psflow::detail {

// The known flag closest to `name`, or "" when none is close: the same name with '-' for '_'
// (the commonest slip: --job-name), else the fewest single-character edits, at most a third of
// the name's length (at least 1).
inline std::string nearest_flag(std::string_view name, const std::vector<std::string>& known) {
  std::string underscored(name);
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  if (std::find(known.begin(), known.end(), underscored) != known.end()) return underscored;
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(1, underscored.size() / 3) + 1;
  for (const auto& candidate : known)
    if (const std::size_t d = distance(underscored, candidate); d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  return best;
}

// "unknown flag '--job-name' (did you mean --job_name?)"
inline std::string unknown_flag_text(std::string_view arg, std::string_view name,
                                     const std::vector<std::string>& known) {
  const std::string nearest = nearest_flag(name, known);
  return "unknown flag '" + std::string(arg) + "'" +
         (nearest.empty() ? "" : " (did you mean --" + nearest + "?)");
}

// One entry of --help: "  --name (default)  help", the help's further lines indented under
// its first; ends with a newline.
inline std::string help_entry(std::string_view head, std::string_view help) {
  constexpr std::size_t kColumn = 33;
  std::string out = "  " + std::string(head);
  out += out.size() < kColumn ? std::string(kColumn - out.size(), ' ')
                              : "\n" + std::string(kColumn, ' ');
  for (const char c : help) {
    out += c;
    if (c == '\n') out += std::string(kColumn, ' ');
  }
  return out + "\n";
}

// Whether `arg` is flag `name`: "--name", "--name=...", "-name" or "-name=...".
inline bool is_flag_named(std::string_view arg, std::string_view name) {
  for (const std::string_view prefix : {"--", "-"})
    if (arg.substr(0, prefix.size()) == prefix) {
      const std::string_view rest = arg.substr(prefix.size());
      if (rest.substr(0, name.size()) == name &&
          (rest.size() == name.size() || rest[name.size()] == '='))
        return true;
    }
  return false;
}

// Whether `arg` is "--help", "-help" or "-h".
inline bool is_help_flag(std::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h";
}

}  // namespace psflow::detail
