// A training program's umbrella: graph building, the in-process runtime, the cluster (Server,
// ClusterSpec, TaskFlags and remote sessions) and everything of train/ (optimizers, hooks,
// savers, MonitoredTrainingSession, replica_device_setter, SyncReplicasOptimizer), without
// observe/'s explain, pictures and traces. psflow/psflow.hpp includes this and those.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/core/log.hpp"
#include "psflow/version.hpp"

// core + graph + runtime: kernels, executor, in-process Session
#include "psflow/runtime.hpp"

// tf.layers: dense, conv2d, batch_normalization, ... on get_variable
#include "psflow/layers.hpp"

// distributed: cluster, servers, remote sessions (the only layer that includes Boost.Asio)
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/flags.hpp"  // psflow::Flags: a program's command line
#if PSFLOW_COMPILES_IMPLEMENTATION       // registers the "psflow://" Session
#include "psflow/distributed/master_session.hpp"
#endif
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/task_flags.hpp"

// train
#include "psflow/train/adadelta.hpp"
#include "psflow/train/adagrad.hpp"
#include "psflow/train/adam.hpp"
#include "psflow/train/atomic_file.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/checkpoint_slices.hpp"
#include "psflow/train/clip_ops.hpp"
#include "psflow/train/ftrl.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "psflow/train/gradients.hpp"
#include "psflow/train/hooks.hpp"
#include "psflow/train/learning_rate_decay.hpp"
#include "psflow/train/momentum.hpp"
#include "psflow/train/monitored_session.hpp"
#include "psflow/train/moving_averages.hpp"
#include "psflow/train/optimizer.hpp"
#include "psflow/train/partition_layout.hpp"
#include "psflow/train/replica_device_setter.hpp"
#include "psflow/train/rmsprop.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"
#include "psflow/train/sync_replicas_optimizer.hpp"
