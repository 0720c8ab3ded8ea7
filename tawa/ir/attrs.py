"""Every `tawa.*` attribute the compiler reads or writes, named once, with a typed getter, a setter and its default.

Passes never spell an attribute name or pick its MLIR class themselves: they call `NUM_WARP_GROUPS.get(region)`
or `LAYOUT.set(op, desc)`. Who sets each attribute and who reads it:

| attribute | on | set by | read by |
|---|---|---|---|
| `tawa.kernel` (unit) | kernel `func.func` | frontend | every pass (the kernel finder) |
| `tawa.params`, `tawa.grid`, `tawa.constants` | kernel | frontend | backend, runtime (launch metadata) |
| `tawa.num_warps` (i32) | kernel | frontend (`@num_warps`), assign-warp-groups | layouts, conversion |
| `tawa.warp_group` (str: producer/consumer) | `scf.execute_region` | partition | WS passes, conversion, interpreter |
| `tawa.num_warp_groups` (i32, default 1) | warp-group region | partition | register-realloc, layouts, conversion |
| `tawa.first_warp_group` (i32) | warp-group region | assign-warp-groups | conversion |
| `tawa.max_registers` (i32) | warp-group region | register-realloc | conversion (`setmaxnreg`) |
| `tawa.aref_name` (str) | `tawa.aref_create` | aref-insertion | diagnostics |
| `tawa.one_slot_ring` (i32: bytes of a slot) | kernel | aref-insertion | convert-to-nvvm (kernel info), compile notes |
| `tawa.aref_load` (unit) | `tawa.load` | assign-warp-groups | layouts, conversion (the put issues it) |
| `tawa.pingpong` (unit) | consumer region of 2+ warp groups | assign-warp-groups | conversion (named-barrier ping-pong) |
| `tawa.lookahead` (unit) | a consumer's `scf.for` | assign-warp-groups | conversion (next iteration's first dot issued early) |
| `tawa.persistent` (unit) | kernel | persistent-tiles | conversion, backend and runtime (launch about one CTA per SM), interpreter |
| `tawa.split_k` (i32, default 1) | kernel | split-k | conversion, backend and runtime (grid axis 2 times it), interpreter |
| `tawa.stream_k` (unit) | kernel | stream-k | conversion, backend and runtime (a workspace record per CTA) |
| `tawa.unit_scale_operand` (i32) | tile `arith.mulf` | lazy-rescale | conversion (skipped when that operand is all 1.0 in a warp) |
| `tawa.at_most` (i32) | tile `arith.truncf` to fp8 | lazy-rescale | conversion (rounded without the overflow check) |
| `tawa.tile_share` (array of two i32) | ping-pong consumer region | partition | protocol-check, persistent-tiles, conversion, interpreter |
| `tawa.smem` (unit) | `tawa.load`, `tawa.trans` | assign-layouts, assign-warp-groups | software-pipeline, conversion |
| `tawa.layout` (str) | op with a tile result | assign-layouts | conversion |
| `tawa.layouts` (array of str) | `scf.for`, `scf.if` | assign-layouts | conversion |
| `tawa.num_stages` (i32, default 0) | `scf.for` | software-pipeline | conversion |
| `tawa.pipelined` (unit) | `tawa.load` | software-pipeline | conversion |
| `tawa.kernel_info` (str, JSON) | module | convert-to-nvvm | backend |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir import ir

from tawa.ir.convert import to_python


@dataclass(frozen=True)
class _Attr:
    name: str
    default: Any = None

    def has(self, op) -> bool:
        return self.name in _op(op).attributes

    def get(self, op):
        attrs = _op(op).attributes
        return self._decode(attrs[self.name]) if self.name in attrs else self.default

    def set(self, op, value) -> None:
        op = _op(op)
        op.attributes[self.name] = self._encode(value, op.context)

    def remove(self, op) -> None:
        if self.has(op):
            del _op(op).attributes[self.name]


class UnitAttr(_Attr):
    def get(self, op) -> bool:
        return self.has(op)

    def set(self, op, value: bool = True) -> None:
        if value:
            _op(op).attributes[self.name] = ir.UnitAttr.get(_op(op).context)
        else:
            self.remove(op)


class I32Attr(_Attr):
    def _decode(self, a) -> int:
        return ir.IntegerAttr(a).value

    def _encode(self, value, ctx):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(32, ctx), int(value))


class StrAttr(_Attr):
    def _decode(self, a) -> str:
        return ir.StringAttr(a).value

    def _encode(self, value, ctx):
        return ir.StringAttr.get(str(value), ctx)


class StrListAttr(_Attr):
    def _decode(self, a) -> list:
        return [ir.StringAttr(x).value for x in ir.ArrayAttr(a)]

    def _encode(self, value, ctx):
        return ir.ArrayAttr.get([ir.StringAttr.get(str(v), ctx) for v in value], ctx)


class PyAttr(_Attr):
    """Metadata stored as MLIR attributes but read as plain Python (lists, dicts, strings, numbers); set from a
    list of ints (the frontend writes the others)."""

    def _decode(self, a):
        return to_python(a)

    def _encode(self, value, ctx):
        i32 = ir.IntegerType.get_signless(32, ctx)
        return ir.ArrayAttr.get([ir.IntegerAttr.get(i32, int(v)) for v in value], ctx)


def _op(op) -> ir.Operation:
    return op.operation if hasattr(op, "operation") else op


# ---- kernel functions ----------------------------------------------------------------------------------------
KERNEL = UnitAttr("tawa.kernel")
PARAMS = PyAttr("tawa.params", [])
GRID = PyAttr("tawa.grid", ["1"])
CONSTANTS = PyAttr("tawa.constants", {})
#: The kernel's `@requires` conditions ({"condition": "N <= 1024", "source": "@requires(N <= BLOCK_N)", "line": 5}:
#: the condition with constants folded, the decorator's line of source and its number), which the launch checks.
REQUIRES = PyAttr("tawa.requires", [])
#: The kernel's scalar arguments (by index) whose positive value the code relies on (`scale-after-max`); the
#: launcher checks them at every launch.
POSITIVE_PARAMS = PyAttr("tawa.positive_params", [])
NUM_WARPS = I32Attr("tawa.num_warps", None)

# ---- warp specialization -----------------------------------------------------------------------------------
WARP_GROUP = StrAttr("tawa.warp_group", None)
NUM_WARP_GROUPS = I32Attr("tawa.num_warp_groups", 1)
FIRST_WARP_GROUP = I32Attr("tawa.first_warp_group", None)
MAX_REGISTERS = I32Attr("tawa.max_registers", None)
AREF_NAME = StrAttr("tawa.aref_name", None)
#: On a kernel whose pipelined loops' ring got one slot where the depth was left to the compiler: the bytes of a
#: slot (a compile note says the copies then wait for the math; `aref-insertion`).
ONE_SLOT_RING = I32Attr("tawa.one_slot_ring", None)
AREF_LOAD = UnitAttr("tawa.aref_load")
PINGPONG = UnitAttr("tawa.pingpong")
LOOKAHEAD = UnitAttr("tawa.lookahead")
PERSISTENT = UnitAttr("tawa.persistent")
#: The programs each output tile's K loop is split over (the `split-k` pass; 1: not split).
SPLIT_K = I32Attr("tawa.split_k", 1)
#: A persistent kernel whose CTAs share the tiles of a mostly idle last wave by K iterations (`stream-k`).
STREAM_K = UnitAttr("tawa.stream_k")
#: On each consumer region of a ping-pong kernel: [its index, the number of consumer regions]; region c computes
#: the c-th of every run of that many consecutive tiles of its CTA (see `persistent_tiles`).
TILE_SHARE = PyAttr("tawa.tile_share", None)
#: On a clustered persistent kernel: [CTAs along grid axis 0, along axis 1] of its thread-block clusters.
CLUSTER = PyAttr("tawa.cluster", None)
#: On a persistent kernel: the programs along grid axis 0 its tile loop visits together (see `persistent_tiles`).
TILE_GROUP = I32Attr("tawa.tile_group", None)
#: On a persistent kernel whose CTAs take tiles from a counter as they free up (`persistent_tiles`, dynamic tiles).
DYNAMIC_TILES = UnitAttr("tawa.dynamic_tiles")
#: On a producer's load: the CTAs of a cluster all read this tile; each copies its share to every one of them.
MULTICAST = UnitAttr("tawa.multicast")

#: On a tile multiply: the index of its operand that is exactly 1.0 everywhere on most iterations (attention's
#: rescale factor after `lazy-rescale`); the GPU lowering skips the multiply where a warp vote finds it so.
UNIT_SCALE_OPERAND = I32Attr("tawa.unit_scale_operand", None)

#: On a rounding to fp8: a bound `lazy-rescale` proved for its operand, 0 <= x <= the value (exponentials of scores
#: less a row maximum that is at most 2^8 stale); where it is below the type's overflow range, the GPU lowering
#: rounds without the overflow check.
AT_MOST = I32Attr("tawa.at_most", None)

#: Warp-group roles.
PRODUCER, CONSUMER = "producer", "consumer"

# ---- GPU backend -------------------------------------------------------------------------------------------
SMEM = UnitAttr("tawa.smem")
LAYOUT = StrAttr("tawa.layout", None)
LAYOUTS = StrListAttr("tawa.layouts", None)
NUM_STAGES = I32Attr("tawa.num_stages", 0)
PIPELINED = UnitAttr("tawa.pipelined")
KERNEL_INFO = StrAttr("tawa.kernel_info", None)

#: Every `tawa.*` attribute, for the verifier and the docs.
ALL = (KERNEL, PARAMS, GRID, CONSTANTS, REQUIRES, POSITIVE_PARAMS, NUM_WARPS, WARP_GROUP, NUM_WARP_GROUPS, FIRST_WARP_GROUP, MAX_REGISTERS,
       AREF_NAME, ONE_SLOT_RING, AREF_LOAD, PINGPONG, LOOKAHEAD, PERSISTENT, SPLIT_K, STREAM_K, TILE_SHARE, CLUSTER,
       TILE_GROUP, DYNAMIC_TILES, MULTICAST, UNIT_SCALE_OPERAND, AT_MOST, SMEM, LAYOUT, LAYOUTS, NUM_STAGES, PIPELINED,
       KERNEL_INFO)
