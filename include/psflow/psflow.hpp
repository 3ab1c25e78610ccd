// psflow: TensorFlow 1.x-style parameter-server training in C++. Includes everything.
#pragma once

#include "psflow/version.hpp"
#include "psflow/graph.hpp"
#include "psflow/core/tensor_format.hpp"
#include "psflow/runtime/kernels.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/task_flags.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/master_session.hpp"
#include "psflow/train/replica_device_setter.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"
#include "psflow/observe/explain.hpp"
#include "psflow/train/hooks.hpp"
#include "psflow/train/monitored_session.hpp"
