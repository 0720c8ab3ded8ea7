"""Lowering of `scf.for` / `scf.if`: tiles carried through loops and branches are flattened to register lists.

A loop marked by the software-pipeline pass (`tawa.num_stages = S` on the `scf.for`, `tawa.pipelined` on its
loads) becomes the uniform-warp pipeline:

    prologue: issue the loads of iterations 0 .. S-2 into ring slots 0 .. S-2
    iteration i (slot i % S, parity (i / S) & 1):
        wait on full[slot]; run the body (its dots stay asynchronous: wgmma.wait_group 1)
        issue the loads of iteration i + S - 1 into slot (i - 1) % S, which the previous iteration's
        (now finished) wgmma group was reading
    after the loop: wgmma.wait_group 0

Each ring slot has one `full` mbarrier (arrival count 1: the elected issuing thread's expect-tx). With S = 1 the
loads are issued at the top of each iteration and every dot waits for its own wgmma.
"""
from __future__ import annotations

from mlir import ir

from tawa.errors import CompilationError

from .. import layouts as L
from . import sync
from .builder import V
from .context import Ctx, SmemTile, Tile, elem_type, is_tile, ops_of, owner_op
from .elementwise import _props, _scalar_op
from .memory import TmaLoad, issue_elected


def _iter_layouts(op) -> list:
    if "tawa.layouts" not in op.attributes:
        return [None] * len(op.results)
    arr = op.attributes["tawa.layouts"]
    return [L.parse(arr[i].value) if arr[i].value else None for i in range(len(arr))]


def flatten(ctx: Ctx, value, layout) -> list:
    if isinstance(value, SmemTile):
        raise CompilationError("a shared-memory tile cannot be carried through a loop or branch")
    if layout is not None:
        from .shape import as_tile
        return as_tile(ctx, value, layout, value.elem if isinstance(value, Tile) else value.type).regs
    return [value]


def _types(ir_values, layouts) -> list:
    out = []
    for v, lay in zip(ir_values, layouts):
        t = v.type
        if lay is not None:
            out.extend([elem_type(t)] * len(lay.regs))
        else:
            out.append(str(t))
    return out


def _unflatten(vals: list, ir_values, layouts) -> list:
    out, pos = [], 0
    for v, lay in zip(ir_values, layouts):
        if lay is not None:
            n = len(lay.regs)
            out.append(Tile(vals[pos:pos + n], lay, elem_type(v.type)))
            pos += n
        else:
            out.append(vals[pos])
            pos += 1
    return out


def _results(b, base: str, types: list) -> list:
    if len(types) == 1:
        return [V(base, types[0])]
    return [V(f"{base}#{i}", t) for i, t in enumerate(types)]


class Pipeline:
    def __init__(self, ctx: Ctx, for_op, stages: int):
        self.for_op = for_op
        self.stages = stages
        body = for_op.regions[0].blocks[0]
        self.iv = body.arguments[0]
        self.loads = []
        self.inside = set()
        self._collect(body)
        self.tma = {id_(op): TmaLoad(ctx, op) for op in self.loads}
        self.ring = {id_(op): ctx.smem.alloc(stages * self.tma[id_(op)].bytes) for op in self.loads}
        self.bytes = sum(t.bytes for t in self.tma.values())
        self.full = ctx.alloc_barriers(stages, 1)
        self.slot = None
        self.counter = None
        self._zero_acc = self._zero_started_accumulators(for_op)

    def _collect(self, block):
        for op in ops_of(block):
            for r in op.results:
                self.inside.add(r)
            if op.name == "tawa.load" and "tawa.pipelined" in op.attributes:
                self.loads.append(op)
            for region in op.regions:
                for blk in region.blocks:
                    self._collect(blk)

    @staticmethod
    def _zero_started_accumulators(for_op):
        """Iter-arg indices whose initial value is a zero splat (their first dot may overwrite)."""
        out = set()
        for i, init in enumerate(list(for_op.operands)[3:]):
            owner = owner_op(init)
            if owner is None:
                continue
            if owner.name == "tawa.splat":
                src = owner_op(owner.operands[0])
                if src is not None and src.name == "arith.constant":
                    try:
                        if float(ir.FloatAttr(src.attributes["value"]).value) == 0.0:
                            out.add(i)
                    except (ValueError, TypeError):
                        pass
        return out

    # ---- queried by the other lowerings ------------------------------------------------------------------
    def owns(self, op) -> bool:
        return id_(op) in self.tma

    def current_tile(self, op) -> SmemTile:
        t = self.tma[id_(op)]
        return SmemTile(self.slot_offsets[id_(op)], t.rows, t.cols, t.elem)

    def keeps_dot_async(self, op) -> bool:
        return self.stages >= 2 and dot_only_accumulates(self.for_op, op)

    def scale_d(self, ctx: Ctx, op):
        acc = op.operands[2]
        body = self.for_op.regions[0].blocks[0]
        for i in self._zero_acc:
            if body.arguments[i + 1] == acc:
                nz = ctx.b.cmpi("ne", self.counter, 0)
                return ctx.b.cast("extui", nz, "i32")
        return ctx.b.i32(1)

    # ---- emission ----------------------------------------------------------------------------------------
    def offsets_at(self, ctx: Ctx, load_op, iv: V) -> list:
        """The load's offsets evaluated for induction value `iv` (re-emitting the scalar slice of the body)."""
        memo = {}

        def ev(value):
            if value == self.iv:
                return iv
            if value not in self.inside:
                return ctx.get(value)
            if value in memo:
                return memo[value]
            owner = owner_op(value)
            if owner is None or not (owner.name.startswith("arith.") or owner.name.startswith("math.")) or is_tile(value.type):
                raise CompilationError("internal: pipelined load offset is not scalar arithmetic")
            if owner.name == "arith.constant":
                r = ctx.b.op(f"arith.constant {owner.attributes['value']}", str(value.type))
            else:
                r = _scalar_op(ctx.b, owner.name, _props(owner), [ev(o) for o in owner.operands], str(value.type))
            memo[value] = r
            return r
        return [ev(v) for v in list(load_op.operands)[1:]]

    def issue(self, ctx: Ctx, iv: V, slot: V, pred) -> None:
        b = ctx.b

        def body():
            bar = ctx.smem_ptr(b.add(b.mul(slot, 8), self.full))
            sync.mbarrier_expect_tx(b, bar, self.bytes)
            for op in self.loads:
                t = self.tma[id_(op)]
                dst = b.add(b.mul(slot, t.bytes), self.ring[id_(op)])
                t.issue(ctx, self.offsets_at(ctx, op, iv), dst, bar)
        issue_elected(ctx, pred, body)


def id_(op):
    return op.operation


def _takes_aref_slots(for_op) -> bool:
    return any(o.name == "tawa.aref_get" for o in ops_of(for_op.regions[0].blocks[0]))


def dot_only_accumulates(for_op, op) -> bool:
    """A dot may stay in flight across the iteration only if its result just flows, through the loop's yield,
    into the accumulator of a dot of the next iteration (reading it earlier would race)."""
    body = for_op.regions[0].blocks[0]
    yield_op = ops_of(body)[-1]
    for use in op.results[0].uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        if owner != yield_op:
            return False
        barg = body.arguments[use.operand_number + 1]
        for u2 in barg.uses:
            o2 = u2.owner.operation if hasattr(u2.owner, "operation") else u2.owner
            if not (o2.name == "tawa.dot" and u2.operand_number == 2):
                return False
    return True


def lower_for(ctx: Ctx, op) -> None:
    from .kernel import lower_block
    b = ctx.b
    lb, ub, step = (ctx.get(v) for v in list(op.operands)[:3])
    inits = list(op.operands)[3:]
    layouts = _iter_layouts(op)
    body = op.regions[0].blocks[0]
    stages = op.attributes["tawa.num_stages"].value if "tawa.num_stages" in op.attributes else 0
    pipe = None
    if stages:
        ctx.smem.push()
        pipe = Pipeline(ctx, op, stages)
        for s in range(stages - 1):
            iv_s = b.add(lb, b.mul(step, s)) if s else lb
            pipe.issue(ctx, iv_s, b.i32(s), b.cmpi("slt", iv_s, ub))
    flat_init = []
    for v, lay in zip(inits, layouts):
        flat_init.extend(flatten(ctx, ctx.get(v), lay))
    types = _types(op.results, layouts)
    if stages > 1 or (not stages and _takes_aref_slots(op)):
        # Accumulators stay in flight across iterations: give them opaque initial values, so that LLVM neither
        # rematerialises constants into them on some path while a wgmma group may be in flight (ptxas then
        # serializes every wgmma, C7515) nor peels the first iteration around them.
        flat_init = sync.fence_registers(b, flat_init)
    if pipe:
        flat_init = [b.i32(0)] + flat_init
        types = ["i32"] + types
    iv = V(b.fresh("iv"), lb.type)
    args = [V(b.fresh("it"), t) for t in types]
    base = b.fresh()
    res = f"{base}:{len(types)} = " if len(types) > 1 else (f"{base} = " if types else "")
    iter_text = ""
    if types:
        iter_text = " iter_args(" + ", ".join(f"{a} = {i}" for a, i in zip(args, flat_init)) + ") -> (" + \
                    ", ".join(types) + ")"
    b.line(f"{res}scf.for {iv} = {lb} to {ub} step {step}{iter_text} : {lb.type} {{")
    saved_pipe = ctx.pipeline
    ctx.loop_depth += 1
    ws_loop = None
    with b.indented():
        ctx.set(body.arguments[0], iv)
        if not pipe:
            from tawa.lowering.aref_lowering import consumer_loop
            ws_loop = consumer_loop(ctx, op)
            if ws_loop is not None:
                ctx.pipeline = ws_loop
        carried = args[1:] if pipe else args
        for barg, val in zip(list(body.arguments)[1:], _unflatten(carried, list(body.arguments)[1:], layouts)):
            ctx.set(barg, val)
        if pipe:
            ctx.pipeline = pipe
            counter = args[0]
            pipe.counter = counter
            slot = b.remu(counter, stages)
            phase = b.and_(b.divu(counter, stages), 1)
            if stages == 1:
                pipe.issue(ctx, iv, slot, None)
            sync.mbarrier_wait(b, ctx.smem_ptr(b.add(b.mul(slot, 8), pipe.full)), phase)
            pipe.slot_offsets = {k: b.add(b.mul(slot, pipe.tma[k].bytes), pipe.ring[k]) for k in pipe.tma}
        lower_block(ctx, body)
        yield_op = ops_of(body)[-1]
        out = []
        for v, lay in zip(yield_op.operands, layouts):
            out.extend(flatten(ctx, ctx.get(v), lay))
        if pipe:
            if stages > 1:
                if ctx.num_warps > 4:
                    # Every warp group's wgmma of the previous iteration must be done with the slot we refill.
                    ctx.sync_threads()
                iv_n = b.add(iv, b.mul(step, stages - 1))
                slot_n = b.remu(b.add(counter, stages - 1), stages)
                pipe.issue(ctx, iv_n, slot_n, b.cmpi("slt", iv_n, ub))
            out = [b.add(counter, 1)] + out
        if out:
            b.line(f"scf.yield {', '.join(o.name for o in out)} : {', '.join(o.type for o in out)}")
    b.line("}")
    ctx.loop_depth -= 1
    ctx.pipeline = saved_pipe
    if ws_loop is not None:
        ws_loop.finish(ctx)
    results = _results(b, base, types) if types else []
    if pipe:
        results = results[1:]
        if stages > 1:
            sync.wgmma_wait(b, 0)
            results = sync.fence_registers(b, results)
        ctx.smem.pop()
    if ws_loop is not None and ws_loop.deferred:
        results = sync.fence_registers(b, results)
    for r, val in zip(op.results, _unflatten(results, list(op.results), layouts)):
        ctx.set(r, val)


def lower_if(ctx: Ctx, op) -> None:
    from .kernel import lower_block
    b = ctx.b
    cond = ctx.get(op.operands[0])
    layouts = _iter_layouts(op)
    types = _types(op.results, layouts)

    def branch(region):
        def fn():
            blk = region.blocks[0]
            lower_block(ctx, blk)
            y = ops_of(blk)[-1]
            out = []
            for v, lay in zip(y.operands, layouts):
                out.extend(flatten(ctx, ctx.get(v), lay))
            return out
        return fn

    if not types:
        b.line(f"scf.if {cond} {{")
        with b.indented():
            lower_block(ctx, op.regions[0].blocks[0])
        if len(op.regions) > 1 and len(op.regions[1].blocks):
            b.line("} else {")
            with b.indented():
                lower_block(ctx, op.regions[1].blocks[0])
        b.line("}")
        return
    vals = b.if_else_values(cond, branch(op.regions[0]), branch(op.regions[1]), types)
    for r, val in zip(op.results, _unflatten(vals, list(op.results), layouts)):
        ctx.set(r, val)
