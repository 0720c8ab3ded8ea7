"""protocol_check: prove, before lowering, that every aref of a kernel is used by a deadlock-free protocol.

Takes: any `tawa` module (in practice: after `partition`). Gives: the same module, unchanged, or one
`CompilationError` naming the aref and the source line of the offending op. Why: an aref lowers to rings of
full/empty mbarriers whose stage and phase each side tracks on its own; if the two sides ever disagree on how
many slots were filled and released, the GPU hangs (or reads a slot being overwritten) with no message. Every
such disagreement is visible in the IR, so it is rejected here instead.

Rules, per aref:
1. It is created at the top level of the kernel and used only by aref_put / aref_get / aref_consumed.
2. (warp-specialized kernels) Every use is inside a warp group; exactly one warp group puts, exactly one other
   warp group gets and releases. An aref that is read but never filled (or filled but never read) is an error.
3. Puts and gets run in mirrored control flow: their only enclosing ops inside the warp group are `scf.for`
   loops and `scf.if` branches. The puts' nest mirrors the gets' nest: same depth, and at each level a loop with
   bounds and step that are the same values or clones of one computation (so both sides iterate the same trip
   count, zero and one included; the index of a mirrored loop around it counts as the same on both sides), or
   the same branch of a conditional on such a condition (both sides take it or skip it together; only around a
   whole loop: inside one, a branch would skip ring slots), and the same number of puts as gets per iteration,
   so the ring's stage and phase advance in lockstep.
4. Every aref_get is matched by exactly one aref_consumed on every path through the same loop iteration (a
   consumed in only one branch of an `scf.if`, a consumed with no earlier get, or a get never released is an
   error).
5. (ping-pong) Several consumer regions may get from one aref only as the complete set of tile shares
   (`tawa.tile_share` [c, n], c = 0..n-1), each mirroring the producer on its own, and the loops of their gets
   run the same trip count for every tile (bounds not computed from program ids): each group skips the others'
   tiles in the ring by that count.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.location import source_location, where
from tawa.ir.ops import AREF_USE_OPS, ArefConsumedOp, ArefCreateOp, ArefGetOp, aref_of, enclosing_warp_group, warp_group_role
from tawa.ir import attrs
from tawa.ir.traversal import ops_of, parent_op, walk
from tawa.ir.types import aref_params
from tawa.errors import CompilationError
from tawa.lowering import ws_ir


def _fail(message: str, op=None):
    raise CompilationError(message, source_location(op) if op is not None else None)


def _user(use):
    owner = use.owner
    return owner.operation if hasattr(owner, "operation") else owner


# ----------------------------------------------------------------------------------------------------------
# Rule 3: mirrored loop nests
def _branch_of(if_op, op) -> int:
    """Which region of `if_op` (0: then, 1: else) holds `op`."""
    for i, region in enumerate(if_op.regions):
        for block in region.blocks:
            cur = op
            while cur is not None and cur != if_op:
                if cur.block == block:
                    return i
                cur = parent_op(cur)
    return -1


def _loop_path(op, region):
    """The scf.for loops and scf.if branches enclosing `op` inside `region` (outermost first; a branch as
    (if, region index)), or the first other op in the way."""
    path, cur, inner = [], parent_op(op), op
    while cur is not None and cur != region:
        if cur.name == "scf.if":
            path.append((cur, _branch_of(cur, inner)))
        elif cur.name == "scf.for":
            path.append(cur)
        else:
            return None, cur
        inner, cur = cur, parent_op(cur)
    return list(reversed(path)), None


def _groups(ops, region):
    """Group puts (or gets) by their innermost enclosing loop or branch: [(path, [ops])] in program order."""
    groups = []
    for op in ops:
        path, blocker = _loop_path(op, region)
        if blocker is not None:
            _fail(f"{op.name} is inside '{blocker.name}'{where(blocker)}; aref puts and gets must run in loops "
                  f"and conditionals that the other warp group mirrors", op)
        if path and isinstance(path[-1], tuple):
            # (a ring's k-th use takes slot k % depth with the k-th phase: a branch of its own inside a loop would
            # skip slots; a conditional around a whole loop adds the loop's trip count or nothing)
            _fail(f"{op.name} is inside 'scf.if'{where(path[-1][0])}; aref puts and gets run unconditionally in "
                  f"their loop (a conditional may stand only around a whole loop, which both warp groups then take "
                  f"or skip together)", op)
        if groups and groups[-1][0] == path:
            groups[-1][1].append(op)
        else:
            groups.append((path, [op]))
    return groups


_BOUND_NAMES = ("lower bounds", "upper bounds", "steps")


def _check_mirrored(name, puts, gets, put_region, get_region):
    pg, gg = _groups(puts, put_region), _groups(gets, get_region)
    if len(pg) != len(gg):
        _fail(f"{name}: filled in {len(pg)} loop nest(s) of the producer but read in {len(gg)} of the consumer; "
              f"the two sides must mirror each other", gets[0] if len(gg) > len(pg) else puts[0])
    for (ppath, pops), (gpath, gops) in zip(pg, gg):
        if len(ppath) != len(gpath):
            _fail(f"{name}: aref_put{where(pops[0])} runs inside {len(ppath)} loop(s) and conditional(s) but "
                  f"aref_get{where(gops[0])} inside {len(gpath)}; the two sides must mirror each other", gops[0])
        ivs = []        # the induction variables of the mirrored loops around this level, producer's first
        for pl, gl in zip(ppath, gpath):
            if isinstance(pl, tuple) or isinstance(gl, tuple):
                if not (isinstance(pl, tuple) and isinstance(gl, tuple)) or pl[1] != gl[1] or \
                        not ws_ir.values_equivalent(pl[0].operands[0], gl[0].operands[0], pairs=ivs):
                    _fail(f"{name}: aref_put{where(pops[0])} and aref_get{where(gops[0])} are not in the same "
                          f"branch of conditionals on the same condition; every aref_put must be matched by one "
                          f"aref_get", gops[0])
                continue
            for i, what in enumerate(_BOUND_NAMES):
                if not ws_ir.values_equivalent(pl.operands[i], gl.operands[i], pairs=ivs):
                    _fail(f"{name}: the producer's loop{where(pl)} and the consumer's loop"
                          f"{where(gl)} may run different trip counts ({what} differ); every aref_put must "
                          f"be matched by one aref_get", gl)
            ivs.append((pl.regions[0].blocks[0].arguments[0], gl.regions[0].blocks[0].arguments[0]))
        if len(pops) != len(gops):
            _fail(f"{name}: {len(pops)} aref_put per iteration{where(pops[0])} but {len(gops)} aref_get "
                  f"per iteration{where(gops[0])}; the ring's stages and phases would drift apart", gops[0])


# ----------------------------------------------------------------------------------------------------------
# Rule 4: every get released exactly once per iteration, on every path
class _Balance:
    def __init__(self, names):
        self.names = names      # aref Value -> display name
        self.last_get = {}      # aref Value -> the latest aref_get op seen

    def block(self, block, counts):
        for op in ops_of(block):
            counts = self.op(op, counts)
        return counts

    def op(self, op, counts):
        if op.name == "tawa.aref_get":
            a = aref_of(op)
            self.last_get[a] = op
            counts = dict(counts)
            counts[a] = counts.get(a, 0) + 1
            return counts
        if op.name == "tawa.aref_consumed":
            a = aref_of(op)
            counts = dict(counts)
            counts[a] = counts.get(a, 0) - 1
            if counts[a] < 0:
                _fail(f"{self.names.get(a, 'aref')}: aref_consumed releases a slot that no earlier aref_get of the "
                      f"same iteration took", op)
            return counts
        if not op.regions or warp_group_role(op):
            return counts
        if op.name == "scf.if":
            outs = []
            for region in op.regions:
                blocks = list(region.blocks)
                outs.append(self.block(blocks[0], counts) if blocks else dict(counts))
            if len(outs) == 1:
                outs.append(dict(counts))
            if _norm(outs[0]) != _norm(outs[1]):
                a = _first_diff(outs[0], outs[1])
                culprit = self._culprit(op, a)
                _fail(f"{self.names.get(a, 'aref')}: aref_consumed runs on only one branch of the conditional"
                      f"{where(op)}; every aref_get must be released exactly once on every path", culprit)
            return outs[0]
        # Loops and other regions: each iteration must leave the number of held slots as it found it.
        for region in op.regions:
            for block in region.blocks:
                after = self.block(block, counts)
                if _norm(after) != _norm(counts):
                    a = _first_diff(after, counts)
                    culprit = self.last_get.get(a, op)
                    _fail(f"{self.names.get(a, 'aref')}: aref_get{where(culprit)} is not matched by exactly "
                          f"one aref_consumed in the same iteration of the loop{where(op)}", culprit)
        return counts

    def _culprit(self, op, a):
        for inner in walk(op):
            if inner.name in (ArefConsumedOp.NAME, ArefGetOp.NAME) and aref_of(inner) == a:
                return inner
        return op


def _norm(counts):
    return {k: v for k, v in counts.items() if v}


def _first_diff(x, y):
    for k in list(x) + list(y):
        if x.get(k, 0) != y.get(k, 0):
            return k
    return None


def _check_balanced(scope_blocks, names):
    bal = _Balance(names)
    for block in scope_blocks:
        end = bal.block(block, {})
        for a, n in _norm(end).items():
            culprit = bal.last_get.get(a)
            _fail(f"{names.get(a, 'aref')}: aref_get{where(culprit) if culprit else ''} is never released "
                  f"by an aref_consumed", culprit)


# ----------------------------------------------------------------------------------------------------------
# Rule 5: consumers that share tiles (ping-pong)
def _check_tile_shares(name, regions, op):
    """Several consumer regions may read one aref only as the complete set of a ping-pong kernel's tile shares:
    [0, n], [1, n], ..., [n-1, n] (each takes whole tiles, in turn)."""
    shares = sorted(tuple(attrs.TILE_SHARE.get(r) or ()) for r in regions)
    n = len(regions)
    if shares != [(c, n) for c in range(n)]:
        _fail(f"{name} is read or released by more than one warp group", op)


def _check_uniform_trips(name, gets):
    """A warp group sharing tiles skips the others' tiles in the ring by its own trip count: the loops of its
    gets must run the same number of iterations for every tile (bounds not computed from the program)."""
    for g in gets:
        loop = parent_op(g)
        while loop is not None and not warp_group_role(loop):
            if loop.name == "scf.for" and ws_ir.computed_from_program(loop.operands[:3]):
                _fail(f"{name}: the loop{where(loop)} of a warp group that shares tiles with another runs a number "
                      f"of iterations that depends on the program; the groups could not skip each other's slots",
                      g)
            loop = parent_op(loop)


# ----------------------------------------------------------------------------------------------------------
def check_kernel(func_op):
    func = func_op.operation
    body = body_block(func)
    creates = [op for op in walk(func) if op.name == "tawa.aref_create"]
    if not creates:
        return
    groups = [op for op in ops_of(body) if warp_group_role(op)]
    names = {}
    for i, c in enumerate(creates):
        names[c.results[0]] = ArefCreateOp(c).describe(i)

    for c in creates:
        name = names[c.results[0]]
        if c.block != body:
            _fail(f"{name} is created inside '{parent_op(c).name}'; arefs must be created at the top level "
                  f"of the kernel, where every warp group sees them", c)
        _types, depth = aref_params(c.results[0].type)
        if depth < 1:
            _fail(f"{name}: depth must be at least 1", c)
        puts, gets, releases = [], [], []
        for use in c.results[0].uses:
            u = _user(use)
            {"tawa.aref_put": puts, "tawa.aref_get": gets, "tawa.aref_consumed": releases}.get(
                u.name, []).append(u)
            if u.name not in AREF_USE_OPS:
                _fail(f"{name} is used by '{u.name}'; arefs may only be used by aref_put, aref_get and "
                      f"aref_consumed", u)
        order = {op: i for i, op in enumerate(walk(func))}
        puts.sort(key=order.get)
        gets.sort(key=order.get)
        releases.sort(key=order.get)
        if gets and not puts:
            _fail(f"{name} is read by aref_get but no warp group puts to it: the get would wait forever", gets[0])
        if releases and not gets:
            _fail(f"{name} is released by aref_consumed but never read by aref_get", releases[0])
        if not groups:
            continue
        if puts and not gets:
            _fail(f"{name} is filled by aref_put but no warp group gets from it: the producer would block once "
                  f"the ring is full", puts[0])
        for op in puts + gets + releases:
            if enclosing_warp_group(op) is None:
                _fail(f"{name}: {op.name} lies outside every warp group of a warp-specialized kernel", op)
        put_regions = {enclosing_warp_group(op) for op in puts}
        get_regions = {enclosing_warp_group(op) for op in gets + releases}
        if len(put_regions) > 1:
            _fail(f"{name} is filled by more than one warp group", puts[0])
        put_region = next(iter(put_regions))
        if len(get_regions) > 1:
            _check_tile_shares(name, get_regions, (gets + releases)[0])
        for get_region in get_regions:
            if put_region == get_region:
                _fail(f"{name} is filled and read by the same warp group; it would wait on itself once the ring "
                      f"is full", gets[0])
            mine = [g for g in gets if enclosing_warp_group(g) == get_region]
            _check_mirrored(name, puts, mine, put_region, get_region)
            if len(get_regions) > 1:
                _check_uniform_trips(name, mine)

    scopes = [g.regions[0].blocks[0] for g in groups] if groups else [body]
    _check_balanced(scopes, names)


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context:
        for func in kernels(module):
            check_kernel(func)
    return module
