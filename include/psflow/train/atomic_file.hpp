// Files that appear whole or not at all: a write goes to a temporary file in the target's
// directory, is fsync'ed and renamed over the target, then the directory is fsync'ed, so
// readers see the old file or the new one, never a partial one, and a crash or a failed write
// leaves at most a "<name>.tmp.<pid>.<n>" file beside it, never a bad "<name>". Failures are
// typed: NotFound (no such directory), FailedPrecondition (permissions, read-only, full disk;
// the caller can fix them and retry), Internal (anything else). What checkpoint files, the
// `checkpoint` state file and the dynamic tables' shard files are written with.
//
// Contract: blocking file I/O, no shared state; any thread.
#pragma once

#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <system_error>
#include <utility>
#endif

namespace psflow::train::detail {

// Writes `contents` to `path` atomically (temporary file, fsync, rename, directory fsync).
void write_file_atomically(const std::string& path, std::string_view contents);

// The directory `path` lies in: "." when it names none.
std::string parent_directory(const std::string& path);

// Makes the entries of directory `dir` (a rename into it) survive a crash.
void sync_directory(const std::string& dir);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

PSFLOW_DECL std::string errno_message(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Throws the typed error for a failed file operation: `what` says which and on what file.
[[noreturn]] inline void throw_io_error(int err, const std::string& what) {
  const std::string message = what + ": " + errno_message(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      throw NotFound(message);
    case EACCES:
    case EISDIR:
    case EPERM:
    case EROFS:
    case ENOSPC:
    case EDQUOT:
      throw FailedPrecondition(message + " (fix the directory, then save again)");
    default:
      throw Internal(message);
  }
}

PSFLOW_DECL std::string parent_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

PSFLOW_DECL void sync_directory(const std::string& dir) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) throw_io_error(errno, "cannot open directory '" + dir + "' to sync it");
  const int rc = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  if (rc != 0 && err != EINVAL)  // EINVAL: this file system cannot sync directories
    throw_io_error(err, "cannot sync directory '" + dir + "'");
}

// A file that appears at its final path only when commit() succeeds. Not thread-safe; one
// writer per object. The destructor removes the temporary file unless committed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), dir_(parent_directory(path_)) {
    static std::atomic<std::uint64_t> counter{0};
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      temp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0 && errno != EEXIST) {
        const int err = errno;
        if (err == ENOENT || err == ENOTDIR)
          throw NotFound("cannot write '" + path_ + "': directory '" + dir_ +
                         "' does not exist (create it first)");
        throw_io_error(err, "cannot create a temporary file next to '" + path_ + "'");
      }
    }
    if (fd_ < 0) throw Internal("cannot create a unique temporary file next to '" + path_ + "'");
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }

  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t written = ::write(fd_, p, n);
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_io_error(errno, "cannot write '" + path_ + "'");
      }
      p += written;
      n -= static_cast<std::size_t>(written);
    }
  }
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }

  // Makes the content durable, then atomically replaces the final path with it.
  void commit() {
    if (::fsync(fd_) != 0) throw_io_error(errno, "cannot flush '" + path_ + "' to disk");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw_io_error(errno, "cannot close '" + path_ + "'");
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      throw_io_error(errno, "cannot rename '" + temp_ + "' to '" + path_ + "'");
    committed_ = true;
    sync_directory(dir_);  // the rename itself must survive a crash
  }

 private:
  std::string path_;
  std::string dir_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

PSFLOW_DECL void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train::detail
