// Fuzz target: one frame as it arrives on a connection (distributed/wire.hpp, messages.hpp).
// Decodes the header, allocates the tensors its table describes, fills them from the payload
// and decodes the metadata as the message the header's type names, as Connection and
// FrameDispatcher do; every message kind needs its case in decode_metadata (-Wswitch fails the
// build until a new kind has one). Properties checked beyond "no crash": the header and the tensor
// table re-encode to the bytes they came from, and every message that decodes re-encodes to bytes
// that decode to the same bytes again.
#include <algorithm>
#include <cstring>

#include "fuzz_common.hpp"
#include "psflow/distributed/messages.hpp"

namespace {

using namespace psflow;
using namespace psflow::wire;

// Limits far below the defaults: any allocation these allow stays small, so -malloc_limit_mb
// catches every size that escapes a check.
WireLimits fuzz_limits() {
  WireLimits limits;
  limits.max_metadata_bytes = 1u << 20;
  limits.max_tensor_bytes = 1u << 20;
  limits.max_frame_bytes = 4u << 20;
  limits.max_tensors = 256;
  return limits;
}

// Reads every element as its type, as the kernels a delivered tensor reaches will: UBSan
// reports a value its type cannot hold (a bool byte other than 0 or 1).
void touch_elements(const std::vector<Tensor>& tensors) {
  std::size_t nonzero = 0;
  for (const Tensor& t : tensors) {
    visit_any_dtype(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* values = t.data<T>();
      for (std::size_t i = 0; i < t.size(); ++i) nonzero += values[i] != T{};
    });
  }
  fuzz::check(nonzero <= std::size_t{1} << 40, "impossible element count");
}

template <class Message>
void decode_and_round_trip(const std::string& bytes, const char* what) {
  const Message message = decode<Message>(bytes, what);
  const std::string once = encode(message);
  const std::string twice = encode(decode<Message>(once, what));
  fuzz::check(once == twice, std::string("a ") + what + " message does not round-trip");
}

void decode_metadata(MessageType type, const std::string& metadata) {
  switch (type) {
    case MessageType::hello:
      return decode_and_round_trip<Hello>(metadata, "hello");
    case MessageType::reply: {
      decode_and_round_trip<Reply>(metadata, "reply");
      const Reply reply = decode<Reply>(metadata, "reply");
      (void)reply.status();
      if (!reply.trace.empty()) decode_and_round_trip<RunGraphTrace>(reply.trace, "trace");
      return;
    }
    case MessageType::register_graph: {
      decode_and_round_trip<RegisterGraph>(metadata, "register_graph");
      const RegisterGraph request = decode<RegisterGraph>(metadata, "register_graph");
      std::vector<Tensor> constants;
      for (const NodeDef& node : request.graph.nodes)
        for (const auto& [key, value] : node.attrs)
          if (const auto* t = std::get_if<Tensor>(&value)) constants.push_back(*t);
      return touch_elements(constants);
    }
    case MessageType::run_graph:
      return decode_and_round_trip<RunGraph>(metadata, "run_graph");
    case MessageType::tensor:
      return decode_and_round_trip<TensorMessage>(metadata, "tensor");
    case MessageType::abort_step:
      return decode_and_round_trip<AbortStep>(metadata, "abort_step");
    case MessageType::deregister_graph:
      return decode_and_round_trip<Handle>(metadata, "deregister_graph");
    case MessageType::stop_server:
      return decode_and_round_trip<StopServer>(metadata, "stop_server");
    case MessageType::workers_done:
      return decode_and_round_trip<WorkersDone>(metadata, "workers_done");
    case MessageType::ping:
    case MessageType::heartbeat:
      return;  // their metadata is not read
  }
}

void decode_frame(const std::uint8_t* data, std::size_t size) {
  if (size < kHeaderBytes) return;  // a connection waits for the rest of the header
  static const WireLimits limits = fuzz_limits();
  const FrameHeader header = decode_header(data, limits);
  unsigned char again[kHeaderBytes];
  encode_header(header, again);
  fuzz::check(std::memcmp(again, data, kHeaderBytes) == 0, "the header does not re-encode");

  const std::string_view rest = fuzz::as_text(data + kHeaderBytes, size - kHeaderBytes);
  const std::uint64_t start = std::uint64_t{header.metadata_bytes} + header.table_bytes;
  if (rest.size() < start) return;  // a connection waits for metadata and table
  Frame frame;
  frame.type = header.type;
  frame.request_id = header.request_id;
  frame.metadata.assign(rest.substr(0, header.metadata_bytes));
  const std::string_view table = rest.substr(header.metadata_bytes, header.table_bytes);
  std::vector<std::uint64_t> payload_sizes;
  frame.tensors = allocate_from_table(table, header, limits, &payload_sizes);
  PayloadDestinations destinations = payload_destinations(frame.tensors, payload_sizes);

  decode_metadata(frame.type, frame.metadata);

  // The payload: a connection reads the rest of it before delivering the frame.
  std::string_view payload = rest.substr(start);
  if (payload.size() < header.payload_bytes) return;
  for (std::span<char> piece : destinations.pieces) {
    if (!piece.empty()) std::memcpy(piece.data(), payload.data(), piece.size());
    payload.remove_prefix(piece.size());
  }
  finish_payload(frame.tensors, destinations);  // as the FrameParser does
  // A string tensor's table entry holds its payload size: only once decoded do they re-encode.
  fuzz::check(encode_tensor_table(frame.tensors) == table, "the tensor table does not re-encode");
  touch_elements(frame.tensors);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The header's version field (bytes 4-5) is set to this build's: the seeds and regression
  // inputs keep reaching the decoders behind the version check after a wire version bump.
  std::vector<std::uint8_t> frame(data, data + size);
  if (size >= psflow::wire::kHeaderBytes)
    std::memcpy(frame.data() + 4, &psflow::wire::kVersion, sizeof psflow::wire::kVersion);
  psflow::fuzz::only_psflow_errors([&] { decode_frame(frame.data(), frame.size()); });
  return 0;
}
