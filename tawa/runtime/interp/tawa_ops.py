"""Closures for the `tawa` tile ops (program ids, block loads/stores, splat, arange, dot, shape ops, reduce).

Loads copy (tiles are values; a later store must not change an earlier load) and read 0 outside the tensor;
stores write only the in-bounds part of the box. Inside a warp-group region, loads and stores are also
preemption points, so interleavings differ around memory traffic too. The aref ops live in `aref_ops`.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from tawa.runtime.interp.compiler import handler, int_attr, str_attr
from tawa.runtime.interp.dtypes import F32, to_repr


def _grid_query(field: str):
    """A closure factory for an op that reads axis `axis` of one of the runtime's grid tuples."""
    def compile_op(c, op):
        axis, rt = int_attr(op, "axis"), c.rt
        (r,) = c.results(op)

        def run(env):
            env[r] = getattr(rt, field)[axis]
        return run, False
    return compile_op


# A persistent kernel's program ids and counts name the programs launched; grid_extent the grid it was written for.
handler("tawa.program_id")(_grid_query("pid"))
handler("tawa.num_programs")(_grid_query("grid"))
handler("tawa.grid_extent")(_grid_query("tile_grid"))


@handler("tawa.cluster_size")
def _cluster_size(c, op):
    (r,) = c.results(op)
    rt = c.rt

    def run(env):
        env[r] = rt.cluster_size
    return run, False


@handler("tawa.dim")
def _dim(c, op):
    axis = int_attr(op, "axis")
    (a,) = c.operands(op)
    (r,) = c.results(op)

    def run(env):
        env[r] = int(env[a].shape[axis])
    return run, False


def _box(shape: tuple, offsets: list, extents: tuple):
    """Source and destination slices of the in-bounds part of a box; None when it is empty."""
    src, dst = [], []
    for extent, offset, size in zip(shape, offsets, extents):
        lo, hi = max(offset, 0), min(offset + size, extent)
        if lo >= hi:
            return None
        src.append(slice(lo, hi))
        dst.append(slice(lo - offset, hi - offset))
    return tuple(src), tuple(dst)


def _preemptible(c, run):
    """Inside a warp group, make `run` a generator that first lets the scheduler switch tasks."""
    if not c.in_task:
        return run, False

    def gen(env):
        yield None
        run(env)
    return gen, True


@handler("tawa.load")
def _load(c, op):
    src, *offs = c.operands(op)
    (r,) = c.results(op)
    info = c.info(op.results[0].type)
    rank = ir.MemRefType(op.operands[0].type).rank
    if len(offs) != rank or len(info.shape) > rank:
        raise c.error(op, f"tawa.load: {len(offs)} offsets and a rank-{len(info.shape)} tile for a rank-{rank} "
                          "tensor")
    full = (1,) * (rank - len(info.shape)) + info.shape
    shape, dtype = info.shape, info.dtype

    def run(env):
        array = env[src]
        offsets = [env[o] for o in offs]
        box = _box(array.shape, offsets, full)
        if box is not None and box[1] == tuple(slice(0, n) for n in full):
            env[r] = np.array(array[box[0]], dtype=dtype).reshape(shape)
            return
        tile = np.zeros(full, dtype=dtype)
        if box is not None:
            tile[box[1]] = array[box[0]]
        env[r] = tile.reshape(shape)
    return _preemptible(c, run)


@handler("tawa.load_scalar")
def _load_scalar(c, op):
    src, *offs = c.operands(op)
    (r,) = c.results(op)
    dst = c.info(op.results[0].type)
    if len(offs) != ir.MemRefType(op.operands[0].type).rank:
        raise c.error(op, "tawa.load_scalar: one offset per dim of the source")

    def run(env):
        array = env[src]
        index = tuple(int(env[o]) for o in offs)
        inside = all(0 <= i < n for i, n in zip(index, array.shape))
        env[r] = to_repr(np.asarray(array[index] if inside else 0, dtype=dst.dtype), dst)
    return _preemptible(c, run)


@handler("tawa.prefetch")
def _prefetch(c, op):
    """A hint for the GPU's memory system: nothing to do here."""
    return (lambda env: None), False


@handler("tawa.store")
def _store(c, op):
    dst, value, *offs = c.operands(op)
    info = c.info(op.operands[1].type)
    rank = ir.MemRefType(op.operands[0].type).rank
    offs, limits = offs[:rank], offs[rank:]         # limits: a store through a view that ends (`O[h, a:b]`)
    if len(offs) != rank or len(limits) not in (0, rank) or len(info.shape) > rank:
        raise c.error(op, f"tawa.store: {len(offs) + len(limits)} offsets and limits and a rank-{len(info.shape)} "
                          f"tile for a rank-{rank} tensor")
    full = (1,) * (rank - len(info.shape)) + info.shape

    def run(env):
        array = env[dst]
        shape = array.shape if not limits else \
            tuple(min(extent, max(int(env[lim]), 0)) for extent, lim in zip(array.shape, limits))
        box = _box(shape, [env[o] for o in offs], full)
        if box is not None:
            array[box[0]] = env[value].reshape(full)[box[1]]
    return _preemptible(c, run)


# ---- split-K: the runtime's workspace, as the GPU keeps it (see tawa.lowering.split_k) --------------------
@handler("tawa.split_k_store")
def _split_k_store(c, op):
    value, tile, split = c.operands(op)
    slot, rt = int_attr(op, "slot"), c.rt

    def run(env):
        rt.partials.setdefault((env[tile], slot), {})[env[split]] = np.array(env[value], copy=True)
    return _preemptible(c, run)


@handler("tawa.split_k_arrive")
def _split_k_arrive(c, op):
    (tile,) = c.operands(op)
    (r,) = c.results(op)
    splits, rt = int_attr(op, "splits"), c.rt

    def run(env):
        count = rt.arrived.get(env[tile], 0) + 1
        rt.arrived[env[tile]] = count % splits      # the last resets the tile's counter, as on the GPU
        env[r] = count == splits
    return _preemptible(c, run)


@handler("tawa.split_k_sum")
def _split_k_sum(c, op):
    _, tile, _ = c.operands(op)
    (r,) = c.results(op)
    slot, splits, rt = int_attr(op, "slot"), int_attr(op, "splits"), c.rt

    def run(env):
        parts = rt.partials.get((env[tile], slot), {})
        missing = [s for s in range(splits) if s not in parts]
        if missing:
            raise c.error(op, f"tawa.split_k_sum: tile {env[tile]} has no partial of split {missing[0]} "
                              f"(slot {slot})")
        total = parts[0]
        for s in range(1, splits):
            total = total + parts[s]
        env[r] = total
    return _preemptible(c, run)


@handler("tawa.splat")
def _splat(c, op):
    (a,) = c.operands(op)
    (r,) = c.results(op)
    info = c.info(op.results[0].type)
    shape, dtype = info.shape, info.dtype
    cache = [object(), None]  # a constant operand is the same object every time: build its tile once

    def run(env):
        scalar = env[a]
        if scalar is not cache[0]:
            tile = np.full(shape, scalar, dtype=dtype)
            tile.flags.writeable = False
            cache[0], cache[1] = scalar, tile
        env[r] = cache[1]
    return run, False


@handler("tawa.arange")
def _arange(c, op):
    (r,) = c.results(op)
    start, end = int_attr(op, "start"), int_attr(op, "end")
    info = c.info(op.results[0].type)
    value = np.arange(start, end, dtype=info.dtype)
    if value.shape != info.shape:
        raise c.error(op, f"tawa.arange [{start}, {end}) does not match its type {info.text}")
    value.flags.writeable = False

    def run(env):
        env[r] = value
    return run, False


@handler("tawa.dot")
def _dot(c, op):
    a, b, acc = c.operands(op)
    (r,) = c.results(op)
    dt = c.info(op.results[0].type).dtype
    types = [c.info(v.type).dtype for v in op.operands]
    if dt == F32 and all(t == F32 for t in types):
        def run(env):
            env[r] = env[acc] + np.matmul(env[a], env[b])
    else:
        def run(env):
            product = np.matmul(env[a].astype(F32), env[b].astype(F32))
            env[r] = (env[acc].astype(F32) + product).astype(dt)
    return run, False


@handler("tawa.expand_dims")
def _expand_dims(c, op):
    axis = int_attr(op, "axis")
    (a,) = c.operands(op)
    (r,) = c.results(op)

    def run(env):
        env[r] = np.expand_dims(env[a], axis)
    return run, False


@handler("tawa.broadcast")
def _broadcast(c, op):
    (a,) = c.operands(op)
    (r,) = c.results(op)
    shape = c.info(op.results[0].type).shape

    def run(env):
        env[r] = np.broadcast_to(env[a], shape)
    return run, False


@handler("tawa.trans")
def _trans(c, op):
    (a,) = c.operands(op)
    (r,) = c.results(op)

    def run(env):
        env[r] = env[a].T
    return run, False


@handler("tawa.reduce")
def _reduce(c, op):
    axis, kind = int_attr(op, "axis"), str_attr(op, "kind")
    (a,) = c.operands(op)
    (r,) = c.results(op)
    src, dst = c.info(op.operands[0].type), c.info(op.results[0].type)
    if kind not in ("sum", "max", "min"):
        raise c.error(op, f"tawa.reduce: unknown kind '{kind}' (expected sum, max or min)")
    if src.is_float:
        if kind == "sum":
            def reduce(x):
                return np.sum(x.astype(F32), axis=axis)
        else:
            fn = np.max if kind == "max" else np.min

            def reduce(x):
                return fn(x.astype(F32), axis=axis)
    else:
        if kind == "sum":
            def reduce(x):
                return np.sum(x, axis=axis, dtype=src.dtype)
        else:
            fn = np.max if kind == "max" else np.min

            def reduce(x):
                return fn(x, axis=axis)
    dtype = dst.dtype
    if dst.is_tensor:
        def run(env):
            env[r] = reduce(env[a]).astype(dtype)
    else:
        def run(env):
            env[r] = to_repr(np.asarray(reduce(env[a])), dst)
    return run, False
