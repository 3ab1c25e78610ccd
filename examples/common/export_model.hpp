// How the example trainers' chiefs export their model (--export_dir): serving::export_model
// through the training session, at a moment the model holds still. Another worker's last step
// may still land while the variables are fetched from the ps tasks, so the export is repeated
// until the check output's value is the same before and after it; that value, the training
// session's answer for `check_feeds`, is returned for the "serving check:" line.
#pragma once

#include <filesystem>
#include <psflow/psflow.hpp>
#include <string>

#include "common/cluster_task.hpp"

namespace example {

inline psflow::Tensor export_model(psflow::Session& sess, const std::string& dir,
                                   const psflow::serving::Signature& signature,
                                   const psflow::Output& check,
                                   const psflow::FeedMap& check_feeds) {
  for (int attempt = 1;; ++attempt) {
    const psflow::Tensor before = sess.run({check}, check_feeds)[0];
    psflow::serving::export_model(sess, dir, signature);
    psflow::Tensor after = sess.run({check}, check_feeds)[0];
    if (after.equals(before)) return after;
    if (attempt == 10)
      throw psflow::Aborted(
          "the model kept changing while it was exported: stop every worker before exporting");
    cluster_task::log(
        "the model changed while it was exported (another worker's last step): again");
    std::filesystem::remove_all(dir);
  }
}

}  // namespace example
