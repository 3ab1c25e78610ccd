// The examples' --explain flag: what one run of a step does across the processes.
//   --explain, --explain=words   in words (psflow::observe::explain)
//   --explain=dot                as a picture: <--explain_dir>/<program>_graph.dot and, when
//                                Graphviz's dot is on PATH, .svg beside it; the paths are
//                                logged to standard error
//   --explain_dir (.)            where --explain=dot writes
// Only the process that runs the session (the worker; in the trainers, the chief) explains;
// a ps task accepts the flags and ignores them.
#pragma once

#include <iostream>
#include <psflow/observe/dot_files.hpp>
#include <psflow/observe/explain.hpp>
#include <psflow/observe/graph_dot.hpp>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>

#include "common/flags.hpp"

namespace explain_flag {

struct ExplainFlag {
  enum class Mode { off, words, dot };
  Mode mode = Mode::off;
  std::string dir = ".";

  // Registers --explain (alone: words) and --explain_dir; `who` says which task explains and
  // `program` names the .dot file.
  void add_to(psflow::Flags& flags, const std::string& who, const std::string& program) {
    flags
        .add("explain",
             who + ": what a step runs where and what crosses processes,\n" +
                 "in words (--explain=words too) or as " + program + "_graph.dot/.svg\n" +
                 "(--explain=dot)",
             "", "words, dot, true or false", true,
             [this](const std::string& value) {
               if (value == "true" || value == "words")
                 mode = Mode::words;
               else if (value == "dot")
                 mode = Mode::dot;
               else if (value == "false")
                 mode = Mode::off;
               else
                 return false;
               return true;
             })
        .add("explain_dir", "where --explain=dot writes", &dir);
  }

  // Explains the run of fetches/feeds/targets through `session`: the words go to `words_out`,
  // the picture to <dir>/<program>_graph.dot (and .svg), its paths to standard error.
  void run(psflow::Session& session, const std::string& program,
           const std::vector<psflow::Output>& fetches, const psflow::FeedMap& feeds,
           const std::vector<psflow::Operation>& targets, std::ostream& words_out) const {
    if (mode == Mode::words) {
      words_out << psflow::observe::explain(session, fetches, feeds, targets) << std::flush;
    } else if (mode == Mode::dot) {
      const auto files = psflow::observe::write_dot_files(
          psflow::observe::graph_dot(session, fetches, feeds, targets), dir, program + "_graph");
      std::cerr << "[" << program << "] explain: " << files.summary() << std::endl;
    }
  }
};

}  // namespace explain_flag
