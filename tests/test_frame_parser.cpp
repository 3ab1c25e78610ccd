// FrameParser (distributed/frame_parser.hpp), fed bytes by hand as a socket would deliver them:
// several frames in one read come out without another read, any split of the bytes gives the
// same frames, a payload beyond the inbox is left to be read straight into its tensor, and a
// bad header, a table over the limits or a bool byte other than 0/1 is malformed with its
// reason, before anything is allocated for it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "psflow/distributed/frame_parser.hpp"
#include "psflow/distributed/outgoing_frame.hpp"
#include "support/wire_bytes.hpp"

using namespace psflow;
using Parser = detail::FrameParser;

namespace {

// The bytes a Connection writes for `frame`.
std::string bytes_of(wire::Frame frame) {
  const detail::OutgoingFrame out(std::move(frame));
  std::string bytes;
  out.for_each_unsent([&](const char* data, std::size_t size) {
    bytes.append(data, size);
    return true;
  });
  return bytes;
}

wire::Frame frame_with(std::uint64_t id, std::string metadata, std::vector<Tensor> tensors) {
  return wire::Frame{wire::MessageType::tensor, id, std::move(metadata), std::move(tensors)};
}

struct Fed {
  std::vector<wire::Frame> frames;
  std::size_t reads = 0;  // read_buffer() fills, payload reads not counted
  std::size_t payload_reads = 0;
  Parser::Next last = Parser::Next::read_more;
};

// Feeds `bytes` to `parser` at most `chunk` bytes per read, as a socket would, until they are
// used up or the parser reports a malformed frame.
Fed feed(Parser& parser, const std::string& bytes, std::size_t chunk) {
  Fed fed;
  std::size_t at = 0;
  for (int step = 0; step < 10000000; ++step) {
    fed.last = parser.parse();
    if (fed.last == Parser::Next::malformed) return fed;
    if (fed.last == Parser::Next::read_more) {
      if (at == bytes.size()) return fed;
      const auto room = parser.read_buffer();
      const std::size_t n = std::min({chunk, bytes.size() - at, room.size()});
      std::memcpy(room.data(), bytes.data() + at, n);
      parser.bytes_read(n);
      at += n;
      ++fed.reads;
      continue;
    }
    if (fed.last == Parser::Next::read_payload) {
      for (const auto& piece : parser.unread_payload()) {
        REQUIRE(bytes.size() - at >= piece.size());
        std::memcpy(piece.data(), bytes.data() + at, piece.size());
        at += piece.size();
      }
      ++fed.payload_reads;
    }
    auto frame = parser.take_frame();
    if (!frame) {
      fed.last = Parser::Next::malformed;
      return fed;
    }
    fed.frames.push_back(std::move(*frame));
  }
  FAIL("the parser never finished");
  return fed;
}

void check_same(const wire::Frame& got, const wire::Frame& want) {
  CHECK(got.type == want.type);
  CHECK(got.request_id == want.request_id);
  CHECK(got.metadata == want.metadata);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (std::size_t i = 0; i < got.tensors.size(); ++i) {
    CHECK(got.tensors[i].summary() == want.tensors[i].summary());
    CHECK(got.tensors[i].equals(want.tensors[i]));  // the same bytes, or the same strings
  }
}

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f;
  return v;
}

}  // namespace

TEST_CASE("several small frames in one read come out without another read") {
  const std::vector<wire::Frame> sent{
      frame_with(1, "a", {Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})}),
      frame_with(2, "", {}),
      frame_with(3, "metadata",
                 {Tensor::from_vector(std::vector<std::int64_t>{7, 8}, {2}),
                  Tensor::from_vector(std::vector<bool>{true, false}, {2})})};
  std::string bytes;
  for (const auto& f : sent) bytes += bytes_of(f);
  Parser parser(wire::WireLimits{});
  const Fed fed = feed(parser, bytes, Parser::kInboxBytes);
  CHECK(fed.reads == 1);
  CHECK(fed.payload_reads == 0);
  REQUIRE(fed.frames.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) check_same(fed.frames[i], sent[i]);
}

TEST_CASE("any split of the bytes gives the same frames") {
  const std::vector<wire::Frame> sent{
      frame_with(5, "first", {Tensor::from_vector(ramp(100), {10, 10})}),
      frame_with(6, "second",
                 {Tensor::from_vector(ramp(3), {3}), Tensor::from_vector(ramp(1), {})})};
  std::string bytes;
  for (const auto& f : sent) bytes += bytes_of(f);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{40}, std::size_t{41},
                                  std::size_t{333}, bytes.size()}) {
    INFO("bytes per read: " << chunk);
    Parser parser(wire::WireLimits{});
    const Fed fed = feed(parser, bytes, chunk);
    CHECK(fed.last == Parser::Next::read_more);
    REQUIRE(fed.frames.size() == sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) check_same(fed.frames[i], sent[i]);
  }
}

TEST_CASE("a payload beyond the inbox is read straight into its tensor") {
  const wire::Frame big = frame_with(9, "big", {Tensor::from_vector(ramp(1 << 20), {1 << 20})});
  const wire::Frame after = frame_with(10, "after", {});
  Parser parser(wire::WireLimits{});
  const Fed fed = feed(parser, bytes_of(big) + bytes_of(after), Parser::kInboxBytes);
  CHECK(fed.payload_reads == 1);
  REQUIRE(fed.frames.size() == 2);
  check_same(fed.frames[0], big);
  check_same(fed.frames[1], after);
}

TEST_CASE("a bad header is malformed: DataLoss, nothing delivered") {
  std::string bytes = bytes_of(frame_with(1, "x", {}));
  bytes[0] ^= 0x55;  // the magic
  Parser parser(wire::WireLimits{});
  const Fed fed = feed(parser, bytes, bytes.size());
  CHECK(fed.last == Parser::Next::malformed);
  CHECK(fed.frames.empty());
  CHECK(parser.error().code() == ErrorCode::data_loss);
}

TEST_CASE("a tensor over the limits is malformed before anything is allocated for it") {
  wire::WireLimits limits;
  limits.max_tensor_bytes = 1024;
  const std::string bytes = bytes_of(frame_with(1, "", {Tensor::from_vector(ramp(1024), {1024})}));
  Parser parser(limits);
  const Fed fed = feed(parser, bytes, bytes.size());
  CHECK(fed.last == Parser::Next::malformed);
  CHECK(parser.error().code() == ErrorCode::data_loss);
  CHECK_THAT(parser.error().message(), Catch::Contains("1024-byte limit"));
}

TEST_CASE("a bool byte other than 0 or 1 is malformed once the payload is in") {
  std::string bytes =
      bytes_of(frame_with(1, "", {Tensor::from_vector(std::vector<bool>{true}, {1})}));
  bytes.back() = 2;
  Parser parser(wire::WireLimits{});
  const Fed fed = feed(parser, bytes, bytes.size());
  CHECK(fed.last == Parser::Next::malformed);
  CHECK(fed.frames.empty());
  CHECK(parser.error().code() == ErrorCode::data_loss);
  CHECK_THAT(parser.error().message(), Catch::Contains("bool"));
}

TEST_CASE("string tensors travel as their strings, any split of the bytes") {
  const std::string with_nul("k\0v", 3);
  const std::vector<wire::Frame> sent{
      frame_with(
          7, "strings",
          {Tensor::from_vector(ramp(3), {3}),
           Tensor::from_vector<std::string>({"", with_nul, std::string(100000, 's'), "x"}, {2, 2}),
           Tensor(std::string("scalar")), Tensor(DType::string, {0}),
           Tensor::from_vector(std::vector<bool>{true}, {1})}),
      frame_with(8, "", {Tensor::from_vector<std::string>({"after"})})};
  std::string bytes;
  for (const auto& f : sent) bytes += bytes_of(f);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{13}, bytes.size()}) {
    INFO("bytes per read: " << chunk);
    Parser parser(wire::WireLimits{});
    const Fed fed = feed(parser, bytes, chunk);
    REQUIRE(fed.frames.size() == sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) check_same(fed.frames[i], sent[i]);
  }
}

TEST_CASE("a string payload whose lengths do not match its bytes is malformed") {
  std::string bytes = bytes_of(frame_with(9, "", {Tensor::from_vector<std::string>({"ab", "c"})}));
  // The payload is the last 8 + 8 + 3 bytes: two lengths, then "abc". Claim 3 bytes for "ab".
  bytes[bytes.size() - 19] = 3;
  Parser parser(wire::WireLimits{});
  const Fed fed = feed(parser, bytes, bytes.size());
  CHECK(fed.last == Parser::Next::malformed);
  CHECK(fed.frames.empty());
  CHECK(parser.error().code() == ErrorCode::data_loss);
  CHECK_THAT(parser.error().message(), Catch::Contains("string tensor"));

  // A table claiming fewer payload bytes than its strings' lengths take is refused up front.
  wire::Frame lying = frame_with(10, "", {Tensor::from_vector<std::string>({"a", "b"})});
  std::string table = wire::encode_tensor_table(lying.tensors);
  const std::uint64_t too_small = 15;  // two lengths need 16
  std::memcpy(table.data() + table.size() - 8, &too_small, 8);
  wire::FrameHeader h;
  h.tensor_count = 1;
  h.table_bytes = static_cast<std::uint32_t>(table.size());
  h.payload_bytes = too_small;
  CHECK_THROWS_WITH(wire::allocate_from_table(table, h, {}), Catch::Contains("fewer bytes"));
}
