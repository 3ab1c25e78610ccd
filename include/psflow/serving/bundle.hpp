// A serving bundle: a trained model as a directory that a process with no cluster can load
// (what TF's SavedModel is to TF Serving). export.hpp writes one, model.hpp loads it.
//
//   DIR/graph.pb          the inference graph as TF's GraphDef protobuf (observe/
//                         graph_def_proto.hpp, GraphDefContent::complete): only what the
//                         signature's outputs need, no optimizer, no Send/Recv, no devices
//   DIR/variables.psflow  every variable that graph reads, by its node name, in the
//                         checkpoint codec (train/checkpoint_file.hpp); a partitioned
//                         variable's shards each under their own name; a dynamic table shard's
//                         live rows as "<shard>-keys" and "<shard>-values"
//   DIR/manifest.json     {"format": "psflow serving bundle", "format_version": 1,
//                          "psflow_version": "0.1.0",
//                          "signature_def": {"serving_default": {
//                            "method_name": "tensorflow/serving/predict",
//                            "inputs": {"x": {"name": "x:0", "dtype": "DT_FLOAT",
//                                             "tensor_shape": {"unknown_rank": false,
//                                               "dim": [{"size": "-1", "name": ""}, ...]}}},
//                            "outputs": {...}}},
//                          "files": {"graph.pb": {"bytes": N, "crc32": C}, ...}}
//                         signature entries in TF Serving's metadata layout (sizes as strings,
//                         -1 for an unknown dimension, "unknown_rank": true for an unknown rank;
//                         signature_def_json gives the same entry for a server's metadata)
//
// The directory is written whole or not at all: into a temporary sibling, every file fsync'ed,
// then renamed into place. Reading checks the manifest's format version, then each file's size
// and CRC32 (zlib) before parsing it: a missing or damaged file is DataLoss naming it, a bundle
// written by a newer format is FailedPrecondition saying which version it needs.
//
// Contract: blocking file I/O, no shared state; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/graph/graph_def.hpp"
#include "psflow/graph/partial_shape.hpp"
#include "psflow/train/checkpoint_file.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "psflow/observe/graph_def_proto.hpp"
#include "psflow/train/atomic_file.hpp"
#include "psflow/version.hpp"
#endif

namespace psflow::serving {

// The newest bundle format this psflow writes and reads.
inline constexpr std::int64_t kBundleFormatVersion = 1;
// The name TF Serving answers a request without a signature name with.
inline constexpr const char* kServingSignatureName = "serving_default";
inline constexpr const char* kGraphFile = "graph.pb";
inline constexpr const char* kVariablesFile = "variables.psflow";
inline constexpr const char* kManifestFile = "manifest.json";

// One input or output of a signature: the graph tensor ("node:index"), its dtype and shape.
struct TensorInfo {
  std::string tensor;
  DType dtype = DType::float32;
  PartialShape shape;
};

// A signature by name: what predict() takes and gives.
struct SignatureDef {
  std::map<std::string, TensorInfo> inputs, outputs;
};

// What a bundle holds, parsed and checked.
struct BundleContents {
  GraphDef graph;
  train::CheckpointTensors variables;
  SignatureDef signature;
};

// Writes a bundle into `dir`, which must not exist or be an empty directory (else
// AlreadyExists: export to a new directory, e.g. the next version number). `graph_def` is the
// GraphDef's bytes. Failures leave no directory behind (atomic_file.hpp's typed errors).
void write_bundle(std::string_view dir, const std::string& graph_def,
                  const train::CheckpointTensors& variables, const SignatureDef& signature);

// Reads and checks the bundle in `dir` (see the file comment for the errors).
BundleContents read_bundle(std::string_view dir);

// The tensor of `graph` named "node:index" (TF's tensor names; "node" alone is output 0), nullopt
// when the graph has none.
std::optional<Output> find_tensor(const Graph& graph, std::string_view name);

// `signature` as TF Serving's SignatureDef JSON ({"inputs": {...}, "outputs": {...},
// "method_name": ...}), what the manifest stores and GET .../metadata answers.
std::string signature_def_json(const SignatureDef& signature);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

PSFLOW_DECL nlohmann::json tensor_info_to_json(const TensorInfo& info) {
  nlohmann::json shape = {{"unknown_rank", !info.shape.known}, {"dim", nlohmann::json::array()}};
  for (std::int64_t d : info.shape.dims)
    shape["dim"].push_back({{"size", std::to_string(d)}, {"name", ""}});
  return {{"name", info.tensor},
          {"dtype", std::string(tf_data_type_name(info.dtype))},
          {"tensor_shape", shape}};
}

PSFLOW_DECL nlohmann::json signature_def_to_json(const SignatureDef& signature) {
  nlohmann::json inputs = nlohmann::json::object(), outputs = nlohmann::json::object();
  for (const auto& [name, info] : signature.inputs) inputs[name] = tensor_info_to_json(info);
  for (const auto& [name, info] : signature.outputs) outputs[name] = tensor_info_to_json(info);
  return {{"method_name", "tensorflow/serving/predict"}, {"inputs", inputs}, {"outputs", outputs}};
}

[[noreturn]] inline void bad_manifest(const std::string& path, const std::string& problem) {
  throw DataLoss("serving bundle file '" + path + "' is damaged: " + problem +
                 "; export the model again");
}

PSFLOW_DECL TensorInfo tensor_info_from_json(const nlohmann::json& j, const std::string& path,
                                             const std::string& name) {
  auto fail = [&](const std::string& what) {
    bad_manifest(path, "signature tensor '" + name + "' " + what);
  };
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("dtype") ||
      !j["dtype"].is_string() || !j.contains("tensor_shape") || !j["tensor_shape"].is_object())
    fail("needs \"name\", \"dtype\" and \"tensor_shape\"");
  TensorInfo info;
  info.tensor = j["name"].get<std::string>();
  const std::string dtype = j["dtype"].get<std::string>();
  bool known_dtype = false;
  for (DType d : kAllDTypes)
    if (tf_data_type_name(d) == dtype) {
      info.dtype = d;
      known_dtype = true;
    }
  if (!known_dtype) fail("has dtype '" + dtype + "', which psflow does not have");
  const auto& shape = j["tensor_shape"];
  if (shape.value("unknown_rank", false)) return info;
  info.shape.known = true;
  if (!shape.contains("dim")) return info;
  if (!shape["dim"].is_array()) fail("has a tensor_shape.dim that is not a list");
  for (const auto& dim : shape["dim"]) {
    if (!dim.is_object() || !dim.contains("size") || !dim["size"].is_string())
      fail("has a dim without a \"size\" string");
    try {
      const std::string size = dim["size"].get<std::string>();
      std::size_t used = 0;
      const long long value = std::stoll(size, &used);
      if (used != size.size() || value < -1) throw std::invalid_argument(size);
      info.shape.dims.push_back(value);
    } catch (const std::exception&) {
      fail("has a dim size that is not an integer >= -1");
    }
  }
  return info;
}

PSFLOW_DECL std::string read_whole_file(const std::string& path, const std::string& bundle) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataLoss("serving bundle '" + bundle + "' has no file '" +
                   std::filesystem::path(path).filename().string() +
                   "': export the model again (a bundle is written whole or not at all, so "
                   "this one was copied incompletely or changed)");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in && !in.eof()) train::detail::throw_io_error(errno, "cannot read '" + path + "'");
  return bytes.str();
}

PSFLOW_DECL std::uint32_t crc32_of_string(const std::string& bytes) {
  return train::detail::crc32_of(bytes.data(), bytes.size());
}

}  // namespace detail

PSFLOW_DECL std::optional<Output> find_tensor(const Graph& graph, std::string_view name) {
  const auto colon = name.rfind(':');
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = name.substr(colon + 1);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error != std::errc() || end != digits.data() + digits.size() || digits.empty())
      return std::nullopt;
  }
  const auto op = graph.find_operation(name.substr(0, colon));
  if (!op || index < 0 || index >= op->num_outputs()) return std::nullopt;
  return op->output(index);
}

PSFLOW_DECL std::string signature_def_json(const SignatureDef& signature) {
  return detail::signature_def_to_json(signature).dump();
}

PSFLOW_DECL void write_bundle(std::string_view dir, const std::string& graph_def,
                              const train::CheckpointTensors& variables,
                              const SignatureDef& signature) {
  namespace fs = std::filesystem;
  fs::path target = fs::path(std::string(dir)).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "dir/"
  if (target.empty()) throw InvalidArgument("export_model: the export directory is empty");
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec)
    train::detail::throw_io_error(
        ec.value(), "cannot create directory '" + parent.string() + "' to export into");
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec)))
    throw AlreadyExists("export directory '" + target.string() +
                        "' already exists and is not empty: export to a new directory (TF "
                        "Serving keeps each version in its own, e.g. 'model/2')");

  static std::atomic<std::uint64_t> counter{0};
  const fs::path temp = parent / ("." + target.filename().string() + ".tmp." +
                                  std::to_string(::getpid()) + "." + std::to_string(counter++));
  if (!fs::create_directory(temp, ec) || ec)
    train::detail::throw_io_error(ec ? ec.value() : EEXIST,
                                  "cannot create temporary directory '" + temp.string() + "'");
  try {
    const std::string graph_path = (temp / kGraphFile).string();
    const std::string variables_path = (temp / kVariablesFile).string();
    train::detail::write_file_atomically(graph_path, graph_def);
    train::write_checkpoint(variables_path, variables);
    const std::string variables_bytes = detail::read_whole_file(variables_path, temp.string());

    nlohmann::json manifest = {
        {"format", "psflow serving bundle"},
        {"format_version", kBundleFormatVersion},
        {"psflow_version", version_string},
        {"signature_def", {{kServingSignatureName, detail::signature_def_to_json(signature)}}},
        {"files",
         {{kGraphFile,
           {{"bytes", graph_def.size()}, {"crc32", detail::crc32_of_string(graph_def)}}},
          {kVariablesFile,
           {{"bytes", variables_bytes.size()},
            {"crc32", detail::crc32_of_string(variables_bytes)}}}}}};
    train::detail::write_file_atomically((temp / kManifestFile).string(), manifest.dump(2) + "\n");
    // rename() replaces an empty directory and refuses a non-empty one (ENOTEMPTY, EEXIST).
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      if (err == ENOTEMPTY || err == EEXIST)
        throw AlreadyExists("export directory '" + target.string() +
                            "' appeared while exporting: export to a new directory");
      train::detail::throw_io_error(
          err, "cannot rename '" + temp.string() + "' to '" + target.string() + "'");
    }
    train::detail::sync_directory(parent.string());
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

PSFLOW_DECL BundleContents read_bundle(std::string_view dir) {
  namespace fs = std::filesystem;
  const std::string bundle(dir);
  std::error_code ec;
  if (!fs::is_directory(bundle, ec))
    throw NotFound("serving bundle '" + bundle +
                   "' is not a directory: pass the directory export_model wrote");
  const std::string manifest_path = (fs::path(bundle) / kManifestFile).string();
  const std::string manifest_text = detail::read_whole_file(manifest_path, bundle);
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(manifest_text);
  } catch (const nlohmann::json::exception& e) {
    detail::bad_manifest(manifest_path, std::string("not JSON (") + e.what() + ")");
  }
  if (!manifest.is_object() || manifest.value("format", "") != "psflow serving bundle" ||
      !manifest.contains("format_version") || !manifest["format_version"].is_number_integer())
    detail::bad_manifest(manifest_path, "not a psflow serving bundle manifest");
  const auto version = manifest["format_version"].get<std::int64_t>();
  if (version > kBundleFormatVersion)
    throw FailedPrecondition(
        "serving bundle '" + bundle + "' has format version " + std::to_string(version) +
        ", written by psflow " + manifest.value("psflow_version", std::string("(unknown)")) +
        "; this psflow (" + version_string + ") reads versions up to " +
        std::to_string(kBundleFormatVersion) + ": load it with a psflow that reads version " +
        std::to_string(version) + ", or export it again with this one");
  if (version < 1) detail::bad_manifest(manifest_path, "format_version must be at least 1");

  auto checked_file = [&](const char* name) {
    const std::string path = (fs::path(bundle) / name).string();
    const auto& files = manifest["files"];
    if (!files.is_object() || !files.contains(name) || !files[name].is_object() ||
        !files[name].contains("bytes") || !files[name]["bytes"].is_number_unsigned() ||
        !files[name].contains("crc32") || !files[name]["crc32"].is_number_unsigned())
      detail::bad_manifest(manifest_path, std::string("it has no size and CRC32 of ") + name);
    std::string bytes = detail::read_whole_file(path, bundle);
    if (bytes.size() != files[name]["bytes"].get<std::uint64_t>() ||
        detail::crc32_of_string(bytes) != files[name]["crc32"].get<std::uint32_t>())
      throw DataLoss("serving bundle file '" + path +
                     "' is damaged: its size or CRC32 differs from the manifest's; export the "
                     "model again");
    return bytes;
  };

  BundleContents out;
  out.graph =
      observe::parse_graph_def(checked_file(kGraphFile), (fs::path(bundle) / kGraphFile).string());
  checked_file(kVariablesFile);
  out.variables = train::read_checkpoint((fs::path(bundle) / kVariablesFile).string());

  const auto& defs = manifest["signature_def"];
  if (!defs.is_object() || !defs.contains(kServingSignatureName) ||
      !defs[kServingSignatureName].is_object())
    detail::bad_manifest(manifest_path,
                         std::string("it has no signature '") + kServingSignatureName + "'");
  const auto& def = defs[kServingSignatureName];
  for (const char* side : {"inputs", "outputs"}) {
    if (!def.contains(side) || !def[side].is_object())
      detail::bad_manifest(manifest_path, std::string("the signature has no ") + side);
    auto& into = std::string_view(side) == "inputs" ? out.signature.inputs : out.signature.outputs;
    for (const auto& [name, info] : def[side].items())
      into[name] = detail::tensor_info_from_json(info, manifest_path, name);
  }
  if (out.signature.outputs.empty())
    detail::bad_manifest(manifest_path, "the signature has no outputs");
  return out;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::serving
