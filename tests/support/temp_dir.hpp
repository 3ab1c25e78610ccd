// Test support: a scratch directory per test, removed by the destructor.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace psflow::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& name = "test") {
    static std::atomic<int> counter{0};
    path_ =
        (std::filesystem::temp_directory_path() /
         ("psflow-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
            .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& leaf) const { return path_ + "/" + leaf; }
  std::string operator/(const std::string& leaf) const { return file(leaf); }
  // Names of the entries directly inside, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

}  // namespace psflow::testing
