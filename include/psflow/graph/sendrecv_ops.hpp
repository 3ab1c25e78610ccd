// _Send / _Recv: the two ends of an edge cut by the partitioner (runtime/partition.hpp), and
// _Feed, the node that stands for a tensor the client feeds. Their attributes carry the
// rendezvous key's parts (send_device, send_device_incarnation, recv_device, tensor_name) and
// the tensor's dtype and shape. Kernels: runtime/kernels/sendrecv_kernels.hpp.
#pragma once

#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/op_builder.hpp"

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_REGISTERED_AT_STARTUP const bool sendrecv_ops_registered = [] {
  auto& r = OpRegistry::global();
  r.add(OpDef{.type = "_Send", .num_inputs = 1, .stateful = true});
  r.add(OpDef{.type = "_Recv", .stateful = true, .infer = spec_from_dtype_shape_attrs});
  r.add(OpDef{.type = "_Feed", .infer = spec_from_dtype_shape_attrs});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
