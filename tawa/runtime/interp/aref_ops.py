"""Asynchronous references (arefs) with their exact ring protocol, and the closures of the aref ops.

An aref of depth D is a ring of D slots, each `empty`, `full` or `borrowed`. `put` waits until the next slot in
ring order is empty (not full, not still borrowed), fills it; `get` waits until the next slot in ring order is
full and borrows it; `consumed` releases the oldest slot the calling warp group borrowed. Waiting is a `Wait`
yielded to the scheduler, which resumes the task only when the wait is ready, so check-and-act is atomic.

Consumer warp groups that share tiles (ping-pong: `tawa.tile_share` regions) each take whole tiles of the ring in
turn: each has its own position in the ring's sequence of puts, which its K loops advance past the other groups'
tiles (`skip`, by the loop's trip count, as the GPU code does), and its get waits for exactly the put at its
position.

A value returned by `get` is valid only until its slot is released: the producer may overwrite it. To make a use
after `consumed` visible, `get` hands out fresh copies and `consumed` poisons them in place (NaN for floats, a
sentinel for integers). Protocol violations raise `ArefProtocolError`: consumed without a borrowed slot, a warp
group finishing while it still borrows slots, values put but never taken when the program ends.
"""
from __future__ import annotations

import re

import numpy as np

from tawa.ir.location import where as _where
from tawa.runtime.interp.compiler import handler
from tawa.runtime.interp.errors import ArefProtocolError, op_location

EMPTY, FULL, BORROWED = "empty", "full", "borrowed"
_POISON_INT = 0x7EADBEEF


class Ring:
    """The run-time state of one aref."""

    def __init__(self, depth: int, value, op):
        self.depth = depth
        self.value = value          # the SSA value, named in messages
        self.op = op
        self.slots = [None] * depth
        self.state = [EMPTY] * depth
        self.seq = [-1] * depth     # which put (0, 1, ...) each slot holds (put k goes to slot k % depth)
        self.puts = 0
        self.gets = 0               # the next put to get, for readers that do not share tiles
        self.cursors: dict = {}     # task -> the next put it gets, for readers that share tiles
        self.borrowed: list = []    # (slot, task), oldest first

    @property
    def put_at(self) -> int:
        return self.puts % self.depth

    @property
    def get_at(self) -> int:
        return self.gets % self.depth

    def cursor(self, task) -> int:
        return self.cursors.get(task, self.gets)

    def skip(self, task, count: int) -> None:
        """A reader sharing tiles passes over `count` puts meant for the others."""
        self.cursors[task] = self.cursor(task) + count

    @property
    def name(self) -> str:
        try:
            return self.value.get_name()
        except Exception:  # noqa: BLE001 - naming is best effort
            return "<aref>"

    def describe(self) -> str:
        return (f"aref {self.name} (depth {self.depth}; slots: {', '.join(self.state)}; next put -> slot "
                f"{self.put_at}, next get -> slot {self.get_at})")

    def can_put(self) -> bool:
        return self.state[self.put_at] == EMPTY

    def can_get(self, task=None) -> bool:
        """Whether a get of the reader's next put may proceed, as the GPU decides it: the slot's `full` barrier
        has completed a phase of the parity of that put's lap (`(k / D) & 1`). That tells laps apart only within
        one lap: a reader two laps ahead passes on a stale phase, which `get` reports. The barrier completed one
        phase per put into the slot, the last for the put the slot holds (`seq`), so its latest phase is that
        put's lap."""
        k = self.cursor(task)
        held = self.seq[k % self.depth]
        return held >= 0 and (held // self.depth) % 2 == (k // self.depth) % 2

    def put(self, values: list) -> None:
        slot = self.put_at
        self.slots[slot] = values
        self.state[slot] = FULL
        self.seq[slot] = self.puts
        self.puts += 1

    def get(self, task, op=None) -> list:
        k = self.cursor(task)
        slot = k % self.depth
        if self.seq[slot] != k or self.state[slot] != FULL:
            raise ArefProtocolError(f"tawa.aref_get of put #{k} on {self.describe()} passed the parity wait of its "
                                    f"slot {slot} on put #{self.seq[slot]} (a lap apart): the reader ran more than "
                                    f"one lap of the ring ahead of or behind the producer", op_location(op))
        values = [np.array(v) if isinstance(v, np.ndarray) else v for v in self.slots[slot]]
        self.slots[slot] = values
        self.state[slot] = BORROWED
        self.borrowed.append((slot, task))
        if task in self.cursors:
            self.cursors[task] = k + 1
        else:
            self.gets = k + 1
        return values

    def consumed(self, task, op) -> None:
        for i, (slot, owner) in enumerate(self.borrowed):
            if owner is task:
                del self.borrowed[i]
                for value in self.slots[slot]:
                    _poison(value)
                self.slots[slot] = None
                self.state[slot] = EMPTY
                return
        who = f" by {task.name}" if task is not None else ""
        raise ArefProtocolError(f"tawa.aref_consumed on {self.describe()} but no slot is borrowed{who} "
                                "(consumed without a matching aref_get)", op_location(op))

    def held_by(self, task) -> int:
        return sum(1 for _, owner in self.borrowed if owner is task)


def _poison(value) -> None:
    if isinstance(value, np.ndarray) and value.flags.writeable:
        if value.dtype.kind == "f" or value.dtype.kind == "V" or value.dtype.name in (
                "bfloat16", "float8_e4m3fn", "float8_e5m2"):
            value[...] = np.nan
        elif value.dtype.kind in "iu":
            value[...] = _POISON_INT if value.dtype.itemsize >= 4 else -1


class Wait:
    """What a blocked task waits for: `put` or `get` on a ring."""
    __slots__ = ("ring", "kind", "op", "task")

    def __init__(self, ring: Ring, kind: str, op, task=None):
        self.ring, self.kind, self.op, self.task = ring, kind, op, task

    def ready(self) -> bool:
        return self.ring.can_put() if self.kind == "put" else self.ring.can_get(self.task)

    def describe(self) -> str:
        need = "an empty slot" if self.kind == "put" else "a full slot"
        return f"waits in tawa.aref_{self.kind}{_where(self.op)} for {need} of {self.ring.describe()}"


_DEPTH = re.compile(r",\s*(\d+)\s*(?::\s*i\d+)?\s*>$")


def aref_depth(type_text: str) -> int:
    match = _DEPTH.search(type_text)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"cannot read the depth of {type_text}")
    return int(match.group(1))


@handler("tawa.aref_create")
def _create(c, op):
    (r,) = c.results(op)
    text = str(op.results[0].type)
    try:
        depth = aref_depth(text)
    except ValueError:
        raise c.error(op, f"tawa.aref_create: the type {text} has no positive depth") from None
    value, rt = op.results[0], c.rt

    def run(env):
        ring = Ring(depth, value, op)
        rt.rings.append(ring)
        env[r] = ring
    return run, False


@handler("tawa.aref_put")
def _put(c, op):
    r, *values = c.operands(op)

    def gen(env):
        ring = env[r]
        yield Wait(ring, "put", op)
        ring.put([env[v] for v in values])
    return gen, True


@handler("tawa.aref_get")
def _get(c, op):
    (r,) = c.operands(op)
    res, rt = c.results(op), c.rt

    def gen(env):
        ring = env[r]
        yield Wait(ring, "get", op, rt.task)
        values = ring.get(rt.task, op)
        if len(values) != len(res):
            raise ArefProtocolError(f"tawa.aref_get expects {len(res)} values but the slot holds {len(values)}",
                                    op_location(op))
        for s, v in zip(res, values):
            env[s] = v
    return gen, True


@handler("tawa.aref_consumed")
def _consumed(c, op):
    (r,) = c.operands(op)
    rt = c.rt

    def gen(env):
        yield None
        env[r].consumed(rt.task, op)
    return gen, True


def check_drained(rings: list) -> None:
    """At the end of a program: every value put must have been taken and released."""
    for ring in rings:
        if FULL in ring.state:
            n = ring.state.count(FULL)
            raise ArefProtocolError(f"{n} value(s) put into {ring.describe()} were never taken by aref_get "
                                    "when the program ended", op_location(ring.op))
        if ring.borrowed:
            raise ArefProtocolError(f"{ring.describe()} still has borrowed slots when the program ended "
                                    "(aref_get without aref_consumed)", op_location(ring.op))


__all__ = ["Ring", "Wait", "check_drained", "aref_depth"]
