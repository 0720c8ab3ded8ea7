"""Reusable synchronisation and bulk-copy building blocks: mbarriers, TMA (bulk tensor) copies, fences, elect.

Every schedule is built from these: the uniform-warp software pipeline (a ring of slots with one `full` mbarrier
per slot), and warp-specialized code where an aref is a ring of slots with `full` and `empty` mbarriers filled by a
producer warp group and drained by consumer warp groups. Each helper emits NVVM ops in generic form.

Notes from the toolchain (see the project's notes on the MLIR path):
- the TMA destination must be a `shared::cluster` pointer (address space 7) on sm_90; the CTA-only form needs
  sm_100;
- after `mbarrier.init` every thread must pass a CTA barrier (and `fence.mbarrier_init`) before anyone waits;
- TMA copies are issued by one elected lane of one warp (a warp-uniform branch plus `elect.sync`), never under a
  thread-divergent predicate, which ptxas would wrap in a uniformity loop.
"""
from __future__ import annotations

from tawa import hopper

from .builder import Builder, V

#: Suspend-time hint for `mbarrier.try_wait` (ns), as CUTLASS uses.
TRY_WAIT_TICKS = 10_000_000


def barrier(b: Builder) -> None:
    b.generic("nvvm.barrier0")


def named_barrier(b: Builder, barrier_id: int, num_threads: int) -> None:
    """`bar.sync id, n`: synchronise a subset of warps (one warp group's worth, for instance)."""
    b.line(f'"nvvm.barrier"({b.i32(barrier_id)}, {b.i32(num_threads)}) <{{operandSegmentSizes = '
           f'array<i32: 1, 1, 0>}}> : (i32, i32) -> ()')


def named_barrier_sync(b: Builder, barrier_id: V, num_threads: int) -> None:
    """`bar.sync id, n` with a run-time barrier id (the same for every thread of a warp)."""
    b.line(f'"nvvm.barrier"({barrier_id}, {b.i32(num_threads)}) <{{operandSegmentSizes = '
           f'array<i32: 1, 1, 0>}}> : (i32, i32) -> ()')


def named_barrier_arrive(b: Builder, barrier_id: V, num_threads: int) -> None:
    """`bar.arrive id, n`: count this warp's threads toward the barrier's `n` without waiting."""
    b.line(f'"llvm.inline_asm"({barrier_id}, {b.i32(num_threads)}) <{{asm_string = "bar.arrive $0, $1;", '
           f'constraints = "r,r", has_side_effects}}> : (i32, i32) -> ()')


def mbarrier_init(b: Builder, bar: V, count: V) -> None:
    b.generic("nvvm.mbarrier.init", [bar, count])


def mbarrier_inval(b: Builder, bar: V) -> None:
    """Invalidate a barrier before it is initialised again (re-initialising a valid one is undefined)."""
    b.generic("nvvm.mbarrier.inval", [bar])


def fence_mbarrier_init(b: Builder) -> None:
    b.generic("nvvm.fence.mbarrier.init")


def mbarrier_expect_tx(b: Builder, bar: V, nbytes: int) -> None:
    """Arrive once and announce `nbytes` of TMA traffic that will complete the phase."""
    b.generic("nvvm.mbarrier.arrive.expect_tx", [bar, b.i32(nbytes)],
              props="relaxed = false, scope = #nvvm.mem_scope<cta>")


def mbarrier_arrive(b: Builder, bar: V) -> None:
    b.line(f'"nvvm.mbarrier.arrive"({bar}) : ({bar.type}) -> ()')


def mbarrier_arrive_in_cta(b: Builder, bar: V, rank: V) -> None:
    """Arrive on the mbarrier at `bar`'s offset in the shared memory of the cluster's CTA `rank`.

    The default semantics (release at CTA scope) suffice: what the arrival orders is the wgmmas' reads of this
    CTA's slot, completed by `wgmma.wait_group` before it, against the async-proxy writes of the other CTA's TMA,
    which that producer issues only after observing the phase. A release at cluster scope costs a fence on
    every slot of the main loop."""
    addr = b.op(f"llvm.ptrtoint {bar} : !llvm.ptr<3> to i32", "i32")
    asm = ("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, $0, $1; "
           "mbarrier.arrive.shared::cluster.b64 _, [remote]; }")
    b.line(f'"llvm.inline_asm"({addr}, {rank}) <{{asm_string = "{asm}", constraints = "r,r", has_side_effects}}> '
           f': (i32, i32) -> ()')


def cluster_barrier(b: Builder) -> None:
    """Every thread of every CTA of the cluster (`barrier.cluster.arrive` + `wait`)."""
    b.generic("nvvm.cluster.arrive")
    b.generic("nvvm.cluster.wait")


def mbarrier_wait(b: Builder, bar: V, phase: V) -> None:
    """Block until the barrier's phase with parity `phase` has completed."""
    b.generic("nvvm.mbarrier.try_wait.parity", [bar, phase, b.i32(TRY_WAIT_TICKS)])


def fence_proxy_async(b: Builder) -> None:
    """Make this thread's generic-proxy shared-memory writes visible to the async proxy (TMA, wgmma)."""
    b.generic("nvvm.fence.proxy", props="kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>")


def elect_sync(b: Builder) -> V:
    return b.generic("nvvm.elect.sync", results=["i1"])[0]


def to_cluster(b: Builder, p: V) -> V:
    return b.op(f"llvm.addrspacecast {p} : !llvm.ptr<3> to !llvm.ptr<7>", "!llvm.ptr<7>")


def box_coords(b: Builder, offsets: list, box: int, box_cols: int, row: V | None = None) -> list:
    """The TMA coordinates (innermost first) of column box `box`, `box_cols` elements wide, of a tile at the i32
    element offsets `offsets` (outermost first), from row `row` (default: the tile's first, `offsets[-2]`)."""
    col = b.add(offsets[-1], box * box_cols) if box else offsets[-1]
    return [col, offsets[-2] if row is None else row] + list(reversed(offsets[:-2]))


def tma_load(b: Builder, tmap: V, dst: V, bar: V, coords: list, multicast: V | None = None) -> None:
    """Bulk tensor copy global -> shared; `coords` innermost first (the TMA convention), in elements. With
    `multicast` (an i16 mask of cluster ranks), the box lands at `dst` in each of those CTAs and completes bytes
    on the mbarrier at `bar`'s offset in each."""
    dst7 = to_cluster(b, dst)
    operands = [dst7, tmap] + list(coords) + [bar] + ([multicast] if multicast is not None else [])
    b.generic("nvvm.cp.async.bulk.tensor.shared.cluster.global", operands,
              props=f"isCTAOnly = false, mode = #nvvm.tma_load_mode<tile>, operandSegmentSizes = "
                    f"array<i32: 1, 1, {len(coords)}, 1, 0, {int(multicast is not None)}, 0, 0>")


def tma_prefetch_l2(b: Builder, tmap: V, coords: list) -> None:
    """Bulk tensor prefetch global -> L2 of the box at `coords` (innermost first): no shared memory, no barrier."""
    b.generic("nvvm.cp.async.bulk.tensor.prefetch", [tmap] + list(coords),
              props=f"mode = #nvvm.tma_load_mode<tile>, operandSegmentSizes = array<i32: 1, {len(coords)}, 0, 0>")


def tma_store(b: Builder, tmap: V, src: V, coords: list) -> None:
    """Bulk tensor copy shared -> global; the copy engine clips the box at the tensor's bounds."""
    b.generic("nvvm.cp.async.bulk.tensor.global.shared.cta", [tmap, src] + list(coords),
              props=f"mode = #nvvm.tma_store_mode<tile>, operandSegmentSizes = array<i32: 1, 1, {len(coords)}, 0, 0>")


def bulk_commit(b: Builder) -> None:
    b.generic("nvvm.cp.async.bulk.commit.group")


def bulk_wait_read(b: Builder, pending: int = 0) -> None:
    """Wait until at most `pending` bulk groups still read their shared-memory source."""
    b.generic("nvvm.cp.async.bulk.wait_group", props=f"group = {pending} : i32, read")


def wgmma_fence(b: Builder) -> None:
    b.generic("nvvm.wgmma.fence.aligned")


def wgmma_commit(b: Builder) -> None:
    b.generic("nvvm.wgmma.commit.group.sync.aligned")


def wgmma_wait(b: Builder, pending: int) -> None:
    b.generic("nvvm.wgmma.wait.group.sync.aligned", props=f"group = {pending} : i64")


def shfl(b: Builder, value: V, lane, kind: str, prelude: bool = False) -> V:
    """`shfl.sync.{kind}` over the full warp (`kind`: bfly, idx, up, down); `lane` a constant or a value computed
    per thread."""
    lane = lane if isinstance(lane, V) else b.i32(lane)
    return b.op(f'"nvvm.shfl.sync"({b.i32(-1)}, {value}, {lane}, {b.i32(31)}) '
                f'<{{kind = #nvvm<shfl_kind {kind}>}}> : (i32, {value.type}, i32, i32) -> {value.type}', value.type,
                prelude=prelude)


def shfl_xor(b: Builder, value: V, lane_mask: int) -> V:
    return shfl(b, value, lane_mask, "bfly")


def keep_alive(b: Builder, regs: list, sink: V) -> None:
    """Read `regs` (i32) here, so that their registers hold these values up to this point: nothing else is written
    into them before (wgmma reads a register A operand while its group runs, and ptxas does not see it). An empty
    inline asm would not do: it leaves no instruction, so ptxas ends the registers' lives at their last real use;
    nor would one instruction reading them all (an xor of them), which ptxas hoists to where they are written.
    Each pair is stored to the 8-byte shared slot at `sink` (an i32 shared address nobody reads) under a predicate
    that holds only if the first word equals an arbitrary constant: the stores almost never run (and are harmless
    when they do), ptxas cannot drop them, and it keeps them after the `wgmma.wait_group` before them."""
    if not regs:
        return
    n = len(regs)
    stores = [f"@p st.shared.v2.b32 [$0], {{${i + 1}, ${i + 2}}};" for i in range(0, n - 1, 2)]
    if n % 2:
        stores.append(f"@p st.shared.b32 [$0], ${n};")
    asm = f"{{ .reg .pred p; setp.eq.u32 p, $1, 0x5f3759df; {' '.join(stores)} }}"
    cons = ",".join(["r"] * (n + 1))
    b.line(f'"llvm.inline_asm"({sink}, {", ".join(r.name for r in regs)}) <{{asm_string = "{asm}", '
           f'constraints = "{cons}", has_side_effects}}> : (i32, {", ".join(r.type for r in regs)}) -> ()')


def fence_registers(b: Builder, regs: list) -> list:
    """Pass registers through an empty side-effecting inline asm that ties each output to its input.

    LLVM sees no data dependence between `wgmma.wait_group` and the accumulator registers the wgmma wrote, so
    it may move reads of them (a conversion, a phi copy) above the wait; ptxas then serializes every wgmma
    (C7514) or, worse, the read races the tensor cores. Uses of the returned values are ordered after the
    asm, and the asm after the wait (both have side effects). The same pins register operands of a wgmma (i32
    fragments) before its `wgmma.fence`. Registers of other types pass through unchanged."""
    constraint = {"f32": "=f", "i32": "=r"}
    fenced = [i for i, r in enumerate(regs) if r.type in constraint]
    if not fenced:
        return list(regs)
    ins = [regs[i] for i in fenced]
    n = len(ins)
    cons = ",".join([constraint[v.type] for v in ins] + [str(i) for i in range(n)])
    if n == 1:      # (LLVM rejects an inline asm with one output returning a struct)
        out = list(regs)
        out[fenced[0]] = b.op(f'"llvm.inline_asm"({ins[0].name}) <{{asm_string = "", constraints = "{cons}", '
                              f'has_side_effects}}> : ({ins[0].type}) -> {ins[0].type}', ins[0].type)
        return out
    struct = f"!llvm.struct<({', '.join(v.type for v in ins)})>"
    res = b.op(f'"llvm.inline_asm"({", ".join(v.name for v in ins)}) <{{asm_string = "", constraints = "{cons}", '
               f'has_side_effects}}> : ({", ".join(v.type for v in ins)}) -> {struct}', struct)
    out = list(regs)
    for j, i in enumerate(fenced):
        out[i] = b.op(f"llvm.extractvalue {res}[{j}] : {struct}", ins[j].type)
    return out


def copy_registers(b: Builder, regs: list) -> list:
    """i32 registers copied into new ones by a side-effecting `mov` each, in program order after the inline asm
    before it (a `wgmma.wait_group`).

    Where `fence_registers` would tie each output to its input, LLVM may compute the input -- a value assembled
    by pure instructions, such as fp8 bytes packed by `prmt` -- straight into the output's register, and schedule
    that above the wait. When that register is a loop-carried wgmma A fragment, it is still being read by the
    group in flight: ptxas then serializes every wgmma (C7513). Copies defined at the asm cannot move."""
    out = []
    for r in regs:
        out.append(b.op(f'"llvm.inline_asm"({r.name}) <{{asm_string = "mov.b32 $0, $1;", constraints = "=r,r", '
                        f'has_side_effects}}> : (i32) -> i32', "i32") if r.type == "i32" else r)
    return out


def setmaxnreg(b: Builder, count: int, num_threads: int, ctas_per_sm: int = 1) -> None:
    """Move the executing warp group to `count` registers per thread (`setmaxnreg.inc/dec`), from the count every
    thread of a `num_threads` block starts with at `ctas_per_sm` blocks per SM."""
    action = "increase" if count > hopper.entry_registers(num_threads, ctas_per_sm) else "decrease"
    b.line(f"nvvm.setmaxregister {action} {count}")
