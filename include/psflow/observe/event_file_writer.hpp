// summary::FileWriter: TF1's tf.summary.FileWriter, writing TensorBoard event files.
//
// An event file is a TFRecord file (observe/tfrecord.hpp) of Event protocol buffers
// (TF's event.proto), written with ProtoWriter:
//   Event { double wall_time = 1; int64 step = 2;
//           oneof what { string file_version = 3; bytes graph_def = 4; Summary summary = 5; } }
// The file is named as TF names it, "<logdir>/events.out.tfevents.<unix seconds, 10 digits>.
// <hostname><suffix>" (when a file of that name exists already, e.g. a second writer in the same
// second, ".1", ".2", ... are appended: TensorBoard reads every file whose name holds
// "tfevents"), and starts with an Event whose file_version is "brain.Event:2".
//
// Unlike TF's writer, which queues events for a background thread and flushes every 120 s,
// writes are synchronous into the C library's buffer: an add_* call costs one small buffered
// write (a summary every few hundred steps), and flush() makes everything visible to a
// TensorBoard reading the file. Thread-safe: each call holds the writer's lock. I/O failures
// throw a typed psflow error naming the file; a call after close() throws FailedPrecondition.
//
// FileWriterCache::get(logdir) shares one writer per directory within a process, as TF's
// SummaryWriterCache does for the hooks that write summaries (SummarySaverHook and
// StepCounterHook write into one file).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/observe/graph_def_proto.hpp"
#include "psflow/observe/proto_writer.hpp"
#include "psflow/observe/summary.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/core/log.hpp"
#include "psflow/observe/tfrecord.hpp"
#endif

namespace psflow::summary {

// The file_version of the first Event of every event file.
inline constexpr std::string_view kEventFileVersion = "brain.Event:2";

class FileWriter {
 public:
  // Creates `logdir` (and its parents) when missing and a new event file in it. Throws
  // InvalidArgument for an empty logdir, FailedPrecondition/NotFound when it cannot create the
  // directory or the file.
  explicit FileWriter(const std::string& logdir, const std::string& filename_suffix = "");
  // TF1's FileWriter(logdir, graph): also writes `graph` (see add_graph).
  FileWriter(const std::string& logdir, const Graph& graph,
             const observe::DevicePlacement& placement = {});
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  // Closes the file; a failure there is logged to standard error, not thrown.
  ~FileWriter();

  // Writes an Event holding `summary` at `global_step`.
  void add_summary(const Summary& summary, std::int64_t global_step = 0);
  // Writes an Event holding `graph` as a GraphDef (observe/graph_def_proto.hpp: devices from
  // `placement` where it names the node, else the requested device).
  void add_graph(const Graph& graph, const observe::DevicePlacement& placement = {});
  // Makes everything written so far visible in the file.
  void flush();
  // Flushes and closes the file. Later add_* calls throw FailedPrecondition; close() again is a
  // no-op.
  void close();

  const std::string& logdir() const noexcept { return logdir_; }
  const std::string& path() const noexcept { return path_; }  // the event file

 private:
  // Frames and appends one Event: wall time now, `step`, and `what` (a field of Event's oneof,
  // already encoded).
  void write_event(std::int64_t step, const observe::ProtoWriter& what);
  [[noreturn]] void fail(const std::string& doing, int err) const;

  std::string logdir_;
  std::string path_;
  mutable std::mutex mutex_;
  std::FILE* file_ = nullptr;
};

// One FileWriter per directory, shared by whoever asks for it while any holder keeps it alive
// (TF's SummaryWriterCache). Thread-safe.
class FileWriterCache {
 public:
  static std::shared_ptr<FileWriter> get(const std::string& logdir);

 private:
  static std::mutex& mutex();
  static std::map<std::string, std::weak_ptr<FileWriter>>& writers();
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

PSFLOW_DECL std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

PSFLOW_DECL std::string event_file_name(std::int64_t unix_seconds, const std::string& host,
                                        const std::string& suffix) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(unix_seconds));
  return std::string("events.out.tfevents.") + seconds + "." + host + suffix;
}

}  // namespace detail

PSFLOW_DECL FileWriter::FileWriter(const std::string& logdir, const std::string& filename_suffix)
    : logdir_(logdir) {
  if (logdir_.empty())
    throw InvalidArgument("summary::FileWriter: empty logdir; name the directory to write to");
  std::error_code ec;
  std::filesystem::create_directories(logdir_, ec);
  if (ec || !std::filesystem::is_directory(logdir_))
    throw FailedPrecondition("summary::FileWriter: cannot create the directory '" + logdir_ + "'" +
                             (ec ? ": " + ec.message() : ": a file of that name exists") +
                             " (choose a writable directory)");
  const auto now = std::chrono::system_clock::now();
  const std::int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const std::string base =
      logdir_ + "/" + detail::event_file_name(seconds, detail::host_name(), filename_suffix);
  path_ = base;
  for (int i = 1; std::filesystem::exists(path_); ++i) path_ = base + "." + std::to_string(i);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) fail("create", errno);
  observe::ProtoWriter version;
  version.float64(1, static_cast<double>(seconds)).bytes(3, kEventFileVersion);
  const std::string record = observe::frame_tfrecord(version.str());
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) fail("write", errno);
  flush();
}

PSFLOW_DECL FileWriter::FileWriter(const std::string& logdir, const Graph& graph,
                                   const observe::DevicePlacement& placement)
    : FileWriter(logdir) {
  add_graph(graph, placement);
}

PSFLOW_DECL FileWriter::~FileWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    log_line(std::string("summary::FileWriter: ") + e.what());
  }
}

PSFLOW_DECL void FileWriter::fail(const std::string& doing, int err) const {
  const std::string message = "summary::FileWriter: cannot " + doing + " the event file '" + path_ +
                              "': " + std::strerror(err);
  if (err == ENOENT || err == ENOTDIR) throw NotFound(message);
  throw FailedPrecondition(message + " (check the directory's permissions and free space)");
}

PSFLOW_DECL void FileWriter::write_event(std::int64_t step, const observe::ProtoWriter& what) {
  observe::ProtoWriter event;
  event.float64(1, detail::wall_time_now()).int64(2, step);
  const std::string record = observe::frame_tfrecord(event.str() + what.str());
  std::lock_guard lock(mutex_);
  if (!file_)
    throw FailedPrecondition("summary::FileWriter: '" + path_ +
                             "' is closed; create a new FileWriter to write more");
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) fail("write", errno);
}

PSFLOW_DECL void FileWriter::add_summary(const Summary& summary, std::int64_t global_step) {
  write_event(global_step, observe::ProtoWriter().bytes(5, summary.serialize()));
}

PSFLOW_DECL void FileWriter::add_graph(const Graph& graph,
                                       const observe::DevicePlacement& placement) {
  write_event(0, observe::ProtoWriter().bytes(4, observe::serialize_graph_def(graph, placement)));
}

PSFLOW_DECL void FileWriter::flush() {
  std::lock_guard lock(mutex_);
  if (file_ && std::fflush(file_) != 0) fail("flush", errno);
}

PSFLOW_DECL void FileWriter::close() {
  std::lock_guard lock(mutex_);
  if (!file_) return;
  std::FILE* file = std::exchange(file_, nullptr);
  const bool flushed = std::fflush(file) == 0;
  const int err = errno;
  const bool closed = std::fclose(file) == 0;
  if (!flushed || !closed) fail("close", flushed ? errno : err);
}

PSFLOW_DECL std::shared_ptr<FileWriter> FileWriterCache::get(const std::string& logdir) {
  std::string key = std::filesystem::path(logdir).lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  std::lock_guard lock(mutex());
  if (auto writer = writers()[key].lock()) return writer;
  auto writer = std::make_shared<FileWriter>(logdir);
  writers()[key] = writer;
  return writer;
}

PSFLOW_DECL std::mutex& FileWriterCache::mutex() {
  static std::mutex m;
  return m;
}
PSFLOW_DECL std::map<std::string, std::weak_ptr<FileWriter>>& FileWriterCache::writers() {
  static std::map<std::string, std::weak_ptr<FileWriter>> w;
  return w;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::summary
