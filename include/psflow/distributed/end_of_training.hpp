// The end of training: how a cluster's workers tell it they are done, so that the ps tasks stop
// and their Server::join() returns (TF1's ps tasks never exit; GitHub issue #4713). Plumbing of
// Server, driven by MonitoredTrainingSession (train/monitored_session.hpp); not meant for users.
//
// The protocol:
//   - The training tasks are every task of the "chief" and "worker" jobs. Each task of the
//     cluster keeps the set of training tasks it heard are done (EndOfTraining).
//   - A worker's session, once created, announces to every ps task that this cluster ends
//     itself (a workers_done message with done = false). Such a ps then watches its workers:
//     when no training task has had a connection to it for ServerOptions::orphan_timeout (the
//     chief failed for good, say), it stops by itself and logs why.
//   - A worker whose training ended sends every ps task and the chief the finished workers it
//     knows, itself included. Each merges them into its own set and answers with the result.
//   - The reporter merges the answers. When every training task is in the union, it stops the
//     ps tasks: the last worker to finish does, the chief when it finishes last. A ps that was
//     restarted lost its set, but the chief and the other ps tasks still hold it, and every
//     report carries it back.
//   - Two workers finishing at once both reach every ps, one after the other: whichever comes
//     second sees the other's report there, so at least one of them stops the ps tasks.
//
// Contract: EndOfTraining is thread-safe. call_each blocks (up to its patience plus its
// timeout) and must not run on an I/O thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/peer_cache.hpp"

namespace psflow::detail {

// The tasks that train with a MonitoredTrainingSession: every task of the "chief" and "worker"
// jobs, the chief first.
std::vector<std::string> training_tasks(const ClusterSpec& cluster);

// Every task of `job` ("/job:ps/replica:0/task:0", ...); none when the cluster has no such job.
std::vector<std::string> tasks_of_job(const ClusterSpec& cluster, std::string_view job);

// What one task knows of the end of training.
class EndOfTraining {
 public:
  // Adds `finished` to the finished workers; returns all of them, sorted.
  std::vector<std::string> merge(const std::vector<std::string>& finished);
  std::vector<std::string> finished() const;
  // A worker said this cluster ends itself: from now on, a ps without workers stops by itself.
  void set_ends_itself();
  bool ends_itself() const;

 private:
  mutable std::mutex mutex_;
  std::set<std::string> finished_;
  bool ends_itself_ = false;
};

// Whether every task of `all` is in `finished`.
bool covers(const std::vector<std::string>& finished, const std::vector<std::string>& all);

// The finished workers as a reply's text (one per line), and back.
std::string finished_text(const std::vector<std::string>& finished);
std::vector<std::string> parse_finished_text(const std::string& text);

// Sends `request` to each of `tasks` at once: connecting for up to `patience` (a task being
// restarted is waited for), then waiting up to `timeout` for its reply. Returns the replies in
// the order of `tasks`; nullopt for a task not reached, or that did not answer in time.
std::vector<std::optional<wire::Reply>> call_each(PeerCache& peers,
                                                  const std::vector<std::string>& tasks,
                                                  const wire::Frame& request,
                                                  std::chrono::milliseconds patience,
                                                  std::chrono::milliseconds timeout);

// ---------------------------------------------------------------------------------------------

inline std::vector<std::string> tasks_of_job(const ClusterSpec& cluster, std::string_view job) {
  std::vector<std::string> tasks;
  if (cluster.has_job(job))
    for (std::size_t t = 0; t < cluster.num_tasks(job); ++t)
      tasks.push_back(full_task_name(job, t));
  return tasks;
}

inline std::vector<std::string> training_tasks(const ClusterSpec& cluster) {
  std::vector<std::string> tasks = tasks_of_job(cluster, "chief");
  for (auto& task : tasks_of_job(cluster, "worker")) tasks.push_back(std::move(task));
  return tasks;
}

inline std::vector<std::string> EndOfTraining::merge(const std::vector<std::string>& finished) {
  std::lock_guard lock(mutex_);
  finished_.insert(finished.begin(), finished.end());
  return {finished_.begin(), finished_.end()};
}

inline std::vector<std::string> EndOfTraining::finished() const {
  std::lock_guard lock(mutex_);
  return {finished_.begin(), finished_.end()};
}

inline void EndOfTraining::set_ends_itself() {
  std::lock_guard lock(mutex_);
  ends_itself_ = true;
}

inline bool EndOfTraining::ends_itself() const {
  std::lock_guard lock(mutex_);
  return ends_itself_;
}

inline bool covers(const std::vector<std::string>& finished, const std::vector<std::string>& all) {
  const std::set<std::string> have(finished.begin(), finished.end());
  for (const auto& task : all)
    if (!have.count(task)) return false;
  return true;
}

inline std::string finished_text(const std::vector<std::string>& finished) {
  std::string text;
  for (const auto& task : finished) text += task + "\n";
  return text;
}

inline std::vector<std::string> parse_finished_text(const std::string& text) {
  std::vector<std::string> finished;
  std::size_t begin = 0;
  for (std::size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1)
    if (end > begin) finished.push_back(text.substr(begin, end - begin));
  return finished;
}

inline std::vector<std::optional<wire::Reply>> call_each(PeerCache& peers,
                                                         const std::vector<std::string>& tasks,
                                                         const wire::Frame& request,
                                                         std::chrono::milliseconds patience,
                                                         std::chrono::milliseconds timeout) {
  using Answer = std::promise<std::optional<wire::Reply>>;
  std::vector<std::shared_ptr<Answer>> answers;
  for (const auto& task : tasks) {
    auto answer = std::make_shared<Answer>();
    answers.push_back(answer);
    peers.connect_async(
        task,
        [answer, request, timeout](Status connected, std::shared_ptr<Connection> connection) {
          if (!connected.ok()) return answer->set_value(std::nullopt);
          connection->call(
              request,
              [answer](Status replied, wire::Frame reply) {
                if (!replied.ok()) return answer->set_value(std::nullopt);
                try {
                  answer->set_value(wire::decode<wire::Reply>(reply.metadata, "reply"));
                } catch (const Error&) {
                  answer->set_value(std::nullopt);
                }
              },
              timeout);
        },
        patience);
  }
  std::vector<std::optional<wire::Reply>> replies;
  // Each is bounded by its patience, then by `timeout` and by the connection closing.
  for (auto& answer : answers) replies.push_back(answer->get_future().get());
  return replies;
}

}  // namespace psflow::detail
