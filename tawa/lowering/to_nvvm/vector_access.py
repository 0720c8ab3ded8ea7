"""Register loads and stores of a kernel without dots in vectors of up to 16 bytes.

A kernel that only moves and reduces rows (a norm, a softmax, a transpose) is bound by memory, and its register
loads and stores were one predicated instruction per element: an RMSNorm over bf16 rows issued 128 two-byte loads
and 128 two-byte stores a thread and moved 2.4 TB/s where torch's moved 3.3 (H200). A blocked layout gives each
thread runs of consecutive elements along the last dimension (`layouts.vector_runs`); here each run is one load or
store of 4, 8 or 16 bytes, predicated as a whole.

A run is whole inside the tensor or whole outside it when the tensor's last extent, the tile's offset along it and
the row pitch are multiples of the run, and the first element's address is aligned to it: one test uniform over
the threads picks, with a branch, between the vector accesses and the element-by-element ones (ragged extents,
views at odd offsets). A run's first element then decides for the run.

Only in kernels without a dot: in a GEMM's epilogue the stores go through TMA and the loads through
`chunk_loads`, and in attention's consumer loop paired loads of a bias made ptxas interleave them with the wgmmas
and ran 6x slower (`memory.lower_register_load`).
"""
from __future__ import annotations

from tawa.ir.types import elem_bytes

from .. import layouts as L
from .builder import V
from .context import Ctx
from .global_access import element_address, predicated_load

#: Widest access, in bytes (`ld.global.v4.b32`).
MAX_VECTOR_BYTES = 16
#: Largest tile a store redistributes through shared memory first (`memory.lower_store`, a transpose's `x.T`):
#: 128x128 bf16. A 256x256 f32 tile needed 257 KiB and was refused, and a 128x128 f32 one spilled 352 bytes.
MAX_CONVERTED_BYTES = 32 * 1024
#: Raw register type of an element of each size (the storage type's bits).
RAW = {1: "i8", 2: "i16", 4: "i32"}


#: Most registers a thread's tile may have for its loads and stores to go in vectors: the vector path loads the
#: whole tile at once and branches over it, where the element path computes register by register (an elementwise
#: kernel's 256x128 f32 tile, 256 registers a thread, spilled 2176 bytes in vectors against 300 element by
#: element). RMSNorm's [4, 4096] bf16 tile has 128 and ran 1.06x torch in vectors, 0.72x element by element.
MAX_REGISTERS = 128


def applies(ctx: Ctx, layout: L.Layout) -> bool:
    """Whether a register load or store of `layout` goes in vectors: a kernel without dots, tiles of at most
    `MAX_REGISTERS` registers a thread."""
    return not ctx.has_dots and len(layout.regs) <= MAX_REGISTERS


def row_runs(layout: L.Layout, elem: str) -> list:
    """Runs of registers holding consecutive elements along the last dimension, the widest of 16, 8 or 4 bytes
    that the layout has (at least two elements); none where it has no such runs."""
    return L.widest_runs(layout, layout.rank - 1, elem_bytes(elem), (16, 8, 4))


def along_rows(ctx: Ctx, tile, elem: str):
    """A tile to store, in a layout whose runs lie along its rows: itself, or, where its registers run down its
    columns instead (a transpose's `x.T`), redistributed through shared memory into the blocked layout (a warp's
    element stores each wrote 32 rows: a 64x64 transpose moved 0.89x torch's bytes per second). Only where the
    blocked layout has runs and the tile fits `MAX_CONVERTED_BYTES`."""
    if not applies(ctx, tile.layout) or tile.layout.rank != 2 or row_runs(tile.layout, elem) \
            or not row_runs(L.transpose(tile.layout), elem):
        return tile
    blocked = L.blocked(tile.shape, ctx.num_warps)
    if not row_runs(blocked, elem) or elem_bytes(elem) * tile.shape[0] * tile.shape[1] > MAX_CONVERTED_BYTES:
        return tile
    from .shape import convert
    return convert(ctx, tile, blocked)


def runs_aligned(ctx: Ctx, arg: int, rank: int, offsets: list, lead, elem: str, layout: L.Layout,
                 width: int) -> V:
    """Whether every run of `width` elements of the tile at `offsets` is one aligned vector wholly inside or wholly
    outside the tensor (see the module docstring): uniform over the threads."""
    b = ctx.b
    es = elem_bytes(elem)
    first, _ = element_address(ctx, arg, rank, offsets, [b.i32(0)] * layout.rank, lead, elem)
    bits = b.op(f"llvm.ptrtoint {first} : !llvm.ptr<1> to i64", "i64")
    for d in range(rank - layout.rank, rank - 1):       # every row pitch the tile spans (a 3-D tile has two)
        bits = b.or_(bits, b.mul(ctx.params.stride(arg, d), es))
    bits = b.or_(bits, b.mul(b.ext_i64(ctx.params.dim(arg, rank - 1)), es))
    bits = b.or_(bits, b.mul(b.ext_i64(offsets[rank - 1]), es))
    return b.cmpi("eq", b.and_(bits, b.const(width * es - 1, "i64")), b.const(0, "i64"))


def _words_asm(op: str, words: int) -> str:
    vec = "" if words == 1 else f".v{words}"
    return f"{op}{vec}.b32"


def load_run(b, ptr: V, pred: V, nbytes: int, read_only: bool) -> list:
    """`nbytes` (4, 8 or 16) at `ptr` in one load where `pred`, else zeros: the 4-byte words, as i32."""
    words = nbytes // 4
    kind = "ld.global.nc" if read_only else "ld.global"
    outs = ", ".join(f"${i}" for i in range(words))
    regs = "{" + outs + "}" if words > 1 else outs
    zero = "".join(f"mov.b32 ${i}, 0;\\0A" for i in range(words))
    text = (f"{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, ${words + 1}, 0;\\0A{zero}"
            f"@p {_words_asm(kind, words)} {regs}, [${words}];\\0A}}")
    cons = ",".join(["=r"] * words + ["l", "r"])
    flag = b.cast("extui", pred, "i32")
    if words == 1:
        return [b.op(f'"llvm.inline_asm"({ptr}, {flag}) <{{asm_string = "{text}", constraints = "{cons}", '
                     f'has_side_effects}}> : (!llvm.ptr<1>, i32) -> i32', "i32")]
    struct = f"!llvm.struct<({', '.join(['i32'] * words)})>"
    res = b.op(f'"llvm.inline_asm"({ptr}, {flag}) <{{asm_string = "{text}", constraints = "{cons}", '
               f'has_side_effects}}> : (!llvm.ptr<1>, i32) -> {struct}', struct)
    return [b.op(f"llvm.extractvalue {res}[{i}] : {struct}", "i32") for i in range(words)]


def store_run(b, ptr: V, pred: V, words: list) -> None:
    """The 4-byte `words` (i32) at `ptr` in one store where `pred`."""
    n = len(words)
    vals = ", ".join(f"${i + 1}" for i in range(n))
    regs = "{" + vals + "}" if n > 1 else vals
    text = (f"{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, ${n + 1}, 0;\\0A"
            f"@p {_words_asm('st.global', n)} [$0], {regs};\\0A}}")
    cons = ",".join(["l"] + ["r"] * n + ["r"])
    flag = b.cast("extui", pred, "i32")
    operands = ", ".join(str(v) for v in [ptr, *words, flag])
    types = ", ".join(["!llvm.ptr<1>"] + ["i32"] * n + ["i32"])
    b.line(f'"llvm.inline_asm"({operands}) <{{asm_string = "{text}", constraints = "{cons}", '
           f'has_side_effects}}> : ({types}) -> ()')


def split_words(b, words: list, es: int) -> list:
    """4-byte words as their elements of `es` bytes (raw integers, lowest address first)."""
    if es == 4:
        return list(words)
    out = []
    for w in words:
        for k in range(4 // es):
            part = b.shr(w, 8 * es * k) if k else w
            out.append(b.cast("trunci", part, RAW[es]))
    return out


def pack_words(b, elems: list, es: int) -> list:
    """Raw elements of `es` bytes (lowest address first) packed into 4-byte words (i32)."""
    if es == 4:
        return list(elems)
    per = 4 // es
    words = []
    for i in range(0, len(elems), per):
        word = None
        for k, e in enumerate(elems[i:i + per]):
            part = b.cast("extui", e, "i32")
            part = b.shl(part, 8 * es * k) if k else part
            word = part if word is None else b.or_(word, part)
        words.append(word)
    return words


def load_tile_regs(ctx: Ctx, arg: int, rank: int, offsets: list, lead, elem: str, layout: L.Layout,
                   read_only: bool, runs: list) -> list:
    """Every register of a register load (raw integers, `RAW`), a run a load where the runs are aligned, else
    element by element; zero outside the tensor."""
    b = ctx.b
    es = elem_bytes(elem)
    raw = RAW[es]
    width = len(runs[0])
    aligned = runs_aligned(ctx, arg, rank, offsets, lead, elem, layout, width)
    order = [r for run in runs for r in run]

    def address(i):
        ptr, pred = element_address(ctx, arg, rank, offsets, ctx.coords(layout, i), lead, elem)
        return ptr, pred if pred is not None else b.const(1, "i1")

    def vectors():
        out = []
        for run in runs:
            ptr, pred = address(run[0])
            out += load_run(b, ptr, pred, width * es, read_only)
        return out

    def elements():
        return pack_words(b, [predicated_load(b, *address(i), raw, read_only) for i in order], es)

    # (the branches yield 4-byte words: two bf16 a register, where elements would take one each)
    words = b.if_else_values(aligned, vectors, elements, ["i32"] * (len(order) * es // 4))
    regs: list = [None] * len(layout.regs)
    for r, v in zip(order, split_words(b, words, es)):
        regs[r] = v
    return regs


def store_tile_regs(ctx: Ctx, arg: int, rank: int, offsets: list, lead, elem: str, layout: L.Layout,
                    raw_regs: list, runs: list, store_element) -> None:
    """A register store (raw integer registers), a run a store where the runs are aligned, else element by
    element (`store_element(register)`)."""
    b = ctx.b
    es = elem_bytes(elem)
    width = len(runs[0])
    aligned = runs_aligned(ctx, arg, rank, offsets, lead, elem, layout, width)
    with b.if_(aligned):
        for run in runs:
            ptr, pred = element_address(ctx, arg, rank, offsets, ctx.coords(layout, run[0]), lead, elem)
            store_run(b, ptr, pred if pred is not None else b.const(1, "i1"),
                      pack_words(b, [raw_regs[r] for r in run], es))
    with b.if_(b.xor(aligned, b.const(1, "i1"))):
        for r in range(len(layout.regs)):
            store_element(r)
