// What the multi-process tests of the trainer example share: the flags of a short run, and
// reading the trainer's logs (the chief's "global step N: loss ..." lines, its test accuracy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace psflow::testing {

inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// "a,b,c": a --ps_hosts / --worker_hosts value.
inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// Short runs: small batches, frequent logs and checkpoints, test-sized deadlines.
inline std::vector<std::string> short_run(int train_steps, std::vector<std::string> extra = {},
                                          int connect_timeout_s = 5) {
  std::vector<std::string> flags{"--train_steps=" + std::to_string(train_steps),
                                 "--batch_size=32",
                                 "--log_every_steps=50",
                                 "--save_checkpoint_steps=100",
                                 "--connect_timeout_s=" + std::to_string(connect_timeout_s),
                                 "--recovery_deadline_s=60",
                                 "--orphan_timeout_s=30"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// The largest number `line`'s first group matched in `log`; -1 when none did.
inline std::int64_t largest_match(const std::string& log, const std::regex& line) {
  std::int64_t largest = -1;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it)
    largest = std::max<std::int64_t>(largest, std::stoll((*it)[1]));
  return largest;
}

// The largest N in the lines "global step N: loss ..." the chief logged so far; -1 when none.
inline std::int64_t last_logged_step(const std::string& log) {
  static const std::regex line(R"(global step (\d+): loss)");
  return largest_match(log, line);
}

// The "test accuracy: 0.xxxx" the chief printed at the end, if it did.
inline std::optional<double> test_accuracy(const std::string& out) {
  static const std::regex line(R"(test accuracy: (\d\.\d{4}))");
  std::smatch m;
  if (!std::regex_search(out, m, line)) return std::nullopt;
  return std::stod(m[1]);
}

}  // namespace psflow::testing
