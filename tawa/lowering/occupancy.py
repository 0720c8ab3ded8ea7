"""Blocks per SM: whether a kernel keeps two CTAs resident on each SM (`ctas_per_sm`).

Not a pass: `tawa.compiler.decide` calls `choose` once, before the pipeline, and the passes read the answer
from the options: `aref-insertion` sizes the ring to half an SM's shared memory, `register-realloc` the warp
groups' budgets to half its register file, `assign-warp-groups` leaves the intra-warpgroup lookahead off (it
needs a second score tile of registers, and the other CTA's warp groups supply the overlap instead), and
`convert-to-nvvm` marks the kernel `.minnctapersm 2`. The runtime launches a persistent kernel with two CTAs
per SM when asked to.

Why: a warp-specialized attention kernel at head dim 64 holds little per consumer thread (a 64x64 score tile, a
64x64 output accumulator), but each consumer warp group's softmax waits on its own Q K^T, and two consumer warp
groups per SM are too few to hide that wait: at one CTA per SM the exponential unit was 43% busy and the issue
slots 40%. A second resident CTA brings two more consumer warp groups; at 8x16x2048x64 on an H200 that took
the kernel from 375 to 425 TFLOP/s (docs/performance.md). FlashAttention-3 gets the same from a third consumer
warp group over 192-row tiles. A GEMM main loop only accumulates and its ring wants all the shared memory, so
GEMMs keep one CTA per SM unless asked.

`uniform_is_faster` is the other side of the same reading: where an attention kernel's register tiles are too
large for two specialized CTAs per SM (128 rows of 128-key blocks at head dim 64: a 64x128 score tile per consumer
thread), its two consumer warp groups are all the math an SM runs, and the uniform-warp kernel, with no producer
warp group taking registers, keeps two CTAs of eight warps resident: 486 against 362 TFLOP/s for variable-length
attention at head dim 64 on an H200, 457 against 413 for the example at 8x16x2048x64 (docs/performance.md).
"""
from __future__ import annotations

from tawa import hopper
from tawa.ir.ops import DotOp, LoadOp, LoadScalarOp
from tawa.ir.traversal import backward_slice, defining_op, ops_of, walk
from tawa.ir.types import tile_bytes, tile_shape
from tawa.lowering import aref_insertion, partition

#: Registers per consumer thread that the consumer loop's register tiles may take at two CTAs per SM: of the 104
#: a consumer warp group gets there (half the register file over 384 threads, less the producer's 24), the rest
#: hold addresses, indices and the row statistics.
TILE_REGISTER_LIMIT = 80


def tile_registers(loop, consumer_threads: int) -> int:
    """32-bit registers per consumer thread taken by the register tiles of a loop's dots: each dot's result, and
    its A operand where it is computed in registers rather than loaded (a loaded operand is read from shared
    memory)."""
    total = 0
    for op in walk(loop):
        if op.name != DotOp.NAME:
            continue
        dot = DotOp(op)
        total += tile_bytes(dot.result.type)
        a = defining_op(dot.a)
        if a is None or a.name != LoadOp.NAME:
            total += tile_bytes(dot.a.type)
    return -(-total // 4 // consumer_threads)


def chains_dots(loop) -> bool:
    """Whether a dot of the loop takes as its A operand math done on another dot's result in the same iteration
    (attention's P V on the softmax of Q K^T): the class of loops whose math waits on the tensor cores."""
    body = loop.regions[0].blocks[0]
    for op in ops_of(body):
        if op.name == DotOp.NAME and any(o.name == DotOp.NAME for o in backward_slice([DotOp(op).a], body)):
            return True
    return False


def choose(func, options, plans, schedule: str, cluster: str) -> tuple[int, str]:
    """(CTAs per SM, why: for the kernel's notes, "" when there is nothing to say). `plans`: the kernel's
    `ws_analysis.plan` where it is warp-specialized, else None."""
    if options.ctas_per_sm is not None:
        n = options.ctas_per_sm
        return n, (f"keeps {n} CTAs resident per SM (ctas_per_sm={n})" if n > 1 else "")
    if options.target != "cuda" or plans is None or schedule not in ("tile", "persistent") or cluster != "1x1" \
            or options.split_k > 1:
        return 1, ""
    loops = [p.loop for p in plans]
    if not any(chains_dots(loop) for loop in loops):
        return 1, ""
    threads = hopper.THREADS_PER_WARP_GROUP * partition.num_consumer_groups(loops, options)
    regs = max(tile_registers(loop, threads) for loop in loops)
    if regs > TILE_REGISTER_LIMIT:
        return 1, ""
    heavy = {ld for p in plans for ld in p.loads}
    if not aref_insertion.smallest_ring_fits(func, heavy, options, persistent=schedule == "persistent",
                                             ctas_per_sm=2)[0]:
        return 1, ""
    return 2, (f"keeps 2 CTAs resident per SM: its consumer loop feeds math on one dot's result into another "
               f"dot and its register tiles take {regs} registers per consumer thread, so two CTAs fit and hide "
               f"each other's latencies (ctas_per_sm=1 turns this off)")


def _softmax(loop) -> bool:
    """Whether the loop takes exponentials (a softmax between its dots, not some other math)."""
    return any(op.name in ("math.exp", "math.exp2") for op in walk(loop))


def uniform_residency(kernel) -> str:
    """Why the uniform-warp kernel `uniform_is_faster` chose keeps only one CTA per SM after all ("" when two
    fit): ptxas's registers, or the shared memory."""
    regs = kernel.registers
    if regs is None:
        return ""
    rounded = -(-regs // 8) * 8
    if 2 * rounded * kernel.num_threads > hopper.REGISTER_FILE or \
            2 * (kernel.shared_bytes + hopper.SMEM_RESERVED_PER_BLOCK) > hopper.SMEM_PER_SM:
        return (f"ptxas gives it {regs} registers a thread beside {kernel.shared_bytes} bytes of shared memory, so "
                f"it keeps one CTA per SM too")
    return ""


#: Head dims at or below which attention's exponentials, not its dots, bound the key loop.
EXPONENTIAL_BOUND_HEAD_DIM = 64
#: Options that only a warp-specialized kernel reads: any of them set keeps the kernel specialized.
SPECIALIZED_OPTIONS = ("num_consumer_groups", "consumer_pingpong", "consumer_lookahead", "register_overlap",
                       "schedule", "group_m", "dynamic_tiles", "ctas_per_sm", "num_buffers", "producer_registers",
                       "consumer_registers")


def uniform_is_faster(func, options, plans) -> str:
    """Why a kernel that could be specialized runs faster on the uniform-warp path ("" when it does not): an
    attention loop (one dot on math over another's result) at a head dim where its exponentials bound it, on two
    consumer warp groups whose register tiles keep the specialized kernel at one CTA per SM. Asked only where the
    choice is the compiler's: `warp_specialize` left automatic and no option of the specialized schedule given."""
    if plans is None or options.warp_specialize is not None or options.target != "cuda" or options.split_k > 1:
        return ""
    if any(getattr(options, o, None) is not None for o in SPECIALIZED_OPTIONS) or \
            options.cluster not in (None, "1x1", (1, 1)):
        return ""
    loops = [p.loop for p in plans]
    chained = [loop for loop in loops if chains_dots(loop) and _softmax(loop)]
    if not chained or partition.num_consumer_groups(loops, options) != 2:
        return ""
    if any(op.name == LoadScalarOp.NAME for loop in loops for op in walk(loop)):
        return ""       # (tile coordinates read in the loop: the uniform path would not pipeline its loads)
    first = next(op for op in walk(chained[0]) if op.name == DotOp.NAME)
    head_dim = tile_shape(DotOp(first).a.type)[-1]
    regs = max(tile_registers(loop, 2 * hopper.THREADS_PER_WARP_GROUP) for loop in loops)
    if head_dim > EXPONENTIAL_BOUND_HEAD_DIM or regs <= TILE_REGISTER_LIMIT:
        return ""
    return (f"at head dim {head_dim} its exponentials bound the key loop, and specialized it would run one CTA per "
            f"SM (its register tiles take {regs} registers per consumer thread, more than the {TILE_REGISTER_LIMIT} "
            f"of two CTAs): two warp groups of math per SM, where the uniform-warp kernel keeps more resident "
            f"(warp_specialize=True keeps it specialized; 64-key blocks let two specialized CTAs fit)")
