"""The `tawa` MLIR dialect, defined once in IRDL and loaded into every context the compiler makes.

Tile values are builtin ranked tensors (`tensor<128x64xbf16>`); global tensors are builtin memrefs with dynamic
sizes (`memref<?x?xbf16>`); scalars are `i32`, `f32` (and the other builtin scalar types). Elementwise math on
tiles uses upstream `arith`/`math` ops directly on tensors, control flow uses `scf`. The `tawa` dialect adds only
what upstream lacks: program ids, block loads/stores, dot, shape ops, reductions, and the asynchronous references
(arefs) that warp specialization is built on. See docs/ir.md for the semantics of every op.

IRDL checks each op's operand and result *kinds*; the rules it cannot express (shapes and dtypes, aref payloads,
warp-group structure, the kinds of `tawa.*` attributes) live in `tawa.ir.verify`, which the compiler runs after
every pass when asked (`CompileOptions.verify_each`, `--dump-ir-after-all`, `TAWA_VERIFY_EACH=1`; the tests set it).

Warp groups are `scf.execute_region` ops tagged with `tawa.warp_group` (IRDL ops cannot be region terminators, and
an execute_region is exactly "a block of code run by one role").
"""
from __future__ import annotations

import sys
import types

from mlir import ir
from mlir.dialects import irdl

# The bindings look for a Python module `mlir.dialects.<namespace>` (generated op classes) for every op they wrap
# whose dialect has none registered yet, and a failed import is not remembered: without this, compiling the linear
# layer searched the filesystem for `mlir.dialects.tawa` 1,488 times (0.07 s). An empty module ends the search;
# `tawa` ops keep the generic OpView, which `tawa.ir.ops` wraps.
sys.modules.setdefault("mlir.dialects.tawa", types.ModuleType("mlir.dialects.tawa"))

DIALECT_IRDL = r"""
irdl.dialect @tawa {
  // An asynchronous reference: a ring of `depth` slots, each holding one value of every type in `types`.
  irdl.type @aref {
    %types = irdl.any
    %depth = irdl.any
    irdl.parameters(types: %types, depth: %depth)
  }

  irdl.operation @program_id {
    %i32 = irdl.is i32
    %attr = irdl.any
    irdl.attributes {"axis" = %attr}
    irdl.results(result: %i32)
  }
  irdl.operation @num_programs {
    %i32 = irdl.is i32
    %attr = irdl.any
    irdl.attributes {"axis" = %attr}
    irdl.results(result: %i32)
  }
  // The extent of the grid a persistent kernel was written for along `axis`: its CTAs loop over those programs.
  irdl.operation @grid_extent {
    %i32 = irdl.is i32
    %attr = irdl.any
    irdl.attributes {"axis" = %attr}
    irdl.results(result: %i32)
  }
  // The CTAs of the thread-block cluster this CTA runs in (1 when the launch has no clusters).
  irdl.operation @cluster_size {
    %i32 = irdl.is i32
    irdl.results(result: %i32)
  }
  // Dynamic tiles of a persistent kernel (`persistent-tiles`): the producer takes its CTA's next tile from the
  // launch's tile counter (a linear tile index; at least the grid's program count once none is left) ...
  irdl.operation @next_tile {
    %i32 = irdl.is i32
    irdl.results(result: %i32)
  }
  // ... and hands it to the consumer warp groups (a ring of two slots) ...
  irdl.operation @tile_put {
    %i32 = irdl.is i32
    irdl.operands(tile: %i32)
  }
  // ... which take it when they finish their current tile.
  irdl.operation @tile_get {
    %i32 = irdl.is i32
    irdl.results(result: %i32)
  }
  irdl.operation @dim {
    %mem = irdl.base "!builtin.memref"
    %i32 = irdl.is i32
    %attr = irdl.any
    irdl.attributes {"axis" = %attr}
    irdl.operands(tensor: %mem)
    irdl.results(result: %i32)
  }
  irdl.operation @load {
    %mem = irdl.base "!builtin.memref"
    %i32 = irdl.is i32
    %tile = irdl.base "!builtin.tensor"
    irdl.operands(src: %mem, offsets: variadic %i32)
    irdl.results(result: %tile)
  }
  // One element of %src (element offsets, one per dim) as a scalar, 0 outside the tensor: a scalar read (a
  // sequence start, an expert id) of a tensor the kernel never writes (`scalar-loads`).
  irdl.operation @load_scalar {
    %mem = irdl.base "!builtin.memref"
    %i32 = irdl.is i32
    %any = irdl.any
    irdl.operands(src: %mem, offsets: variadic %i32)
    irdl.results(result: %any)
  }
  irdl.operation @store {
    %mem = irdl.base "!builtin.memref"
    %i32 = irdl.is i32
    %tile = irdl.base "!builtin.tensor"
    irdl.operands(dst: %mem, value: %tile, offsets: variadic %i32)
  }
  // A hint that the block of shape `shape` at `offsets` of %src is loaded later (by a tawa.load of that block):
  // the backend starts bringing it toward the SM. No effect on results.
  irdl.operation @prefetch {
    %mem = irdl.base "!builtin.memref"
    %i32 = irdl.is i32
    %shape = irdl.any
    irdl.attributes {"shape" = %shape}
    irdl.operands(src: %mem, offsets: variadic %i32)
  }
  irdl.operation @splat {
    %scalar = irdl.any
    %tile = irdl.base "!builtin.tensor"
    irdl.operands(value: %scalar)
    irdl.results(result: %tile)
  }
  irdl.operation @arange {
    %tile = irdl.base "!builtin.tensor"
    %start = irdl.any
    %end = irdl.any
    irdl.attributes {"start" = %start, "end" = %end}
    irdl.results(result: %tile)
  }
  irdl.operation @dot {
    %a = irdl.base "!builtin.tensor"
    %b = irdl.base "!builtin.tensor"
    %acc = irdl.base "!builtin.tensor"
    %res = irdl.base "!builtin.tensor"
    irdl.operands(a: %a, b: %b, acc: %acc)
    irdl.results(result: %res)
  }
  irdl.operation @expand_dims {
    %tile = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr = irdl.any
    irdl.attributes {"axis" = %attr}
    irdl.operands(src: %tile)
    irdl.results(result: %out)
  }
  irdl.operation @broadcast {
    %tile = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(src: %tile)
    irdl.results(result: %out)
  }
  irdl.operation @trans {
    %tile = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(src: %tile)
    irdl.results(result: %out)
  }
  irdl.operation @reduce {
    %tile = irdl.base "!builtin.tensor"
    %any = irdl.any
    %attr = irdl.any
    %kind = irdl.any
    irdl.attributes {"axis" = %attr, "kind" = %kind}
    irdl.operands(src: %tile)
    irdl.results(result: %any)
  }

  // Split-K (the `split-k` pass): a program's partial accumulator of slot `slot`, kept for output tile %tile.
  irdl.operation @split_k_store {
    %tile = irdl.base "!builtin.tensor"
    %i32 = irdl.is i32
    %slot = irdl.any
    irdl.attributes {"slot" = %slot}
    irdl.operands(value: %tile, tile: %i32, split: %i32)
  }
  // True for the last of the tile's `splits` programs to arrive (after storing its partials).
  irdl.operation @split_k_arrive {
    %i32 = irdl.is i32
    %i1 = irdl.is i1
    %splits = irdl.any
    irdl.attributes {"splits" = %splits}
    irdl.operands(tile: %i32)
    irdl.results(last: %i1)
  }
  // The sum, in split order, of every program's partial of slot `slot` of tile %tile; %value is the partial of
  // this program, split %split.
  irdl.operation @split_k_sum {
    %tile = irdl.base "!builtin.tensor"
    %i32 = irdl.is i32
    %slot = irdl.any
    %splits = irdl.any
    irdl.attributes {"slot" = %slot, "splits" = %splits}
    irdl.operands(value: %tile, tile: %i32, split: %i32)
    irdl.results(result: %tile)
  }

  irdl.operation @aref_create {
    %aref = irdl.base @tawa::@aref
    irdl.results(result: %aref)
  }
  // IRDL binds each constraint variable to one type per op, so values of different types need their own
  // operands: up to 8 optional ones (`operandSegmentSizes` / `resultSegmentSizes` say which are present).
  irdl.operation @aref_put {
    %aref = irdl.base @tawa::@aref
    %v0 = irdl.any
    %v1 = irdl.any
    %v2 = irdl.any
    %v3 = irdl.any
    %v4 = irdl.any
    %v5 = irdl.any
    %v6 = irdl.any
    %v7 = irdl.any
    irdl.operands(aref: %aref, v0: optional %v0, v1: optional %v1, v2: optional %v2, v3: optional %v3, v4: optional %v4, v5: optional %v5, v6: optional %v6, v7: optional %v7)
  }
  irdl.operation @aref_get {
    %aref = irdl.base @tawa::@aref
    %v0 = irdl.any
    %v1 = irdl.any
    %v2 = irdl.any
    %v3 = irdl.any
    %v4 = irdl.any
    %v5 = irdl.any
    %v6 = irdl.any
    %v7 = irdl.any
    irdl.operands(aref: %aref)
    irdl.results(v0: optional %v0, v1: optional %v1, v2: optional %v2, v3: optional %v3, v4: optional %v4, v5: optional %v5, v6: optional %v6, v7: optional %v7)
  }
  irdl.operation @aref_consumed {
    %aref = irdl.base @tawa::@aref
    irdl.operands(aref: %aref)
  }
}
"""

#: Most values one aref slot holds (`aref_put` operands / `aref_get` results after the aref).
AREF_MAX_VALUES = 8



def load_dialect(context: ir.Context) -> None:
    """Register the `tawa` dialect in `context` (idempotent per context)."""
    if getattr(context, "_tawa_loaded", False):
        return
    with context, ir.Location.unknown(context):
        irdl.load_dialects(ir.Module.parse(DIALECT_IRDL))
    context._tawa_loaded = True


def make_context() -> ir.Context:
    """A fresh MLIR context with upstream dialects and `tawa` loaded."""
    context = ir.Context()
    load_dialect(context)
    return context
