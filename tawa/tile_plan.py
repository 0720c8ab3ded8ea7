"""When a stream-K kernel shares its tail: the rule the compiled kernel evaluates and the runtime predicts.

Pure Python (no MLIR), so that the runtime can choose a kernel's stream-K variant for a launch (see
`tawa.autotune.space.shape_defaults`) by the same rule the kernel applies to itself on the GPU
(`tawa.lowering.stream_k`, which emits it as IR).
"""
from __future__ import annotations

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
