// The wire format: header and tensor-table validation, message round trips, and that no byte
// sequence makes decoding crash or allocate past the limits (only DataLoss comes out).
#include <catch2/catch.hpp>
#include <random>

#include "psflow/distributed/messages.hpp"
#include "psflow/graph.hpp"

using namespace psflow;

namespace {
std::string header_bytes(const wire::FrameHeader& h) {
  std::string out(wire::kHeaderBytes, '\0');
  wire::encode_header(h, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}
wire::FrameHeader decode(const std::string& bytes, const wire::WireLimits& limits = {}) {
  return wire::decode_header(reinterpret_cast<const unsigned char*>(bytes.data()), limits);
}
}  // namespace

TEST_CASE("a frame header round-trips, and bad headers are DataLoss") {
  wire::FrameHeader h;
  h.type = wire::MessageType::run_graph;
  h.request_id = 0x1122334455667788ull;
  h.metadata_bytes = 17;
  h.table_bytes = 18;
  h.payload_bytes = 4096;
  h.tensor_count = 1;
  const auto back = decode(header_bytes(h));
  CHECK(back.type == h.type);
  CHECK(back.request_id == h.request_id);
  CHECK(back.metadata_bytes == 17);
  CHECK(back.table_bytes == 18);
  CHECK(back.payload_bytes == 4096);

  auto bad = header_bytes(h);
  bad[0] = 'X';
  CHECK_THROWS_WITH(decode(bad), Catch::Contains("bad magic"));
  wire::FrameHeader v = h;
  v.version = 9;
  CHECK_THROWS_WITH(decode(header_bytes(v)), Catch::Contains("version"));
  wire::FrameHeader t = h;
  t.type = static_cast<wire::MessageType>(77);
  CHECK_THROWS_AS(decode(header_bytes(t)), DataLoss);
  wire::WireLimits small;
  small.max_metadata_bytes = 16;
  CHECK_THROWS_WITH(decode(header_bytes(h), small), Catch::Contains("metadata"));
  small = {};
  small.max_frame_bytes = 1000;
  CHECK_THROWS_WITH(decode(header_bytes(h), small), Catch::Contains("payload"));
}

TEST_CASE(
    "the tensor table describes tensors, and claims beyond the limits are refused before "
    "allocating") {
  std::vector<Tensor> tensors = {Tensor(DType::float32, {2, 3}), Tensor(std::int64_t{5}),
                                 Tensor(DType::boolean, {0})};
  const std::string table = wire::encode_tensor_table(tensors);
  wire::FrameHeader h;
  h.tensor_count = 3;
  h.table_bytes = static_cast<std::uint32_t>(table.size());
  h.payload_bytes = 24 + 8;
  auto allocated = wire::allocate_from_table(table, h, {});
  REQUIRE(allocated.size() == 3);
  CHECK(allocated[0].summary() == "float32[2,3]");
  CHECK(allocated[1].summary() == "int64[]");
  CHECK(allocated[2].summary() == "bool[0]");

  wire::FrameHeader wrong_total = h;
  wrong_total.payload_bytes = 31;
  CHECK_THROWS_AS(wire::allocate_from_table(table, wrong_total, {}), DataLoss);
  CHECK_THROWS_AS(wire::allocate_from_table(table.substr(0, table.size() - 3), h, {}), DataLoss);

  wire::WireLimits limits;
  limits.max_tensor_bytes = 16;
  CHECK_THROWS_WITH(wire::allocate_from_table(table, h, limits), Catch::Contains("limit"));

  std::string huge;
  huge.push_back(static_cast<char>(DType::float64));
  huge.push_back(3);
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t dim = std::uint64_t{1} << 30;
    huge.append(reinterpret_cast<const char*>(&dim), 8);
  }
  wire::FrameHeader hh;
  hh.tensor_count = 1;
  hh.table_bytes = static_cast<std::uint32_t>(huge.size());
  hh.payload_bytes = 64;
  CHECK_THROWS_AS(wire::allocate_from_table(huge, hh, {}), DataLoss);
  std::string unknown_dtype = table;
  unknown_dtype[0] = 42;
  CHECK_THROWS_WITH(wire::allocate_from_table(unknown_dtype, h, {}),
                    Catch::Contains("unknown dtype"));
}

TEST_CASE("a GraphDef with every attribute kind survives encoding") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {-1, 3}, "x");
  Output c = ops::constant(g, Tensor::from_vector<float>({1, 2, 3}), "c");
  Output y = ops::reduce_sum(x * c, {1}, true);
  ops::constant(g, Tensor::from_vector<std::string>({"", std::string("a\0b", 3), "vocab"}),
                "words");
  wire::RegisterGraph message;
  for (std::size_t i = 0; i < g.num_nodes(); ++i)
    message.graph.nodes.push_back(to_node_def(g, static_cast<int>(i)));
  message.graph.nodes.back().device = "/job:ps/replica:0/task:0/device:CPU:0";
  const auto back = wire::decode<wire::RegisterGraph>(wire::encode(message), "register_graph");
  REQUIRE(back.graph.nodes.size() == message.graph.nodes.size());
  for (std::size_t i = 0; i < back.graph.nodes.size(); ++i) {
    const auto& a = message.graph.nodes[i];
    const auto& b = back.graph.nodes[i];
    CHECK(a.name == b.name);
    CHECK(a.op == b.op);
    CHECK(a.inputs == b.inputs);
    CHECK(a.device == b.device);
    REQUIRE(a.attrs.size() == b.attrs.size());
    for (const auto& [key, value] : a.attrs) {
      const auto& other = b.attrs.at(key);
      if (auto t = std::get_if<Tensor>(&value))
        CHECK(t->equals(std::get<Tensor>(other)));
      else
        CHECK(value.index() == other.index());
    }
  }
  Graph imported;
  import_graph_def(imported, back.graph);
  CHECK(imported.operation(y.op().name()).output(0).shape() == PartialShape::of({-1, 1}));
  CHECK(imported.operation("words").output(0).dtype() == DType::string);

  // A string tensor's element count is checked against the bytes left before it is allocated.
  std::string lying = wire::encode(message);
  const std::size_t at = lying.find(std::string("vocab"));
  REQUIRE(at != std::string::npos);
  CHECK_THROWS_AS(wire::decode<wire::RegisterGraph>(lying.substr(0, at + 2), "register_graph"),
                  DataLoss);
}

TEST_CASE("decoding random and mutated bytes gives a message or DataLoss, never a crash") {
  wire::RunGraph run{"graph-7", 42, 99};
  const std::string valid = wire::encode(run);
  CHECK(wire::decode<wire::RunGraph>(valid, "run_graph").handle == "graph-7");
  CHECK_THROWS_WITH(wire::decode<wire::RunGraph>(valid + "x", "run_graph"),
                    Catch::Contains("trailing"));
  std::mt19937 rng(1);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = valid;
    if (i % 2 == 0) {
      bytes.assign(rng() % 64, '\0');
      for (auto& ch : bytes) ch = static_cast<char>(rng());
    } else {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    try {
      (void)wire::decode<wire::RegisterGraph>(bytes, "register_graph");
      (void)wire::decode<wire::RunGraph>(bytes, "run_graph");
    } catch (const DataLoss&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
  // A count claiming more elements than bytes remain is refused before reserving memory.
  std::string lying = wire::encode(wire::Handle{"abc"});
  const std::uint64_t huge = std::uint64_t{1} << 60;
  std::memcpy(lying.data(), &huge, sizeof huge);
  CHECK_THROWS_WITH(wire::decode<wire::Handle>(lying, "handle"), Catch::Contains("claims"));
}

namespace {
// What Boost's binary archive (no header) writes for `message`: the layout every message uses.
template <class Message>
std::string boost_archive_bytes(const Message& message) {
  wire::StringWriteBuffer out;
  {
    boost::archive::binary_oarchive archive(out,
                                            boost::archive::no_header | boost::archive::no_codecvt);
    message.save(archive);
  }
  return out.take();
}

template <class Message>
void check_plain_encoding(const Message& message, const char* what) {
  STATIC_REQUIRE(wire::sent_every_step<Message>);
  const std::string bytes = wire::encode(message);
  CHECK(bytes == boost_archive_bytes(message));
  CHECK(wire::encode(wire::decode<Message>(bytes, what)) == bytes);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut)
    CHECK_THROWS_AS(wire::decode<Message>(bytes.substr(0, cut), what), DataLoss);
  CHECK_THROWS_WITH(wire::decode<Message>(bytes + "x", what), Catch::Contains("trailing"));
}
}  // namespace

TEST_CASE(
    "per-step messages skip the archive object but keep its bytes, and short ones are DataLoss") {
  check_plain_encoding(wire::RunGraph{"graph-7", 0x0102030405060708ull, 99}, "run_graph");
  check_plain_encoding(wire::TensorMessage{42, "w:0;/job:ps/replica:0/task:0"}, "tensor");
  check_plain_encoding(wire::Reply{static_cast<std::int32_t>(ErrorCode::aborted), "restarted", 7},
                       "reply");
  check_plain_encoding(
      wire::AbortStep{5, static_cast<std::int32_t>(ErrorCode::unavailable), "stop"}, "abort_step");
  STATIC_REQUIRE_FALSE(wire::sent_every_step<wire::RegisterGraph>);
  // The checks of each message still apply.
  CHECK_THROWS_WITH(wire::decode<wire::Reply>(wire::encode(wire::Reply{999, "?", 0}), "reply"),
                    Catch::Contains("malformed reply message: reply has an unknown status code"));
  std::string lying = wire::encode(wire::RunGraph{"abc", 1, 2});
  const std::uint64_t huge = std::uint64_t{1} << 60;
  std::memcpy(lying.data(), &huge, sizeof huge);
  CHECK_THROWS_WITH(wire::decode<wire::RunGraph>(lying, "run_graph"), Catch::Contains("claims"));
}

// Found by fuzzing (fuzz/targets/wire_frame.cpp; inputs in fuzz/regressions/wire_frame/).
TEST_CASE("fuzz regression: a workers_done message whose done byte is not 0 or 1 is DataLoss") {
  std::string bytes = wire::encode(wire::WorkersDone{true, "/job:worker/replica:0/task:1", {}});
  const auto message = wire::decode<wire::WorkersDone>(bytes, "workers_done");
  CHECK(message.done);
  CHECK(message.reporter == "/job:worker/replica:0/task:1");
  bytes[0] = 4;  // `done` is the first byte: 4 used to be loaded straight into a bool
  CHECK_THROWS_AS(wire::decode<wire::WorkersDone>(bytes, "workers_done"), DataLoss);
  CHECK_THROWS_WITH(wire::decode<wire::WorkersDone>(bytes, "workers_done"),
                    Catch::Contains("a boolean holds 4"));
}

TEST_CASE("fuzz regression: a boolean byte other than 0 or 1 is DataLoss, never read as a bool") {
  auto graph_with = [](const AttrValue& value) {
    wire::RegisterGraph message;
    message.graph.nodes.push_back(NodeDef{"n", "NoOp", {}, "", {}});
    message.graph.nodes.back().attrs["a"] = value;
    return wire::encode(message);
  };
  // A bool attribute is the message's last byte: 2 used to be loaded straight into a bool.
  std::string bytes = graph_with(true);
  CHECK(std::get<bool>(
      wire::decode<wire::RegisterGraph>(bytes, "register_graph").graph.nodes[0].attrs.at("a")));
  bytes.back() = 2;
  CHECK_THROWS_AS(wire::decode<wire::RegisterGraph>(bytes, "register_graph"), DataLoss);
  CHECK_THROWS_WITH(wire::decode<wire::RegisterGraph>(bytes, "register_graph"),
                    Catch::Contains("boolean attribute holds 2"));

  // The same for a bool tensor's bytes, in an attribute and in a frame's payload.
  bytes = graph_with(Tensor::from_vector<bool>({true, false}));
  bytes.back() = 7;
  CHECK_THROWS_WITH(wire::decode<wire::RegisterGraph>(bytes, "register_graph"),
                    Catch::Contains("bool tensor holding the byte 7"));
  std::vector<Tensor> payload = {Tensor::from_vector<float>({1.5f}),
                                 Tensor::from_vector<bool>({false, true})};
  CHECK_NOTHROW(wire::check_payload(payload));
  static_cast<unsigned char*>(payload[1].raw_data())[0] = 0xff;
  CHECK_THROWS_AS(wire::check_payload(payload), DataLoss);
}
