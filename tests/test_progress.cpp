// observe/progress.hpp: the progress line's text (rate, ETA, loss), its live mode (one line
// redrawn in place, rate-limited) and its plain mode (a line now and then), with an injected
// clock and a string stream.
#include <catch2/catch.hpp>
#include <chrono>
#include <iostream>
#include <limits>
#include <psflow/core/log.hpp>
#include <psflow/observe/progress.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace progress_test {

using psflow::observe::ProgressLine;
using psflow::observe::ProgressOptions;
using Clock = ProgressLine::Clock;

// A clock the test moves by hand.
struct FakeClock {
  Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
  void advance(double seconds) {
    now += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
};

ProgressOptions options_with(FakeClock& clock, bool live) {
  ProgressOptions options;
  options.live = live;
  options.now = [&clock] { return clock.now; };
  return options;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace progress_test

using namespace progress_test;

TEST_CASE("durations read as seconds, minutes, hours and days") {
  using psflow::observe::format_duration;
  CHECK(format_duration(0) == "0.0s");
  CHECK(format_duration(4.24) == "4.2s");
  CHECK(format_duration(44.4) == "44s");
  CHECK(format_duration(164) == "2m44s");
  CHECK(format_duration(3599.6) == "1h00m");
  CHECK(format_duration(3720) == "1h02m");
  CHECK(format_duration(3 * 86400 + 4 * 3600 + 100) == "3d04h");
  CHECK(format_duration(1e9) == ">99d");
  CHECK(format_duration(-1) == "--");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "--");
}

TEST_CASE("rates keep three significant digits") {
  using psflow::observe::format_rate;
  CHECK(format_rate(0.04166) == "0.0417");
  CHECK(format_rate(4.166) == "4.17");
  CHECK(format_rate(41.34) == "41.3");
  CHECK(format_rate(416.6) == "417");
  CHECK(format_rate(-1) == "--");
}

TEST_CASE("the line shows the count, the rate over the window, the ETA and the loss") {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(8000, options_with(clock, false), out);
  CHECK(progress.text() == "global step ?/8000");
  progress.update(0);
  CHECK(progress.text() == "global step 0/8000 (0%)  -- steps/s  ETA --");
  clock.advance(0.2);
  progress.update(10);  // too short a time to say a rate
  CHECK(progress.text() == "global step 10/8000 (0%)  -- steps/s  ETA --");
  for (int i = 1; i <= 100; ++i) {  // 10 steps every 0.25 s: 40 steps/s
    clock.advance(0.25);
    progress.update(10 + 10 * i, 0.41234);
  }
  // 1010 of 8000: 6990 to go at 40/s is 174.75 s.
  CHECK(progress.text() == "global step 1010/8000 (12%)  40.0 steps/s  ETA 2m55s  loss 0.4123");

  // The rate follows the last window (10 s): 10 steps every 0.1 s is 100/s once the old
  // samples have left it.
  for (int i = 1; i <= 120; ++i) {
    clock.advance(0.1);
    progress.update(1010 + 10 * i);
  }
  CHECK(progress.text() == "global step 2210/8000 (27%)  100 steps/s  ETA 58s  loss 0.4123");
}

TEST_CASE("past the total the ETA is zero, and the final line gives the average rate") {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(100, options_with(clock, false), out);
  progress.update(20);  // a restored run starts at 20
  clock.advance(2);
  progress.update(101, 2e-5);
  CHECK(progress.text() == "global step 101/100 (100%)  40.5 steps/s  ETA 0s  loss 2.000e-05");
  clock.advance(2);
  progress.finish();
  CHECK(out.str() == "global step 101/100 (100%)  20.2 steps/s  done in 4.0s  loss 2.000e-05\n");
  clock.advance(5);
  progress.update(200);  // ignored after finish()
  progress.finish();
  CHECK(progress.text() ==
        "global step 101/100 (100%)  20.2 steps/s  done in 4.0s  loss 2.000e-05");
  CHECK(count(out.str(), "\n") == 1);
}

TEST_CASE("a count that goes back (a restore) restarts the rate") {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(1000, options_with(clock, false), out);
  progress.update(0);
  clock.advance(1);
  progress.update(500);
  CHECK(progress.text() == "global step 500/1000 (50%)  500 steps/s  ETA 1.0s");
  clock.advance(1);
  progress.update(300);
  CHECK(progress.text() == "global step 300/1000 (30%)  -- steps/s  ETA --");
  clock.advance(1);
  progress.update(310);
  CHECK(progress.text() == "global step 310/1000 (31%)  10.0 steps/s  ETA 1m09s");
}

TEST_CASE("live mode redraws one line in place at most 4 times a second") {
  FakeClock clock;
  std::ostringstream out;
  ProgressOptions options = options_with(clock, true);
  options.prefix = "[trainer] ";
  ProgressLine progress(1000, options, out);
  CHECK(progress.live());
  progress.update(0);  // the first update draws at once
  CHECK(out.str() == "\r[trainer] global step 0/1000 (0%)  -- steps/s  ETA --\033[K");
  for (int i = 1; i <= 100; ++i) {  // 100 updates over 1 s: 4 redraws
    clock.advance(0.01);
    progress.update(i);
  }
  CHECK(count(out.str(), "\r") == 1 + 4);
  CHECK(count(out.str(), "\n") == 0);
  const std::string last = out.str().substr(out.str().rfind('\r'));
  CHECK(last == "\r[trainer] global step 100/1000 (10%)  100 steps/s  ETA 9.0s\033[K");

  // The owner's log line goes above the live line, which is drawn again below it.
  out.str("");
  progress.print_above("[trainer] global step 100: loss 0.5");
  CHECK(out.str() ==
        "\r\033[K[trainer] global step 100: loss 0.5\n"
        "\r[trainer] global step 100/1000 (10%)  100 steps/s  ETA 9.0s\033[K");

  out.str("");
  clock.advance(1);
  progress.update(1000, 0.25);
  progress.finish();
  CHECK(out.str() ==
        "\r[trainer] global step 1000/1000 (100%)  500 steps/s  ETA 0s  loss 0.2500\033[K"
        "\r[trainer] global step 1000/1000 (100%)  500 steps/s  done in 2.0s  loss 0.2500\033[K\n");
}

TEST_CASE("a live line left unfinished is ended with a newline") {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressLine progress(10, options_with(clock, true), out);
    progress.update(3);
  }
  CHECK(out.str() == "\rglobal step 3/10 (30%)  -- steps/s  ETA --\033[K\n");
}

TEST_CASE("library log lines go above a live line on standard error, never into it") {
  FakeClock clock;
  std::ostringstream captured;
  std::streambuf* saved = std::cerr.rdbuf(captured.rdbuf());
  {
    ProgressLine progress(10, options_with(clock, true), std::cerr);
    progress.update(3);
    psflow::log_line("saved checkpoint /tmp/m/model.ckpt-3");
    progress.finish();
  }
  std::cerr.rdbuf(saved);
  const std::string text = captured.str();
  // The live line is cleared, the log line printed whole, and the live line drawn again.
  CHECK_THAT(text, Catch::Contains("ETA --\033[K\r\033[K[psflow") &&
                       Catch::Contains("saved checkpoint /tmp/m/model.ckpt-3\n\rglobal step 3/10"));
  // Once finished, log lines no longer go through the progress line.
  CHECK(count(text, "saved checkpoint") == 1);
}

TEST_CASE("plain mode prints a line every N seconds or every N steps") {
  FakeClock clock;
  std::ostringstream out;
  ProgressOptions options = options_with(clock, false);
  options.plain_every_s = 10;
  ProgressLine progress(1000, options, out);
  CHECK_FALSE(progress.live());
  for (int i = 0; i <= 250; ++i) {  // 10 steps/s for 25 s: lines at 10 s and 20 s
    progress.update(i);
    clock.advance(0.1);
  }
  CHECK(out.str() ==
        "global step 100/1000 (10%)  10.0 steps/s  ETA 1m30s\n"
        "global step 200/1000 (20%)  10.0 steps/s  ETA 1m20s\n");
  CHECK(out.str().find('\r') == std::string::npos);
  CHECK(out.str().find('\033') == std::string::npos);

  progress.print_above("a log line");
  CHECK(out.str().ends_with("ETA 1m20s\na log line\n"));

  std::ostringstream by_steps;
  ProgressOptions step_options = options_with(clock, false);
  step_options.plain_every_s = 0;
  step_options.plain_every_steps = 300;
  ProgressLine every_300(1000, step_options, by_steps);
  for (int i = 0; i <= 1000; i += 7) {
    every_300.update(i);
    clock.advance(0.1);
  }
  CHECK(count(by_steps.str(), "\n") == 3);  // past 300, 600 and 900
  CHECK(by_steps.str().starts_with("global step 301/1000 (30%)"));
}

TEST_CASE("labels and units are the caller's") {
  FakeClock clock;
  std::ostringstream out;
  ProgressOptions options = options_with(clock, false);
  options.label = "batch";
  options.unit = "batches";
  ProgressLine progress(50, options, out);
  progress.update(5);
  clock.advance(1);
  progress.update(10);
  CHECK(progress.text() == "batch 10/50 (20%)  5.00 batches/s  ETA 8.0s");
}

TEST_CASE("bad totals and intervals are InvalidArgument") {
  CHECK_THROWS_AS(ProgressLine(0), psflow::InvalidArgument);
  ProgressOptions options;
  options.rate_window_s = 0;
  CHECK_THROWS_AS(ProgressLine(10, options), psflow::InvalidArgument);
  options = {};
  options.plain_every_s = -1;
  CHECK_THROWS_AS(ProgressLine(10, options), psflow::InvalidArgument);
}

TEST_CASE("a stream that is not the terminal's is plain unless told") {
  std::ostringstream out;
  ProgressLine progress(10, {}, out);
  CHECK_FALSE(progress.live());
}

TEST_CASE("updates from several threads keep the line whole") {
  std::ostringstream out;
  ProgressOptions options;
  options.live = false;
  options.plain_every_steps = 100;
  options.plain_every_s = 0;
  ProgressLine progress(4000, options, out);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&progress, t] {
      for (int i = 0; i < 1000; ++i) progress.update(t * 1000 + i);
    });
  for (auto& thread : threads) thread.join();
  progress.finish();
  std::istringstream lines(out.str());
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) CHECK(line.starts_with("global step "));
  CHECK(n >= 1);
}
