// Fuzz target: device strings (core/device_spec.hpp). The input is one or two device strings
// (split at the first newline). Properties checked beyond "no crash": a parsed spec prints in a
// canonical form that parses back to the same spec and prints the same; merging and matching
// keep their documented relations.
#include "psflow/core/device_spec.hpp"

#include <functional>

#include "fuzz_common.hpp"

namespace {

using namespace psflow;

void check_canonical(const DeviceSpec& spec) {
  const std::string text = spec.to_string();
  const DeviceSpec back = DeviceSpec::parse(text);
  fuzz::check(back == spec, "'" + text + "' does not parse back to the spec it came from");
  fuzz::check(back.to_string() == text, "'" + text + "' is not canonical");
  fuzz::check(canonical_device(text) == text, "canonical_device('" + text + "') changes it");
  (void)std::hash<DeviceSpec>()(spec);
}

void parse_specs(std::string_view input) {
  const std::size_t newline = input.find('\n');
  const DeviceSpec a = DeviceSpec::parse(input.substr(0, newline));
  check_canonical(a);
  fuzz::check(a.is_satisfied_by(a) && a.matches(a), "a spec does not match itself");
  fuzz::check(a.address_space().is_satisfied_by(a), "a spec is outside its address space");
  fuzz::check(
      a.is_fully_specified() == (a.job && a.replica && a.task && a.device_type && a.device_index),
      "is_fully_specified disagrees with the fields");
  if (newline == std::string_view::npos) return;

  const DeviceSpec b = DeviceSpec::parse(input.substr(newline + 1));
  check_canonical(b);
  const DeviceSpec merged = a.merged_with(b);
  check_canonical(merged);
  fuzz::check(b.is_satisfied_by(merged), "a merged spec lost fields of the spec merged in");
  fuzz::check(a.matches(b) == b.matches(a), "matches is not symmetric");
  fuzz::check(!a.matches(b) || a.is_satisfied_by(merged), "merging matching specs lost fields");
  DeviceSpec in_place = a;
  fuzz::check(in_place.merge_from(b) == merged, "merge_from and merged_with disagree");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psflow::fuzz::only_psflow_errors([&] { parse_specs(psflow::fuzz::as_text(data, size)); });
  return 0;
}
