"""The limits of the target, an NVIDIA Hopper GPU (sm_90a), defined once.

Pure Python with no imports, so the frontend, the passes, the GPU conversion and the runtime all read the same
numbers. Values are per thread block (CTA) unless said otherwise.
"""

#: Compute capability the backend emits code for.
ARCH = "sm_90a"

#: Threads per warp, warps per warp group, threads per warp group (the unit of wgmma and setmaxnreg).
THREADS_PER_WARP = 32
WARPS_PER_GROUP = 4
THREADS_PER_WARP_GROUP = THREADS_PER_WARP * WARPS_PER_GROUP

#: Dynamic shared memory one block may opt into (227 KiB on H100/H200).
SMEM_PER_BLOCK = 227 * 1024
#: Shared memory of one SM, and what the hardware sets aside per resident block (H100/H200).
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024
#: Bytes at the start of the dynamic shared segment reserved for mbarriers; tiles start 1024-aligned after it.
SMEM_BARRIER_REGION = 1024
#: What is left for tiles (rings, staging) once the barrier region is set aside.
SMEM_FOR_TILES = SMEM_PER_BLOCK - SMEM_BARRIER_REGION

#: SMs of an H100 SXM or H200, for compile-time choices that depend on how many tiles run at once (the runtime
#: launches persistent kernels on the device's own count).
TYPICAL_SMS = 132

#: 32-bit registers per SM, and the per-thread limits `setmaxnreg` accepts (a multiple of 8 in [24, 256]).
REGISTER_FILE = 65536
MAX_REGISTERS_PER_THREAD = 255
SETMAXNREG_MIN = 24
SETMAXNREG_MAX = 256
SETMAXNREG_STEP = 8

#: Named barriers per block (id 0 is the one `bar.sync 0` / `__syncthreads` uses).
NAMED_BARRIERS = 16

#: Columns (N) one wgmma computes at most; a wider dot tile takes several (`to_nvvm.dot.n_chunks`).
WGMMA_MAX_N = 256
#: Elements along each dimension of one TMA box at most (rows of one copy, of a tile stored through TMA).
TMA_BOX_MAX = 256

#: TMA: global strides and the base address must be multiples of this many bytes; the swizzle atom TMA writes.
TMA_ALIGN_BYTES = 16
SWIZZLE_BYTES = 128
#: An L2 sector. TMA reads a tile whose rows start inside one (a row pitch that is a multiple of 16 bytes but not
#: of 32) at about half speed: the launch picks clusters that load such an operand once per pair.
SECTOR_BYTES = 32


#: Blocks a kernel may ask to keep resident per SM (`ctas_per_sm`): one, or two that split the SM between them.
CTAS_PER_SM = (1, 2)


def smem_per_block(ctas_per_sm: int = 1) -> int:
    """Dynamic shared memory one block may use when `ctas_per_sm` blocks are to be resident on an SM."""
    return min(SMEM_PER_BLOCK, SMEM_PER_SM // ctas_per_sm - SMEM_RESERVED_PER_BLOCK)


def smem_for_tiles(ctas_per_sm: int = 1) -> int:
    """What is left of `smem_per_block` for tiles once the barrier region is set aside."""
    return smem_per_block(ctas_per_sm) - SMEM_BARRIER_REGION


def entry_registers(num_threads: int, ctas_per_sm: int = 1) -> int:
    """Registers per thread at kernel entry when `ctas_per_sm` blocks of `num_threads` share the register file
    (what `.maxntid` with `.minnctapersm` fixes; a multiple of 8)."""
    return min(MAX_REGISTERS_PER_THREAD, REGISTER_FILE // ctas_per_sm // num_threads // 8 * 8)


def register_pool(num_threads: int, ctas_per_sm: int = 1) -> int:
    """The registers a block of `num_threads` starts with, which `setmaxnreg` only moves between its warps: a
    warp group's `setmaxnreg.inc` waits until others have released enough, forever if the budgets add up to
    more. 384 threads start with 168 each, 64512 in all: 40 + 2 x 232 warp-group budgets fit, 32 + 2 x 240
    (65536, the register file) hangs the GPU. (Warps hold registers in steps of 8 per thread: the 255 a thread
    of a 256-thread block may use are 256 held.)"""
    step = SETMAXNREG_STEP
    return (entry_registers(num_threads, ctas_per_sm) + step - 1) // step * step * num_threads


#: setmaxnreg budgets for one producer and up to two consumer warp groups at one CTA per SM (a TMA producer needs a
#: few dozen registers, a consumer with a 64xN wgmma accumulator slab up to 240).
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232


def producer_registers(consumer_groups: int, ctas_per_sm: int = 1) -> int:
    """The producer's budget where none is given: PRODUCER_REGISTERS, or the least setmaxnreg allows where three
    consumer groups or two CTAs per SM share the register file."""
    return SETMAXNREG_MIN if consumer_groups > 2 or ctas_per_sm > 1 else PRODUCER_REGISTERS


def consumer_register_limit(producer: int, consumer_groups: int, ctas_per_sm: int = 1) -> tuple:
    """(the register pool of a block of a producer and `consumer_groups` consumer warp groups, at `ctas_per_sm`
    blocks per SM; the most registers each consumer warp group may ask for next to a producer budget of
    `producer`)."""
    pool = register_pool(THREADS_PER_WARP_GROUP * (1 + consumer_groups), ctas_per_sm)
    most = (pool // THREADS_PER_WARP_GROUP - producer) // consumer_groups // SETMAXNREG_STEP * SETMAXNREG_STEP
    return pool, most
