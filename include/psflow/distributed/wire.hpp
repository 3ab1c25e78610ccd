// The wire format. A frame is
//   header (40 bytes) | metadata | tensor table | tensor payloads
// The header has fixed-size little-endian fields; the metadata is the message (which request,
// which step...) in Boost.Serialization's binary archive layout; the tensor table gives each
// tensor's dtype and shape; the payloads are the tensors' raw bytes, written straight from their
// buffers (scatter-gather) and read straight into freshly allocated destination tensors (a string
// tensor's payload is its encoded strings, core/string_encoding.hpp). Every size
// a peer claims is checked against WireLimits before anything is allocated, and a frame that fails
// a check is reported as DataLoss so that only its connection is closed.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <cstdint>
#include <cstring>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <span>
#include <streambuf>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/string_encoding.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/distributed/wire_limits.hpp"
#include "psflow/graph/graph_def.hpp"

namespace psflow::wire {

static_assert(std::endian::native == std::endian::little,
              "psflow's wire format assumes a little-endian host");

inline constexpr std::uint32_t kMagic = 0x57465350;  // "PSFW"
// 3: heartbeat frames; 4: string tensors; 5: dead values (a tensor frame without a tensor)
inline constexpr std::uint16_t kVersion = 5;
inline constexpr std::size_t kHeaderBytes = 40;

enum class MessageType : std::uint16_t {
  hello = 1,         // first frame on a connection: who I am
  reply,             // answer to any request: status (+ handle, + tensors)
  register_graph,    // master -> worker: a partition to run later
  run_graph,         // master -> worker: run a registered partition for one step
  tensor,            // one-way: a tensor for a step's rendezvous on the receiving task
  abort_step,        // one-way: fail every pending recv of a step
  deregister_graph,  // master -> worker: forget a partition
  stop_server,       // "please stop": the receiving server's join() returns
  ping,              // liveness / incarnation check
  heartbeat,         // one-way, empty: "still here" from a side that had nothing else to send
  workers_done,      // worker -> ps, chief: the workers done training (end_of_training.hpp)
  last = workers_done,
};

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  MessageType type = MessageType::ping;
  std::uint64_t request_id = 0;  // pairs a reply with its request; 0 for one-way frames
  std::uint32_t metadata_bytes = 0;
  std::uint32_t table_bytes = 0;
  std::uint64_t payload_bytes = 0;
  std::uint32_t tensor_count = 0;
  std::uint32_t reserved = 0;
};

// A frame in memory: tensors travel beside the metadata, never inside it.
struct Frame {
  MessageType type = MessageType::ping;
  std::uint64_t request_id = 0;
  std::string metadata;
  std::vector<Tensor> tensors;
};

// A DType travels as its enum value (one byte).
inline bool is_dtype_code(unsigned code) { return code < std::size(kAllDTypes); }

// The payload bytes of `t`: its buffer, or for a string tensor its encoded strings.
inline std::uint64_t payload_bytes(const Tensor& t) {
  return t.dtype() == DType::string ? encoded_strings_size(t) : t.nbytes();
}

// The header of `frame` whose tensor table (encode_tensor_table) is `table_bytes` long.
inline FrameHeader frame_header(const Frame& frame, std::size_t table_bytes) {
  FrameHeader h;
  h.type = frame.type;
  h.request_id = frame.request_id;
  h.metadata_bytes = static_cast<std::uint32_t>(frame.metadata.size());
  h.table_bytes = static_cast<std::uint32_t>(table_bytes);
  h.tensor_count = static_cast<std::uint32_t>(frame.tensors.size());
  for (const Tensor& t : frame.tensors) h.payload_bytes += payload_bytes(t);
  return h;
}

inline void encode_header(const FrameHeader& h, unsigned char* out) {
  auto put = [&out](const auto& v) {
    std::memcpy(out, &v, sizeof v);
    out += sizeof v;
  };
  put(h.magic);
  put(h.version);
  put(static_cast<std::uint16_t>(h.type));
  put(h.request_id);
  put(h.metadata_bytes);
  put(h.table_bytes);
  put(h.payload_bytes);
  put(h.tensor_count);
  put(h.reserved);
}

// Decodes and validates a header; throws DataLoss saying what is wrong.
inline FrameHeader decode_header(const unsigned char* in, const WireLimits& limits) {
  FrameHeader h;
  std::uint16_t type = 0;
  auto get = [&in](auto& v) {
    std::memcpy(&v, in, sizeof v);
    in += sizeof v;
  };
  get(h.magic);
  get(h.version);
  get(type);
  get(h.request_id);
  get(h.metadata_bytes);
  get(h.table_bytes);
  get(h.payload_bytes);
  get(h.tensor_count);
  get(h.reserved);
  h.type = static_cast<MessageType>(type);
  if (h.magic != kMagic)
    throw DataLoss("not a psflow frame (bad magic): is something else talking to this port?");
  if (h.version != kVersion)
    throw DataLoss("psflow wire version " + std::to_string(h.version) +
                   " is not supported (this is version " + std::to_string(kVersion) +
                   "): run the same psflow version on every task");
  if (type == 0 || type > static_cast<std::uint16_t>(MessageType::last))
    throw DataLoss("unknown message type " + std::to_string(type));
  if (h.metadata_bytes > limits.max_metadata_bytes)
    throw DataLoss("frame metadata of " + std::to_string(h.metadata_bytes) +
                   " bytes exceeds the limit of " + std::to_string(limits.max_metadata_bytes));
  if (h.tensor_count > limits.max_tensors)
    throw DataLoss("frame claims " + std::to_string(h.tensor_count) + " tensors, the limit is " +
                   std::to_string(limits.max_tensors));
  if (h.table_bytes > static_cast<std::uint64_t>(h.tensor_count) * (2 + 8 * 256))
    throw DataLoss("frame tensor table of " + std::to_string(h.table_bytes) +
                   " bytes is too large for " + std::to_string(h.tensor_count) + " tensors");
  if (h.payload_bytes > limits.max_frame_bytes)
    throw DataLoss("frame payload of " + std::to_string(h.payload_bytes) +
                   " bytes exceeds the limit of " + std::to_string(limits.max_frame_bytes));
  return h;
}

// Tensor table: per tensor u8 dtype, u8 rank, then rank u64 dimensions; a string tensor then
// its u64 payload size.
inline std::string encode_tensor_table(const std::vector<Tensor>& tensors) {
  std::string table;
  auto put_u64 = [&table](std::uint64_t v) {
    table.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  for (const Tensor& t : tensors) {
    table.push_back(static_cast<char>(t.dtype()));
    table.push_back(static_cast<char>(t.rank()));
    for (std::size_t d : t.shape()) put_u64(d);
    if (t.dtype() == DType::string) put_u64(payload_bytes(t));
  }
  return table;
}

// This machine's physical memory in bytes (the most any frame could ever be held in).
inline std::uint64_t physical_memory_bytes() {
  static const std::uint64_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * page
                                 : std::numeric_limits<std::uint64_t>::max();
  }();
  return bytes;
}

// Allocates the tensors a table describes (contents to be read into them), after checking each
// claimed size against the limits, the header's payload total and this machine's memory
// (ResourceExhausted before anything is allocated). `payload_sizes`, if given, receives each
// tensor's payload size.
inline std::vector<Tensor> allocate_from_table(
    std::string_view table, const FrameHeader& h, const WireLimits& limits,
    std::vector<std::uint64_t>* payload_sizes = nullptr) {
  std::vector<Tensor> tensors;
  tensors.reserve(h.tensor_count);
  std::size_t pos = 0;
  std::uint64_t total = 0, total_memory = 0;
  for (std::uint32_t i = 0; i < h.tensor_count; ++i) {
    if (pos + 2 > table.size()) throw DataLoss("tensor table is truncated");
    const auto dtype_code = static_cast<unsigned char>(table[pos]);
    const auto rank = static_cast<unsigned char>(table[pos + 1]);
    pos += 2;
    if (!is_dtype_code(dtype_code)) throw DataLoss("tensor table names an unknown dtype");
    const auto dtype = static_cast<DType>(dtype_code);
    if (pos + 8ull * rank > table.size()) throw DataLoss("tensor table is truncated");
    Shape shape(rank);
    // A string element takes at least its 8-byte length in the payload.
    std::uint64_t bytes = dtype == DType::string ? 8 : dtype_size(dtype);
    for (std::size_t d = 0; d < rank; ++d) {
      std::uint64_t dim;
      std::memcpy(&dim, table.data() + pos, sizeof dim);
      pos += sizeof dim;
      if (dim != 0 && bytes > limits.max_tensor_bytes / dim)
        throw DataLoss("a tensor in the frame claims more than the " +
                       std::to_string(limits.max_tensor_bytes) + "-byte limit");
      bytes *= dim;
      shape[d] = static_cast<std::size_t>(dim);
    }
    std::uint64_t memory = bytes;  // what holding it takes here
    if (dtype == DType::string) {
      // Each element is a std::string object beside the bytes it holds.
      memory = bytes / 8 * sizeof(std::string);
      if (pos + 8 > table.size()) throw DataLoss("tensor table is truncated");
      std::uint64_t encoded;
      std::memcpy(&encoded, table.data() + pos, sizeof encoded);
      pos += sizeof encoded;
      if (encoded < bytes)
        throw DataLoss("a string tensor in the frame claims fewer bytes than its lengths take");
      if (encoded > limits.max_tensor_bytes)
        throw DataLoss("a tensor in the frame claims more than the " +
                       std::to_string(limits.max_tensor_bytes) + "-byte limit");
      memory += encoded;
      bytes = encoded;
    }
    if (payload_sizes) payload_sizes->push_back(bytes);
    total += bytes;
    total_memory += memory;
    if (total > h.payload_bytes)
      throw DataLoss("tensor table claims more bytes than the frame carries");
    if (total_memory > physical_memory_bytes())
      throw ResourceExhausted("a frame announces " + std::to_string(total_memory) +
                              " bytes of tensors, more than this machine's memory (" +
                              std::to_string(physical_memory_bytes()) + " bytes)");
    tensors.push_back(Tensor::uninitialized(dtype, std::move(shape)));
  }
  if (pos != table.size()) throw DataLoss("tensor table has trailing bytes");
  if (total != h.payload_bytes) throw DataLoss("tensor table and frame payload sizes disagree");
  return tensors;
}

// Where a received frame's payload goes: each tensor's own buffer, in order, except that a
// string tensor's encoded bytes are staged and decoded by finish_payload.
struct PayloadDestinations {
  std::vector<std::span<char>> pieces;                      // one per tensor, in payload order
  std::vector<std::pair<std::size_t, std::string>> staged;  // (tensor index, encoded bytes)
};

// `payload_sizes` from allocate_from_table.
inline PayloadDestinations payload_destinations(std::vector<Tensor>& tensors,
                                                const std::vector<std::uint64_t>& payload_sizes) {
  PayloadDestinations d;
  std::size_t strings = 0;
  for (const Tensor& t : tensors) strings += t.dtype() == DType::string;
  d.staged.reserve(strings);  // no reallocation: pieces point into the staged strings
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].dtype() == DType::string) {
      d.staged.emplace_back(i, std::string(payload_sizes.at(i), '\0'));
      d.pieces.emplace_back(d.staged.back().second.data(), d.staged.back().second.size());
    } else {
      d.pieces.emplace_back(static_cast<char*>(tensors[i].raw_data()), tensors[i].nbytes());
    }
  }
  return d;
}

// A bool tensor's bytes must each be 0 or 1: anything else is undefined behaviour when read.
inline void check_bool_bytes(const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::boolean) return;
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i)
    if (bytes[i] > 1)
      throw DataLoss(what + " is a bool tensor holding the byte " + std::to_string(bytes[i]) +
                     " (only 0 and 1 are booleans)");
}

// Checks what the payload put into a frame's tensors (once all of it has arrived): DataLoss for
// a bool byte other than 0 or 1.
inline void check_payload(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) check_bool_bytes(t, "a tensor in the frame");
}

// Once all of the payload has arrived: decodes the staged strings into their tensors and checks
// the bools (DataLoss for a malformed payload).
inline void finish_payload(std::vector<Tensor>& tensors, PayloadDestinations& destinations) {
  for (auto& [index, bytes] : destinations.staged)
    if (const std::string problem = decode_strings(bytes, tensors[index]); !problem.empty())
      throw DataLoss("a string tensor in the frame is malformed: " + problem);
  destinations.staged.clear();
  check_payload(tensors);
}

// ---------------------------------------------------------------------------------------------
// Metadata: Boost.Serialization binary archives. Strings and sequences are written as a count
// followed by their elements, and read back only after checking the count against the bytes
// that remain, so a hostile count cannot make us allocate.
//
// The messages of every step (run_graph, its reply, tensors, aborts) are written and read by
// PlainWriter/PlainReader instead, which produce and accept exactly the bytes of Boost's binary
// archive without header (primitives in native little-endian order): a Boost archive builds a
// std::locale and a table of helpers per message, about 8k instructions, a sixth of a small
// step's cost.

// The bytes left to read in the message being decoded on this thread.
class ByteSource {
 public:
  virtual std::size_t remaining() const = 0;

 protected:
  ~ByteSource() = default;
};

class MemoryReadBuffer : public std::streambuf, public ByteSource {
 public:
  explicit MemoryReadBuffer(const std::string& data) {
    char* begin = const_cast<char*>(data.data());
    setg(begin, begin, begin + data.size());
  }
  std::size_t remaining() const override { return static_cast<std::size_t>(egptr() - gptr()); }
};

// Appends everything written to a string: an archive on it skips a stream's set-up.
class StringWriteBuffer : public std::streambuf {
 public:
  std::string take() { return std::move(bytes_); }

 protected:
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    bytes_.append(data, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof()))
      bytes_.push_back(traits_type::to_char_type(c));
    return traits_type::not_eof(c);
  }

 private:
  std::string bytes_;
};

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian, as Boost's binary archive writes it on this host");

template <class T>
concept WirePrimitive = std::is_arithmetic_v<T>;

class PlainWriter {
 public:
  template <WirePrimitive T>
  PlainWriter& operator<<(T value) {
    save_binary(&value, sizeof value);
    return *this;
  }
  void save_binary(const void* data, std::size_t n) {
    bytes_.append(static_cast<const char*>(data), n);
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// The bool a wire byte holds: 0 or 1, anything else DataLoss (reading such a byte straight into
// a bool would be undefined behaviour). `what` names the value, e.g. "a boolean attribute".
inline bool bool_from_byte(std::uint8_t byte, const char* what = "a boolean") {
  if (byte > 1) throw DataLoss(std::string(what) + " holds " + std::to_string(byte));
  return byte == 1;
}

class PlainReader : public ByteSource {
 public:
  explicit PlainReader(const std::string& bytes) : bytes_(bytes) {}
  template <WirePrimitive T>
  PlainReader& operator>>(T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      std::uint8_t byte = 0;
      load_binary(&byte, 1);
      value = bool_from_byte(byte);
    } else {
      load_binary(&value, sizeof value);
    }
    return *this;
  }
  void load_binary(void* data, std::size_t n) {
    if (n > remaining())
      throw DataLoss("it ends " + std::to_string(n - remaining()) + " bytes early");
    std::memcpy(data, bytes_.data() + offset_, n);
    offset_ += n;
  }
  std::size_t remaining() const override { return bytes_.size() - offset_; }

 private:
  const std::string& bytes_;
  std::size_t offset_ = 0;
};

// Messages sent in every step opt in to the plain encoding (see above).
template <class Message>
inline constexpr bool sent_every_step = false;

namespace detail {
inline thread_local const ByteSource* decoding = nullptr;

inline std::uint64_t checked_count(std::uint64_t count, std::size_t min_element_bytes) {
  const std::size_t left = decoding ? decoding->remaining() : 0;
  if (min_element_bytes > 0 && count > left / min_element_bytes)
    throw DataLoss("message claims " + std::to_string(count) + " elements but only " +
                   std::to_string(left) + " bytes remain");
  return count;
}
}  // namespace detail

// A bool as one byte, 0 or 1 (the bytes a Boost archive writes for a bool); loading checks it
// (bool_from_byte).
template <class Archive>
void save_bool(Archive& ar, bool b) {
  ar << static_cast<std::uint8_t>(b ? 1 : 0);
}
template <class Archive>
void load_bool(Archive& ar, bool& b) {
  std::uint8_t byte = 0;
  ar >> byte;
  b = bool_from_byte(byte);
}

template <class Archive>
void save_string(Archive& ar, const std::string& s) {
  std::uint64_t n = s.size();
  ar << n;
  if (n) ar.save_binary(s.data(), n);
}
template <class Archive>
void load_string(Archive& ar, std::string& s) {
  std::uint64_t n = 0;
  ar >> n;
  s.resize(detail::checked_count(n, 1));
  if (n) ar.load_binary(s.data(), n);
}

template <class Archive, class T, class SaveOne>
void save_sequence(Archive& ar, const std::vector<T>& items, SaveOne save_one) {
  std::uint64_t n = items.size();
  ar << n;
  for (const T& item : items) save_one(ar, item);
}
template <class Archive, class T, class LoadOne>
void load_sequence(Archive& ar, std::vector<T>& items, LoadOne load_one) {
  std::uint64_t n = 0;
  ar >> n;
  items.clear();
  // The count is checked against the bytes left, but reserved only up to a small batch: one
  // byte of a hostile message must not buy sizeof(T) bytes of memory up front.
  items.reserve(
      static_cast<std::size_t>(std::min<std::uint64_t>(detail::checked_count(n, 1), 1024)));
  for (std::uint64_t i = 0; i < n; ++i) {
    items.emplace_back();
    load_one(ar, items.back());
  }
}

template <class Archive>
void save_tensor(Archive& ar, const Tensor& t) {
  auto dtype = static_cast<std::uint8_t>(t.dtype());
  ar << dtype;
  save_sequence(ar, std::vector<std::uint64_t>(t.shape().begin(), t.shape().end()),
                [](Archive& a, std::uint64_t d) { a << d; });
  if (t.dtype() == DType::string) {
    for (const std::string& s : t.values<std::string>()) save_string(ar, s);
  } else if (t.nbytes()) {
    ar.save_binary(t.raw_data(), t.nbytes());
  }
}
template <class Archive>
void load_tensor(Archive& ar, Tensor& t) {
  std::uint8_t dtype = 0;
  ar >> dtype;
  if (!is_dtype_code(dtype)) throw DataLoss("message holds a tensor of unknown dtype");
  std::vector<std::uint64_t> dims;
  load_sequence(ar, dims, [](Archive& a, std::uint64_t& d) { a >> d; });
  const bool strings = static_cast<DType>(dtype) == DType::string;
  // A string element takes at least its 8-byte length.
  std::uint64_t bytes = strings ? 8 : dtype_size(static_cast<DType>(dtype));
  for (auto d : dims) {
    if (d != 0 && bytes > std::numeric_limits<std::uint32_t>::max() / d)
      throw DataLoss("message holds an oversized tensor");
    bytes *= d;
  }
  detail::checked_count(bytes, 1);
  t = Tensor::uninitialized(static_cast<DType>(dtype), Shape(dims.begin(), dims.end()));
  if (strings) {
    for (std::string& s : t.values<std::string>()) load_string(ar, s);
  } else if (bytes) {
    ar.load_binary(t.raw_data(), bytes);
  }
  check_bool_bytes(t, "a tensor in the message");
}

template <class Archive>
void save_attr(Archive& ar, const AttrValue& v) {
  auto index = static_cast<std::uint8_t>(v.index());
  ar << index;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>)
          save_string(ar, x);
        else if constexpr (std::is_same_v<T, DType>)
          ar << static_cast<std::uint8_t>(x);
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
          save_sequence(ar, x, [](Archive& a, std::int64_t d) { a << d; });
        else if constexpr (std::is_same_v<T, Tensor>)
          save_tensor(ar, x);
        else
          ar << x;
      },
      v);
}
template <class Archive>
void load_attr(Archive& ar, AttrValue& v) {
  std::uint8_t index = 0;
  ar >> index;
  switch (index) {
    case 0: {
      std::uint8_t x = 0;
      ar >> x;
      v = bool_from_byte(x, "a boolean attribute");
      break;
    }
    case 1: {
      std::int64_t x;
      ar >> x;
      v = x;
      break;
    }
    case 2: {
      double x;
      ar >> x;
      v = x;
      break;
    }
    case 3: {
      std::string x;
      load_string(ar, x);
      v = std::move(x);
      break;
    }
    case 4: {
      std::uint8_t x;
      ar >> x;
      if (!is_dtype_code(x)) throw DataLoss("attribute holds an unknown dtype");
      v = static_cast<DType>(x);
      break;
    }
    case 5: {
      std::vector<std::int64_t> x;
      load_sequence(ar, x, [](Archive& a, std::int64_t& d) { a >> d; });
      v = std::move(x);
      break;
    }
    case 6: {
      Tensor x;
      load_tensor(ar, x);
      v = std::move(x);
      break;
    }
    default:
      throw DataLoss("attribute of unknown kind " + std::to_string(index));
  }
}

template <class Archive>
void save_graph_def(Archive& ar, const GraphDef& g) {
  save_sequence(ar, g.nodes, [](Archive& a, const NodeDef& n) {
    save_string(a, n.name);
    save_string(a, n.op);
    save_string(a, n.device);
    save_sequence(a, n.inputs, [](Archive& b, const std::string& s) { save_string(b, s); });
    std::uint64_t count = n.attrs.size();
    a << count;
    for (const auto& [key, value] : n.attrs) {
      save_string(a, key);
      save_attr(a, value);
    }
  });
}
template <class Archive>
void load_graph_def(Archive& ar, GraphDef& g) {
  load_sequence(ar, g.nodes, [](Archive& a, NodeDef& n) {
    load_string(a, n.name);
    load_string(a, n.op);
    load_string(a, n.device);
    load_sequence(a, n.inputs, [](Archive& b, std::string& s) { load_string(b, s); });
    std::uint64_t count = 0;
    a >> count;
    detail::checked_count(count, 2);
    for (std::uint64_t i = 0; i < count; ++i) {
      std::string key;
      load_string(a, key);
      load_attr(a, n.attrs[key]);
    }
  });
}

// Serialises a message (a struct with `template <class A> void save(A&) const` and `load(A&)`).
template <class Message>
std::string encode(const Message& message) {
  if constexpr (sent_every_step<Message>) {
    PlainWriter out;
    message.save(out);
    return out.take();
  } else {
    StringWriteBuffer out;
    {
      boost::archive::binary_oarchive archive(
          out, boost::archive::no_header | boost::archive::no_codecvt);
      message.save(archive);
    }
    return out.take();
  }
}

// Parses a message; any malformation is DataLoss naming the message kind.
template <class Message>
Message decode(const std::string& bytes, const char* what) {
  const ByteSource* previous = detail::decoding;
  Message message;
  std::size_t trailing = 0;
  try {
    if constexpr (sent_every_step<Message>) {
      PlainReader in(bytes);
      detail::decoding = &in;
      message.load(in);
      trailing = in.remaining();
    } else {
      MemoryReadBuffer buffer(bytes);
      detail::decoding = &buffer;
      boost::archive::binary_iarchive archive(
          buffer, boost::archive::no_header | boost::archive::no_codecvt);
      message.load(archive);
      trailing = buffer.remaining();
    }
  } catch (const DataLoss& e) {
    detail::decoding = previous;
    throw DataLoss(std::string("malformed ") + what + " message: " + e.message());
  } catch (const std::exception& e) {
    detail::decoding = previous;
    throw DataLoss(std::string("malformed ") + what + " message: " + e.what());
  }
  detail::decoding = previous;
  if (trailing != 0) throw DataLoss(std::string("malformed ") + what + " message: trailing bytes");
  return message;
}

}  // namespace psflow::wire
