// Slices of a checkpointed tensor: where a stored block lies in its full tensor (TF's
// save-slice information; how a Saver stores the shards of a partitioned variable), the rules
// a set of records must keep, and assembling any block of a tensor from the slices that cover
// it. The geometry behind checkpoint_file.hpp, saver.hpp and the dynamic tables' shard files.
//
// The rules: a slice record holds the block of tensor `name` (of the full shape) that starts at
// `offset` and spans the stored tensor's shape along each axis. A name has either one whole
// record or one record per slice: all of one dtype and full shape, each inside the full shape,
// none overlapping another. The slices need not cover the whole tensor; asking for a block they
// do not cover is answered with what is missing.
//
// Contract: pure functions over the records; any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdint>
#include <cstring>
#endif

namespace psflow::train {

// Where a stored tensor lies in the tensor it is a slice of: the block that starts at `offset`
// (one entry per axis) in a tensor of `full_shape`; the block's lengths are the stored tensor's
// shape. What a variable's SaveSliceInfo says about a shard.
struct CheckpointSlice {
  Shape full_shape;
  std::vector<std::size_t> offset;
  bool operator==(const CheckpointSlice&) const = default;
};

// One record of a checkpoint: the whole tensor `name`, or (with `slice`) a block of it.
struct CheckpointEntry {
  std::string name;
  Tensor tensor;
  std::optional<CheckpointSlice> slice;
};
using CheckpointEntries = std::vector<CheckpointEntry>;

namespace detail {

// What a checkpoint holds under one name: a whole tensor (one part, no slice) or slices of it.
struct StoredTensor {
  DType dtype = DType::float32;
  Shape full_shape;
  bool sliced = false;
  std::vector<const CheckpointEntry*> parts;
};

// The validated `entries` by name, names in file order. Points into `entries`: keep them alive.
struct CheckpointIndex {
  std::map<std::string, StoredTensor, std::less<>> by_name;
  std::vector<std::string> names;

  explicit CheckpointIndex(const CheckpointEntries& entries) {
    for (const auto& e : entries) {
      auto [it, inserted] = by_name.try_emplace(e.name);
      StoredTensor& stored = it->second;
      if (inserted) {
        names.push_back(e.name);
        stored.dtype = e.tensor.dtype();
        stored.full_shape = e.slice ? e.slice->full_shape : e.tensor.shape();
        stored.sliced = e.slice.has_value();
      }
      stored.parts.push_back(&e);
    }
  }
  const StoredTensor* find(std::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &it->second;
  }
};

// "[0:5, 0:4]": the block at `offset` spanning `lengths`, Python's slice notation.
std::string block_string(const std::vector<std::size_t>& offset, const Shape& lengths);

// What is wrong with `entries` by the rules above, beyond each record's own fields ("" when
// nothing is).
std::string check_entries(const CheckpointEntries& entries);

// Block [offset, offset + lengths) of `stored` (which must lie inside its full shape): the
// stored tensor itself when one part is exactly that block, else a copy assembled from the
// parts. nullopt when the parts do not cover it; `missing` then says what is missing.
std::optional<Tensor> stored_block(const StoredTensor& stored,
                                   const std::vector<std::size_t>& offset, const Shape& lengths,
                                   std::string* missing);

}  // namespace detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

PSFLOW_DECL std::string block_string(const std::vector<std::size_t>& offset, const Shape& lengths) {
  std::string out = "[";
  for (std::size_t d = 0; d < lengths.size(); ++d)
    out +=
        (d ? ", " : "") + std::to_string(offset[d]) + ":" + std::to_string(offset[d] + lengths[d]);
  return out + "]";
}

// "slice [0:5, 0:4] of 'emb' float32[10,4]" or "tensor 'w' float32[2,2]", for messages.
PSFLOW_DECL std::string entry_string(const CheckpointEntry& e) {
  const std::string type = std::string(dtype_name(e.tensor.dtype()));
  if (!e.slice) return "tensor '" + e.name + "' " + type + shape_string(e.tensor.shape());
  return "slice " + block_string(e.slice->offset, e.tensor.shape()) + " of '" + e.name + "' " +
         type + shape_string(e.slice->full_shape);
}

PSFLOW_DECL std::vector<std::size_t> entry_offset(const CheckpointEntry& e) {
  return e.slice ? e.slice->offset : std::vector<std::size_t>(e.tensor.rank(), 0);
}

// Elements in the intersection of two blocks (0 when they do not meet).
PSFLOW_DECL std::size_t overlap_elements(const std::vector<std::size_t>& a_offset,
                                         const Shape& a_shape,
                                         const std::vector<std::size_t>& b_offset,
                                         const Shape& b_shape) {
  std::size_t count = 1;
  for (std::size_t d = 0; d < a_shape.size(); ++d) {
    const std::size_t lo = std::max(a_offset[d], b_offset[d]);
    const std::size_t hi = std::min(a_offset[d] + a_shape[d], b_offset[d] + b_shape[d]);
    if (lo >= hi) return 0;
    count *= hi - lo;
  }
  return count;
}

PSFLOW_DECL std::string check_entries(const CheckpointEntries& entries) {
  std::map<std::string_view, std::vector<const CheckpointEntry*>> by_name;
  for (const auto& e : entries) {
    if (e.slice) {
      const auto& s = *e.slice;
      if (s.full_shape.size() != e.tensor.rank() || s.offset.size() != e.tensor.rank())
        return "the slice of '" + e.name + "' has a full shape of rank " +
               std::to_string(s.full_shape.size()) + " and " + std::to_string(s.offset.size()) +
               " offsets for data of rank " + std::to_string(e.tensor.rank()) +
               " (all three must agree)";
      for (std::size_t d = 0; d < s.full_shape.size(); ++d)
        if (s.offset[d] > s.full_shape[d] || e.tensor.shape()[d] > s.full_shape[d] - s.offset[d])
          return entry_string(e) + " reaches past the full shape along axis " + std::to_string(d);
    }
    by_name[e.name].push_back(&e);
  }
  for (const auto& [name, parts] : by_name) {
    if (parts.size() < 2) continue;
    const bool sliced = std::all_of(parts.begin(), parts.end(),
                                    [](const CheckpointEntry* e) { return e->slice.has_value(); });
    if (!sliced) {
      const bool any_slice = std::any_of(parts.begin(), parts.end(), [](const CheckpointEntry* e) {
        return e->slice.has_value();
      });
      if (!any_slice) return "tensor name '" + std::string(name) + "' appears twice";
      return "'" + std::string(name) +
             "' is stored both whole and as slices (give one or the other)";
    }
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const CheckpointEntry& a = *parts[0];
      const CheckpointEntry& b = *parts[i];
      if (a.tensor.dtype() != b.tensor.dtype() || a.slice->full_shape != b.slice->full_shape)
        return "the slices of '" + std::string(name) + "' disagree: " + entry_string(a) + " and " +
               entry_string(b) + " (every slice of a tensor has its dtype and full shape)";
    }
    for (std::size_t i = 0; i < parts.size(); ++i)
      for (std::size_t j = i + 1; j < parts.size(); ++j)
        if (overlap_elements(parts[i]->slice->offset, parts[i]->tensor.shape(),
                             parts[j]->slice->offset, parts[j]->tensor.shape()) > 0)
          return "the " + entry_string(*parts[i]) + " overlaps the " + entry_string(*parts[j]);
  }
  return {};
}

// Copies into `dst` (the block at dst_offset of the full tensor) the part of `src` (the block at
// src_offset) that lies inside it; returns how many elements that was.
PSFLOW_DECL std::size_t copy_overlap(const Tensor& src, const std::vector<std::size_t>& src_offset,
                                     Tensor& dst, const std::vector<std::size_t>& dst_offset) {
  const std::size_t rank = dst.rank();
  const std::size_t item = dtype_size(dst.dtype());
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(dst.raw_data());
  if (rank == 0) {
    std::memcpy(to, from, item);
    return 1;
  }
  std::vector<std::size_t> lo(rank), hi(rank);
  std::size_t count = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(src_offset[d], dst_offset[d]);
    hi[d] = std::min(src_offset[d] + src.shape()[d], dst_offset[d] + dst.shape()[d]);
    if (lo[d] >= hi[d]) return 0;
    count *= hi[d] - lo[d];
  }
  auto strides = [rank](const Shape& shape) {
    std::vector<std::size_t> out(rank);
    std::size_t step = 1;
    for (std::size_t d = rank; d-- > 0;) {
      out[d] = step;
      step *= shape[d];
    }
    return out;
  };
  const auto src_strides = strides(src.shape());
  const auto dst_strides = strides(dst.shape());
  const std::size_t run = (hi[rank - 1] - lo[rank - 1]) * item;  // contiguous in both
  std::vector<std::size_t> index = lo;
  for (;;) {
    std::size_t s = 0, t = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      s += (index[d] - src_offset[d]) * src_strides[d];
      t += (index[d] - dst_offset[d]) * dst_strides[d];
    }
    std::memcpy(to + t * item, from + s * item, run);
    std::size_t d = rank - 1;  // the last axis is the run; step the others like an odometer
    for (;;) {
      if (d == 0) return count;
      --d;
      if (++index[d] < hi[d]) break;
      index[d] = lo[d];
    }
  }
}

// For an error message: a block inside [offset, offset + lengths) that no part of `stored`
// covers, in Python's slice notation (stretched along axis 0 as far as it goes uncovered).
PSFLOW_DECL std::string uncovered_block(const StoredTensor& stored,
                                        const std::vector<std::size_t>& offset,
                                        const Shape& lengths) {
  const std::size_t rank = lengths.size();
  std::vector<std::vector<std::size_t>> cuts(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t lo = offset[d], hi = offset[d] + lengths[d];
    cuts[d] = {lo, hi};
    for (const auto* part : stored.parts) {
      const auto part_offset = entry_offset(*part);
      cuts[d].push_back(std::clamp(part_offset[d], lo, hi));
      cuts[d].push_back(std::clamp(part_offset[d] + part->tensor.shape()[d], lo, hi));
    }
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
  }
  // The cuts split the block into cells that each lie inside a part or outside all of them.
  std::size_t cells = 1;
  for (const auto& c : cuts) {
    if (c.size() < 2) return block_string(offset, lengths);
    cells = cells > 1000000 / (c.size() - 1) ? 1000001 : cells * (c.size() - 1);
  }
  if (cells > 1000000) return block_string(offset, lengths);
  std::vector<std::size_t> cell(rank, 0);  // per axis: which interval of cuts[d]
  auto covered = [&](const std::vector<std::size_t>& c) {
    for (const auto* part : stored.parts) {
      const auto part_offset = entry_offset(*part);
      bool inside = true;
      for (std::size_t d = 0; d < rank && inside; ++d)
        inside = cuts[d][c[d]] >= part_offset[d] &&
                 cuts[d][c[d] + 1] <= part_offset[d] + part->tensor.shape()[d];
      if (inside) return true;
    }
    return false;
  };
  for (std::size_t n = 0; n < cells; ++n) {
    if (!covered(cell)) {
      std::vector<std::size_t> from(rank);
      Shape span(rank);
      for (std::size_t d = 0; d < rank; ++d) {
        from[d] = cuts[d][cell[d]];
        span[d] = cuts[d][cell[d] + 1] - from[d];
      }
      auto next = cell;
      while (++next[0] + 1 < cuts[0].size() && !covered(next))
        span[0] = cuts[0][next[0] + 1] - from[0];
      return block_string(from, span);
    }
    for (std::size_t d = rank; d-- > 0;) {
      if (++cell[d] + 1 < cuts[d].size()) break;
      cell[d] = 0;
    }
  }
  return block_string(offset, lengths);
}

PSFLOW_DECL std::optional<Tensor> stored_block(const StoredTensor& stored,
                                               const std::vector<std::size_t>& offset,
                                               const Shape& lengths, std::string* missing) {
  for (const auto* part : stored.parts)
    if (part->tensor.shape() == lengths && entry_offset(*part) == offset) return part->tensor;
  // The block's size comes from the file (a slice's full shape): the disjoint parts can cover
  // it only if they hold as many elements, so a larger block (or one whose count overflows)
  // is missing elements before anything is allocated for it.
  std::size_t needed = 1, held = 0;
  bool overflow = false;
  if (std::find(lengths.begin(), lengths.end(), std::size_t{0}) != lengths.end()) {
    needed = 0;
  } else {
    for (std::size_t d : lengths) {
      overflow = overflow || needed > SIZE_MAX / d;
      if (!overflow) needed *= d;
    }
  }
  for (const auto* part : stored.parts) held += part->tensor.size();
  if (overflow || needed > held) {
    if (missing)
      *missing = uncovered_block(stored, offset, lengths) + " (the slices hold " +
                 std::to_string(held) + " elements, the block needs " +
                 (overflow ? "more than " + std::to_string(SIZE_MAX) : std::to_string(needed)) +
                 ")";
    return std::nullopt;
  }
  Tensor out = Tensor::uninitialized(stored.dtype, lengths);
  std::size_t copied = 0;
  for (const auto* part : stored.parts)
    copied += copy_overlap(part->tensor, entry_offset(*part), out, offset);
  if (copied == out.size()) return out;  // the parts are disjoint: every element was written
  if (missing)
    *missing = uncovered_block(stored, offset, lengths) + " (" +
               std::to_string(out.size() - copied) + " of the " + std::to_string(out.size()) +
               " elements needed are missing)";
  return std::nullopt;
}

}  // namespace detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
