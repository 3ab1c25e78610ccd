// Reading a dataset's files: InputFile gives a file's bytes, inflating "ZLIB"
// or "GZIP" compression on the way (zlib); TextLineReader gives its lines,
// TFRecordReader its records with both masked CRC-32C checksums checked (the
// framing observe/tfrecord.hpp writes).
//
// Errors name the file: NotFound when it cannot be opened, DataLoss with the
// byte offset (in the uncompressed stream) for a truncated record, a checksum
// that does not match or damaged compressed data. Each reader is used by one
// thread at a time.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/data/compression.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "psflow/observe/crc32c.hpp"
#endif

namespace psflow::data {

static_assert(std::endian::native == std::endian::little,
              "TFRecord lengths are read as this host stores them");

class InputFile {
 public:
  // compression: "" (none), "ZLIB" or "GZIP"; anything else is InvalidArgument.
  InputFile(std::string path, std::string_view compression = "");
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // Up to `n` bytes into `dst`: fewer only at the end of the file, 0 there.
  std::size_t read(char* dst, std::size_t n);
  // Exactly `n` bytes, or fewer at the end of the file (the count says how
  // many).
  std::size_t read_fully(char* dst, std::size_t n);
  // Bytes read so far (of the uncompressed stream).
  std::uint64_t offset() const noexcept { return offset_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::size_t read_raw(char* dst, std::size_t n);
  std::size_t inflate_into(char* dst, std::size_t n);

  std::string path_;
  std::FILE* file_ = nullptr;
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;  // null without compression
  std::uint64_t offset_ = 0;
};

// The lines of a text file, without their "\n" (or "\r\n"), as TF's
// TextLineDataset reads them.
class TextLineReader {
 public:
  TextLineReader(std::string path, std::string_view compression = "");
  std::optional<std::string> next();
  // The number of the line next() returned last (1 for the first).
  std::uint64_t line_number() const noexcept { return line_; }
  const std::string& path() const noexcept { return file_.path(); }

 private:
  InputFile file_;
  std::vector<char> buffer_ = std::vector<char>(64 * 1024);
  std::size_t start_ = 0, end_ = 0;
  bool eof_ = false;
  std::uint64_t line_ = 0;
};

// The records of a TFRecord file.
class TFRecordReader {
 public:
  TFRecordReader(std::string path, std::string_view compression = "");
  std::optional<std::string> next();
  const std::string& path() const noexcept { return file_.path(); }
  // The byte offset of the next record (in the uncompressed stream).
  std::uint64_t offset() const noexcept { return file_.offset(); }

 private:
  InputFile file_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

struct InputFile::Inflater {
  z_stream stream{};
  std::vector<unsigned char> input = std::vector<unsigned char>(256 * 1024);
  bool done = false;
  ~Inflater() { inflateEnd(&stream); }
};

PSFLOW_DECL InputFile::InputFile(std::string path, std::string_view compression)
    : path_(std::move(path)) {
  const int window_bits = detail::zlib_window_bits(compression, path_);
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) throw NotFound("cannot open " + path_ + ": " + std::strerror(errno));
  // Records are small and read a few fields at a time: a large buffer makes few system calls.
  std::setvbuf(file_, nullptr, _IOFBF, std::size_t{1} << 18);
  if (window_bits) {
    inflater_ = std::make_unique<Inflater>();
    if (inflateInit2(&inflater_->stream, window_bits) != Z_OK) {
      std::fclose(file_);
      throw ResourceExhausted("cannot start decompressing " + path_);
    }
  }
}

PSFLOW_DECL InputFile::~InputFile() {
  inflater_.reset();
  if (file_) std::fclose(file_);
}

PSFLOW_DECL std::size_t InputFile::read_raw(char* dst, std::size_t n) {
  // Unlocked: an InputFile is read by one thread at a time (its iterator's).
  const std::size_t got = ::fread_unlocked(dst, 1, n, file_);
  if (got < n && std::ferror(file_))
    throw DataLoss("reading " + path_ + " failed: " + std::strerror(errno));
  return got;
}

PSFLOW_DECL std::size_t InputFile::inflate_into(char* dst, std::size_t n) {
  Inflater& z = *inflater_;
  z.stream.next_out = reinterpret_cast<Bytef*>(dst);
  z.stream.avail_out = static_cast<uInt>(n);
  while (z.stream.avail_out > 0 && !z.done) {
    if (z.stream.avail_in == 0) {
      const std::size_t got = read_raw(reinterpret_cast<char*>(z.input.data()), z.input.size());
      if (got == 0)
        throw DataLoss(path_ + ": the compressed data ends early, at byte " +
                       std::to_string(offset_ + (n - z.stream.avail_out)) +
                       " of the uncompressed stream (truncated file?)");
      z.stream.next_in = z.input.data();
      z.stream.avail_in = static_cast<uInt>(got);
    }
    const int status = inflate(&z.stream, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      z.done = true;
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      throw DataLoss(path_ + ": damaged compressed data near byte " +
                     std::to_string(offset_ + (n - z.stream.avail_out)) +
                     " of the uncompressed stream (" +
                     (z.stream.msg ? z.stream.msg : "zlib error " + std::to_string(status)) +
                     "; is the compression type right?)");
    }
  }
  return n - z.stream.avail_out;
}

PSFLOW_DECL std::size_t InputFile::read(char* dst, std::size_t n) {
  const std::size_t got = inflater_ ? inflate_into(dst, n) : read_raw(dst, n);
  offset_ += got;
  return got;
}

PSFLOW_DECL std::size_t InputFile::read_fully(char* dst, std::size_t n) {
  std::size_t total = 0;
  while (total < n) {
    const std::size_t got = read(dst + total, n - total);
    if (got == 0) break;
    total += got;
  }
  return total;
}

PSFLOW_DECL TextLineReader::TextLineReader(std::string path, std::string_view compression)
    : file_(std::move(path), compression) {}

PSFLOW_DECL std::optional<std::string> TextLineReader::next() {
  std::string line;
  for (;;) {
    const auto* begin = buffer_.data() + start_;
    const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - start_));
    if (newline) {
      line.append(begin, newline);
      start_ = static_cast<std::size_t>(newline - buffer_.data()) + 1;
      break;
    }
    line.append(begin, end_ - start_);
    start_ = end_ = 0;
    if (eof_ || (end_ = file_.read(buffer_.data(), buffer_.size())) == 0) {
      eof_ = true;
      if (line.empty()) return std::nullopt;  // no last line without its newline
      break;
    }
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_;
  return line;
}

PSFLOW_DECL TFRecordReader::TFRecordReader(std::string path, std::string_view compression)
    : file_(std::move(path), compression) {}

PSFLOW_DECL std::optional<std::string> TFRecordReader::next() {
  const std::uint64_t at = file_.offset();
  auto fail = [&](const std::string& problem) {
    return DataLoss(file_.path() + ": the record at byte " + std::to_string(at) + " " + problem);
  };
  char header[12];
  const std::size_t got = file_.read_fully(header, sizeof header);
  if (got == 0) return std::nullopt;
  if (got < sizeof header) throw fail("is truncated (its length header is incomplete)");
  std::uint64_t length = 0;
  std::uint32_t length_crc = 0;
  std::memcpy(&length, header, 8);
  std::memcpy(&length_crc, header + 8, 4);
  if (length_crc != observe::masked_crc32c(std::string_view(header, 8)))
    throw fail("has a length whose checksum does not match");
  // Read in bounded pieces: a length announcing more than the file holds fails
  // at the end of the file, not in one huge allocation.
  std::string data;
  constexpr std::uint64_t kPiece = 1 << 20;
  while (data.size() < length) {
    const std::size_t piece = static_cast<std::size_t>(std::min(kPiece, length - data.size()));
    const std::size_t old = data.size();
    data.resize(old + piece);
    if (file_.read_fully(data.data() + old, piece) < piece)
      throw fail("is truncated (" + std::to_string(length) + " bytes of data announced)");
  }
  char crc_bytes[4];
  if (file_.read_fully(crc_bytes, 4) < 4) throw fail("is truncated (its data checksum is missing)");
  std::uint32_t data_crc = 0;
  std::memcpy(&data_crc, crc_bytes, 4);
  if (data_crc != observe::masked_crc32c(data))
    throw fail("has data whose checksum does not match");
  return data;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
