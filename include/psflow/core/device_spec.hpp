// DeviceSpec: parse, print and merge TensorFlow-style device strings.
//
// A device string says where an op should run, field by field:
//   /job:<name>/replica:<int>/task:<int>/device:<TYPE>:<int|*>
// Every part is optional. Partial specs are merged (fields set in the newer/inner spec win) and
// finally completed by the placer. Grammar and rules follow TensorFlow's DeviceSpec
// (python/framework/device_spec.py) and DeviceNameUtils (core/util/device_name_utils.cc); the
// few places where psflow is stricter are noted at DeviceSpec::parse.
#pragma once

#include <charconv>
#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "psflow/core/error.hpp"

namespace psflow {

// A (possibly partial) device specification. A plain value type: copy it freely; no field
// refers to anything else. An unset field means "any"; an unset device_index with a set
// device_type prints as "*" ("/device:CPU:*"). Designated initializers work:
//   DeviceSpec{.job = "ps", .task = 1}   // "/job:ps/task:1"
struct DeviceSpec {
  // (The "= {}" keep GCC's -Wmissing-field-initializers quiet for designated initializers.)
  std::optional<std::string> job = {};
  std::optional<int> replica = {};
  std::optional<int> task = {};
  std::optional<std::string> device_type = {};  // "CPU", "GPU", ...; legacy lowercase upper-cased
  std::optional<int> device_index = {};         // nullopt prints as "*"

  // Parses a device string; "" (and "/") give the empty spec. Accepted, as in TensorFlow:
  //   "/job:ps/replica:0/task:1/device:CPU:0", any subset of those parts in any order,
  //   "/device:GPU:*" and "/device:GPU" (any index), legacy "/cpu:0", "/GPU:1", "/cpu",
  //   "/device:cpu:0" (-> CPU), a missing leading slash ("CPU:0", "job:ps"), "*" for any value
  //   ("/job:*", "/task:*").
  // Throws InvalidArgument, quoting the whole string and naming the bad piece, for: an unknown
  // attribute ("/foo:bar"), two device types ("/cpu:0/gpu:1"), a replica/task/index that is not
  // a non-negative integer, an empty or malformed job name (TF's rule: a letter, then letters,
  // digits or '_'), a malformed device type, and - stricter than TF, which lets the last one
  // win - the same field given twice ("/job:a/job:b").
  static DeviceSpec parse(std::string_view spec);

  // Canonical form: job, replica, task, device, each only when set; "" when empty. A
  // device_index without a device_type is not printed (TF does the same).
  std::string to_string() const;

  // Field by field, every field set in `other` replaces ours (TF's DeviceSpec.merge_from). For
  // nested scopes, merge the inner spec into the outer one: inner fields win. Returns *this.
  DeviceSpec& merge_from(const DeviceSpec& other);
  // The same, on a copy (TF 2's make_merged_spec).
  DeviceSpec merged_with(const DeviceSpec& other) const;

  bool empty() const;
  // All five fields set: names exactly one device.
  bool is_fully_specified() const;
  // Every field set in both specs agrees: the two can name the same device.
  bool matches(const DeviceSpec& other) const;
  // Every field set here is set in `other` to the same value: `other` is this spec or a more
  // specific one (TF's DeviceNameUtils::IsSpecification(*this, other)).
  bool is_satisfied_by(const DeviceSpec& other) const;
  // Only job, replica and task: the process the device lives in (TF's AddressSpace).
  DeviceSpec address_space() const;

  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const DeviceSpec& spec);

// parse(spec).to_string(): the canonical spelling of a device string (TF's canonical_name).
inline std::string canonical_device(std::string_view spec);

// True for a name usable after "/job:": a letter, then letters, digits or '_'.
inline bool is_valid_job_name(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Implementation.

namespace detail {

inline bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// A letter, then letters, digits or '_' (TF's rule for job names and device types).
inline bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ascii_alpha(s.front())) return false;
  for (char c : s) {
    if (!is_ascii_alpha(c) && !is_ascii_digit(c) && c != '_') return false;
  }
  return true;
}

inline std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// Device types TF spells in the legacy short form ("/cpu:0") and upper-cases when given in
// lowercase. Any other type ("/device:MyDevice:0") is kept exactly as written.
inline bool is_legacy_device_type(std::string_view upper) {
  return upper == "CPU" || upper == "GPU" || upper == "TPU";
}

inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = s.find(sep, start);
    if (end == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
}

// Parses one device string; each method that fails throws InvalidArgument naming the piece.
class DeviceSpecParser {
 public:
  explicit DeviceSpecParser(std::string_view spec) : spec_(spec) {}

  DeviceSpec parse() {
    for (std::string_view piece : split(spec_, '/')) {
      if (piece.empty()) continue;  // leading, trailing or doubled '/'
      piece_ = piece;
      parse_piece(split(piece, ':'));
    }
    return result_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("invalid device string '" + std::string(spec_) + "' at '/" +
                          std::string(piece_) + "': " + what +
                          "; expected /job:<name>/replica:<int>/task:<int>/device:<TYPE>:<int|*>"
                          ", every part optional");
  }

  void parse_piece(const std::vector<std::string_view>& parts) {
    const std::string_view key = parts[0];
    const std::size_t n = parts.size();
    if (key == "job" || key == "replica" || key == "task") {
      if (n != 2) {
        fail("'" + std::string(key) + "' takes exactly one value, as in /" + std::string(key) +
             (key == "job" ? ":<name>" : ":<int>"));
      }
      if (key == "job") {
        parse_job(parts[1]);
      } else if (key == "replica") {
        parse_index(parts[1], "replica", seen_replica_, result_.replica);
      } else {
        parse_index(parts[1], "task", seen_task_, result_.task);
      }
    } else if (key == "device") {
      if (n != 2 && n != 3) fail("expected /device:<TYPE>:<int|*>");
      parse_device(parts[1], n == 3 ? std::optional<std::string_view>(parts[2]) : std::nullopt);
    } else if ((n == 1 || n == 2) && is_legacy_device_type(ascii_upper(key))) {
      parse_device(key, n == 2 ? std::optional<std::string_view>(parts[1]) : std::nullopt);
    } else if (key.empty()) {
      fail("missing attribute name before ':'");
    } else {
      fail("unknown attribute '" + std::string(key) +
           "' (known: job, replica, task, device, or legacy cpu/gpu/tpu)");
    }
  }

  void parse_job(std::string_view value) {
    if (seen_job_) fail("the job is given twice; give one /job:<name>");
    seen_job_ = true;
    if (value == "*") return;
    if (value.empty()) fail("empty job name; write /job:<name>, e.g. /job:worker");
    if (!is_identifier(value)) {
      fail("bad job name '" + std::string(value) +
           "': a job name starts with a letter and has only letters, digits and '_'");
    }
    result_.job = std::string(value);
  }

  void parse_index(std::string_view value, const char* what, bool& seen, std::optional<int>& out) {
    if (seen) fail(std::string("the ") + what + " is given twice");
    seen = true;
    if (value == "*") return;
    out = parse_int(value, what);
  }

  int parse_int(std::string_view value, const char* what) const {
    if (value.empty()) fail(std::string("empty ") + what + "; give a non-negative integer or '*'");
    for (char c : value) {
      if (!is_ascii_digit(c)) {
        fail(std::string(what) + " '" + std::string(value) +
             "' is not a non-negative integer (or '*')");
      }
    }
    int out = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
    if (ec != std::errc() || end != value.data() + value.size()) {
      fail(std::string(what) + " '" + std::string(value) + "' is too large");
    }
    return out;
  }

  void parse_device(std::string_view type, std::optional<std::string_view> index) {
    if (seen_device_) {
      fail("two device types ('" + result_.device_type.value_or("*") + "' and '" +
           std::string(type) + "'); give one /device:<TYPE>:<int>");
    }
    seen_device_ = true;
    if (type == "*") {
      if (index && *index != "*") fail("a device index needs a device type: /device:<TYPE>:<int>");
      return;
    }
    if (!is_identifier(type)) {
      fail("bad device type '" + std::string(type) +
           "': a device type starts with a letter and has only letters, digits and '_'");
    }
    const std::string upper = ascii_upper(type);
    result_.device_type = is_legacy_device_type(upper) ? upper : std::string(type);
    if (index && *index != "*") result_.device_index = parse_int(*index, "device index");
  }

  std::string_view spec_;
  std::string_view piece_;
  DeviceSpec result_;
  bool seen_job_ = false;
  bool seen_replica_ = false;
  bool seen_task_ = false;
  bool seen_device_ = false;
};

}  // namespace detail

inline DeviceSpec DeviceSpec::parse(std::string_view spec) {
  return detail::DeviceSpecParser(spec).parse();
}

inline std::string DeviceSpec::to_string() const {
  std::string out;
  if (job) out += "/job:" + *job;
  if (replica) out += "/replica:" + std::to_string(*replica);
  if (task) out += "/task:" + std::to_string(*task);
  if (device_type) {
    out += "/device:" + *device_type + ":";
    out += device_index ? std::to_string(*device_index) : std::string("*");
  }
  return out;
}

inline DeviceSpec& DeviceSpec::merge_from(const DeviceSpec& other) {
  if (other.job) job = other.job;
  if (other.replica) replica = other.replica;
  if (other.task) task = other.task;
  if (other.device_type) device_type = other.device_type;
  if (other.device_index) device_index = other.device_index;
  return *this;
}

inline DeviceSpec DeviceSpec::merged_with(const DeviceSpec& other) const {
  DeviceSpec out = *this;
  out.merge_from(other);
  return out;
}

inline bool DeviceSpec::empty() const {
  return !job && !replica && !task && !device_type && !device_index;
}

inline bool DeviceSpec::is_fully_specified() const {
  return job && replica && task && device_type && device_index;
}

namespace detail {
template <class T>
bool compatible(const std::optional<T>& a, const std::optional<T>& b) {
  return !a || !b || *a == *b;
}
template <class T>
bool satisfied(const std::optional<T>& wanted, const std::optional<T>& have) {
  return !wanted || (have && *wanted == *have);
}
}  // namespace detail

inline bool DeviceSpec::matches(const DeviceSpec& other) const {
  return detail::compatible(job, other.job) && detail::compatible(replica, other.replica) &&
         detail::compatible(task, other.task) &&
         detail::compatible(device_type, other.device_type) &&
         detail::compatible(device_index, other.device_index);
}

inline bool DeviceSpec::is_satisfied_by(const DeviceSpec& other) const {
  return detail::satisfied(job, other.job) && detail::satisfied(replica, other.replica) &&
         detail::satisfied(task, other.task) && detail::satisfied(device_type, other.device_type) &&
         detail::satisfied(device_index, other.device_index);
}

inline DeviceSpec DeviceSpec::address_space() const {
  DeviceSpec out;
  out.job = job;
  out.replica = replica;
  out.task = task;
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const DeviceSpec& spec) {
  return os << spec.to_string();
}

inline std::string canonical_device(std::string_view spec) {
  return DeviceSpec::parse(spec).to_string();
}

inline bool is_valid_job_name(std::string_view name) { return detail::is_identifier(name); }

}  // namespace psflow

template <>
struct std::hash<psflow::DeviceSpec> {
  std::size_t operator()(const psflow::DeviceSpec& spec) const {
    return std::hash<std::string>()(spec.to_string());
  }
};
