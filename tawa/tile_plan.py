"""Tile rules that the compiler applies and the runtime predicts: when a stream-K kernel shares its tail, how
full a grid keeps the SMs' waves, which tiles one consumer warp group holds whole (ping-pong).

Pure Python (no MLIR), so that the runtime can choose a kernel's variant for a launch (see
`tawa.autotune.launch_defaults.shape_defaults`) by the same rules the compiler applies (`tawa.lowering.stream_k`,
which emits the stream-K rule as IR; `tawa.lowering.persistent_tiles`, which picks ping-pong).
"""
from __future__ import annotations

#: f32 accumulator registers per thread one consumer warp group may hold in the ping-pong schedule (its whole
#: tile; the rest of the 232-register budget is for the epilogue and addresses): 128x192 at most (a fused
#: bias + GELU + residual epilogue fits beside its 192 accumulators without spills). Larger tiles are cooperative:
#: the consumer groups share each one.
PINGPONG_ACC_REGISTERS = 192

#: The tail is shared where more than 1 / IDLE_SHARE of the CTAs' tile slots over all waves would be idle.
IDLE_SHARE = 8


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def shares_tail(tiles: int, ctas: int, trips: int) -> bool:
    """Whether a stream-K kernel with `tiles` output tiles of `trips` K iterations each, launched as `ctas`
    CTAs, shares the tiles of its last waves by K iterations (else every tile runs whole)."""
    if ctas <= 0 or tiles <= ctas or trips <= 1:
        return False
    slots = cdiv(tiles, ctas) * ctas
    return (slots - tiles) * IDLE_SHARE > slots


def wave_fill(m: int, n: int, block_m: int, block_n: int, ctas: int, splits: int = 1, batch: int = 1) -> float:
    """The share of the tile slots of all the waves that computes output (the rest is idle CTAs in the last wave
    and the padding of ragged edge tiles) when an m x n output in block_m x block_n tiles runs on `ctas` CTAs, each
    computing its tiles one after another (a persistent or ping-pong kernel: a ping-pong CTA's two groups
    alternate, so it finishes its tiles in the time of that many whole tiles). With `splits`, each tile is
    `splits` programs of 1/splits of its K loop each; with `batch`, there are that many m x n outputs."""
    if min(m, n, block_m, block_n, ctas, splits, batch) <= 0:
        return 0.0
    programs = cdiv(m, block_m) * cdiv(n, block_n) * splits * batch
    return m * n * splits * batch / (cdiv(programs, ctas) * ctas * block_m * block_n)
