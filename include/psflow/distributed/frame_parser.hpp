// The read side of a Connection: what the socket delivers goes into a 64 KiB inbox, so several
// small frames cost one read, and FrameParser finds the frames in it. A frame's header,
// metadata and tensor table are decoded from the inbox, every size checked against the
// WireLimits and this machine's memory before anything is allocated; the payload bytes that
// came in the same read are copied out of the inbox, the rest is read by the caller straight
// into the frame's newly allocated tensors (no copy of a large payload).
//
// Use: parse(); on read_more, read into read_buffer() and call bytes_read(n); on read_payload,
// read exactly unread_payload() into place; then take_frame(). On malformed, error() says why
// and the connection must go: the stream cannot be resynchronised.
//
// Contract: one reader (the connection's strand); not thread-safe.
#pragma once

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/distributed/wire.hpp"

namespace psflow::detail {

class FrameParser {
 public:
  static constexpr std::size_t kInboxBytes = 64 * 1024;
  enum class Next { read_more, read_payload, frame, malformed };

  explicit FrameParser(wire::WireLimits limits) : limits_(limits) {}

  // Looks for the next frame in what was read (see the top of this file).
  Next parse();
  // Where the next read goes: the room after the unparsed bytes, enough for what parse()
  // last asked for (a frame's header, metadata and table are read whole into the inbox).
  boost::asio::mutable_buffer read_buffer();
  void bytes_read(std::size_t n) { end_ += n; }
  // The parts of the frame's tensors the inbox did not hold; valid until take_frame().
  const std::vector<boost::asio::mutable_buffer>& unread_payload() const { return unread_; }
  // The frame parse() found, once its payload is all in: decodes its string tensors and checks
  // the payload's bytes (a bool must be 0 or 1); DataLoss, and no frame, when they are wrong.
  std::optional<wire::Frame> take_frame();
  // Why parse() or take_frame() failed: DataLoss for a malformed frame, ResourceExhausted for a
  // legal claim this machine cannot hold, what the allocation threw otherwise.
  const Status& error() const noexcept { return error_; }

 private:
  std::size_t buffered() const noexcept { return end_ - start_; }

  const wire::WireLimits limits_;
  // Bytes read and not yet parsed are inbox_[start_, end_).
  std::vector<char> inbox_ = std::vector<char>(kInboxBytes);
  std::size_t start_ = 0;
  std::size_t end_ = 0;
  std::size_t wanted_ = wire::kHeaderBytes;  // bytes parse() needs in the inbox to go on
  wire::Frame incoming_;
  wire::PayloadDestinations destinations_;  // where incoming_'s payload goes
  std::vector<boost::asio::mutable_buffer> unread_;
  Status error_;
};

// ---------------------------------------------------------------------------------------------

inline FrameParser::Next FrameParser::parse() {
  if (buffered() < wire::kHeaderBytes) {
    wanted_ = wire::kHeaderBytes;
    return Next::read_more;
  }
  const char* at = inbox_.data() + start_;
  wire::FrameHeader header;
  try {
    header = wire::decode_header(reinterpret_cast<const unsigned char*>(at), limits_);
  } catch (const Error& e) {
    error_ = Status(ErrorCode::data_loss, e.message());
    return Next::malformed;
  }
  const std::size_t frame_start = wire::kHeaderBytes + header.metadata_bytes + header.table_bytes;
  if (buffered() < frame_start) {
    wanted_ = frame_start;
    return Next::read_more;
  }
  incoming_ = wire::Frame{};
  incoming_.type = header.type;
  incoming_.request_id = header.request_id;
  incoming_.metadata.assign(at + wire::kHeaderBytes, header.metadata_bytes);
  try {
    std::vector<std::uint64_t> payload_sizes;
    incoming_.tensors = wire::allocate_from_table(
        std::string_view(at + wire::kHeaderBytes + header.metadata_bytes, header.table_bytes),
        header, limits_, &payload_sizes);
    destinations_ = wire::payload_destinations(incoming_.tensors, payload_sizes);
  } catch (const Error& e) {
    error_ = Status(e.code(), e.message());
    return Next::malformed;
  } catch (...) {  // std::bad_alloc: the process lives, this connection goes
    error_ = Status::from_current_exception();
    return Next::malformed;
  }
  start_ += frame_start;
  unread_.clear();
  for (std::span<char> piece : destinations_.pieces) {
    const std::size_t from_inbox = std::min(piece.size(), buffered());
    if (from_inbox) std::memcpy(piece.data(), inbox_.data() + start_, from_inbox);
    start_ += from_inbox;
    if (from_inbox < piece.size())
      unread_.emplace_back(piece.data() + from_inbox, piece.size() - from_inbox);
  }
  return unread_.empty() ? Next::frame : Next::read_payload;  // read_payload: the inbox is empty
}

inline boost::asio::mutable_buffer FrameParser::read_buffer() {
  std::memmove(inbox_.data(), inbox_.data() + start_, buffered());
  end_ -= start_;
  start_ = 0;
  if (buffered() == 0 && inbox_.size() > kInboxBytes) inbox_.assign(kInboxBytes, '\0');
  if (wanted_ > inbox_.size()) inbox_.resize(wanted_);  // within the limits: decode_header
  return boost::asio::buffer(inbox_.data() + end_, inbox_.size() - end_);
}

inline std::optional<wire::Frame> FrameParser::take_frame() {
  unread_.clear();
  try {
    wire::finish_payload(incoming_.tensors, destinations_);
  } catch (const Error& e) {
    error_ = Status(ErrorCode::data_loss, e.message());
    return std::nullopt;
  }
  return std::move(incoming_);
}

}  // namespace psflow::detail
