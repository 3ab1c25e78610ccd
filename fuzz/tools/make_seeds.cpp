// Writes the binary seed corpora of the fuzz targets (fuzz/corpus/wire_frame,
// fuzz/corpus/checkpoint and fuzz/corpus/graph_def) with psflow's own encoders, so every seed is
// a valid frame, checkpoint or GraphDef as psflow writes it today, plus a few near-valid
// variants. The text targets' seeds
// are written by hand. Run after a format change (see fuzz/README.md):
//   g++ -std=c++20 -Iinclude fuzz/tools/make_seeds.cpp -o build-fuzz/make_seeds
//       -lboost_serialization -lz -lre2 -pthread && build-fuzz/make_seeds fuzz/corpus   (one line)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "psflow/distributed/messages.hpp"
#include "psflow/graph.hpp"
#include "psflow/graph/graph_def.hpp"
#include "psflow/observe/graph_def_proto.hpp"
#include "psflow/train/checkpoint_file.hpp"

using namespace psflow;
namespace fs = std::filesystem;

namespace {

void save(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
  std::cout << file.string() << " (" << bytes.size() << " bytes)\n";
}

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A frame as it goes on the wire: header, metadata, tensor table, payloads.
std::string frame_bytes(const wire::Frame& frame) {
  const std::string table = wire::encode_tensor_table(frame.tensors);
  std::string out(wire::kHeaderBytes, '\0');
  wire::encode_header(wire::frame_header(frame, table.size()),
                      reinterpret_cast<unsigned char*>(out.data()));
  out += frame.metadata;
  out += table;
  for (const Tensor& t : frame.tensors)
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

void write_frames(const fs::path& dir) {
  using wire::MessageType;
  const Tensor matrix = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor flags = Tensor::from_vector<bool>({true, false, true}, {3});
  save(dir / "hello", frame_bytes(wire::make_frame(
                          MessageType::hello, wire::Hello{"/job:worker/replica:0/task:0", 42})));
  save(dir / "reply", frame_bytes(wire::make_reply(7, wire::Reply{0, "graph-1", 42, ""})));
  save(dir / "reply-error",
       frame_bytes(wire::make_reply(
           8, wire::Reply::from(Status(ErrorCode::aborted, "step 3 was aborted")))));
  wire::RunGraphTrace trace;
  trace.stats.task = "/job:ps/replica:0/task:0";
  trace.stats.device = "/job:ps/replica:0/task:0/device:CPU:0";
  trace.stats.nodes.push_back({"w/read", "Identity", 1, false, 100, 250});
  trace.stats.nodes.push_back({"recv", "_Recv", 2, true, 120, 400});
  trace.stats.sends.push_back({"edge_1_w/read", 24, 260});
  trace.stats.recvs.push_back({"edge_2_grad", 24, 390});
  trace.request_received_ns = 90;
  trace.reply_sent_ns = 410;
  save(dir / "reply-trace",
       frame_bytes(wire::make_reply(9, wire::Reply{0, "", 42, wire::encode(trace)})));

  wire::RegisterGraph graph;
  NodeDef w{"w", "VariableV2", {}, "/job:ps/replica:0/task:0/device:CPU:0", {}};
  w.attrs["dtype"] = DType::float32;
  w.attrs["shape"] = std::vector<std::int64_t>{2, 3};
  w.attrs["container"] = std::string("");
  NodeDef c{"c", "Const", {}, "/job:worker/replica:0/task:0/device:CPU:0", {}};
  c.attrs["value"] = matrix;
  c.attrs["dtype"] = DType::float32;
  NodeDef b{"b", "Const", {}, "", {}};
  b.attrs["value"] = flags;
  NodeDef add{"add", "Add", {"w:0", "c:0", "^b"}, "", {}};
  add.attrs["T"] = DType::float32;
  add.attrs["use_locking"] = true;
  add.attrs["alpha"] = 0.5;
  add.attrs["seed"] = std::int64_t{-3};
  graph.graph.nodes = {w, c, b, add};
  save(dir / "register-graph", frame_bytes(wire::make_frame(MessageType::register_graph, graph)));

  save(dir / "run-graph", frame_bytes(wire::make_frame(MessageType::run_graph,
                                                       wire::RunGraph{"graph-1", 5, 42, true})));
  save(dir / "tensor",
       frame_bytes(wire::make_frame(MessageType::tensor, wire::TensorMessage{5, "edge_1_w/read"},
                                    {matrix})));
  // A dead value (the untaken side of a cond): a tensor frame without a tensor.
  save(dir / "tensor-dead",
       frame_bytes(wire::make_frame(MessageType::tensor, wire::TensorMessage{5, "cond/Switch:1"})));
  save(dir / "tensors",
       frame_bytes(wire::make_frame(MessageType::reply, wire::Reply{},
                                    {flags, Tensor(std::int64_t{9}), Tensor(DType::float64, {0, 4}),
                                     Tensor::from_vector<std::int32_t>({7, 8}, {2, 1})})));
  save(dir / "abort-step",
       frame_bytes(wire::make_frame(MessageType::abort_step,
                                    wire::AbortStep{5, 10, "a ps task went away"})));
  save(dir / "deregister-graph",
       frame_bytes(wire::make_frame(MessageType::deregister_graph, wire::Handle{"graph-1"})));
  save(dir / "stop-server",
       frame_bytes(wire::make_frame(MessageType::stop_server, wire::StopServer{"training done"})));
  save(dir / "ping", frame_bytes(wire::make_frame(MessageType::ping, wire::Handle{})));
  // Near-valid: a frame cut inside its payload.
  const std::string tensor_frame = read(dir / "tensor");
  save(dir / "tensor-truncated", tensor_frame.substr(0, tensor_frame.size() - 5));
}

void write_checkpoints(const fs::path& dir, const fs::path& scratch) {
  const fs::path file = scratch / "seed.ckpt";
  train::write_checkpoint(file.string(),
                          {{"w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                           {"global_step", Tensor(std::int64_t{100})},
                           {"mask", Tensor::from_vector<bool>({true, false}, {2})},
                           {"b", Tensor::from_vector<double>({0.5}, {1})},
                           {"ids", Tensor::from_vector<std::int32_t>({1, 2, 3}, {3, 1})},
                           {"empty", Tensor(DType::float32, {0, 3})}});
  const std::string plain = read(file);
  save(dir / "plain", plain);

  using train::CheckpointEntry;
  using train::CheckpointSlice;
  train::write_checkpoint_entries(
      file.string(),
      {CheckpointEntry{"emb", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}),
                       CheckpointSlice{{4, 2}, {0, 0}}},
       CheckpointEntry{"emb", Tensor::from_vector<float>({5, 6, 7, 8}, {2, 2}),
                       CheckpointSlice{{4, 2}, {2, 0}}},
       CheckpointEntry{"bias", Tensor::from_vector<float>({1, 2}, {2}), std::nullopt}});
  save(dir / "sliced", read(file));

  // Slices that leave a gap: read_checkpoint_entries accepts it, read_checkpoint does not.
  train::write_checkpoint_entries(
      file.string(), {CheckpointEntry{"emb", Tensor::from_vector<float>({1, 2}, {1, 2}),
                                      CheckpointSlice{{3, 2}, {0, 0}}},
                      CheckpointEntry{"emb", Tensor::from_vector<float>({5, 6}, {1, 2}),
                                      CheckpointSlice{{3, 2}, {2, 0}}}});
  save(dir / "sliced-gap", read(file));

  // Near-valid: cut short, and one data byte flipped (its checksum no longer matches).
  save(dir / "plain-truncated", plain.substr(0, plain.size() - 7));
  std::string flipped = plain;
  flipped[60] = static_cast<char>(flipped[60] ^ 0x40);
  save(dir / "plain-flipped", flipped);
  fs::remove(file);
}

// A serving bundle's graph.pb: a small model with the attribute kinds a GraphDef carries.
void write_graph_defs(const fs::path& dir) {
  Graph g;
  auto x = ops::placeholder(g, DType::float32, {-1, 2}, "x");
  auto w = ops::variable(g, {2, 1}, DType::float32, "w");
  auto y = ops::matmul(x, ops::identity(w, "w/read"));
  auto b = ops::constant(g, Tensor::from_vector<float>({0.25f}, {1}), "b");
  auto p = ops::sigmoid(ops::reshape(y + b, {-1}), "probability");
  ops::mul(p, ops::scalar_like(p, 0.1));
  ops::constant(g, Tensor::from_vector<bool>({true, false}, {2}), "mask");
  const std::string bytes = observe::serialize_graph_def(g, {}, observe::GraphDefContent::complete);
  save(dir / "model", bytes);
  save(dir / "model-truncated", bytes.substr(0, bytes.size() - 9));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds <corpus directory, e.g. fuzz/corpus>\n";
    return 2;
  }
  const fs::path corpus = argv[1];
  fs::create_directories(corpus / "wire_frame");
  fs::create_directories(corpus / "checkpoint");
  fs::create_directories(corpus / "graph_def");
  const fs::path scratch =
      fs::temp_directory_path() / ("psflow-seeds-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  write_frames(corpus / "wire_frame");
  write_checkpoints(corpus / "checkpoint", scratch);
  write_graph_defs(corpus / "graph_def");
  fs::remove_all(scratch);
  return 0;
}
