// Fuzz target: a checkpoint file (train/checkpoint_file.hpp) read by read_checkpoint_entries
// and read_checkpoint. Each input is read twice: as it is, and with every checksum rewritten to
// the value the reader computes, so that mutations get past the checksums to the checks behind
// them (shapes, byte counts, slices). Properties checked beyond "no crash": what reads back
// writes out and reads back again as the same records.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "psflow/train/checkpoint_file.hpp"

namespace {

using namespace psflow;
using namespace psflow::train;

// An in-memory file the reader opens by path: no disk traffic per input.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("psflow-fuzz-checkpoint", MFD_CLOEXEC)) {
    if (fd_ < 0) fuzz::fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& write(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0 ||
        ::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
      fuzz::fail("cannot write the memory file");
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

std::uint64_t le(const std::string& f, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(f[at + i]);
  return v;
}
void put_le32(std::string& f, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) f[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint32_t crc(std::uint32_t start, const std::string& f, std::size_t from, std::size_t to) {
  return static_cast<std::uint32_t>(
      ::crc32_z(start, reinterpret_cast<const Bytef*>(f.data() + from), to - from));
}

// `f` with every data, record and index checksum set to what the reader computes, following
// the layout in checkpoint_file.hpp as far as it makes sense.
std::string with_fixed_checksums(std::string f) {
  constexpr std::size_t kHeader = 24;
  if (f.size() < kHeader) return f;
  const bool sliced = (le(f, 12, 4) & 1) != 0;
  const std::uint64_t count = le(f, 16, 8);
  std::uint32_t index = crc(0, f, 0, kHeader);
  std::size_t pos = kHeader;
  auto have = [&](std::uint64_t n) { return n <= f.size() - pos; };
  for (std::uint64_t i = 0; i < count && i < 4096; ++i) {
    const std::size_t start = pos;
    if (!have(4)) return f;
    const std::uint64_t name = le(f, pos, 4);
    pos += 4;
    if (!have(name + 8)) return f;
    pos += name + 4;  // name, dtype
    const std::uint64_t rank = le(f, pos, 4);
    pos += 4;
    if (rank > 64 || !have(8 * rank)) return f;
    pos += 8 * rank;
    if (sliced) {
      if (!have(4)) return f;
      const std::uint64_t kind = le(f, pos, 4);
      pos += 4;
      if (kind == 1) {
        if (!have(16 * rank)) return f;
        pos += 16 * rank;
      }
    }
    if (!have(16)) return f;
    const std::uint64_t nbytes = le(f, pos, 8);
    const std::size_t data_crc = pos + 8, record_crc = pos + 12;
    pos += 16;
    if (!have(nbytes)) return f;
    put_le32(f, data_crc, crc(0, f, pos, pos + nbytes));
    put_le32(f, record_crc, crc(0, f, start, record_crc));
    index = crc(index, f, start, pos);
    pos += nbytes;
  }
  if (have(4)) put_le32(f, pos, index);
  return f;
}

bool same_entries(const CheckpointEntries& a, const CheckpointEntries& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].tensor;
    const Tensor& y = b[i].tensor;
    if (a[i].name != b[i].name || a[i].slice != b[i].slice || x.dtype() != y.dtype() ||
        x.shape() != y.shape() || x.nbytes() != y.nbytes() ||
        (x.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0))
      return false;
  }
  return true;
}

// A scratch directory for the write round trip (memory-backed where /dev/shm exists).
const std::string& scratch_directory() {
  static const std::string dir = [] {
    std::string pattern = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    pattern += "/psflow-fuzz-checkpoint-XXXXXX";
    if (!::mkdtemp(pattern.data())) fuzz::fail("mkdtemp failed");
    return pattern;
  }();
  return dir;
}

void read_one(MemoryFile& file, std::string_view bytes) {
  const std::string& path = file.write(bytes);
  CheckpointEntries entries;
  bool read = false;
  fuzz::only_psflow_errors([&] {
    entries = read_checkpoint_entries(path);
    read = true;
  });
  fuzz::only_psflow_errors([&] { (void)read_checkpoint(path); });
  if (!read) return;

  // What was read writes and reads back as the same records.
  const std::string copy = scratch_directory() + "/copy";
  try {
    write_checkpoint_entries(copy, entries);
    fuzz::check(same_entries(read_checkpoint_entries(copy), entries),
                "a checkpoint read back after writing differs from what was written");
  } catch (const Error& e) {
    fuzz::fail(std::string("what read_checkpoint_entries accepted does not write back: ") +
               e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static MemoryFile file;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  read_one(file, bytes);
  const std::string fixed = with_fixed_checksums(bytes);
  if (fixed != bytes) read_one(file, fixed);
  return 0;
}
