"""Lowering of `tawa.program_id` / `tawa.num_programs`: special registers, optionally in grouped launch order; of a
persistent kernel's `tawa.grid_extent`: a parameter the runtime fills with the grid the kernel was written for; and
of `tawa.cluster_size`: the special register `%cluster_nctarank` (1 in a launch without clusters)."""
from __future__ import annotations

from tawa.ir.ops import ClusterSizeOp, GridExtentOp, NumProgramsOp, ProgramIdOp

from .builder import V
from .context import Ctx

_SREG = {ProgramIdOp.NAME: "ctaid", NumProgramsOp.NAME: "nctaid"}
SREG_OPS = tuple(_SREG) + (GridExtentOp.NAME, ClusterSizeOp.NAME)

#: Programs along grid axis 0 that run next to each other in grouped launch order (warp-specialized kernels).
PID_GROUP = 8


def lower_program_index(ctx: Ctx, op) -> None:
    if op.name == GridExtentOp.NAME:
        ctx.set(op.results[0], ctx.params.grid_extent(GridExtentOp(op).axis))
        return
    if op.name == ClusterSizeOp.NAME:
        ctx.set(op.results[0], ctx.cluster_size())
        return
    axis = (ProgramIdOp if op.name == ProgramIdOp.NAME else NumProgramsOp)(op).axis
    ctx.set(op.results[0], program_index(ctx, op.name, axis))


def program_index(ctx: Ctx, name: str, axis: int) -> V:
    """`tawa.program_id` / `tawa.num_programs` along `axis`; program ids in grouped order when `ctx.pid_group`."""
    kind = _SREG[name]
    if kind == "ctaid" and ctx.pid_group and axis < 2:
        return _grouped_ids(ctx)[axis]
    return ctx.b.op(f'"nvvm.read.ptx.sreg.{kind}.{"xyz"[axis]}"() : () -> i32', "i32", prelude=True)


def _grouped_ids(ctx: Ctx) -> tuple:
    """Launch order -> program ids such that each run of `G * ny` consecutive CTAs covers G consecutive axis-0
    ids for every axis-1 id (Triton's grouped ordering). For a GEMM grid (M tiles, N tiles) the CTAs resident
    at once then share A row panels and B column panels in L2 instead of streaming all of A per N column.
    Programs are independent, so any bijection of the grid computes the same result."""
    key = "grouped_pids"
    if key in ctx._bases:
        return ctx._bases[key]
    b, g = ctx.b, ctx.pid_group

    def op(text):
        return b.op(text, "i32", prelude=True)
    x, y, nx, ny = (op(f'"nvvm.read.ptx.sreg.{k}"() : () -> i32') for k in ("ctaid.x", "ctaid.y", "nctaid.x",
                                                                           "nctaid.y"))
    lin = op(f"arith.addi {x}, {op(f'arith.muli {y}, {nx} : i32')} : i32")
    size = op(f"arith.muli {ny}, {b.i32(g)} : i32")
    gid = op(f"arith.divui {lin}, {size} : i32")
    first = op(f"arith.muli {gid}, {b.i32(g)} : i32")
    width = op(f"arith.minui {op(f'arith.subi {nx}, {first} : i32')}, {b.i32(g)} : i32")
    rest = op(f"arith.subi {lin}, {op(f'arith.muli {gid}, {size} : i32')} : i32")
    px = op(f"arith.addi {first}, {op(f'arith.remui {rest}, {width} : i32')} : i32")
    py = op(f"arith.divui {rest}, {width} : i32")
    ctx._bases[key] = (px, py)
    return px, py
