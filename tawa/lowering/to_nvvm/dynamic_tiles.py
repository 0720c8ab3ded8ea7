"""Lowering of dynamic tiles: `tawa.next_tile`, `tawa.tile_put`, `tawa.tile_get` and the `scf.while` tile loop
around them (`persistent_tiles`, "Dynamic tiles").

- The launch's tile counter is the first word of the runtime's workspace (ABI `workspace`; the kernel's metadata
  says `dynamic_tiles`, and the runtime allocates `abi.TILE_COUNTER_BYTES`, zeroed once).
- `next_tile` (the producer warp, after the tile's loads): lane 0 adds 1 to the counter (`atom.add.relaxed.gpu`,
  nothing else is ordered by it); the `tile_put` right after it shuffles the old value v to the warp; the tile is
  v + CTAs launched. Every CTA fetches once per tile it
  runs (the runtime launches at most as many CTAs as tiles, each starting with its own), so a launch makes
  exactly `tiles` fetches, reading 0 to tiles - 1: the one that reads tiles - 1 is the last, and stores 0 back
  (`st.relaxed.gpu`) for the next launch.
- `tile_put` / `tile_get`: a ring of `TILE_SLOTS` shared words with a `full` mbarrier (one arrival: the
  producer's) and an `empty` one (one arrival per consumer thread) each, as an aref's ring: the k-th put and get of
  a CTA use slot k % TILE_SLOTS with parity (k / TILE_SLOTS) & 1, k the tile loop's iteration. put: wait empty,
  lane 0 stores the index and arrives on full (a release at CTA scope); get: every consumer thread waits on full
  (an acquire), loads the index, and arrives on empty. Each consumer warp group passes on its own (a named
  barrier over all of them at every tile would make the group that runs ahead under the consumer ping-pong wait
  for the other), and with two slots the producer hands over the tile after next while the consumers finish this
  one.
- `scf.while` (the tile loop of a region): carries the tile index, its iteration count (the arefs used directly in
  its body, a prologue operand's, use slot `count` of their rings past the uses before the loop) and the use
  counts of the rings of the loops nested in it (`arefs.ring_counts`), as the static tile loop does.
"""
from __future__ import annotations

from dataclasses import dataclass

from tawa import hopper
from tawa.errors import InternalCompilerError
from tawa.ir.ops import TileGetOp, TilePutOp
from tawa.ir.traversal import ops_of

from . import arefs, elementwise, sync
from .builder import V
from .context import Ctx

#: Slots of the tile channel's ring.
TILE_SLOTS = 2
_ENV_KEY = "tile_channel"


@dataclass
class TileChannel:
    words: int         # shared-memory offset of the slots' words (4 bytes each, 8 apart)
    full: int          # offset of the slots' full mbarriers
    empty: int         # offset of the slots' empty mbarriers
    depth: int = TILE_SLOTS     # (a ring's depth, for `arefs.stage_of`)


def open_channel(ctx: Ctx, num_threads: int) -> None:
    """At the kernel's top level: the channel's words and mbarriers (empty expects every consumer thread: all
    but the producer warp group's)."""
    consumers = num_threads - hopper.THREADS_PER_WARP_GROUP
    words = ctx.alloc_barriers(TILE_SLOTS, 0)        # plain words in the reserved region (count 0: never init)
    ctx.env[_ENV_KEY] = TileChannel(words, ctx.alloc_barriers(TILE_SLOTS, 1),
                                    ctx.alloc_barriers(TILE_SLOTS, consumers))


def _channel(ctx: Ctx) -> TileChannel:
    channel = ctx.env.get(_ENV_KEY)
    if channel is None:
        raise InternalCompilerError("a tile channel op in a kernel without dynamic tiles")
    return channel


def _slot(ctx: Ctx, op) -> tuple:
    """(word, full, empty, parity) of the put or get `op`: the slot of its tile loop's iteration, as an aref's."""
    channel = _channel(ctx)
    stage, parity = arefs.stage_of(ctx, channel, arefs.iteration(ctx, op))
    return tuple(arefs.barrier_ptr(ctx, base, stage) for base in (channel.words, channel.full, channel.empty)) + \
        (parity,)


@dataclass
class FetchedTile:
    """A `next_tile` whose atomic is in flight: lane 0's old counter value, read at the `tile_put`."""
    old: V


def lower_next_tile(ctx: Ctx, op) -> None:
    """Issue the fetch only: its result is read at the tile's `tile_put`, after the tile's loads, so that the
    atomic's round trip to L2 does not delay them."""
    b = ctx.b
    counter = ctx.params.workspace()
    old = b.op(f'"llvm.inline_asm"({ctx.lane()}, {counter}) <{{asm_string = "{{ .reg .pred p; setp.eq.u32 p, $1, 0; '
               f'mov.u32 $0, 0; @p atom.add.relaxed.gpu.global.u32 $0, [$2], 1; }}", constraints = "=r,r,l", '
               f'has_side_effects}}> : (i32, !llvm.ptr<1>) -> i32', "i32")
    ctx.set(op.results[0], FetchedTile(old))


def _finish_fetch(ctx: Ctx, value, fetched: FetchedTile) -> V:
    """The tile index of a fetch: the old value broadcast from lane 0, plus the CTAs launched; the launch's last
    fetch resets the counter."""
    b = ctx.b
    old = sync.shfl(b, fetched.old, 0, "idx")
    tiles = b.mul(b.mul(ctx.params.grid_extent(0), ctx.params.grid_extent(1)), ctx.params.grid_extent(2))
    with b.if_(b.and_(b.cmpi("eq", ctx.lane(), 0), b.cmpi("eq", old, b.sub(tiles, 1)))):
        # the launch's last fetch: the next launch starts from 0
        b.line(f'"llvm.inline_asm"({ctx.params.workspace()}) <{{asm_string = "st.relaxed.gpu.global.u32 [$0], 0;", '
               f'constraints = "l", has_side_effects}}> : (!llvm.ptr<1>) -> ()')
    ctas = b.op('"nvvm.read.ptx.sreg.nctaid.x"() : () -> i32', "i32", prelude=True)
    tile = b.add(old, ctas)
    ctx.set(value, tile)
    return tile


def lower_tile_put(ctx: Ctx, op) -> None:
    b = ctx.b
    value = TilePutOp(op).tile
    tile = ctx.get(value)
    if isinstance(tile, FetchedTile):
        tile = _finish_fetch(ctx, value, tile)
    word, full, empty, parity = _slot(ctx, op)
    sync.mbarrier_wait(b, empty, b.xor(parity, 1))
    with b.if_(b.cmpi("eq", ctx.lane(), 0)):
        b.line(f"llvm.store {tile}, {word} : i32, !llvm.ptr<3>")
        sync.mbarrier_arrive(b, full)


def lower_tile_get(ctx: Ctx, op) -> None:
    b = ctx.b
    word, full, empty, parity = _slot(ctx, op)
    sync.mbarrier_wait(b, full, parity)
    tile = b.op(f"llvm.load {word} : !llvm.ptr<3> -> i32", "i32")
    sync.mbarrier_arrive(b, empty)
    ctx.set(op.results[0], tile)


def lower_tile_loop(ctx: Ctx, op, lower_body) -> None:
    """The `scf.while` tile loop of a region; `lower_body(ctx, ops)` lowers the ops of its body (the producer's
    or the consumers' lowering)."""
    b = ctx.b
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    condition = ops_of(before)[-1]
    if len(op.operands) != 1 or len(after.arguments) != 1 or condition.name != "scf.condition":
        raise InternalCompilerError("a tile loop carries its tile index only", op=op.name)
    direct, nested = arefs.rings_used(ctx, op)
    bases = {id(r): ctx.ring_uses.get(id(r)) for r in direct}
    carried = [ctx.get(op.operands[0]), b.i32(0)] + arefs.ring_counts(ctx, nested)
    types = ", ".join("i32" for _ in carried)
    entry = [V(b.fresh("tw"), "i32") for _ in carried]
    inner = [V(b.fresh("tw"), "i32") for _ in carried]
    res = b.fresh()
    b.line(f"{res}:{len(carried)} = scf.while (" + ", ".join(f"{a} = {c}" for a, c in zip(entry, carried)) +
           f") : ({types}) -> ({types}) {{")
    with b.indented():
        ctx.set(before.arguments[0], entry[0])
        for o in ops_of(before)[:-1]:
            elementwise.lower_elementwise(ctx, o)
        cond = ctx.get(condition.operands[0])
        b.line(f"scf.condition({cond}) " + ", ".join(str(a) for a in entry) + f" : {types}")
    b.line("} do {")
    b.line(f"^bb0(" + ", ".join(f"{a}: i32" for a in inner) + "):")
    ctx.loop_depth += 1
    with b.indented():
        ctx.set(after.arguments[0], inner[0])
        ctx.tile_iterations[op.results[0]] = inner[1]
        arefs.set_ring_counts(ctx, nested, inner[2:])
        body = ops_of(after)
        lower_body(ctx, body[:-1])
        out = [ctx.get(body[-1].operands[0]), b.add(inner[1], 1)] + arefs.ring_counts(ctx, nested)
        b.line(f"scf.yield " + ", ".join(str(v) for v in out) + f" : {types}")
    ctx.loop_depth -= 1
    b.line("}")
    results = [V(f"{res}#{i}", "i32") for i in range(len(carried))]
    arefs.set_ring_counts(ctx, nested, results[2:])
    for r in direct:
        base = bases[id(r)]
        ctx.ring_uses[id(r)] = results[1] if base is None else b.add(base, results[1])


def lower_consumer_tile_loop(ctx: Ctx, op) -> None:
    lower_tile_loop(ctx, op, lambda c, ops: c.lower_block(ops))


HANDLERS = {
    TileGetOp.NAME: lower_tile_get,
    "scf.while": lower_consumer_tile_loop,
}
