// Progress of long work for the person watching it, one line:
//   global step 1200/8000 (15%)  41.3 steps/s  ETA 2m44s  loss 0.4123
// On a terminal it redraws one live line in place (at most a few times a second); when the
// output goes to a file or a pipe it prints a plain line now and then instead, so a log stays
// readable. Updated from the loop that does the work: no thread of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "psflow/core/error.hpp"
#include "psflow/core/log.hpp"
#endif

namespace psflow::observe {

struct ProgressOptions {
  std::string label = "global step";  // "<label> 1200/8000"
  std::string unit = "steps";         // "41.3 <unit>/s"
  std::string prefix;                 // written before every line, e.g. "[trainer] "
  // true: redraw one live line; false: plain lines. nullopt: live when the stream is std::cerr,
  // std::clog or std::cout and that file descriptor is a terminal (and TERM is not "dumb").
  std::optional<bool> live;
  double redraw_interval_s = 0.25;     // live: at most one redraw per this many seconds
  double plain_every_s = 30;           // plain: a line every this many seconds (0: not by time)
  std::int64_t plain_every_steps = 0;  // plain: also a line every this many steps (0: not by steps)
  double rate_window_s = 10;           // the rate is measured over about the last this many seconds
  // The clock (steady_clock::now when empty); tests inject their own.
  std::function<std::chrono::steady_clock::time_point()> now;
};

// One progress line toward `total`. Contract:
//  - update(current, loss) after each unit of work; cheap when nothing is due (one clock read).
//  - print_above(line): the owner's own log lines while a live line is shown: the live line is
//    cleared, `line` printed, the live line drawn again below it. (Lines that others write to
//    the same stream meanwhile land after the live line's text; the next redraw starts below.)
//  - finish(): the final line ("done in ..." with the average rate) and, live, the newline.
//    Idempotent; later update() calls are ignored. The destructor only ends an unfinished live
//    line with a newline, so that whatever follows (an error) starts on a line of its own.
//  - Thread-safe: every member locks one mutex. The stream must outlive the object; it is only
//    written from inside these calls.
// Not copyable or movable (hold it in a unique_ptr to pass it around).
class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;

  // total > 0, the options' intervals >= 0 and the window > 0, or InvalidArgument.
  explicit ProgressLine(std::int64_t total, ProgressOptions options = {},
                        std::ostream& out = std::cerr);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(std::int64_t current, std::optional<double> loss = std::nullopt);
  void print_above(std::string_view line);
  void finish();

  std::string text() const;  // what the line says now, without the prefix
  bool live() const noexcept { return live_; }
  std::int64_t total() const noexcept { return total_; }

 private:
  struct Sample {
    Clock::time_point when;
    std::int64_t step;
  };
  Clock::time_point now() const { return options_.now ? options_.now() : Clock::now(); }
  std::optional<double> rate_locked() const;
  std::string text_locked(bool final_line, Clock::time_point now) const;
  void draw_locked(Clock::time_point now);

  const std::int64_t total_;
  const ProgressOptions options_;
  std::ostream& out_;
  const bool live_;

  mutable std::mutex mutex_;
  bool started_ = false, drawn_ = false, finished_ = false;
  Clock::time_point first_time_{}, last_time_{}, last_output_{}, finish_time_{};
  std::int64_t first_step_ = 0, current_ = 0, last_output_step_ = 0;
  std::optional<double> loss_;
  std::deque<Sample> samples_;  // spaced by >= window/32; front: about one window back
};

// "4.2s", "44s", "2m44s", "1h02m", "3d04h", ">99d"; "--" for a negative or not finite value.
std::string format_duration(double seconds);
// 3 significant digits, fewer decimals as it grows: "0.0417", "4.17", "41.7", "417".
std::string format_rate(double per_second);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL bool stream_is_terminal(const std::ostream& out) {
  int fd = -1;
  if (&out == &std::cerr || &out == &std::clog)
    fd = STDERR_FILENO;
  else if (&out == &std::cout)
    fd = STDOUT_FILENO;
  if (fd < 0 || ::isatty(fd) == 0) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::string_view(term) == "dumb");
}

PSFLOW_DECL std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace detail

PSFLOW_DECL std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  if (seconds < 9.95) return detail::printf_string("%.1fs", seconds);
  if (seconds >= 100.0 * 86400) return ">99d";
  const auto s = static_cast<long long>(std::llround(seconds));
  char text[32];
  if (s < 60)
    std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  else
    std::snprintf(text, sizeof text, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
  return text;
}

PSFLOW_DECL std::string format_rate(double per_second) {
  if (!std::isfinite(per_second) || per_second < 0) return "--";
  if (per_second < 1) return detail::printf_string("%.3g", per_second);
  if (per_second < 9.995) return detail::printf_string("%.2f", per_second);
  if (per_second < 99.95) return detail::printf_string("%.1f", per_second);
  return detail::printf_string("%.0f", per_second);
}

PSFLOW_DECL ProgressLine::ProgressLine(std::int64_t total, ProgressOptions options,
                                       std::ostream& out)
    : total_(total),
      options_(std::move(options)),
      out_(out),
      live_(options_.live.value_or(detail::stream_is_terminal(out))) {
  if (total_ <= 0)
    throw InvalidArgument("ProgressLine: total " + std::to_string(total_) +
                          " must be positive (the count the work goes to)");
  if (!(options_.redraw_interval_s >= 0) || !(options_.plain_every_s >= 0) ||
      options_.plain_every_steps < 0 || !(options_.rate_window_s > 0))
    throw InvalidArgument(
        "ProgressLine: redraw_interval_s, plain_every_s and plain_every_steps must be >= 0 and "
        "rate_window_s > 0");
  // Library log lines (psflow::log_line) then go above the live line instead of into it.
  if (live_ && (&out_ == &std::cerr || &out_ == &std::clog))
    psflow::detail::set_log_sink([this](std::string_view line) { print_above(line); }, this);
}

PSFLOW_DECL ProgressLine::~ProgressLine() {
  psflow::detail::clear_log_sink(
      this);  // before taking mutex_: the sink is called under the log's lock
  try {
    std::lock_guard lock(mutex_);
    if (live_ && drawn_ && !finished_) out_ << '\n' << std::flush;
  } catch (...) {  // a destructor does not throw; the line just stays open
  }
}

PSFLOW_DECL void ProgressLine::update(std::int64_t current, std::optional<double> loss) {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  const Clock::time_point t = now();
  if (loss) loss_ = loss;
  if (!started_ || current < current_) {  // the first update, or the count went back (a restore)
    samples_.clear();
    if (!started_) {
      first_time_ = last_output_ = t;
      first_step_ = last_output_step_ = current;
    }
    started_ = true;
  }
  current_ = current;
  last_time_ = t;
  const auto spacing = std::chrono::duration<double>(options_.rate_window_s / 32);
  if (samples_.empty() || t - samples_.back().when >= spacing) samples_.push_back({t, current});
  const auto window = std::chrono::duration<double>(options_.rate_window_s);
  while (samples_.size() > 1 && t - samples_[1].when >= window) samples_.pop_front();

  if (live_) {
    if (!drawn_ ||
        std::chrono::duration<double>(t - last_output_).count() >= options_.redraw_interval_s)
      draw_locked(t);
    return;
  }
  const bool by_time =
      options_.plain_every_s > 0 &&
      std::chrono::duration<double>(t - last_output_).count() >= options_.plain_every_s;
  const std::int64_t every = options_.plain_every_steps;
  const bool by_steps = every > 0 && current / every > last_output_step_ / every;
  if (by_time || by_steps) {
    out_ << options_.prefix << text_locked(false, t) << '\n' << std::flush;
    last_output_ = t;
    last_output_step_ = current;
  }
}

PSFLOW_DECL void ProgressLine::print_above(std::string_view line) {
  std::lock_guard lock(mutex_);
  if (live_ && drawn_ && !finished_) {
    out_ << "\r\033[K" << line << '\n';
    draw_locked(last_output_);
  } else {
    out_ << line << '\n' << std::flush;
  }
}

PSFLOW_DECL void ProgressLine::finish() {
  psflow::detail::clear_log_sink(this);  // before taking mutex_ (see the destructor)
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (!started_) {  // nothing was ever shown or measured
    if (live_ && drawn_) out_ << '\n' << std::flush;
    return;
  }
  finish_time_ = now();
  const std::string line = text_locked(true, finish_time_);
  if (live_)
    out_ << '\r' << options_.prefix << line << "\033[K\n" << std::flush;
  else
    out_ << options_.prefix << line << '\n' << std::flush;
}

PSFLOW_DECL std::string ProgressLine::text() const {
  std::lock_guard lock(mutex_);
  return text_locked(finished_, finished_ ? finish_time_ : now());
}

PSFLOW_DECL std::optional<double> ProgressLine::rate_locked() const {
  if (samples_.empty()) return std::nullopt;
  const Sample& from = samples_.front();
  const double seconds = std::chrono::duration<double>(last_time_ - from.when).count();
  // Under half a second (or a tenth of the window) is too little to say; no progress neither.
  if (seconds < std::min(0.5, options_.rate_window_s / 10) || current_ <= from.step)
    return std::nullopt;
  return static_cast<double>(current_ - from.step) / seconds;
}

PSFLOW_DECL std::string ProgressLine::text_locked(bool final_line, Clock::time_point now) const {
  std::string text = options_.label + " ";
  if (!started_) return text + "?/" + std::to_string(total_);
  const long long percent = std::clamp<long long>(current_ * 100 / total_, 0, 100);
  text += std::to_string(current_) + "/" + std::to_string(total_) + " (" + std::to_string(percent) +
          "%)  ";
  if (final_line) {
    const double seconds = std::chrono::duration<double>(now - first_time_).count();
    const std::optional<double> rate =
        seconds > 0 && current_ > first_step_
            ? std::optional<double>(static_cast<double>(current_ - first_step_) / seconds)
            : std::nullopt;
    text += (rate ? format_rate(*rate) : "--") + " " + options_.unit + "/s  done in " +
            format_duration(seconds);
  } else {
    const std::optional<double> rate = rate_locked();
    text += (rate ? format_rate(*rate) : "--") + " " + options_.unit + "/s  ETA ";
    if (current_ >= total_)
      text += "0s";
    else
      text += rate ? format_duration(static_cast<double>(total_ - current_) / *rate) : "--";
  }
  if (loss_) {
    const double l = *loss_;
    const bool fixed = l == 0 || (std::fabs(l) >= 1e-3 && std::fabs(l) < 1e5);
    text += "  loss " + detail::printf_string(fixed ? "%.4f" : "%.3e", l);
  }
  return text;
}

PSFLOW_DECL void ProgressLine::draw_locked(Clock::time_point now) {
  out_ << '\r' << options_.prefix << text_locked(false, now) << "\033[K" << std::flush;
  drawn_ = true;
  last_output_ = now;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
