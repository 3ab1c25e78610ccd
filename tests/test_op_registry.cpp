// The op registries against docs/ops.md: every op type psflow defines has a kernel, a row in
// the table, and the gradient status the table says; a family that forgets one of its pieces
// (docs/adding-an-op.md) fails here.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "psflow/graph.hpp"
#include "psflow/runtime/kernels.hpp"

using namespace psflow;

namespace {

// op type -> gradient column ("yes", "none" or "—"), from the table rows of docs/ops.md.
std::map<std::string, std::string> documented_ops() {
  std::ifstream in(std::string(PSFLOW_SOURCE_DIR) + "/docs/ops.md");
  REQUIRE(in.good());
  std::map<std::string, std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| op type", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(1));
    std::string cell;
    while (std::getline(cells_in, cell, '|')) {
      const auto first = cell.find_first_not_of(' ');
      const auto last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    REQUIRE(cells.size() >= 4);
    INFO("docs/ops.md row: " << line);
    CHECK(rows.count(cells[0]) == 0);  // one row per op type
    rows[cells[0]] = cells[3];
  }
  return rows;
}

}  // namespace

TEST_CASE("docs/ops.md lists every registered op, with a kernel and its gradient status") {
  const auto documented = documented_ops();
  REQUIRE(documented.size() > 50);
  const auto registered = OpRegistry::global().types();
  for (const auto& type : registered) {
    INFO("op type " << type << " is registered");
    CHECK(documented.count(type) == 1);
    CHECK(KernelRegistry::global().contains(type));
  }
  for (const auto& [type, gradient] : documented) {
    INFO("op type " << type << " is in docs/ops.md with gradient '" << gradient << "'");
    CHECK(OpRegistry::global().contains(type));
    const auto fn = GradientRegistry::global().lookup(type);
    if (gradient == "yes") {
      CHECK((fn && *fn));
    } else if (gradient == "none") {
      CHECK((fn && !*fn));
    } else {
      CHECK(gradient == "—");
      CHECK_FALSE(fn);
    }
  }
}

TEST_CASE("an op type without a kernel or definition is named in the error") {
  CHECK_FALSE(KernelRegistry::global().contains("NoSuchOp"));
  CHECK_THROWS_WITH(OpRegistry::global().lookup("NoSuchOp"),
                    Catch::Contains("no op type 'NoSuchOp' is registered"));
}
