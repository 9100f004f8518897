// Where selectPack's workspace keeps its pass state, the per-tile ready flags
// and the per-tile counts (kernels/cuda/select_pack.cu). Plain C++, so the
// host unit tests check the arithmetic without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spccl::cuda {

constexpr size_t kSelectStateBytes = 64;       // the pass state (generation, tile and done counters)
constexpr size_t kSelectTileFlagBytes = 8;     // a tile's ready flag: 4 x generation + state
constexpr size_t kSelectTileCountsBytes = 24;  // a tile's counts (above, ties, NaN/Inf), aggregate or inclusive

struct SelectPackLayout {
  uint64_t tiles;  // how many tiles it holds
  size_t status, agg, incl, total;
};

inline size_t selectPackAlign(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline SelectPackLayout selectPackLayoutForTiles(uint64_t tiles) {
  SelectPackLayout l;
  l.tiles = tiles;
  l.status = selectPackAlign(kSelectStateBytes);
  l.agg = selectPackAlign(l.status + tiles * kSelectTileFlagBytes);
  l.incl = selectPackAlign(l.agg + tiles * kSelectTileCountsBytes);
  l.total = selectPackAlign(l.incl + tiles * kSelectTileCountsBytes);
  return l;
}

// The layout of a workspace of `bytes`: for as many tiles as fit. Every pass
// on a workspace lays it out from its size, never from its own element
// count: the per-tile counts of a pass with few tiles would otherwise sit
// where a later pass with more tiles reads its ready flags, and a stale count
// that happens to read as this generation's flag (4 x generation + 1 to 3)
// would feed the look-back an old prefix: pairs in the wrong places and a
// wrong count.
inline SelectPackLayout selectPackLayoutForBytes(size_t bytes) {
  const size_t perTile = kSelectTileFlagBytes + 2 * kSelectTileCountsBytes;
  const size_t fixed = selectPackAlign(kSelectStateBytes) + 3 * 256;   // each region pads under 256 bytes
  uint64_t tiles = bytes > fixed ? (bytes - fixed) / perTile : 0;      // fits: a lower bound
  while (selectPackLayoutForTiles(tiles + 1).total <= bytes) ++tiles;  // at most 3 x 256 / perTile steps
  return selectPackLayoutForTiles(tiles);
}

}  // namespace spccl::cuda
