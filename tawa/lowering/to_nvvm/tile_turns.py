"""The ping-pong GEMM schedule's order between its consumer groups: main loops run in tile order.

Each consumer warp group of a ping-pong kernel (`tawa.tile_share` [c, n]) computes every n-th tile of its CTA,
taking the slots of its tiles from the ring all groups share and passing over the others' (`arefs.skip_tiles`).
Before its main loop, group c waits on named barrier `MAIN_LOOP_BARRIERS + c` until the group before it in tile
order arrives there, after that group's own main loop (group 0 does not wait at its first tile). Two reasons:

- correctness: a group waits on a slot's `full` barrier by parity, which tells phases apart only within one lap of
  the ring; were a group to start its next tile while the other still consumes the tile in between, it would wait
  on slots a lap or more ahead of the producer and take a stale phase for its own;
- speed: the tensor cores serve one main loop at a time, and each group's epilogue (loads, math, the TMA store)
  runs under the next group's main loop. This is the ping-pong of CUTLASS's sm90 kernels.
"""
from __future__ import annotations

from tawa.ir.ops import ForOp
from tawa.ir.traversal import parent_op

from . import sync
from .context import Ctx
from .ws_consumer_loop import PINGPONG_BARRIERS, PINGPONG_THREADS


def take_main_loop_turn(ctx: Ctx, loop) -> None:
    """Before a ping-pong group's main loop: wait until the group before it in tile order has finished its own
    (`bar.sync` on this group's barrier, which that group arrives on), except group 0 at its first tile. Why: a
    group waits on ring slots by parity, which tells phases apart only within one lap of the ring; with the main
    loops in tile order, the producer is never more than a lap ahead of or behind the group that waits. It is
    also the ping-pong itself: one group's epilogue runs while the other's main loop has the tensor cores."""
    b = ctx.b
    index, _ = ctx.tile_share
    barrier = b.i32(MAIN_LOOP_BARRIERS + index)
    tiles = parent_op(loop)
    if index == 0 and tiles is not None and tiles.name == ForOp.NAME:
        with b.if_(b.cmpi("ne", ctx.get(ForOp(tiles).iv), ctx.get(ForOp(tiles).lower))):  # not its first tile
            sync.named_barrier_sync(b, barrier, MAIN_LOOP_THREADS)
    elif index != 0:
        sync.named_barrier_sync(b, barrier, MAIN_LOOP_THREADS)


def pass_main_loop_turn(ctx: Ctx) -> None:
    """After a ping-pong group's main loop (every slot it took released): the next group in tile order may start
    its main loop (`bar.arrive` on that group's barrier). The last pass of a kernel meets no wait; the CTA's exit
    clears it."""
    b = ctx.b
    index, count = ctx.tile_share
    sync.named_barrier_arrive(b, b.i32(MAIN_LOOP_BARRIERS + (index + 1) % count), MAIN_LOOP_THREADS)


#: Named barriers ordering the ping-pong groups' main loops (group c waits on MAIN_LOOP_BARRIERS + c); attention's
#: ping-pong, which uses the same ids, runs in regions of two warp groups, never in tile-sharing ones.
MAIN_LOOP_BARRIERS = PINGPONG_BARRIERS[0]
#: Threads at each: the waiting group and the group that passes it the turn.
MAIN_LOOP_THREADS = PINGPONG_THREADS
