// Checkpoint files: psflow's on-disk format for a set of named tensors (what Saver writes),
// written atomically and checksummed so that a crash, a full disk or a flipped bit can never
// make a restore return wrong values: a reader either gets every tensor exactly as written or
// a typed error naming the file and what is wrong with it.
//
// Layout, every integer little-endian:
//   header   "PSFLOWCK"  u32 format version (1)  u32 flags  u64 tensor count
//            flags: 0, or 1 ("sliced") when records may hold slices (see below)
//   record, once per tensor:
//            u32 name length (1..65535)  name bytes
//            u32 dtype, TF's DataType numbers: 1 float32, 2 float64, 3 int32, 7 string, 9 int64,
//            10 bool
//            u32 rank (0..64)  u64 dimension x rank  (the shape of the data that follows)
//            only in a sliced file:
//              u32 slice kind: 0 the record is the whole tensor, 1 it is a slice, then:
//              u64 full dimension x rank  u64 offset x rank
//            u64 byte count (must equal elements x dtype size; for strings, their encoding's)
//            u32 CRC32 of the data bytes
//            u32 CRC32 of this record's metadata (name length .. data CRC)
//            the data: byte count raw bytes, row-major, little-endian, bools as 0/1 bytes;
//            strings as core/string_encoding.hpp lays them out (a u64 length each, then bytes)
//   trailer  u32 CRC32 of the index (every byte before the trailer except the data bytes)
//            "PSFLWEND"
// CRC32 is zlib's crc32. The whole file must end right after the trailer.
//
// Slices (TF's save-slice information; how a Saver stores the shards of a partitioned variable;
// the rules they keep are in checkpoint_slices.hpp): a name then has one record per slice, each
// holding its block alone, row-major. A file without slices is written with flags 0 and no
// slice fields, byte for byte as before slices existed, so files written before them read as
// they always did; a psflow that predates slices refuses a sliced file ("unknown flags
// 0x00000001") instead of misreading it.
//
// Contract: write_checkpoint/read_checkpoint block on file I/O and keep no shared state, so
// they may run on any thread. A write is atomic (atomic_file.hpp): readers see the old file or
// the new one, never a partial one, and a failed write leaves nothing behind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/string_encoding.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/train/atomic_file.hpp"
#include "psflow/train/checkpoint_slices.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>
#endif

namespace psflow::train {

using CheckpointTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (names unique and non-empty, tensors non-empty) to `path` atomically,
// replacing any file there. Throws InvalidArgument for bad input (nothing is written),
// NotFound when the directory does not exist, FailedPrecondition when it cannot be written
// (permissions, read-only, full disk), Internal for other I/O failures; never leaves a
// partial file.
void write_checkpoint(std::string_view path, const CheckpointTensors& tensors);

// The same for records that may be slices: a name may then appear once per slice (the rules are
// in checkpoint_slices.hpp; InvalidArgument naming the name and the slices when they are
// broken).
// Without any slice the file is the one write_checkpoint writes.
void write_checkpoint_entries(std::string_view path, const CheckpointEntries& entries);

// Reads and fully validates the checkpoint at `path`; returns its tensors in file order, a
// sliced tensor assembled whole from its slices (at its first slice's place).
// Throws NotFound naming the file when it does not exist, or naming the tensor and the missing
// range when the slices of a tensor do not cover it; InvalidArgument when it is a
// directory, DataLoss naming the file and the problem when it is not a valid checkpoint
// (bad magic or version, a truncated file, a size larger than the rest of the file, an unknown
// dtype, a shape that does not match its byte count, a bad checksum, trailing bytes, slices
// that overlap, disagree or reach past their full shape).
CheckpointTensors read_checkpoint(std::string_view path);

// Reads and validates like read_checkpoint; returns every record as stored, slices as slices.
CheckpointEntries read_checkpoint_entries(std::string_view path);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

static_assert(std::endian::native == std::endian::little,
              "checkpoint data is stored little-endian: add byte swapping for this host");

inline constexpr char kCheckpointMagic[8] = {'P', 'S', 'F', 'L', 'O', 'W', 'C', 'K'};
inline constexpr char kCheckpointEndMagic[8] = {'P', 'S', 'F', 'L', 'W', 'E', 'N', 'D'};
inline constexpr std::uint32_t kCheckpointVersion = 1;
// Flag bit of a file whose records carry a slice field.
inline constexpr std::uint32_t kCheckpointFlagSliced = 1;
inline constexpr std::uint32_t kMaxCheckpointNameLength = 65535;
inline constexpr std::uint32_t kMaxCheckpointRank = 64;
inline constexpr std::uint64_t kCheckpointHeaderBytes = 8 + 4 + 4 + 8;
inline constexpr std::uint64_t kCheckpointTrailerBytes = 4 + 8;
// Smallest possible record: 1-byte name, rank 0, no data.
inline constexpr std::uint64_t kMinCheckpointRecordBytes = 4 + 1 + 4 + 4 + 8 + 4 + 4;

// TF's DataType enum numbers, so the codes mean the same thing to a TF user.
constexpr std::uint32_t checkpoint_dtype_code(DType dtype) { return tf_data_type(dtype); }
constexpr std::optional<DType> checkpoint_dtype_from_code(std::uint32_t code) {
  return dtype_from_tf_data_type(code);
}

PSFLOW_DECL std::uint32_t crc32_of(std::uint32_t crc, const void* data, std::size_t n) {
  return static_cast<std::uint32_t>(
      ::crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}
PSFLOW_DECL std::uint32_t crc32_of(const void* data, std::size_t n) { return crc32_of(0, data, n); }

PSFLOW_DECL void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
PSFLOW_DECL void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
PSFLOW_DECL std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Sequential reader that checks every size against what is left of the file before reading,
// and turns any problem into DataLoss naming the file and the offset.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR)
        throw NotFound("checkpoint file '" + path_ + "' does not exist");
      throw_io_error(err, "cannot open checkpoint file '" + path_ + "'");
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw_io_error(err, "cannot stat checkpoint file '" + path_ + "'");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw InvalidArgument("'" + path_ + "' is " +
                            (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                            ", not a checkpoint file: pass a checkpoint path (e.g. what "
                            "latest_checkpoint(dir) returns)");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  ~CheckpointReader() { ::close(fd_); }

  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t offset() const noexcept { return offset_; }
  std::uint64_t remaining() const noexcept { return size_ - offset_; }

  [[noreturn]] void corrupt(const std::string& what) const {
    throw DataLoss("checkpoint file '" + path_ + "' is corrupt: " + what + " (at byte " +
                   std::to_string(offset_) + " of " + std::to_string(size_) +
                   "); restore another checkpoint");
  }

  // Reads exactly n bytes; `what` names them in the error when the file is too short.
  void read(void* dst, std::uint64_t n, const std::string& what) {
    if (n > remaining())
      corrupt("truncated: " + what + " needs " + std::to_string(n) + " bytes, only " +
              std::to_string(remaining()) + " remain");
    char* p = static_cast<char*>(dst);
    std::uint64_t left = n;
    while (left > 0) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30));
      const ssize_t got = ::read(fd_, p, chunk);
      if (got < 0) {
        if (errno == EINTR) continue;
        corrupt("cannot read " + what + ": " + errno_message(errno));
      }
      if (got == 0) corrupt("truncated while reading " + what + " (the file shrank)");
      p += got;
      left -= static_cast<std::uint64_t>(got);
      offset_ += static_cast<std::uint64_t>(got);
    }
  }
  // Metadata reads also feed the running checksums.
  std::uint32_t u32(const std::string& what) {
    unsigned char b[4];
    read(b, 4, what);
    checksum(b, 4);
    return static_cast<std::uint32_t>(get_le(b, 4));
  }
  std::uint64_t u64(const std::string& what) {
    unsigned char b[8];
    read(b, 8, what);
    checksum(b, 8);
    return get_le(b, 8);
  }
  void checksum(const void* data, std::size_t n) {
    index_crc_ = crc32_of(index_crc_, data, n);
    record_crc_ = crc32_of(record_crc_, data, n);
  }
  std::uint32_t index_crc() const noexcept { return index_crc_; }
  std::uint32_t record_crc() const noexcept { return record_crc_; }
  void start_record() noexcept { record_crc_ = 0; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
  std::uint32_t index_crc_ = 0;
  std::uint32_t record_crc_ = 0;
};

PSFLOW_DECL std::string hex32(std::uint32_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out.push_back(digits[(v >> shift) & 0xf]);
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Definitions

PSFLOW_DECL void write_checkpoint(std::string_view path, const CheckpointTensors& tensors) {
  CheckpointEntries entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) entries.push_back({name, tensor, std::nullopt});
  write_checkpoint_entries(path, entries);
}

PSFLOW_DECL void write_checkpoint_entries(std::string_view path, const CheckpointEntries& entries) {
  const std::string file(path);
  bool sliced = false;
  for (const auto& [name, tensor, slice] : entries) {
    if (name.empty() || name.size() > detail::kMaxCheckpointNameLength)
      throw InvalidArgument("write_checkpoint('" + file + "'): tensor names must have 1 to " +
                            std::to_string(detail::kMaxCheckpointNameLength) + " bytes, got '" +
                            name + "'");
    if (tensor.empty())
      throw InvalidArgument("write_checkpoint('" + file + "'): tensor '" + name + "' is empty");
    if (tensor.rank() > detail::kMaxCheckpointRank)
      throw InvalidArgument("write_checkpoint('" + file + "'): tensor '" + name + "' has rank " +
                            std::to_string(tensor.rank()) + ", at most " +
                            std::to_string(detail::kMaxCheckpointRank) + " is supported");
    sliced = sliced || slice.has_value();
  }
  if (const std::string problem = detail::check_entries(entries); !problem.empty())
    throw InvalidArgument("write_checkpoint('" + file + "'): " + problem);

  detail::AtomicFile out(file);
  std::string meta(detail::kCheckpointMagic, 8);
  detail::put_u32(meta, detail::kCheckpointVersion);
  detail::put_u32(meta, sliced ? detail::kCheckpointFlagSliced : 0);
  detail::put_u64(meta, entries.size());
  std::uint32_t index_crc = detail::crc32_of(meta.data(), meta.size());
  out.write(meta);
  for (const auto& [name, tensor, slice] : entries) {
    meta.clear();
    detail::put_u32(meta, static_cast<std::uint32_t>(name.size()));
    meta += name;
    detail::put_u32(meta, detail::checkpoint_dtype_code(tensor.dtype()));
    detail::put_u32(meta, static_cast<std::uint32_t>(tensor.rank()));
    for (auto d : tensor.shape()) detail::put_u64(meta, d);
    if (sliced) {
      detail::put_u32(meta, slice ? 1 : 0);
      if (slice) {
        for (auto d : slice->full_shape) detail::put_u64(meta, d);
        for (auto o : slice->offset) detail::put_u64(meta, o);
      }
    }
    const bool strings = tensor.dtype() == DType::string;
    const std::string encoded = strings ? encode_strings(tensor) : std::string();
    const void* data = strings ? encoded.data() : tensor.raw_data();
    const std::size_t nbytes = strings ? encoded.size() : tensor.nbytes();
    detail::put_u64(meta, nbytes);
    detail::put_u32(meta, detail::crc32_of(data, nbytes));
    detail::put_u32(meta, detail::crc32_of(meta.data(), meta.size()));
    index_crc = detail::crc32_of(index_crc, meta.data(), meta.size());
    out.write(meta);
    out.write(data, nbytes);  // numbers straight from the buffer: no copy
  }
  meta.clear();
  detail::put_u32(meta, index_crc);
  meta.append(detail::kCheckpointEndMagic, 8);
  out.write(meta);
  out.commit();
}

PSFLOW_DECL CheckpointEntries read_checkpoint_entries(std::string_view path) {
  detail::CheckpointReader in{std::string(path)};
  if (in.size() == 0) in.corrupt("the file is empty");

  char magic[8] = {};
  const auto magic_bytes = std::min<std::uint64_t>(8, in.size());
  in.read(magic, magic_bytes, "the magic");
  if (std::memcmp(magic, detail::kCheckpointMagic, magic_bytes) != 0)
    in.corrupt("not a psflow checkpoint (it does not start with \"PSFLOWCK\")");
  if (magic_bytes < 8) in.corrupt("truncated inside the header");
  in.checksum(magic, 8);
  const std::uint32_t version = in.u32("the format version");
  if (version != detail::kCheckpointVersion)
    in.corrupt("format version " + std::to_string(version) + ", this psflow reads version " +
               std::to_string(detail::kCheckpointVersion));
  const std::uint32_t flags = in.u32("the flags");
  if ((flags & ~detail::kCheckpointFlagSliced) != 0)
    in.corrupt("unknown flags " + detail::hex32(flags));
  const bool sliced = (flags & detail::kCheckpointFlagSliced) != 0;
  const std::uint64_t count = in.u64("the tensor count");
  const std::uint64_t room = in.remaining() < detail::kCheckpointTrailerBytes
                                 ? 0
                                 : in.remaining() - detail::kCheckpointTrailerBytes;
  const std::uint64_t min_record = detail::kMinCheckpointRecordBytes + (sliced ? 4 : 0);
  if (count > room / min_record)
    in.corrupt("the header claims " + std::to_string(count) + " tensors, the rest of the file (" +
               std::to_string(in.remaining()) + " bytes) can hold at most " +
               std::to_string(room / min_record));

  CheckpointEntries tensors;
  tensors.reserve(static_cast<std::size_t>(count));
  std::set<std::string> names;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string record = "record " + std::to_string(i);
    in.start_record();
    const std::uint32_t name_length = in.u32(record + "'s name length");
    if (name_length == 0 || name_length > detail::kMaxCheckpointNameLength)
      in.corrupt(record + " has a name of " + std::to_string(name_length) + " bytes (1 to " +
                 std::to_string(detail::kMaxCheckpointNameLength) + " allowed)");
    std::string name(name_length, '\0');
    in.read(name.data(), name_length, record + "'s name");
    in.checksum(name.data(), name.size());
    const std::string what = "tensor '" + name + "' (" + record + ")";

    const std::uint32_t code = in.u32(what + "'s dtype");
    const auto dtype = detail::checkpoint_dtype_from_code(code);
    if (!dtype) in.corrupt(what + " has unknown dtype code " + std::to_string(code));
    const std::uint32_t rank = in.u32(what + "'s rank");
    if (rank > detail::kMaxCheckpointRank)
      in.corrupt(what + " has rank " + std::to_string(rank) + " (at most " +
                 std::to_string(detail::kMaxCheckpointRank) + ")");
    Shape shape(rank);
    std::uint64_t elements = 1;
    bool overflow = false;
    for (std::uint32_t d = 0; d < rank; ++d) {
      const std::uint64_t dim = in.u64(what + "'s dimension " + std::to_string(d));
      shape[d] = static_cast<std::size_t>(dim);
      if (dim != 0 && elements > UINT64_MAX / dim)
        overflow = true;
      else
        elements *= dim;
    }
    std::optional<CheckpointSlice> slice;
    if (sliced) {
      const std::uint32_t kind = in.u32(what + "'s slice kind");
      if (kind > 1) in.corrupt(what + " has unknown slice kind " + std::to_string(kind));
      if (kind == 1) {
        slice.emplace();
        slice->full_shape.resize(rank);
        slice->offset.resize(rank);
        for (std::uint32_t d = 0; d < rank; ++d)
          slice->full_shape[d] =
              static_cast<std::size_t>(in.u64(what + "'s full dimension " + std::to_string(d)));
        for (std::uint32_t d = 0; d < rank; ++d) {
          slice->offset[d] =
              static_cast<std::size_t>(in.u64(what + "'s slice offset " + std::to_string(d)));
          if (slice->offset[d] > slice->full_shape[d] ||
              shape[d] > slice->full_shape[d] - slice->offset[d])
            in.corrupt(what + ": its slice (offset " + std::to_string(slice->offset[d]) +
                       ", length " + std::to_string(shape[d]) + " along axis " + std::to_string(d) +
                       ") reaches past the full shape " + shape_string(slice->full_shape));
        }
      }
    }
    const std::uint64_t nbytes = in.u64(what + "'s byte count");
    const bool strings = *dtype == DType::string;
    const std::uint64_t item = strings ? 8 : dtype_size(*dtype);  // a string: at least its length
    if (overflow || elements > UINT64_MAX / item ||
        (strings ? elements * item > nbytes : elements * item != nbytes))
      in.corrupt(
          what + ": shape " + shape_string(shape) + " of " + std::string(dtype_name(*dtype)) +
          (overflow ? " overflows" : " needs " + std::to_string(elements * item) + " bytes") +
          ", the record says " + std::to_string(nbytes));
    const std::uint32_t data_crc = in.u32(what + "'s data checksum");
    const std::uint32_t expected_record_crc = in.record_crc();
    unsigned char stored[4];
    in.read(stored, 4, what + "'s record checksum");
    in.checksum(stored, 4);
    if (detail::get_le(stored, 4) != expected_record_crc)
      in.corrupt("the index record of " + what + " fails its checksum");
    if (nbytes > in.remaining())
      in.corrupt(what + " claims " + std::to_string(nbytes) + " data bytes, only " +
                 std::to_string(in.remaining()) + " remain (truncated file?)");
    if (!sliced && !names.insert(name).second)
      in.corrupt("tensor name '" + name + "' appears twice");

    Tensor tensor = Tensor::uninitialized(*dtype, std::move(shape));
    std::string encoded(strings ? nbytes : 0, '\0');
    void* data = strings ? encoded.data() : tensor.raw_data();
    in.read(data, nbytes, what + "'s data");
    const std::uint32_t actual_crc = detail::crc32_of(data, nbytes);
    if (actual_crc != data_crc)
      in.corrupt("the data of " + what + " fails its checksum (stored " + detail::hex32(data_crc) +
                 ", computed " + detail::hex32(actual_crc) + ")");
    if (strings)
      if (const std::string problem = decode_strings(encoded, tensor); !problem.empty())
        in.corrupt("the strings of " + what + " are malformed: " + problem);
    if (*dtype == DType::boolean) {  // any other byte would be an invalid bool
      const auto* bytes = static_cast<const unsigned char*>(tensor.raw_data());
      for (std::size_t b = 0; b < tensor.nbytes(); ++b)
        if (bytes[b] > 1) in.corrupt(what + " holds a bool byte that is neither 0 nor 1");
    }
    tensors.push_back({name, std::move(tensor), std::move(slice)});
  }
  if (sliced) {
    if (const std::string problem = detail::check_entries(tensors); !problem.empty())
      in.corrupt(problem);
  }

  const std::uint32_t expected_index_crc = in.index_crc();
  unsigned char stored[4];
  in.read(stored, 4, "the trailer");
  if (detail::get_le(stored, 4) != expected_index_crc)
    in.corrupt("the index fails its checksum (stored " +
               detail::hex32(static_cast<std::uint32_t>(detail::get_le(stored, 4))) +
               ", computed " + detail::hex32(expected_index_crc) + ")");
  char end[8];
  in.read(end, 8, "the trailer");
  if (std::memcmp(end, detail::kCheckpointEndMagic, 8) != 0)
    in.corrupt("the trailer does not end with \"PSFLWEND\"");
  if (in.remaining() != 0)
    in.corrupt(std::to_string(in.remaining()) + " unexpected bytes after the trailer");
  return tensors;
}

PSFLOW_DECL CheckpointTensors read_checkpoint(std::string_view path) {
  CheckpointEntries entries = read_checkpoint_entries(path);
  CheckpointTensors tensors;
  tensors.reserve(entries.size());
  const bool sliced = std::any_of(entries.begin(), entries.end(),
                                  [](const CheckpointEntry& e) { return e.slice.has_value(); });
  if (!sliced) {
    for (auto& e : entries) tensors.emplace_back(std::move(e.name), std::move(e.tensor));
    return tensors;
  }
  const detail::CheckpointIndex index(entries);
  for (const auto& name : index.names) {
    const detail::StoredTensor& stored = *index.find(name);
    std::string missing;
    auto whole = detail::stored_block(stored, std::vector<std::size_t>(stored.full_shape.size(), 0),
                                      stored.full_shape, &missing);
    if (!whole)
      throw NotFound("checkpoint file '" + std::string(path) + "' holds only slices of tensor '" +
                     name + "' " + std::string(dtype_name(stored.dtype)) +
                     shape_string(stored.full_shape) + " that do not cover it: " + missing +
                     "; read its slices with read_checkpoint_entries");
    tensors.emplace_back(name, std::move(*whole));
  }
  return tensors;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
