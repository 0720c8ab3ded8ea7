"""Closures of dynamic tiles (`tawa.next_tile`, `tawa.tile_put`, `tawa.tile_get`): the launch's tile counter and
each CTA's channel (a ring of two slots) from the producer to the consumer warp groups, with the GPU lowering's protocol
(`to_nvvm.dynamic_tiles`).

The counter is the launch's (`Runtime.tile_counter`): a fetch returns it plus the CTAs launched and adds one, and
the fetch that reads tiles - 1 sets it back to 0, as the GPU code does; a launch that leaves it elsewhere broke the
protocol (`check_tiles_done`). A put waits until every consumer region took the index put a lap (two puts)
before, a get until there is one it has not taken.
"""
from __future__ import annotations

from tawa.ir.location import where as _where
from tawa.runtime.interp.aref_ops import Wait
from tawa.runtime.interp.compiler import handler
from tawa.runtime.interp.errors import ArefProtocolError, op_location


class TileChannel:
    """One CTA's channel: the indices put (a ring of `SLOTS`, as the GPU's), and how many each reader took."""

    SLOTS = 2

    def __init__(self, readers: int):
        self.readers = readers
        self.values: list = []
        self.taken: dict = {}

    @property
    def puts(self) -> int:
        return len(self.values)

    def can_put(self) -> bool:
        """The slot of the next put is free: every reader took the index put a ring's lap before it."""
        oldest = self.puts - self.SLOTS
        taken = list(self.taken.values()) + [0] * (self.readers - len(self.taken))
        return oldest < 0 or min(taken) > oldest

    def can_get(self, task) -> bool:
        return self.taken.get(task, 0) < self.puts

    def describe(self) -> str:
        return (f"the tile channel ({self.puts} put, taken {sorted(self.taken.values())} by {len(self.taken)} of "
                f"{self.readers} readers)")


class ChannelWait(Wait):
    """What a task blocked on the channel waits for (the scheduler asks `ready`, as of an aref's `Wait`)."""

    def describe(self) -> str:
        need = "every reader to take the index of its slot" if self.kind == "put" else "an index"
        return f"waits in tawa.tile_{self.kind}{_where(self.op)} for {need} of {self.ring.describe()}"


@handler("tawa.next_tile")
def _next_tile(c, op):
    (r,) = c.results(op)
    rt = c.rt

    def run(env):
        tiles = rt.tile_grid[0] * rt.tile_grid[1] * rt.tile_grid[2]
        old = rt.tile_counter
        rt.tile_counter = 0 if old == tiles - 1 else old + 1
        env[r] = old + rt.grid[0]
    return run, False


@handler("tawa.tile_put")
def _tile_put(c, op):
    (t,) = c.operands(op)
    rt = c.rt

    def gen(env):
        channel = rt.channel
        yield ChannelWait(channel, "put", op)
        channel.values.append(env[t])
    return gen, True


@handler("tawa.tile_get")
def _tile_get(c, op):
    (r,) = c.results(op)
    rt = c.rt

    def gen(env):
        channel = rt.channel
        yield ChannelWait(channel, "get", op, rt.task)
        k = channel.taken.get(rt.task, 0)
        channel.taken[rt.task] = k + 1
        env[r] = channel.values[k]
    return gen, True


def check_taken(channel, op=None) -> None:
    """At the end of a CTA: every index put was taken by every reader."""
    if channel is not None and channel.puts and (len(channel.taken) < channel.readers
                                                 or not all(n == channel.puts for n in channel.taken.values())):
        raise ArefProtocolError(f"{channel.describe()}: an index put was never taken when the program ended",
                                op_location(op) if op is not None else None)


def check_tiles_done(rt, op=None) -> None:
    """At the end of a launch: the tile counter is back at 0 (every CTA fetched until it read past the tiles)."""
    if rt.tile_counter:
        raise ArefProtocolError(f"the tile counter ends the launch at {rt.tile_counter}, not 0: some CTA stopped "
                                "fetching tiles before it read past the last", op_location(op) if op else None)


__all__ = ["TileChannel", "check_taken", "check_tiles_done"]
