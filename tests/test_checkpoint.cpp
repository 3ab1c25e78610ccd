// Checkpoint files: round trips of every dtype, and that every kind of damage (flipped bytes,
// truncation, lying sizes, garbage) is reported as DataLoss naming the file, never as values.
#include <zlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "psflow/runtime.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
namespace fs = std::filesystem;

using psflow::testing::TempDir;

namespace {

std::string read_bytes(const std::string& path) { return psflow::testing::read_file(path); }

void write_bytes(const std::string& path, const std::string& bytes) {
  psflow::testing::write_file(path, bytes);
}

train::CheckpointTensors sample_tensors() {
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"f32", Tensor::from_vector<float>({1.5f, -0.0f, inf, -2.25f, 1e-30f, 3}, {2, 3})},
      {"f64_scalar", Tensor(3.141592653589793)},
      {"i32", Tensor::from_vector<std::int32_t>({std::numeric_limits<std::int32_t>::min(), -1, 0,
                                                 std::numeric_limits<std::int32_t>::max()})},
      {"i64", Tensor::from_vector<std::int64_t>({std::numeric_limits<std::int64_t>::min(), 7, 8,
                                                 std::numeric_limits<std::int64_t>::max()},
                                                {2, 1, 2})},
      {"layer1/bool", Tensor::from_vector<bool>({true, false, true})},
      {"bool_scalar", Tensor(true)},
      {"empty_f32", Tensor(DType::float32, {0})},
      {"empty_i64", Tensor(DType::int64, {3, 0})},
      {"i32_scalar", Tensor(std::int32_t{-42})},
      {"f64", Tensor::from_vector<double>({0.1, 0.2}, {1, 2})},
      {"vocab", Tensor::from_vector<std::string>(
                    {"", std::string("a\0b", 3), "user:12345", std::string(3000, 'w')}, {2, 2})},
      {"string_scalar", Tensor(std::string("s"))},
      {"empty_string", Tensor(DType::string, {0})},
  };
}

void check_same(const train::CheckpointTensors& got, const train::CheckpointTensors& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("tensor " << want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.dtype() == want[i].second.dtype());
    CHECK(got[i].second.shape() == want[i].second.shape());
    CHECK(got[i].second.equals(want[i].second));
  }
}

// Builds checkpoint bytes by hand (with valid checksums unless told otherwise), to check the
// reader against files that lie in ways a random flip rarely produces.
struct RawRecord {
  std::string name;
  std::uint32_t dtype = 1;
  std::vector<std::uint64_t> dims;
  std::uint64_t nbytes = 0;
  std::string data;
  // In a sliced file (flags 1): kind 0 whole, 1 a slice with these full dims and offsets.
  std::uint32_t slice_kind = 0;
  std::vector<std::uint64_t> full_dims = {};
  std::vector<std::uint64_t> offsets = {};
};

void put32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t crc(const std::string& s, std::uint32_t init = 0) {
  return static_cast<std::uint32_t>(
      ::crc32(init, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

std::string craft(const std::vector<RawRecord>& records, std::optional<std::uint64_t> count = {},
                  std::uint32_t flags = 0) {
  std::string header = "PSFLOWCK";
  put32(header, 1);
  put32(header, flags);
  put64(header, count.value_or(records.size()));
  std::string out = header;
  std::uint32_t index = crc(header);
  for (const auto& r : records) {
    std::string meta;
    put32(meta, static_cast<std::uint32_t>(r.name.size()));
    meta += r.name;
    put32(meta, r.dtype);
    put32(meta, static_cast<std::uint32_t>(r.dims.size()));
    for (auto d : r.dims) put64(meta, d);
    if (flags & 1) {
      put32(meta, r.slice_kind);
      for (auto d : r.full_dims) put64(meta, d);
      for (auto o : r.offsets) put64(meta, o);
    }
    put64(meta, r.nbytes);
    put32(meta, crc(r.data));
    put32(meta, crc(meta));
    index = crc(meta, index);
    out += meta + r.data;
  }
  put32(out, index);
  return out + "PSFLWEND";
}

// The DataLoss that reading `path` throws (fails the test when it throws anything else).
std::string data_loss_message(const std::string& path) {
  try {
    train::read_checkpoint(path);
  } catch (const DataLoss& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected DataLoss, got: " << e.what());
  }
  FAIL("expected DataLoss, the read succeeded");
  return {};
}

}  // namespace

TEST_CASE("checkpoint files round-trip every dtype, rank-0 and empty tensors") {
  TempDir dir("checkpoint");
  const auto path = dir.file("all.psflow");
  const auto tensors = sample_tensors();
  train::write_checkpoint(path, tensors);
  check_same(train::read_checkpoint(path), tensors);
  // Only the final file is left: the temporary one was renamed.
  CHECK(dir.entries() == std::vector<std::string>{"all.psflow"});
}

TEST_CASE("a checkpoint with no tensors round-trips") {
  TempDir dir("checkpoint");
  const auto path = dir.file("empty.psflow");
  train::write_checkpoint(path, {});
  CHECK(train::read_checkpoint(path).empty());
}

TEST_CASE("the layout is the documented one") {
  TempDir dir("checkpoint");
  const auto path = dir.file("layout.psflow");
  train::write_checkpoint(path, {{"ab", Tensor::from_vector<std::int32_t>({7, 8})}});
  RawRecord r{"ab", 3, {2}, 8, std::string("\x07\0\0\0\x08\0\0\0", 8)};
  CHECK(read_bytes(path) == craft({r}));
}

TEST_CASE("writing replaces the old file whole") {
  TempDir dir("checkpoint");
  const auto path = dir.file("model.psflow");
  train::write_checkpoint(path, {{"a", Tensor(1.0f)}});
  train::write_checkpoint(path, {{"b", Tensor(std::int64_t{2})}});
  const auto got = train::read_checkpoint(path);
  REQUIRE(got.size() == 1);
  CHECK(got[0].first == "b");
  CHECK(got[0].second.scalar<std::int64_t>() == 2);
  CHECK(dir.entries() == std::vector<std::string>{"model.psflow"});
}

TEST_CASE("a flipped byte anywhere in the file is DataLoss naming the file") {
  TempDir dir("checkpoint");
  const auto good = dir.file("good.psflow");
  train::write_checkpoint(good, sample_tensors());
  const std::string bytes = read_bytes(good);
  const auto bad = dir.file("bad.psflow");
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    INFO("flipped byte " << i << " of " << bytes.size());
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ 0x5a);
    write_bytes(bad, copy);
    CHECK_THAT(data_loss_message(bad), Catch::Contains(bad));
  }
}

TEST_CASE("damaged data and a damaged index are each reported as a failed checksum") {
  TempDir dir("checkpoint");
  const auto path = dir.file("x.psflow");
  train::write_checkpoint(path, {{"weights", Tensor::from_vector<float>({1, 2, 3, 4})}});
  const std::string bytes = read_bytes(path);
  // header 24 | name len 4 | "weights" 7 | dtype 4 | rank 4 | dim 8 | nbytes 8 | crcs 8 | data 16
  const std::size_t name_at = 24 + 4, data_at = 24 + 4 + 7 + 4 + 4 + 8 + 8 + 4 + 4;
  REQUIRE(bytes.size() == data_at + 16 + 12);

  std::string data_flip = bytes;
  data_flip[data_at + 5] ^= 0x01;
  write_bytes(path, data_flip);
  auto message = data_loss_message(path);
  CHECK_THAT(message, Catch::Contains("data of tensor 'weights'") && Catch::Contains("checksum"));

  std::string index_flip = bytes;
  index_flip[name_at] = 'W';  // the name: only the record checksum can tell
  write_bytes(path, index_flip);
  CHECK_THAT(data_loss_message(path), Catch::Contains("fails its checksum"));

  std::string trailer_flip = bytes;
  trailer_flip[data_at + 16] ^= 0x10;  // the index checksum itself
  write_bytes(path, trailer_flip);
  CHECK_THAT(data_loss_message(path), Catch::Contains("index fails its checksum"));
}

TEST_CASE("truncation at any offset is DataLoss") {
  TempDir dir("checkpoint");
  const auto good = dir.file("good.psflow");
  train::write_checkpoint(good, sample_tensors());
  const std::string bytes = read_bytes(good);
  const auto bad = dir.file("truncated.psflow");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " of " << bytes.size() << " bytes");
    write_bytes(bad, bytes.substr(0, n));
    CHECK_THAT(data_loss_message(bad), Catch::Contains(bad));
  }
}

TEST_CASE("trailing bytes after the trailer are DataLoss") {
  TempDir dir("checkpoint");
  const auto path = dir.file("x.psflow");
  train::write_checkpoint(path, {{"a", Tensor(1.0)}});
  write_bytes(path, read_bytes(path) + "extra");
  CHECK_THAT(data_loss_message(path), Catch::Contains("5 unexpected bytes after the trailer"));
}

TEST_CASE("sizes that claim more than the file holds are rejected before allocating") {
  TempDir dir("checkpoint");
  const auto path = dir.file("liar.psflow");
  const std::uint64_t huge = std::uint64_t{1} << 40;
  // A consistent record (valid checksums) whose data would be 4 TiB.
  write_bytes(path, craft({RawRecord{"w", 1, {huge}, 4 * huge, ""}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("claims 4398046511104 data bytes"));
  // A header claiming 2^60 tensors.
  write_bytes(path, craft({}, std::uint64_t{1} << 60));
  CHECK_THAT(data_loss_message(path), Catch::Contains("claims 1152921504606846976 tensors"));
  // A name length of 4 GiB - 1.
  std::string bytes = craft({RawRecord{"w", 1, {}, 4, "abcd"}});
  for (int i = 0; i < 4; ++i) bytes[24 + i] = '\xff';
  write_bytes(path, bytes);
  CHECK_THAT(data_loss_message(path), Catch::Contains("name of 4294967295 bytes"));
  // Dimensions whose product overflows 64 bits.
  write_bytes(path, craft({RawRecord{"w", 1, {huge, huge, huge}, 4, "abcd"}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("overflows"));
}

TEST_CASE("an unknown dtype, a shape that disagrees with the byte count, a bad bool: DataLoss") {
  TempDir dir("checkpoint");
  const auto path = dir.file("x.psflow");
  write_bytes(path, craft({RawRecord{"w", 77, {1}, 4, "abcd"}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("unknown dtype code 77"));
  write_bytes(path, craft({RawRecord{"w", 1, {2}, 4, "abcd"}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("needs 8 bytes, the record says 4"));
  write_bytes(path, craft({RawRecord{"w", 10, {2}, 2, std::string("\x01\x02", 2)}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("neither 0 nor 1"));
  write_bytes(path, craft({RawRecord{"w", 1, {}, 4, "abcd"}, RawRecord{"w", 1, {}, 4, "efgh"}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("appears twice"));
  write_bytes(path, craft({RawRecord{"w", 1, std::vector<std::uint64_t>(65, 1), 4, "abcd"}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("rank 65"));
  std::string version = craft({});
  version[8] = 2;
  write_bytes(path, version);
  CHECK_THAT(data_loss_message(path), Catch::Contains("format version 2"));
}

TEST_CASE(
    "garbage and empty files are DataLoss, a missing file NotFound, a directory InvalidArgument") {
  TempDir dir("checkpoint");
  const auto path = dir.file("garbage");
  std::mt19937 rng(7);
  std::string garbage(1000, '\0');
  for (auto& c : garbage) c = static_cast<char>(rng());
  write_bytes(path, garbage);
  CHECK_THAT(data_loss_message(path), Catch::Contains("not a psflow checkpoint"));
  write_bytes(path, "model_checkpoint_path: \"model.ckpt-5\"\n");
  CHECK_THAT(data_loss_message(path), Catch::Contains("not a psflow checkpoint"));
  write_bytes(path, "PSF");
  CHECK_THAT(data_loss_message(path), Catch::Contains("truncated"));
  write_bytes(path, "");
  CHECK_THAT(data_loss_message(path), Catch::Contains("empty"));

  const auto missing = dir.file("missing.psflow");
  CHECK_THROWS_AS(train::read_checkpoint(missing), NotFound);
  CHECK_THROWS_WITH(train::read_checkpoint(missing), Catch::Contains(missing));
  CHECK_THROWS_AS(train::read_checkpoint(dir.path()), InvalidArgument);
}

TEST_CASE("a failed write is a typed error and leaves no file behind") {
  TempDir dir("checkpoint");
  // Into a directory that does not exist.
  const auto nowhere = dir.file("no/such/dir/x.psflow");
  CHECK_THROWS_AS(train::write_checkpoint(nowhere, {{"a", Tensor(1.0f)}}), NotFound);
  CHECK_THROWS_WITH(train::write_checkpoint(nowhere, {{"a", Tensor(1.0f)}}),
                    Catch::Contains("no/such/dir"));
  CHECK(dir.entries().empty());

  // Over a path that is a directory: everything is written, then the rename fails.
  fs::create_directory(fs::path(dir.path()) / "taken");
  fs::create_directory(fs::path(dir.path()) / "taken" / "child");
  CHECK_THROWS_AS(train::write_checkpoint(dir.file("taken"), {{"a", Tensor(1.0f)}}), Error);
  CHECK(dir.entries() == std::vector<std::string>{"taken"});

  // Bad input: nothing is written and an existing checkpoint keeps its content.
  const auto path = dir.file("keep.psflow");
  train::write_checkpoint(path, {{"a", Tensor(1.0f)}});
  CHECK_THROWS_AS(train::write_checkpoint(path, {{"a", Tensor(1.0f)}, {"a", Tensor(2.0f)}}),
                  InvalidArgument);
  CHECK_THROWS_AS(train::write_checkpoint(path, {{"", Tensor(1.0f)}}), InvalidArgument);
  CHECK_THROWS_AS(train::write_checkpoint(path, {{"e", Tensor()}}), InvalidArgument);
  const auto kept = train::read_checkpoint(path);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].second.scalar<float>() == 1.0f);
  CHECK(dir.entries().size() == 2);
}

// A row-sliced [3, 2] float tensor "t" (rows 0:1 and 1:3) and a whole int32 scalar "n".
train::CheckpointEntries sliced_entries() {
  return {
      {"t", Tensor::from_vector<float>({1, 2}, {1, 2}), train::CheckpointSlice{{3, 2}, {0, 0}}},
      {"n", Tensor(std::int32_t{7}), std::nullopt},
      {"t", Tensor::from_vector<float>({3, 4, 5, 6}, {2, 2}),
       train::CheckpointSlice{{3, 2}, {1, 0}}},
  };
}

std::string float_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

TEST_CASE("slices round-trip, follow the documented layout and read back assembled") {
  TempDir dir("checkpoint");
  const auto path = dir.file("sliced.psflow");
  const auto entries = sliced_entries();
  train::write_checkpoint_entries(path, entries);

  const auto got = train::read_checkpoint_entries(path);
  REQUIRE(got.size() == entries.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("entry " << i);
    CHECK(got[i].name == entries[i].name);
    CHECK(got[i].tensor.equals(entries[i].tensor));
    CHECK(got[i].slice == entries[i].slice);
  }

  // Flags 1, and every record has its slice kind (then full dims and offsets for a slice).
  const std::string n_data("\x07\0\0\0", 4);
  CHECK(read_bytes(path) ==
        craft({RawRecord{"t", 1, {1, 2}, 8, float_bytes({1, 2}), 1, {3, 2}, {0, 0}},
               RawRecord{"n", 3, {}, 4, n_data, 0},
               RawRecord{"t", 1, {2, 2}, 16, float_bytes({3, 4, 5, 6}), 1, {3, 2}, {1, 0}}},
              {}, 1));

  // The whole-tensor view assembles "t" at its first slice's place.
  const auto whole = train::read_checkpoint(path);
  REQUIRE(whole.size() == 2);
  CHECK(whole[0].first == "t");
  CHECK(whole[0].second.equals(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2})));
  CHECK(whole[1].first == "n");
  CHECK(whole[1].second.scalar<std::int32_t>() == 7);

  // Without slices the file is the one write_checkpoint writes (flags 0, no slice fields).
  train::write_checkpoint_entries(path, {{"ab", Tensor::from_vector<std::int32_t>({7, 8}), {}}});
  CHECK(read_bytes(path) ==
        craft({RawRecord{"ab", 3, {2}, 8, std::string("\x07\0\0\0\x08\0\0\0", 8)}}));
}

TEST_CASE("slices that overlap, disagree or leave their full shape are refused on write") {
  TempDir dir("checkpoint");
  const auto path = dir.file("bad.psflow");
  const Tensor rows2 = Tensor::filled(1.0f, {2, 2});
  auto write = [&](train::CheckpointEntries entries) {
    train::write_checkpoint_entries(path, entries);
  };
  using S = train::CheckpointSlice;
  CHECK_THROWS_WITH(write({{"t", rows2, S{{3, 2}, {0, 0}}}, {"t", rows2, S{{3, 2}, {1, 0}}}}),
                    Catch::Contains("overlaps") && Catch::Contains("[0:2, 0:2]") &&
                        Catch::Contains("[1:3, 0:2]"));
  CHECK_THROWS_WITH(write({{"t", rows2, S{{3, 2}, {2, 0}}}}), Catch::Contains("reaches past"));
  CHECK_THROWS_WITH(write({{"t", rows2, S{{4, 2}, {0, 0}}}, {"t", rows2, S{{5, 2}, {2, 0}}}}),
                    Catch::Contains("disagree"));
  CHECK_THROWS_WITH(write({{"t", rows2, S{{4, 2}, {0, 0}}},
                           {"t", Tensor::filled(1.0, {2, 2}), S{{4, 2}, {2, 0}}}}),
                    Catch::Contains("disagree") && Catch::Contains("float64"));
  CHECK_THROWS_WITH(write({{"t", rows2, S{{4, 2}, {0, 0}}}, {"t", rows2, std::nullopt}}),
                    Catch::Contains("both whole and as slices"));
  CHECK_THROWS_WITH(write({{"t", rows2, S{{4}, {0}}}}), Catch::Contains("rank"));
  CHECK_THROWS_AS(write({{"t", rows2, S{{4, 2}, {0, 0}}}, {"t", rows2, S{{4, 2}, {0, 0}}}}),
                  InvalidArgument);
  CHECK(dir.entries().empty());
}

TEST_CASE("a sliced file that lies about its slices is DataLoss, a gap is NotFound") {
  TempDir dir("checkpoint");
  const auto path = dir.file("x.psflow");
  const std::string two = float_bytes({1, 2});
  write_bytes(path, craft({RawRecord{"t", 1, {1, 2}, 8, two, 1, {3, 2}, {0, 0}},
                           RawRecord{"t", 1, {1, 2}, 8, two, 1, {3, 2}, {0, 0}}},
                          {}, 1));
  CHECK_THAT(data_loss_message(path), Catch::Contains("overlaps") && Catch::Contains(path));
  write_bytes(path, craft({RawRecord{"t", 1, {1, 2}, 8, two, 1, {3, 2}, {3, 0}}}, {}, 1));
  CHECK_THAT(data_loss_message(path), Catch::Contains("reaches past the full shape"));
  write_bytes(path, craft({RawRecord{"t", 1, {1, 2}, 8, two, 2}}, {}, 1));
  CHECK_THAT(data_loss_message(path), Catch::Contains("unknown slice kind 2"));
  write_bytes(path, craft({}, {}, 2));
  CHECK_THAT(data_loss_message(path), Catch::Contains("unknown flags 0x00000002"));

  // Valid slices that leave rows 1:3 out: the entries read, the whole tensor cannot be built.
  write_bytes(path, craft({RawRecord{"t", 1, {1, 2}, 8, two, 1, {3, 2}, {0, 0}}}, {}, 1));
  CHECK(train::read_checkpoint_entries(path).size() == 1);
  CHECK_THROWS_AS(train::read_checkpoint(path), NotFound);
  CHECK_THROWS_WITH(train::read_checkpoint(path),
                    Catch::Contains("'t'") && Catch::Contains("[1:3, 0:2]"));

  // A flipped byte anywhere in a sliced file is still DataLoss.
  train::write_checkpoint_entries(path, sliced_entries());
  const std::string bytes = read_bytes(path);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    INFO("flipped byte " << i << " of " << bytes.size());
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ 0x5a);
    write_bytes(path, copy);
    CHECK_THAT(data_loss_message(path), Catch::Contains(path));
  }
}

// Found by fuzzing (fuzz/targets/checkpoint.cpp; inputs in fuzz/regressions/checkpoint/).
TEST_CASE("fuzz regression: slices of a huge or overflowing full shape are NotFound, unallocated") {
  TempDir dir("checkpoint");
  const auto path = dir.file("x.psflow");
  // 2^62 x 4 elements wrap to 0 in a size_t: the assembled tensor used to get a 0-byte buffer
  // that the slice was then copied into. 2^40 elements would ask for 4 TiB.
  const std::vector<train::CheckpointEntry> cases = {
      {"t", Tensor::from_vector<float>(std::vector<float>(16, 1.0f), {4, 4}),
       train::CheckpointSlice{{std::size_t{1} << 62, 4}, {0, 0}}},
      {"t", Tensor::from_vector<float>({1, 2}, {2, 1}),
       train::CheckpointSlice{{std::size_t{1} << 40, 1}, {0, 0}}},
  };
  for (const auto& entry : cases) {
    INFO(shape_string(entry.slice->full_shape));
    train::write_checkpoint_entries(path, {entry});
    CHECK(train::read_checkpoint_entries(path).size() == 1);
    CHECK_THROWS_AS(train::read_checkpoint(path), NotFound);
    CHECK_THROWS_WITH(train::read_checkpoint(path),
                      Catch::Contains("'t'") && Catch::Contains("the slices hold"));
  }
}

TEST_CASE("a string record is its lengths, then its bytes, and lengths that lie are DataLoss") {
  TempDir dir("checkpoint");
  const auto path = dir.file("strings.psflow");
  train::write_checkpoint(path, {{"s", Tensor::from_vector<std::string>({"ab", "c"})}});
  std::string data;
  put64(data, 2);
  put64(data, 1);
  data += "abc";
  CHECK(read_bytes(path) == craft({RawRecord{"s", 7, {2}, data.size(), data}}));

  std::string lying;
  put64(lying, 2);
  put64(lying, 5);  // runs past the bytes
  lying += "abc";
  write_bytes(path, craft({RawRecord{"s", 7, {2}, lying.size(), lying}}));
  CHECK_THAT(data_loss_message(path),
             Catch::Contains("the strings of") && Catch::Contains("runs past the end"));
  // Fewer bytes than the lengths of its elements take.
  write_bytes(path, craft({RawRecord{"s", 7, {3}, 16, std::string(16, '\0')}}));
  CHECK_THAT(data_loss_message(path), Catch::Contains("shape [3] of string"));
}
