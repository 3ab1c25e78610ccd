// What command-line flag parsers say (TaskFlags, Flags): the nearest known flag to a mistyped
// one, and the lines of --help. Pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
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
  // Appended piece by piece: GCC 12 at -O3 flags "  " + std::string with a false -Wrestrict.
  std::string out = "  ";
  out += head;
  if (out.size() < kColumn) {
    out.append(kColumn - out.size(), ' ');
  } else {  // a long head: the help starts on the next line
    out += '\n';
    out.append(kColumn, ' ');
  }
  for (const char c : help) {
    out += c;
    if (c == '\n') out.append(kColumn, ' ');
  }
  return out + "\n";
}

// A command-line argument read as a flag: "--name=value", "--name", "-name=value" or "-name".
struct FlagArgument {
  std::size_t dashes = 0;            // 2, 1, or 0 when `arg` does not start with '-'
  std::string name;                  // empty when dashes is 0
  std::optional<std::string> value;  // what follows the first '=', if there is one
};

inline FlagArgument split_flag_argument(std::string_view arg) {
  FlagArgument out;
  out.dashes = arg.starts_with("--") ? 2 : arg.starts_with("-") ? 1 : 0;
  if (out.dashes == 0) return out;
  const std::string_view body = arg.substr(out.dashes);
  const std::size_t eq = body.find('=');
  out.name = std::string(body.substr(0, eq));
  if (eq != std::string_view::npos) out.value = std::string(body.substr(eq + 1));
  return out;
}

// Whether `arg` is flag `name`: "--name", "--name=...", "-name" or "-name=...".
inline bool is_flag_named(std::string_view arg, std::string_view name) {
  const FlagArgument flag = split_flag_argument(arg);
  return flag.dashes > 0 && flag.name == name;
}

// Whether `arg`, after a flag without '=', is that flag's value rather than the next flag:
// "-1" and "-.5" are values, "-x" and "--x" are flags.
inline bool looks_like_value(std::string_view arg) {
  return arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.';
}

// Whether `arg` is "--help", "-help" or "-h".
inline bool is_help_flag(std::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h";
}

}  // namespace psflow::detail
