// TF Serving's REST API over a psflow::serving::Model, as a pure function of a request (method,
// target, body) to a response (status, JSON body): no sockets here, so it is unit-tested alone
// (tests/test_rest_api.cpp) and main.cpp only moves bytes.
//
//   GET  /v1/models/NAME[/versions/V]            the model's status
//   GET  /v1/models/NAME[/versions/V]/metadata   its signature, in TF Serving's layout
//   POST /v1/models/NAME[/versions/V]:predict    {"instances": [...]} -> {"predictions": [...]}
//                                                {"inputs": ...}      -> {"outputs": ...}
//
// Request formats, as TF Serving's (https://www.tensorflow.org/tfx/serving/api_rest):
// - row ("instances"): a list with one entry per example. With one input an entry is that
//   input's value for the example (a number, or a nested list); with several, an object naming
//   each input. The entries are stacked along a new first (batch) dimension.
// - columnar ("inputs"): each input's whole tensor, batch dimension included; with one input it
//   may be given bare, else as an object by input name.
// Answers: "predictions" with one entry per example (the output's row, or an object of every
// output's row when there are several), or "outputs" (the tensor, or an object of tensors).
// A DT_STRING value is a JSON string, or binary bytes as {"b64": "<base64>"} (TF Serving's
// form); a string output that is not UTF-8 is answered as {"b64": ...}.
// "signature_name", when given, must be "serving_default".
//
// Errors are {"error": "..."}: 400 for malformed JSON, wrong types or shapes (the message names
// the input and what the signature expects); 404 for an unknown model or path; 405 for a known
// path with the wrong method; 500 for a failure inside the model.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/serving.hpp"

namespace serve {

struct Response {
  unsigned status = 200;
  std::string body;  // JSON
};

// A request the client got wrong: answered with `status` and {"error": message}.
struct HttpError : std::runtime_error {
  HttpError(unsigned status, const std::string& message)
      : std::runtime_error(message), status(status) {}
  unsigned status;
};

// ---- JSON <-> Tensor -----------------------------------------------------------------------

// Base64 (RFC 4648, with padding), as TF Serving carries binary strings: {"b64": "..."}.
inline std::string base64_encode(std::string_view bytes) {
  static constexpr char digits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t chunk = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<unsigned char>(bytes[i + 2]);
    out += digits[(chunk >> 18) & 63];
    out += digits[(chunk >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(chunk >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? digits[chunk & 63] : '=';
  }
  return out;
}

// The bytes of base64 `text`; nullopt when it is not base64.
inline std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const int pad = (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=');
    if (pad > 0 && i + 4 != text.size()) return std::nullopt;
    std::uint32_t chunk = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(text[i + static_cast<std::size_t>(k)]);
      if (v < 0) return std::nullopt;
      chunk = (chunk << 6) | static_cast<std::uint32_t>(v);
    }
    out += static_cast<char>((chunk >> 16) & 255);
    if (pad < 2) out += static_cast<char>((chunk >> 8) & 255);
    if (pad < 1) out += static_cast<char>(chunk & 255);
  }
  return out;
}

// {"b64": "..."}: one binary string value, not an object naming inputs.
inline bool is_binary_value(const nlohmann::json& v) {
  return v.is_object() && v.size() == 1 && v.contains("b64") && v["b64"].is_string();
}

// An object naming inputs (row instances and columnar "inputs" with several inputs).
inline bool names_inputs(const nlohmann::json& v) { return v.is_object() && !is_binary_value(v); }

// True when `bytes` is valid UTF-8 (what a JSON string can carry).
inline bool is_utf8(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const std::size_t n = c < 0x80         ? 1
                          : (c >> 5) == 6  ? 2
                          : (c >> 4) == 14 ? 3
                          : (c >> 3) == 30 ? 4
                                           : 0;
    if (n == 0 || i + n > bytes.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(bytes[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// The tensor a (nested) JSON list or scalar holds, of `dtype`. HttpError 400 naming `what` for
// a ragged list, an empty value or an element of the wrong type.
inline psflow::Tensor tensor_from_json(const nlohmann::json& value, psflow::DType dtype,
                                       const std::string& what) {
  auto bad = [&](const std::string& problem) {
    throw HttpError(400, "input '" + what + "': " + problem);
  };
  psflow::Shape shape;
  for (const nlohmann::json* level = &value; level->is_array(); level = &level->front()) {
    if (level->empty()) bad("an empty list has no shape; send at least one value");
    shape.push_back(level->size());
  }
  std::vector<const nlohmann::json*> leaves;
  // Walks the value, checking every list at depth d has shape[d] entries.
  auto walk = [&](auto&& self, const nlohmann::json& v, std::size_t depth) -> void {
    if (depth == shape.size()) {
      if (v.is_array()) bad("the lists are ragged (deeper in some places than others)");
      leaves.push_back(&v);
      return;
    }
    if (!v.is_array() || v.size() != shape[depth])
      bad("the lists are ragged: every list at depth " + std::to_string(depth) + " must have " +
          std::to_string(shape[depth]) + " entries");
    for (const auto& item : v) self(self, item, depth + 1);
  };
  walk(walk, value, 0);
  psflow::Tensor t = psflow::Tensor::uninitialized(dtype, shape);
  psflow::visit_any_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = t.data<T>();
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const nlohmann::json& leaf = *leaves[i];
      if constexpr (std::is_same_v<T, std::string>) {
        // A JSON string, or binary bytes as {"b64": "..."}, as TF Serving takes DT_STRING.
        if (leaf.is_string()) {
          out[i] = leaf.get<std::string>();
        } else if (is_binary_value(leaf)) {
          auto bytes = base64_decode(leaf["b64"].get<std::string>());
          if (!bytes) bad("\"b64\" holds something that is not base64: " + leaf.dump());
          out[i] = std::move(*bytes);
        } else {
          bad("expected a string or {\"b64\": \"...\"}, got " + leaf.dump());
        }
      } else if constexpr (std::is_same_v<T, bool>) {
        if (!leaf.is_boolean()) bad("expected true or false, got " + leaf.dump());
        out[i] = leaf.get<bool>();
      } else if constexpr (std::is_integral_v<T>) {
        if (!leaf.is_number_integer()) bad("expected an integer, got " + leaf.dump());
        out[i] = leaf.get<T>();
      } else {
        if (!leaf.is_number()) bad("expected a number, got " + leaf.dump());
        out[i] = leaf.get<T>();
      }
    }
  });
  return t;
}

// The tensor as nested JSON lists (a scalar as a bare value); with `row` >= 0, only that row of
// the first dimension.
inline nlohmann::json json_from_tensor(const psflow::Tensor& t, std::int64_t row = -1) {
  const psflow::Shape& shape = t.shape();
  std::size_t first_dim = 0, offset = 0;
  if (row >= 0) {
    first_dim = 1;
    offset = static_cast<std::size_t>(row) * (t.size() / shape.at(0));
  }
  nlohmann::json out;
  psflow::visit_any_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = t.data<T>() + offset;
    std::size_t next = 0;
    auto leaf = [](const T& x) -> nlohmann::json {
      if constexpr (std::is_same_v<T, std::string>) {
        // Text as a JSON string; bytes JSON cannot carry as {"b64": "..."}.
        if (!is_utf8(x)) return nlohmann::json{{"b64", base64_encode(x)}};
      }
      return nlohmann::json(x);
    };
    auto build = [&](auto&& self, std::size_t dim) -> nlohmann::json {
      if (dim == shape.size()) return leaf(data[next++]);
      nlohmann::json list = nlohmann::json::array();
      for (std::size_t i = 0; i < shape[dim]; ++i) list.push_back(self(self, dim + 1));
      return list;
    };
    out = build(build, first_dim);
  });
  return out;
}

// ---- the API ---------------------------------------------------------------------------------

class RestApi {
 public:
  // Serves `model` as `name`, version `version` (TF Serving's numbered version directory).
  RestApi(const psflow::serving::Model& model, std::string name, std::string version)
      : model_(model), name_(std::move(name)), version_(std::move(version)) {}

  Response handle(std::string_view method, std::string_view target, std::string_view body) const {
    try {
      return route(method, target, body);
    } catch (const HttpError& e) {
      return error(e.status, e.what());
    } catch (const psflow::InvalidArgument& e) {
      return error(400, e.what());
    } catch (const std::exception& e) {
      return error(500, e.what());
    }
  }

  // GET /v1/models/NAME/metadata's answer: the bundle's signature in TF Serving's layout.
  nlohmann::json metadata() const {
    return {{"model_spec", {{"name", name_}, {"signature_name", ""}, {"version", version_}}},
            {"metadata",
             {{"signature_def",
               {{"signature_def",
                 {{psflow::serving::kServingSignatureName,
                   nlohmann::json::parse(
                       psflow::serving::signature_def_json(model_.signature()))}}}}}}}};
  }

  // POST :predict's answer to `request`.
  nlohmann::json predict(const nlohmann::json& request) const {
    if (!request.is_object()) throw HttpError(400, "the request body must be a JSON object");
    if (request.contains("signature_name") &&
        request["signature_name"] != psflow::serving::kServingSignatureName)
      throw HttpError(400, "unknown signature_name " + request["signature_name"].dump() +
                               ": this model serves \"serving_default\"");
    const bool rows = request.contains("instances");
    if (rows == request.contains("inputs"))
      throw HttpError(400,
                      "the request needs exactly one of \"instances\" (row format) or "
                      "\"inputs\" (columnar format)");
    const auto names = model_.input_names();
    std::map<std::string, psflow::Tensor> feeds;
    std::size_t batch = 0;
    if (rows) {
      const auto& instances = request["instances"];
      if (!instances.is_array() || instances.empty())
        throw HttpError(400, "\"instances\" must be a non-empty list, one entry per example");
      batch = instances.size();
      const bool named = names_inputs(instances.front());
      if (!named && names.size() != 1)
        throw HttpError(400, "this model has " + std::to_string(names.size()) +
                                 " inputs: each instance must be an object naming them");
      for (const auto& name : names) {
        nlohmann::json column = nlohmann::json::array();
        for (const auto& instance : instances) {
          if (named != names_inputs(instance))
            throw HttpError(400, "instances mix objects and bare values");
          if (!named) {
            column.push_back(instance);
          } else if (!instance.contains(name)) {
            throw HttpError(400, "an instance has no input '" + name + "'");
          } else {
            column.push_back(instance[name]);
          }
        }
        feeds[name] = tensor_from_json(column, info(name).dtype, name);
      }
      if (named)
        for (const auto& instance : instances)
          for (const auto& [key, value] : instance.items())
            if (!model_.signature().inputs.count(key))
              throw HttpError(400, "unknown input '" + key + "'");
    } else {
      const auto& inputs = request["inputs"];
      const bool named = names_inputs(inputs);
      if (!named && names.size() != 1)
        throw HttpError(400, "this model has " + std::to_string(names.size()) +
                                 " inputs: \"inputs\" must be an object naming them");
      if (named) {
        for (const auto& [key, value] : inputs.items()) {
          if (!model_.signature().inputs.count(key))
            throw HttpError(400, "unknown input '" + key + "'");
          feeds[key] = tensor_from_json(value, info(key).dtype, key);
        }
      } else {
        feeds[names.front()] = tensor_from_json(inputs, info(names.front()).dtype, names.front());
      }
    }
    const auto outputs = model_.predict(feeds);
    if (!rows) {
      if (outputs.size() == 1) return {{"outputs", json_from_tensor(outputs.begin()->second)}};
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [name, t] : outputs) out[name] = json_from_tensor(t);
      return {{"outputs", out}};
    }
    for (const auto& [name, t] : outputs)
      if (t.shape().empty() || t.shape()[0] != batch)
        throw HttpError(500, "output '" + name + "' has shape " + psflow::shape_string(t.shape()) +
                                 ", not one row per instance: ask in the columnar format");
    nlohmann::json predictions = nlohmann::json::array();
    for (std::size_t i = 0; i < batch; ++i) {
      const auto row = static_cast<std::int64_t>(i);
      if (outputs.size() == 1) {
        predictions.push_back(json_from_tensor(outputs.begin()->second, row));
      } else {
        nlohmann::json entry = nlohmann::json::object();
        for (const auto& [name, t] : outputs) entry[name] = json_from_tensor(t, row);
        predictions.push_back(entry);
      }
    }
    return {{"predictions", predictions}};
  }

 private:
  static Response error(unsigned status, const std::string& message) {
    return {status, nlohmann::json{{"error", message}}.dump()};
  }

  const psflow::serving::TensorInfo& info(const std::string& input) const {
    return model_.signature().inputs.at(input);
  }

  Response route(std::string_view method, std::string_view target, std::string_view body) const {
    const std::string_view path = target.substr(0, target.find('?'));
    constexpr std::string_view prefix = "/v1/models/";
    if (path.substr(0, prefix.size()) != prefix)
      throw HttpError(404, "no such path: " + std::string(path) +
                               " (this server answers /v1/models/" + name_ + ")");
    std::string_view rest = path.substr(prefix.size());
    std::string_view verb;
    if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
      verb = rest.substr(colon + 1);
      rest = rest.substr(0, colon);
    }
    std::vector<std::string_view> parts;
    for (std::size_t at = 0; at <= rest.size();) {
      const auto slash = std::min(rest.find('/', at), rest.size());
      parts.push_back(rest.substr(at, slash - at));
      at = slash + 1;
    }
    if (parts.front() != name_)
      throw HttpError(404, "Servable not found for request: Latest(" + std::string(parts.front()) +
                               "); this server serves model '" + name_ + "'");
    std::size_t next = 1;
    if (parts.size() >= 3 && parts[1] == "versions") {
      if (parts[2] != version_)
        throw HttpError(404, "Servable not found for request: Specific(" + name_ + ", " +
                                 std::string(parts[2]) + "); this server has version " + version_);
      next = 3;
    }
    const std::string_view what = next < parts.size() ? parts[next] : std::string_view();
    if (next + 1 < parts.size() || (!what.empty() && what != "metadata") ||
        (!verb.empty() && (verb != "predict" || !what.empty())))
      throw HttpError(404, "no such path: " + std::string(path));
    auto require = [&](std::string_view wanted) {
      if (method != wanted)
        throw HttpError(405, std::string(path) + " takes " + std::string(wanted) + ", not " +
                                 std::string(method));
    };
    if (verb == "predict") {
      require("POST");
      nlohmann::json request;
      try {
        request = nlohmann::json::parse(body);
      } catch (const nlohmann::json::exception& e) {
        throw HttpError(400, std::string("malformed JSON: ") + e.what());
      }
      return {200, predict(request).dump()};
    }
    require("GET");
    if (what == "metadata") return {200, metadata().dump()};
    return {200, nlohmann::json{{"model_version_status",
                                 {{{"version", version_},
                                   {"state", "AVAILABLE"},
                                   {"status", {{"error_code", "OK"}, {"error_message", ""}}}}}}}
                     .dump()};
  }

  const psflow::serving::Model& model_;
  std::string name_, version_;
};

}  // namespace serve
