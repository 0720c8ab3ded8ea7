"""Closures for structured control flow: `scf.for`, `scf.if`, `scf.while`, untagged `scf.execute_region`.

A region's block arguments and terminator operands are register slots, so carrying loop values is a list copy.
When a body may block (it holds aref ops), the op becomes a generator function that `yield from`s its body; the
plain version is kept for everything else because it is faster. (`tawa.warp_group` regions are handled by
`scheduler`.)
"""
from __future__ import annotations

from tawa.runtime.interp.compiler import handler


def _assign(env, slots, values):
    for s, v in zip(slots, values):
        env[s] = v


def _tile_share(op):
    """(c, n, [aref operand slots]) for a loop of a ping-pong consumer region that gets from arefs directly, else
    None: the loop passes over the other groups' tiles in those rings (c of them before it, n - 1 - c after)."""
    from tawa.ir import attrs
    from tawa.ir.ops import ArefGetOp, enclosing_warp_group
    from tawa.ir.traversal import ops_of
    gets = [o for o in ops_of(op.regions[0].blocks[0]) if o.name == ArefGetOp.NAME]
    region = enclosing_warp_group(op) if gets else None
    share = attrs.TILE_SHARE.get(region) if region is not None else None
    return (share, gets) if share else None


class TurnWait:
    """A ping-pong group waiting for its main loop's turn: tile `tile` of the CTA's order."""
    __slots__ = ("rt", "tile", "op")

    def __init__(self, rt, tile: int, op):
        self.rt, self.tile, self.op = rt, tile, op

    def ready(self) -> bool:
        return self.rt.turn == self.tile

    def describe(self) -> str:
        return f"waits for the main-loop turn of tile {self.tile} (now {self.rt.turn})"


@handler("scf.for")
def _for(c, op):
    lb, ub, step, *inits = c.operands(op)
    res = c.results(op)
    body = c.compile_region(op.regions[0], op)
    iv, *carried = body.args
    yields, fn = body.yields, body.fn
    shared = _tile_share(op)
    if shared is not None:
        (index, count), gets = shared
        arefs = sorted({c.operands(g)[0] for g in gets})
        rt = c.rt

        def skip(env, groups, lo, hi, st):
            trips = max(0, -(-(hi - lo) // st))
            for a in arefs:
                env[a].skip(rt.task, groups * trips)

        def gen_shared(env):
            values = [env[i] for i in inits]
            lo, hi, st = env[lb], env[ub], env[step]
            if st <= 0:
                raise ValueError(f"scf.for step must be positive, got {st}")
            # The groups' main loops run in tile order (`to_nvvm.tile_turns`): this is tile n * j + c.
            j = rt.main_loops.get(rt.task, 0)
            rt.main_loops[rt.task] = j + 1
            yield TurnWait(rt, count * j + index, op)
            skip(env, index, lo, hi, st)
            for i in range(lo, hi, st):
                env[iv] = i
                _assign(env, carried, values)
                yield from fn(env)
                values = [env[y] for y in yields]
            skip(env, count - 1 - index, lo, hi, st)
            rt.turn += 1
            _assign(env, res, values)
        return gen_shared, True
    if not body.is_gen:
        def run(env):
            values = [env[i] for i in inits]
            lo, hi, st = env[lb], env[ub], env[step]
            if st <= 0:
                raise ValueError(f"scf.for step must be positive, got {st}")
            for i in range(lo, hi, st):
                env[iv] = i
                _assign(env, carried, values)
                fn(env)
                values = [env[y] for y in yields]
            _assign(env, res, values)
        return run, False

    def gen(env):
        values = [env[i] for i in inits]
        lo, hi, st = env[lb], env[ub], env[step]
        if st <= 0:
            raise ValueError(f"scf.for step must be positive, got {st}")
        for i in range(lo, hi, st):
            env[iv] = i
            _assign(env, carried, values)
            yield from fn(env)
            values = [env[y] for y in yields]
        _assign(env, res, values)
    return gen, True


@handler("scf.if")
def _if(c, op):
    (cond,) = c.operands(op)
    res = c.results(op)
    then = c.compile_region(op.regions[0], op)
    other = c.compile_region(op.regions[1], op) if len(list(op.regions[1].blocks)) else None
    if not then.is_gen and not (other and other.is_gen):
        def run(env):
            block = then if env[cond] else other
            if block is not None:
                block.fn(env)
                _assign(env, res, [env[y] for y in block.yields])
        return run, False

    def gen(env):
        block = then if env[cond] else other
        if block is not None:
            if block.is_gen:
                yield from block.fn(env)
            else:
                block.fn(env)
            _assign(env, res, [env[y] for y in block.yields])
    return gen, True


@handler("scf.execute_region")
def _execute_region(c, op):
    res = c.results(op)
    body = c.compile_region(op.regions[0], op)
    if not body.is_gen:
        def run(env):
            body.fn(env)
            _assign(env, res, [env[y] for y in body.yields])
        return run, False

    def gen(env):
        yield from body.fn(env)
        _assign(env, res, [env[y] for y in body.yields])
    return gen, True


@handler("scf.while")
def _while(c, op):
    inits = c.operands(op)
    res = c.results(op)
    before = c.compile_region(op.regions[0], op, terminators=("scf.condition",))
    after = c.compile_region(op.regions[1], op)
    cond, *forwarded = before.yields
    if not before.is_gen and not after.is_gen:
        def run(env):
            values = [env[i] for i in inits]
            while True:
                _assign(env, before.args, values)
                before.fn(env)
                values = [env[s] for s in forwarded]
                if not env[cond]:
                    break
                _assign(env, after.args, values)
                after.fn(env)
                values = [env[y] for y in after.yields]
            _assign(env, res, values)
        return run, False

    def step(block, env):
        if block.is_gen:
            yield from block.fn(env)
        else:
            block.fn(env)

    def gen(env):
        values = [env[i] for i in inits]
        while True:
            _assign(env, before.args, values)
            yield from step(before, env)
            values = [env[s] for s in forwarded]
            if not env[cond]:
                break
            _assign(env, after.args, values)
            yield from step(after, env)
            values = [env[y] for y in after.yields]
        _assign(env, res, values)
    return gen, True
