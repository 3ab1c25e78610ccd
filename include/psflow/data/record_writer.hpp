// Writing a dataset's files: TFRecordWriter frames records
// (observe/tfrecord.hpp) into a file, compressed with zlib as "ZLIB" or "GZIP"
// if asked, as TF's tf.io.TFRecordWriter does, so that TFRecordDataset (and TF)
// read them back. close() reports a failed write (a full disk); the destructor
// closes without throwing.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/data/compression.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "psflow/observe/tfrecord.hpp"
#endif

namespace psflow::data {

class TFRecordWriter {
 public:
  // compression: "" (none), "ZLIB" or "GZIP"; anything else is InvalidArgument.
  // The file is created or truncated.
  TFRecordWriter(std::string path, std::string_view compression = "");
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;
  ~TFRecordWriter();

  void write(std::string_view record);
  // Finishes the compressed stream and closes the file; throws Internal when a
  // write failed.
  void close();

 private:
  void put(const void* data, std::size_t n, int flush);

  std::string path_;
  std::FILE* file_ = nullptr;
  struct Deflater;
  std::unique_ptr<Deflater> deflater_;  // null without compression
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

struct TFRecordWriter::Deflater {
  z_stream stream{};
  std::vector<unsigned char> output = std::vector<unsigned char>(256 * 1024);
  ~Deflater() { deflateEnd(&stream); }
};

PSFLOW_DECL TFRecordWriter::TFRecordWriter(std::string path, std::string_view compression)
    : path_(std::move(path)) {
  const int window_bits = detail::zlib_window_bits(compression, path_);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw NotFound("cannot create " + path_ + ": " + std::strerror(errno));
  if (window_bits) {
    deflater_ = std::make_unique<Deflater>();
    if (deflateInit2(&deflater_->stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      std::fclose(file_);
      file_ = nullptr;
      throw ResourceExhausted("cannot start compressing " + path_);
    }
  }
}

PSFLOW_DECL TFRecordWriter::~TFRecordWriter() {
  try {
    close();
  } catch (const Error&) {  // close() reports it to a caller who asks
  }
}

PSFLOW_DECL void TFRecordWriter::put(const void* data, std::size_t n, int flush) {
  auto fail = [&] { return Internal("writing " + path_ + " failed: " + std::strerror(errno)); };
  if (!deflater_) {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) throw fail();
    return;
  }
  z_stream& z = deflater_->stream;
  z.next_in = static_cast<Bytef*>(const_cast<void*>(data));
  z.avail_in = static_cast<uInt>(n);
  int status = Z_OK;
  do {  // until the input is taken (and, when finishing, the stream ended)
    z.next_out = deflater_->output.data();
    z.avail_out = static_cast<uInt>(deflater_->output.size());
    status = deflate(&z, flush);
    const std::size_t produced = deflater_->output.size() - z.avail_out;
    if (produced > 0 && std::fwrite(deflater_->output.data(), 1, produced, file_) != produced)
      throw fail();
  } while (z.avail_out == 0 || (flush == Z_FINISH && status != Z_STREAM_END));
}

PSFLOW_DECL void TFRecordWriter::write(std::string_view record) {
  if (!file_) throw FailedPrecondition("TFRecordWriter for " + path_ + " is closed");
  const std::string framed = observe::frame_tfrecord(record);
  put(framed.data(), framed.size(), Z_NO_FLUSH);
}

PSFLOW_DECL void TFRecordWriter::close() {
  if (!file_) return;
  std::FILE* file = file_;
  bool failed = false;
  try {
    if (deflater_) put(nullptr, 0, Z_FINISH);
  } catch (const Error&) {
    failed = true;
  }
  deflater_.reset();
  file_ = nullptr;
  if (std::fclose(file) != 0 || failed)
    throw Internal("writing " + path_ + " failed: " + std::strerror(errno));
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
