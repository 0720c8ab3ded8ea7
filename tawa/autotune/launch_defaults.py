"""What a GEMM-family kernel compiled without tile constants launches for each call, chosen from the shape alone.

`tawa.compile` gives such a kernel (a `dot`, a grid of `cdiv(M, BLOCK_M)` by `cdiv(N, BLOCK_N)`, compiled without
`BLOCK_M`, `BLOCK_N` or `split_k`) per-shape variants (`tawa.runtime.kernel.ShapeVariants`): at each call the
extents of its shape symbols, and whether the rows of the operands every tile row or column reads (B, A) are
32-byte aligned, pick a configuration by `shape_defaults`, with no timing. The rules are fitted to side-by-side measurements
(docs/performance.md, "what a kernel launches without tile constants"):

- small M (decode shapes): 64-row tiles, and split-K where those leave most SMs idle over a long K;
- larger M: the tile and schedule that fill the SMs' waves best (`tawa.tile_plan.wave_fill`), weighted by what each
  computes per tile slot, and thread-block clusters that share the tiles of an operand whose rows sit off the
  32-byte sector grid.

An attention-family kernel (two dots, a grid tiled by BLOCK_M along the sequence) at head dims up to 64 takes
192-row query blocks on long sequences (`attention_defaults`).

The tuner (`tawa.autotune`) adds the same configuration to the candidates it times, so that tuning never ends
slower than not tuning. Pure Python: the runtime asks it on machines without the compiler.
"""
from __future__ import annotations

from tawa import tile_plan
from tawa.elements import ELEMENT_BYTES, IR_NAMES
from tawa.hopper import SECTOR_BYTES, SMEM_FOR_TILES, THREADS_PER_WARP_GROUP, TMA_ALIGN_BYTES, WGMMA_MAX_N
from tawa.options import cluster_axis, cluster_dims, cluster_name

from tawa.runtime.grid import walked_tiles

from .config import Config
from .space import _reduction_symbol, _stream_k_shares, grid_programs

#: Rows at or below which a GEMM-family kernel called without tile constants takes 64-row tiles (and split-K).
SMALL_M = 64
#: K per split below which splitting is not worth its partials (8 iterations of a 64-deep K block).
MIN_K_PER_SPLIT = 512
#: K below which a default tile's sparse last wave is not worth sharing by stream-K (a tile of 16 iterations of a
#: 64-deep K block takes about as long as the fix-up of a shared one).
MIN_K_STREAM_K = 1024


def has_shape_defaults(info: dict) -> bool:
    """Whether `shape_defaults` can choose anything for this kernel (a GEMM-family kernel with a larger default
    BLOCK_M than small-M calls want, or an attention-family one), and may: never for a program whose results
    depend on its tile constants (`partial[pid_n]`: `tawa.frontend.tuning.tile_invariant`)."""
    if not info.get("tile_invariant", True):
        return False
    tiles = {c for c, _ in info.get("tiles", [])}
    block_m = info.get("constants", {}).get("BLOCK_M")
    return bool(info.get("has_dot")) and {"BLOCK_M", "BLOCK_N"} <= tiles and isinstance(block_m, int) and \
        block_m > SMALL_M or is_attention_family(info)


def shape_defaults(info: dict, extents: dict, sms: int = 132, misaligned=(), fixed=None, own=None) -> dict:
    """The configuration a GEMM-family kernel compiled without tile constants launches for these extents (no
    timing: the rules below are fitted to the measurements in docs/performance.md), or {} for its own defaults.

    Applies to kernels with a dot whose grid tiles two symbols by BLOCK_M and BLOCK_N. For M <= 64 (decode
    shapes) the 64 x 128 tile; and when those tiles leave the GPU mostly idle and the one other shape symbol (K)
    is long, split-K: the most splits (4 or 2) that keep the programs within the SMs. For larger M see
    `_large_m_defaults`. `misaligned` holds the argument indices of tensors whose rows do not start on 32-byte
    boundaries; `fixed` the options the kernel was compiled with explicitly, which no rule overrides. An
    attention-family kernel goes to `attention_defaults`, which reads the kernel's own compiled configuration
    (`own`, a `CompiledKernel`; None where there is none at hand: then it keeps the kernel's)."""
    if is_attention_family(info):
        return attention_defaults(info, extents, dict(fixed or {}), own, sms)
    return _balanced(_gemm_defaults(info, extents, sms, misaligned, fixed), own)


def _gemm_defaults(info: dict, extents: dict, sms: int, misaligned, fixed) -> dict:
    """`shape_defaults` for a GEMM-family kernel."""
    if not has_shape_defaults(info):
        return {}
    tiles = dict((c, sym) for c, sym in info.get("tiles", []))
    m, n = extents.get(tiles["BLOCK_M"]), extents.get(tiles["BLOCK_N"])
    k = extents.get(_reduction_symbol(info))
    batch = _batch(info, extents)
    if m is None or n is None:
        return {}
    if m > SMALL_M:
        few = _few_rows_split(info, m, n, k, sms, dict(fixed or {}))
        if few:
            return few
        return _large_m_defaults(info, extents, m, n, k, batch, sms, set(misaligned), dict(fixed or {}))
    config = {"BLOCK_M": SMALL_M, "BLOCK_N": 128}
    programs = -(-m // SMALL_M) * -(-n // 128)
    for splits in SPLITS if not _asks_dynamic_tiles(dict(fixed or {})) else ():
        # (split-K counts its programs along grid axis 2, which a batched grid already uses)
        if k is not None and _plain(info) and programs * splits <= sms and k >= splits * MIN_K_PER_SPLIT:
            config["split_k"] = splits
            break
    return {name: value for name, value in config.items() if name not in (fixed or {})}


def _balanced(config: dict, own) -> dict:
    """`config` with one program per CTA instead of a persistent schedule, and without clusters or split-K (which
    such a kernel refuses or which need a persistent schedule), where some of the kernel's programs skip its K loop
    (`CompiledKernel.skipping_programs`: MoE tiles past an expert's rows): the hardware hands programs to SMs as
    they free up, where persistent CTAs take fixed shares (or, with dynamic tiles, pay a counter per tile).
    Measured (H200, MoE in the capacity layout, 128x256; docs/performance.md): 585-603 TFLOP/s against 524-527
    persistent and 576-585 with dynamic tiles. (K loops whose length varies, a K per batch, keep the rules' choice:
    there fixed shares mix the batches and ran fastest.)"""
    if not getattr(own, "skipping_programs", False):
        return config
    persistent = config.get("schedule") in ("persistent", "pingpong", "streamk")
    config = {k: v for k, v in config.items() if k not in ("cluster", "group_m", "dynamic_tiles", "split_k")}
    return dict(config, schedule="tile") if persistent else config


#: Split counts a grid of 64-row tiles may take, the most first: the most that keep the programs within one wave
#: (each split at least MIN_K_PER_SPLIT deep). Measured against 4 (GPU time, H200): 16x1024x8192 12.7 against 13.8
#: µs, 64x1024x16384 15.6 against 19.5; 16 splits ran slower than 8 on both (14.7, 16.4).
SPLITS = (8, 4, 2)
#: Options given at compile time that keep `_few_rows_split` out (it sets the tile, the split and the schedule).
_FEW_ROWS_FIXED = ("BLOCK_M", "BLOCK_N", "split_k", "schedule", "cluster", "warp_specialize", "num_consumer_groups")


def _few_rows_split(info: dict, m: int, n: int, k, sms: int, fixed: dict) -> dict:
    """For M above SMALL_M on grids so small that 64 x 128 tiles split four ways still fit one wave (a few hundred
    rows and columns over a long K): those tiles, split 8 or 4 ways; {} elsewhere.

    The 128-row tiles of such a grid leave most SMs idle, and split in 8 they sum more partials per output than
    64-row ones split in 4 (the last program of a tile adds up the others'). Measured (GPU time of launches queued
    back to back, H200): 440x312x4800 29.8 -> 13.1 µs, 512x512x8192 31.5 -> 14.4, 256x1024x8192 31.2 -> 14.1,
    300x600x6000 38.6 -> 16.3, 200x1000x3000 24.6 -> 13.4 (cuBLAS: 10.5, 14.7, 15.2, 16.6, 12.5), where the best
    128 x 128 split ran 16.1-21.4. Where four splits of 64-row tiles take more than a wave (1024x1024x8192: 512
    programs) 64-row tiles lose to 128 x 128 split in two (47.0 against 34.3 µs) and the rules below choose."""
    if k is None or not _plain(info) or _asks_dynamic_tiles(fixed) or any(name in fixed for name in _FEW_ROWS_FIXED):
        return {}
    programs = -(-m // SMALL_M) * -(-n // 128)
    if programs <= 0:                       # an empty output: nothing to launch
        return {}
    for splits in SPLITS[:2]:
        if programs * splits <= sms and k >= splits * MIN_K_PER_SPLIT:
            return {"BLOCK_M": SMALL_M, "BLOCK_N": 128, "split_k": splits}
    return {}


def _plain(info: dict) -> bool:
    """Whether the grid is the output's tiles alone (two axes, no batch axis)."""
    return len(info.get("grid_symbols") or []) == 2


def _batch(info: dict, extents: dict):
    """How many m x n outputs the grid computes: 1 for a grid of output tiles alone, the extent of a third axis
    that is a shape symbol alone (`@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), Z)`), else None (unknown)."""
    if _plain(info):
        return 1
    axes = info.get("grid_symbols") or []
    if len(axes) == 3 and axes[2] is not None and axes[2] in extents:
        return max(int(extents[axes[2]]), 0)
    return None


#: The tiles a one-dot kernel whose own tile is one of them may switch between, each with its schedule and what it
#: computes per tile slot against 128x256 (measured on 10 to 42 shapes, docs/performance.md): cooperative
#: persistent 128x256 and ping-pong 128x192 run level (a 128x192 tile is 3/4 the size, so the two quantize
#: differently onto the SMs); 128x128 (twice the CTAs of 128x256 for a grid of few tiles) at 0.93, persistent or
#: as a kernel's own ping-pong tile; 192x192 (three consumer warp groups of one 64-row slab each, whose 132 tiles
#: fill 132 SMs once at M = 1100 to 1152 and N = 4096 to 4224, where 128-row tiles take two waves) at 0.93: 0.92 to
#: 1.05 of the others per slot over 13 shapes.
TILE_SWITCHES = {(128, 256): ({"schedule": "persistent"}, 1.0),
                 # (ping-pong left to the compiler, which shares the tile where a group's epilogue spills)
                 (128, 192): ({}, 1.0),
                 (128, 128): ({"schedule": "persistent"}, 0.93),
                 (192, 192): ({"schedule": "persistent"}, 0.93),
                 # cooperative 128x320 (two wgmmas a k-step; only where `_wide_tile_fits`)
                 # runs level with 128x256 per slot (0.96-1.07 over 14 shapes, H200); last, so that a fill it only
                 # ties leaves the choice to the others (against ping-pong 128x192 on equal fills: -1.2% to +3.2%)
                 (128, 320): ({"schedule": "persistent"}, 1.0)}


#: What a tile computes per slot against 128x256 in a kernel whose dot's B is computed in registers (a weight-only
#: fp8 GEMM, `computed_b`): each K step converts a [BLOCK_K, BLOCK_N] B, which a 128x128 tile's group does for half
#: the output of a 128x256 tile's (measured 0.78-0.83 as ping-pong, 0.83-0.87 persistent, over 6 shapes on an
#: H200; 256x128 ran level with 128x256). Tiles 192 wide hold no register tile (B is one), so they are not tried.
COMPUTED_B_RATES = {(128, 128): 0.82}


def _tile_rate(info: dict, tile: tuple, rate: float):
    """What `tile` computes per slot in this kernel (`TILE_SWITCHES`, `COMPUTED_B_RATES`), or None where it
    cannot run the kernel."""
    if not info.get("computed_b"):
        return rate
    return None if 192 in tile else COMPUTED_B_RATES.get(tile, rate)


def _switch_to(own: tuple, tile: tuple, options: dict) -> dict:
    """The configuration that switches a kernel whose own tile is `own` to `tile`: its BLOCK_N, its BLOCK_M where
    that differs from the own one, and its options."""
    return {**({"BLOCK_M": tile[0]} if tile[0] != own[0] else {}), "BLOCK_N": tile[1], **options}


#: A GEMM whose own tile is 128x256 may also split K in two over 128x128 tiles (four times the programs), at 0.85
#: per slot, where K is long enough (SPLIT_MIN_K) for its partial sums to pay (a fused epilogue's did not: the
#: linear layer split ran at two thirds of its own tile).
SPLIT_SWITCH, SPLIT_RATE = {"BLOCK_N": 128, "split_k": 2}, 0.85
SPLIT_MIN_K = 4096
#: Below this K a cooperative tile's epilogue, which no other tile's main loop hides, weighs on a fused epilogue
#: (one that loads a bias or a residual): there a cooperative tile computes EXPOSED_EPILOGUE_RATE of its rate per
#: slot (GEMM + bias + GELU at 16384x4096x1024: 535 TFLOP/s cooperative 128x256 against 582 for its own
#: ping-pong 128x128 and 622 for ping-pong 128x192, at equal fills).
EXPOSED_EPILOGUE_K, EXPOSED_EPILOGUE_RATE = 2048, 0.85
#: ... and a plain GEMM's (its epilogue only converts and stores the tile) at this rate, where its A rows sit on
#: the sector grid: ping-pong 128x192 ran 4-5% faster than cooperative 128x256 at K = 512 to 2048 on grids both
#: fill alike (8192x8192x1024: 640 against 607 TFLOP/s, 16384x8192x1024: 639 / 609, H200). With A's rows off the
#: grid (K = 1000: 6000x6000x1000, 513 against 554) ping-pong's narrower tile, which reads A once per 192 columns
#: instead of 256, loses instead.
SMALL_K_COOPERATIVE_RATE = 0.95
#: The share of its slots a stream-K launch keeps busy, as measured against the persistent kernel on 12 shapes (its
#: partial sums and shared epilogues cost the rest): over two waves, where every tile is shared by two CTAs, about
#: 0.75; over three or more, where only the last waves' tiles are, about 0.87.
STREAM_K_FILL_TWO_WAVES, STREAM_K_FILL = 0.75, 0.87
#: Rows off the sector grid (docs/performance.md, "rows off the sector grid weigh tiles and clusters together"): what a tile
#: computes per slot while the operand every tile column reads (A) or every tile row reads (B) has rows off the
#: grid and no cluster shares its tiles, against the same tile with it on the grid, as (A, B). A 2x1 or 1x2
#: cluster shares one of them (TMA multicast: each CTA of the pair loads half of each tile for both), which
#: halves its reads. Fitted to 13 shapes with A, B or both off the grid, eight variants each (H100): a 128x256
#: tile reads twice as many B rows as A rows per k-step and loses a quarter with B unshared, 192x192 reads both
#: alike and loses little; ping-pong 128x192 in clusters runs its pair's turns in lockstep (PINGPONG_CLUSTER_RATE).
SECTOR_PENALTIES = {(128, 256): (0.96, 0.75), (128, 192): (0.88, 0.72), (128, 128): (0.65, 0.75),
                    (192, 192): (0.95, 0.93)}
PINGPONG_CLUSTER_RATE = 0.95
#: ... and, with operands off the grid, 192x192 computes per slot what 128x256 does (0.97-1.04 of it where each
#: shares the operand off the grid), not the 0.93 of aligned grids (TILE_SWITCHES).
SECTOR_TILE_RATES = {(192, 192): 1.0}
#: The tiles measured in clusters there (128x128 pairs along M ran at 0.6-0.7 of 128x256's: too many A rows)
SECTOR_CLUSTER_TILES = ((128, 256), (128, 192), (192, 192))
#: Another tile or schedule replaces the kernel's own only where it fills the waves by this factor more ...
SWITCH_MARGIN = 1.05
#: ... except between cooperative persistent 128-row tiles (`COOPERATIVE_PEERS`), whose measured speeds followed
#: their fills closely: 128x320 against 128x256 ran -1.3% to +3.1% off the ratio of their fills over 8 shapes of 3
#: to 27 waves (H200; 4096x14336x4096: fills 0.987 / 0.970, 690 / 679 TFLOP/s, cuBLAS 659 with its own 320-wide
#: tile). A 128x320 tile computes 5/4 of a 128x256 one from 7% fewer operand bytes per FLOP, so which of the two
#: a grid of N-heavy tiles (an FFN's 14336 or 28672) takes is settled by the last wave alone.
PEER_MARGIN = 1.01
COOPERATIVE_PEERS = ((128, 256), (128, 320))
#: Options given explicitly under which no other tile or schedule is launched ...
_SCHEDULE_OPTIONS = ("warp_specialize", "schedule", "split_k", "BLOCK_M", "BLOCK_N", "tma", "num_consumer_groups",
                     # (budgets given fit the kernel's own consumer groups, not a tile of three)
                     "producer_registers", "consumer_registers")
#: ... and under which no clusters are added.
_CLUSTER_OPTIONS = ("warp_specialize", "split_k", "cluster", "tma", "num_consumer_groups")


def _asks_dynamic_tiles(fixed: dict) -> bool:
    """`dynamic_tiles=True` given: it needs the persistent schedule without clusters or split-K, so no rule may
    switch the schedule, add clusters or split K (`dynamic_tiles=False` changes nothing the rules read)."""
    return fixed.get("dynamic_tiles") is True


def _large_m_defaults(info: dict, extents: dict, m: int, n: int, k, batch, sms: int, misaligned: set,
                      fixed: dict) -> dict:
    """For M > 64: the tile and schedule that fill the GPU's waves best, and thread-block clusters where an operand's
    rows sit off the 32-byte sector grid.

    - Waves. A persistent CTA computes its tiles one after another, so a launch takes as long as its fullest
      CTA: `tawa.tile_plan.wave_fill` is the share of all the waves' tile slots that computes output. Over 41
      shapes the measured speed of 128x256 (cooperative) against 128x192 (ping-pong) followed the ratio of their
      fills. A one-dot kernel whose own tile is one of `TILE_SWITCHES` switches to another of them (a
      cooperative one weighs less below `EXPOSED_EPILOGUE_K`: `_cooperative_rates`), to split-K 128x128 (a 128x256 GEMM,
      K >= 4096), or to its stream-K variant where that shares a sparse last wave (K >= 1024; not for an epilogue
      that loads a tensor, which stream-K refuses), when that fills the waves `SWITCH_MARGIN` better, weighted by
      what each computes per slot (GEMM 1536x6144x2048: 0.73 -> 0.97, 527 -> 680 TFLOP/s; the linear layer at
      1024x4096x4096: 0.65 -> 0.97, 440 -> 607).
    - Sectors. A row pitch that is a multiple of 16 but not 32 bytes (a bf16 K or N of 8 mod 16: 1000, 3000,
      5000) halves TMA's read rate of that operand; a pair of CTAs loading each of its tiles once for both (TMA
      multicast) recovers most of it. A plain one-dot GEMM of a wave or more of its own tiles weighs every tile
      alone and in the pairs that share an operand off the grid (`clustered_fill`, `SECTOR_PENALTIES`;
      3000x3000x3000 with A and B off: 192x192 in 2x1 pairs, 457 -> 539 TFLOP/s); other kernels run their choice
      in pairs along M where B is off the grid (3000x5000x2000: 465 -> 630). Stream-K and split-K, which cannot
      pair CTAs, are not taken where B's tiles could be shared."""
    consts = info.get("constants", {})
    own = (consts.get("BLOCK_M"), consts.get("BLOCK_N"))
    if not all(isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in own):
        return {}
    may_cluster = not any(name in fixed for name in _CLUSTER_OPTIONS) and not _asks_dynamic_tiles(fixed) and \
        fixed.get("schedule") in (None, "persistent", "pingpong")
    off_grid = {operand for operand, indices in (("A", tile_column_operands(info)), ("B", tile_row_operands(info)))
                if set(indices) & misaligned}
    # the tiles and clusters weighed together where rows are off the grid: measured for plain one-dot GEMMs
    sector_bound = may_cluster and bool(off_grid) and info.get("dots") == 1 and not info.get("epilogue_loads") \
        and _plain(info) and own in SECTOR_CLUSTER_TILES and \
        tile_plan.cdiv(m, own[0]) * tile_plan.cdiv(n, own[1]) >= sms
    # elsewhere the kernel's choice runs in pairs that share B, where B is off the grid
    pairs_for_b = may_cluster and "B" in off_grid and not sector_bound and tile_plan.cdiv(m, own[0]) >= 2
    b_bound = may_cluster and "B" in off_grid and tile_plan.cdiv(m, own[0]) >= 2

    def sector_rate(tile, shared=None) -> float:
        return _sector_penalty(tile, off_grid - {shared}) if sector_bound else 1.0

    may_switch = not any(name in fixed for name in _SCHEDULE_OPTIONS) and not _asks_dynamic_tiles(fixed) and \
        cluster_name(fixed.get("cluster", "1x1")) == "1x1"
    # (what each computes per slot, its configuration) of the own tile and the tiles it may switch to ...
    own_rate, rates = 1.0, {}
    # ... and of split-K and stream-K
    others = []
    # one dot over a grid of output tiles, or of them times a batch axis (split-K and stream-K: without one)
    if may_switch and info.get("dots") == 1 and batch is not None:
        plain = _plain(info)
        switching = own in TILE_SWITCHES
        own_rate = _tile_rate(info, own, TILE_SWITCHES[own][1] if switching else 1.0) or 1.0  # (stream-K keeps it)
        # a cooperative tile's epilogue, which no other tile's main loop hides, weighs on short K loops
        own_cooperative, cooperative = _cooperative_rates(info, k, misaligned)
        if not own_pingpong(own):
            own_rate *= own_cooperative
        if switching:
            for tile, (switch, other) in TILE_SWITCHES.items():
                other = _tile_rate(info, tile, other)
                if tile[1] > WGMMA_MAX_N and not (_wide_tile_fits(info, fixed) and not off_grid):
                    continue
                if tile != own and other is not None:
                    if sector_bound:
                        other = SECTOR_TILE_RATES.get(tile, other)
                    rates[tile] = (other * cooperative if switch.get("schedule") == "persistent" else other,
                                   _switch_to(own, tile, switch))
        # (split-K runs 128x128 tiles, stream-K the own one; neither in clusters)
        if plain and own == (128, 256) and k is not None and k >= SPLIT_MIN_K and not b_bound:
            others.append((sector_rate((128, 128)) * SPLIT_RATE * tile_plan.wave_fill(m, n, 128, 128, sms, splits=2),
                           dict(SPLIT_SWITCH)))
        programs = grid_programs(info, Config({}), extents)
        if plain and not b_bound and not info.get("epilogue_loads") and k is not None and \
                k >= MIN_K_STREAM_K and _stream_k_shares(info, Config({}), extents, programs, sms):
            fill = STREAM_K_FILL_TWO_WAVES if tile_plan.cdiv(programs, sms) <= 2 else STREAM_K_FILL
            others.append((sector_rate(own) * own_rate * fill, {"schedule": "streamk"}))
    rates = {own: (own_rate, {}), **rates}
    m_axis = [c for c, _ in info.get("tiles", [])].index("BLOCK_M")
    # the cluster that shares each operand: B in pairs along the grid axis that tiles M, A along the other
    sharing = {"B": "2x1" if m_axis == 0 else "1x2", "A": "1x2" if m_axis == 0 else "2x1"}
    outputs = 1 if batch is None else batch
    candidates = []
    for tile, (rate, switch) in rates.items():
        schedule = (switch or fixed).get("schedule", "pingpong" if own_pingpong(tile) else None)
        alone = rate * sector_rate(tile) * tile_plan.wave_fill(m, n, *tile, sms, batch=outputs)
        candidates.append((alone, switch))
        if not (sector_bound and tile in SECTOR_CLUSTER_TILES):
            continue
        for operand in sorted(off_grid):
            fill, paired = clustered_fill(m, n, tile, outputs, sms, sharing[operand], m_axis)
            score = rate * (PINGPONG_CLUSTER_RATE if schedule == "pingpong" else 1.0) * \
                sector_rate(tile, operand) * fill
            # (a cluster the runtime would launch unpaired is the entry above; pairs run in lockstep: only where
            # they pay clearly)
            if paired and score >= SWITCH_MARGIN * alone:
                candidates.append((score, dict(switch, cluster=sharing[operand])))
    own_score = candidates[0][0]
    if own_score <= 0:                      # an empty output: nothing to launch, nothing to compile
        return {}

    def margin(config: dict) -> float:
        tile = (config.get("BLOCK_M", own[0]), config.get("BLOCK_N", own[1]))
        peers = own in COOPERATIVE_PEERS and tile in COOPERATIVE_PEERS and tile != own and \
            config.get("schedule") == "persistent" and set(config) <= {"BLOCK_N", "schedule"}
        return PEER_MARGIN if peers else SWITCH_MARGIN

    # the best of all, taken where it clears its margin (a peer that clears its 1% does not win over a tile the
    # rule scores higher that misses its 5%: then the own tile stays)
    score, config = max(candidates + others, key=lambda candidate: candidate[0])
    config = config if score >= margin(config) * own_score else {}
    return dict(config, cluster=sharing["B"]) if pairs_for_b else config


#: Bytes of one ring slot of a 128x320 tile at most: three of them and the epilogue's staging fill shared memory
#: (bf16 with BLOCK_K = 64, fp8 with 128, tf32 with 32: 56 KiB).
WIDE_SLOT_BYTES = 64 * 1024


def _dtype_bytes(name):
    """Bytes of a dtype named in the language's or the IR's spelling (`tawa.elements`), else None."""
    return ELEMENT_BYTES.get(IR_NAMES.get(name, name)) if isinstance(name, str) else None


def _element_bytes(info: dict, operands, constants: dict):
    """Bytes of the elements of these operands (by index; a dtype may be a constant's name, read in `constants`),
    or None where one is not known."""
    dtypes = dict((index, name) for index, name in info.get("operand_dtypes", []))
    sizes = [_dtype_bytes(dtypes.get(index)) or _dtype_bytes(constants.get(dtypes.get(index))) for index in operands]
    return None if None in sizes else sizes


def _wide_slot_bytes(info: dict, fixed: dict):
    """Bytes of one K step's A and B tiles at 128x320 (BLOCK_K and the operands' dtypes, as compiled: the constants
    given at compile time over the source's), or None where unknown."""
    consts = dict(info.get("constants", {}))
    consts.update((name, value if isinstance(value, (int, float)) else str(value))
                  for name, value in fixed.items() if name in consts)
    dtypes = dict((index, name) for index, name in info.get("operand_dtypes", []))
    operands = tile_row_operands(info) + tile_column_operands(info)
    names = {dtypes.get(index) for index in operands}
    # (a constant computed from others holds its source value only while they keep theirs)
    derived = set(info.get("derived_constants", [])) & ({"BLOCK_K"} | names)
    if derived and any(name in consts for name in fixed):
        return None
    block_k = consts.get("BLOCK_K")
    sizes = _element_bytes(info, operands, consts)
    if not isinstance(block_k, int) or isinstance(block_k, bool) or not operands or sizes is None:
        return None
    return block_k * (128 + 320) * max(sizes)


def _wide_tile_fits(info: dict, fixed: dict) -> bool:
    """Whether a one-dot kernel may switch to a tile wider than one wgmma (128x320): nothing converted in its main
    loop (a converted B is a register tile 320 wide) and no tensor loaded in its epilogue, where it did not pay
    (H200, six FFN shapes: the linear layer's bias + GELU + residual ran 0.96-1.05x 128x256 and mostly below its own
    ping-pong 128x192; FP8 with row and column scales 1.00-1.06x 128x256, 0.98-1.00x ping-pong); and a K step whose
    tiles fit three ring slots (`WIDE_SLOT_BYTES`; BLOCK_K = 128 of bf16 would leave two). B may be stored either
    way ([N, K] is copied in two blocks of 160 rows): on four FFN shapes a plain x @ W.T ran 1.01-1.04x 128x256,
    tf32 1.02-1.07x, fp8 e5m2 1.01-1.05x."""
    slot = _wide_slot_bytes(info, fixed)
    return not info.get("computed_b") and not info.get("epilogue_loads") and slot is not None and \
        slot <= WIDE_SLOT_BYTES


def own_pingpong(tile: tuple) -> bool:
    """Whether a kernel's own tile of this size runs ping-pong (a consumer warp group holds all of it)."""
    return tile[0] * tile[1] <= tile_plan.PINGPONG_ACC_REGISTERS * THREADS_PER_WARP_GROUP


def _sector_penalty(tile: tuple, unshared: set) -> float:
    """What `tile` computes per slot while the operands in `unshared` ("A", "B") have rows off the sector grid that
    no cluster shares (SECTOR_PENALTIES)."""
    penalties = dict(zip("AB", SECTOR_PENALTIES.get(tile, SECTOR_PENALTIES[(128, 256)])))
    rate = 1.0
    for operand in unshared:
        rate *= penalties[operand]
    return rate


def clustered_fill(m: int, n: int, tile: tuple, batch: int, sms: int, cluster, m_axis: int) -> tuple:
    """(wave fill, whether the CTAs run paired): `tile_plan.wave_fill` of an m x n output (times `batch`) in
    `tile`s, as a persistent kernel in `cluster` ("2x1", "1x2" or None) walks it: the paired axis rounded up to
    whole clusters where the runtime pairs the CTAs (`tawa.runtime.grid.walked_tiles`), alone where it does not."""
    along_m, along_n = tile_plan.cdiv(m, tile[0]), tile_plan.cdiv(n, tile[1])
    grid = (along_m, along_n, batch) if m_axis == 0 else (along_n, along_m, batch)
    dims = cluster_dims(cluster) if cluster else None
    if dims is not None and grid[cluster_axis(dims)[0]] < 2:
        dims = None     # (the runtime may pair a single tile with one past the output; the rule does not take it)
    tiles, size = walked_tiles(dims, grid, sms)
    if tiles <= 0:
        return 0.0, False
    slots = sms // size * size
    if slots <= 0:
        return 0.0, False
    return m * n * batch / (tile_plan.cdiv(tiles, slots) * slots * tile[0] * tile[1]), size > 1


#: An attention-family kernel's own query block, and the configuration that replaces it: 192 rows on three
#: consumer warp groups of 64 (FlashAttention-3's tile at head dim 64), 128-key blocks, one query block per CTA.
ATTENTION_OWN_ROWS = 128
ATTENTION_192 = {"BLOCK_M": 192, "BLOCK_N": 128, "schedule": "tile"}
#: Head dims up to which the 192-row block pays. There a key block's two dots cost the tensor cores about what its
#: exponentials cost the MUFU units, and the third consumer warp group is what overlaps the two; from 80 on its
#: registers no longer fit the 160 three groups get (ptxas spills and serializes the wgmmas).
ATTENTION_192_MAX_HEAD_DIM = 64
#: ... and from which for a kernel on the uniform-warp path: at head dim 32 the 128-row uniform kernel ran 1.02-1.09x
#: the 192-row blocks at S = 2048 and 4096 and within 3% of them from 8192 on, causal or not, except 0.94x causal at
#: 16384 (H200).
ATTENTION_192_MIN_HEAD_DIM = 48
#: Sequence lengths, in 128-key blocks, from which the 192-row block pays: it wastes up to a third of a block's
#: rows at the end of the sequence, makes a third fewer CTAs, and (causal) computes a larger masked triangle on
#: the diagonal and leaves longer programs for the last wave, all paid back only over long key loops. Measured
#: (H100, docs/performance.md) against the 128-row default at head dim 64: loops of the same length for every
#: program +9% at S = 2048 up to +15% at 16384, -5% at 1024; loops that grow with the query block (causal) -7% at
#: 2048, -2% to +1% at 3000-4096, +6% at 8192, +12% at 16384.
ATTENTION_192_MIN_BLOCKS, ATTENTION_192_MIN_BLOCKS_UNEVEN = 16, 48
#: What a 192-row block computes per SM against the own 128-row blocks (1.09-1.15 measured on grids of many waves),
#: for the estimate of the two grids' times in waves (`attention_defaults`); and the waves of 192-row CTAs below
#: which the own blocks stay (fewer, larger CTAs leave more of a partial last wave idle, and a CTA alone on its SM
#: finishes 128 rows sooner than 192).
ATTENTION_192_RATE, ATTENTION_192_MIN_WAVES = 1.1, 2
#: Sequence lengths, in 128-key blocks, from which an attention kernel whose own schedule takes dynamic tiles
#: (persistent CTAs taking query blocks from a counter: causal attention at head dims from 80) runs one query block
#: per CTA instead. Its K and V rings then share the shared memory with no ring for the next block's Q (and no
#: staging for O beside them), a slot deeper, which long key loops want more than the overlap of one block's end
#: with the next block's start, which short ones want. Measured (H100, head dim 128, causal; docs/performance.md)
#: the dynamic tiles against one block per CTA: 1.10x at S = 256 and 512, 1.04x at 1024, 1.00x at 2048, 0.95-0.97x
#: from 3000 to 8192.
ATTENTION_TILE_MIN_BLOCKS = 20
ATTENTION_TILE = {"schedule": "tile"}
#: Key blocks per head dim (up to the key), for an attention kernel whose own BLOCK_N is another: 64 keys up to head
#: dim 64 (two CTAs per SM, whose four consumer warp groups hide each other's softmax), 128 above, up to 128
#: (above 128: `wide_head_key_block`).
#: Measured (docs/performance.md): at head dim 96, 128-key blocks ran 1.20x a user kernel's 64 (521 against 434
#: TFLOP/s, 4x16x4096, H200); at head dim 64, 64-key blocks 1.07x a user kernel's 128 specialized at one CTA per SM
#: (383 against 364 at 8x16x512 queries over 2048 keys). A kernel whose own 128-key block the compiler put on the
#: uniform-warp path at head dim 64 (`CompiledKernel.uniform_by_choice`: two CTAs per SM, as the examples' own now)
#: keeps it: 1.03-1.10x the 64-key blocks over S = 512 to 16384, causal or not (H200).
ATTENTION_KEY_BLOCKS = ((64, 64), (128, 128))
#: Above head dim 128 (up to WGMMA_MAX_N) a 128-key slot of K and V can leave room for only one slot beside the
#: 128-row Q tile (head dim 192 or 256 at 16 bits), and the producer then cannot load the next keys while the
#: consumers work on these. Key blocks are taken in steps of WIDE_HEAD_KEY_STEP, the largest up to 128 whose two
#: slots fit beside Q (`wide_head_key_block`: 128 at head dim 160, 112 at 192, 80 at 256, as FlashAttention-3 picks),
#: on sequences of at least WIDE_HEAD_MIN_BLOCKS 128-key blocks; shorter ones take 64-key blocks, which leave room
#: for Q's own ring (the persistent schedule overlaps one query block's end with the next one's start, as short key
#: loops want). Measured (H200, one process, bf16, docs/performance.md) against the example's own 128-key blocks:
#: 1.18-1.40x at head dims 192 and 256 from S = 1024 to 8192, causal or not (4x16x4096x256: 662 against 513 TFLOP/s,
#: cuDNN 632); at S = 1024 64-key blocks ran 0-4% above the wide ones; at head dim 160 128-key blocks (two slots
#: fit) ran 1.11-1.14x 64-key ones.
WIDE_HEAD_KEY_STEP, WIDE_HEAD_MIN_BLOCKS, WIDE_HEAD_SHORT_KEY_BLOCK = 16, 16, 64
#: Head dims above which a kernel the compiler ran on uniform warps keeps its key block (see above; at head dim 32
#: too: 1.04-1.10x the 64-key specialized blocks over S = 1024 to 16384, causal or not, H200; head dim 16 was not
#: measured), up to the head dim where the compiler takes that path (`occupancy.EXPONENTIAL_BOUND_HEAD_DIM`).
#: Between them a kernel of smaller specialized key blocks launches UNIFORM_KEY_BLOCK ones where the compiler runs
#: those on uniform warps.
UNIFORM_KEEPS_KEYS_ABOVE_HEAD_DIM, UNIFORM_KEY_BLOCK_MAX_HEAD_DIM, UNIFORM_KEY_BLOCK = 16, 64, 128
#: Options given explicitly under which an attention kernel keeps its own configuration.
_ATTENTION_OPTIONS = _SCHEDULE_OPTIONS + ("cluster", "ctas_per_sm", "consumer_pingpong", "consumer_lookahead")


def is_attention_family(info: dict) -> bool:
    """Two dots and a grid that tiles one shape symbol, by BLOCK_M (attention's query blocks along the sequence);
    `attention_defaults` also asks the compiled kernel whether one dot takes the other's result in its loop."""
    tiles = info.get("tiles", [])
    return bool(info.get("has_dot")) and info.get("dots") == 2 and len(tiles) == 1 and tiles[0][0] == "BLOCK_M"


def _other_keys_safe(info: dict, extents: dict, block: int, masked_or_divided: bool) -> bool:
    """Whether key blocks of `block`, larger than the kernel's own or not dividing it, visit the same keys (a
    tile-invariant kernel loops over `cdiv(S, BLOCK_N)` blocks, `tuning.tile_invariant`): the shape symbols naming
    the rows of the key tensors (their second-to-last dims; the queries' length, which BLOCK_M tiles, left out
    where other row symbols exist) are each compared against in the kernel (a mask `cols < S` of the keys past the
    end) and a multiple of `block`; with `masked_or_divided`, either suffices. A key tensor whose rows are a
    constant counts as unmasked, undivided: a kernel may rely on its own block dividing the keys and leave those
    past the end unmasked, or test them in a branch that is dead at its constants (`if EVEN_N == 0:`), which the
    source's comparisons do not tell apart."""
    masked = set(info.get("compared_symbols", ()))
    dims = [d[-2] for _, d in info.get("operands", []) if len(d) >= 2]
    if any(not isinstance(d, str) for d in dims):
        return False
    rows = (set(dims) - {info["tiles"][0][1]}) or set(dims)
    for name in rows:
        extent = extents.get(name)
        divided = isinstance(extent, int) and extent % block == 0
        if not ((name in masked or divided) if masked_or_divided else (name in masked and divided)):
            return False
    return bool(rows)


def _attention_head_dim(info: dict, constants: dict):
    """The widest constant last extent of the tensors the grid tiles, at the compiled kernel's `constants` (derived
    ones included): an attention kernel's head dim; None where one is not a constant."""
    symbol = info["tiles"][0][1]
    tiled = {index for index, dims in info.get("operands", []) if symbol in dims}
    widths = [constants.get(d, d) for index, dims in info.get("operand_constants", []) if index in tiled
              for d in dims[-1:] if d is not None]
    if not widths or not all(isinstance(w, int) and not isinstance(w, bool) for w in widths):
        return None
    return max(widths)


def wide_head_key_block(head_dim: int, elem_bytes: int) -> int:
    """The largest key block, in steps of WIDE_HEAD_KEY_STEP up to 128, whose two slots of K and V (`elem_bytes`
    elements) fit in shared memory beside a 128-row Q tile at this head dim; WIDE_HEAD_SHORT_KEY_BLOCK where none
    does."""
    q_tile = ATTENTION_OWN_ROWS * head_dim * elem_bytes
    for block in range(128, WIDE_HEAD_SHORT_KEY_BLOCK, -WIDE_HEAD_KEY_STEP):
        if q_tile + 2 * 2 * block * head_dim * elem_bytes <= SMEM_FOR_TILES:
            return block
    return WIDE_HEAD_SHORT_KEY_BLOCK


def _attention_key_block(info: dict, constants: dict, head_dim: int, length):
    """The key block an attention kernel launches at this head dim and sequence length (ATTENTION_KEY_BLOCKS up to
    head dim 128, `wide_head_key_block` above: where that is below 128, only on sequences of WIDE_HEAD_MIN_BLOCKS
    128-key blocks and in kernels that compare no block offsets, else WIDE_HEAD_SHORT_KEY_BLOCK), or None (keep the
    kernel's own): head dims above WGMMA_MAX_N, or tensors whose element size is not known."""
    if head_dim <= ATTENTION_KEY_BLOCKS[-1][0]:
        return next(block for most, block in ATTENTION_KEY_BLOCKS if head_dim <= most)
    if head_dim > WGMMA_MAX_N:
        return None
    # (the widest element of the tensors the grid tiles: an f32 output counts as f32 operands, which only errs
    # towards smaller blocks)
    symbol = info["tiles"][0][1]
    sizes = _element_bytes(info, [index for index, dims in info.get("operands", []) if symbol in dims], constants)
    if not sizes:
        return None
    block = wide_head_key_block(head_dim, max(sizes))
    if block < 128 and (length is None or length < WIDE_HEAD_MIN_BLOCKS * 128):
        return WIDE_HEAD_SHORT_KEY_BLOCK
    return block


def keeps_variant(info, config: dict, own, compiled) -> bool:
    """Whether the launch takes the variant compiled for `config` (else the kernel's own): a key block the attention
    rule raised to UNIFORM_KEY_BLOCK at head dim 64 only where the compiler ran it on uniform warps
    (`CompiledKernel.uniform_by_choice`), the premise of the raise; where ptxas left the uniform kernel one CTA per
    SM (a bias or a mask row in the loop) the variant is specialized at one CTA per SM, slower than the own blocks."""
    if own is None or info is None or config != {"BLOCK_N": UNIFORM_KEY_BLOCK}:
        return True
    constants = dict(getattr(own, "constants", None) or {})
    if not _raises_to_uniform(constants.get("BLOCK_N"), _attention_head_dim(info, constants)):
        return True
    return bool(getattr(compiled, "uniform_by_choice", False))


def _uniform_head_dim(head_dim) -> bool:
    """Whether at this head dim the compiler runs 128-key attention blocks on uniform warps, as measured."""
    return head_dim is not None and UNIFORM_KEEPS_KEYS_ABOVE_HEAD_DIM < head_dim <= UNIFORM_KEY_BLOCK_MAX_HEAD_DIM


def _raises_to_uniform(own_keys, head_dim) -> bool:
    """Whether a kernel's own key block is one the attention rule may raise to UNIFORM_KEY_BLOCK for the uniform
    path (`keeps_variant` checks the compiled variant)."""
    return isinstance(own_keys, int) and own_keys < UNIFORM_KEY_BLOCK and _uniform_head_dim(head_dim)


def attention_defaults(info: dict, extents: dict, fixed: dict, own=None, sms: int = 132) -> dict:
    """ATTENTION_TILE for an attention-family kernel whose compiled configuration (`own`) chains its loop's dots,
    has query blocks of ATTENTION_OWN_ROWS and takes dynamic tiles, on sequences of at least
    ATTENTION_TILE_MIN_BLOCKS 128-key blocks.

    With either, or alone, BLOCK_N from ATTENTION_KEY_BLOCKS (above head dim 128: `wide_head_key_block` on long
    sequences) where the kernel's own key block is another at its head dim (64-key blocks up to head dim 64 are
    compared against 192 rows at two CTAs per SM). A key block larger than the kernel's own is taken only where the
    kernel masks the keys' length and it divides that length; a smaller one that does not divide the own block, and
    ATTENTION_192's 128, where either holds (as measured on the examples' ragged sequences): `_other_keys_safe`.

    ATTENTION_192 for an attention-family kernel whose compiled configuration (`own`) chains its loop's dots and
    has query blocks of ATTENTION_OWN_ROWS, at head dims up to ATTENTION_192_MAX_HEAD_DIM (from
    ATTENTION_192_MIN_HEAD_DIM on for a kernel on the uniform-warp path), on sequences of at least ATTENTION_192_MIN_BLOCKS 128-key blocks (ATTENTION_192_MIN_BLOCKS_UNEVEN where the programs' loops run
    different lengths, `own.uneven_programs`), on grids of at least ATTENTION_192_MIN_WAVES waves of 192-row CTAs
    that finish no later than the own grid: waves of the own CTAs (`own.ctas_per_sm` per SM) against waves of
    192-row ones, each 192 / (128 x CTAs per SM) / ATTENTION_192_RATE as long. Else {}. The head dim is the widest
    constant extent of the tensors the grid tiles, at the compiled kernel's constants (derived ones included)."""
    if own is None or not getattr(own, "chained_dots", False) or any(name in fixed for name in _ATTENTION_OPTIONS) \
            or _asks_dynamic_tiles(fixed):
        return {}
    constants = dict(getattr(own, "constants", None) or {})
    if constants.get("BLOCK_M") != ATTENTION_OWN_ROWS:
        return {}
    head_dim = _attention_head_dim(info, constants)
    if head_dim is None:
        return {}
    symbol = info["tiles"][0][1]
    length = extents.get(symbol)
    keys = _attention_key_block(info, constants, head_dim, length)
    own_keys = constants.get("BLOCK_N")
    # the own configuration with the key block its head dim wants (the rules below compare against that one); a
    # larger block, or a smaller one that does not divide the own, only where it visits the same keys
    # (`_other_keys_safe`)
    # (not smaller where the compiler took the uniform-warp path for the own block at head dim 64: 128-key blocks
    # there run two CTAs per SM and beat the 64-key specialized kernel, `ATTENTION_KEY_BLOCKS`; measured at 64 only)
    uniform_kept = getattr(own, "uniform_by_choice", False) and _uniform_head_dim(head_dim)
    # (other blocks only where the results cannot depend on them, `tuning.block_sizes_free`; a kernel recorded
    # before the field existed counts as dependent)
    free = bool(info.get("block_sizes_free", False))
    base = {"BLOCK_N": keys} if isinstance(own_keys, int) and keys is not None and own_keys != keys and free and \
        (_other_keys_safe(info, extents, keys, masked_or_divided=False) if keys > own_keys
         else _other_keys_safe(info, extents, keys, masked_or_divided=True) if own_keys % keys
         else not uniform_kept) else {}
    # (and larger, from a smaller specialized block, where the compiler would run it on uniform warps: checked on the
    # compiled variant, `keeps_variant`)
    if not base and free and _raises_to_uniform(own_keys, head_dim) and \
            not getattr(own, "uniform_by_choice", False) and \
            _other_keys_safe(info, extents, UNIFORM_KEY_BLOCK, masked_or_divided=False):
        base = {"BLOCK_N": UNIFORM_KEY_BLOCK}
    if getattr(own, "dynamic_tiles", False) and length is not None and length >= ATTENTION_TILE_MIN_BLOCKS * 128:
        return dict(ATTENTION_TILE, **base)
    least = ATTENTION_192_MIN_BLOCKS_UNEVEN if getattr(own, "uneven_programs", True) else ATTENTION_192_MIN_BLOCKS
    # (below ATTENTION_192_MIN_HEAD_DIM only against the uniform-warp 128-key kernel, kept or raised to: the
    # specialized one was not measured against 192 rows there)
    on_uniform = uniform_kept or base == {"BLOCK_N": UNIFORM_KEY_BLOCK} and _raises_to_uniform(own_keys, head_dim)
    if length is None or head_dim > ATTENTION_192_MAX_HEAD_DIM or \
            (on_uniform and head_dim < ATTENTION_192_MIN_HEAD_DIM) or length < least * 128:
        return base
    # the programs along the grid's other axes (heads, batch): each must be a shape symbol alone
    others = 1
    for axis_symbol in (info.get("grid_symbols") or [None])[1:]:
        if axis_symbol is None or axis_symbol not in extents:
            return base
        others *= max(int(extents[axis_symbol]), 0)
    # (64-key blocks up to head dim 64 run two CTAs per SM, as the examples' own do)
    per_sm = 2 if base else max(int(getattr(own, "ctas_per_sm", 1) or 1), 1)
    rows = ATTENTION_192["BLOCK_M"]
    programs = tile_plan.cdiv(length, rows) * others
    if sms <= 0 or programs < ATTENTION_192_MIN_WAVES * sms:
        return base
    waves_own = tile_plan.cdiv(tile_plan.cdiv(length, ATTENTION_OWN_ROWS) * others, sms * per_sm)
    waves_192 = tile_plan.cdiv(programs, sms) * rows / (ATTENTION_OWN_ROWS * per_sm) / ATTENTION_192_RATE
    if isinstance(own_keys, int) and own_keys < ATTENTION_192["BLOCK_N"] and \
            not _other_keys_safe(info, extents, ATTENTION_192["BLOCK_N"], masked_or_divided=True):
        return base                     # (its 128-key blocks would be larger than the kernel's own)
    if not free:
        return base                     # (its results may depend on the blocks' sizes)
    return dict(ATTENTION_192) if waves_192 <= waves_own else base


def _cooperative_rates(info: dict, k, misaligned: set) -> tuple:
    """(for the kernel's own tile, for a tile it switches to) what a cooperative tile computes per slot against a
    ping-pong one where its epilogue is exposed (K below EXPOSED_EPILOGUE_K), on a grid of output tiles alone:

    - an epilogue that loads a tensor: EXPOSED_EPILOGUE_RATE; for the own tile only where the operand every tile
      column reads (A) has its rows on the sector grid (FP8 with its scales, own 128x256: ping-pong 128x192 ran
      8-14% faster at K = 512-2048, 8192x8192x1024 1080 against 996 TFLOP/s, H200);
    - none: SMALL_K_COOPERATIVE_RATE for both where A's rows are on the sector grid;
    - else 1 (batched grids were not measured)."""
    if k is None or k >= EXPOSED_EPILOGUE_K:
        return 1.0, 1.0
    a_on_grid = _plain(info) and not set(tile_column_operands(info)) & misaligned
    if info.get("epilogue_loads"):
        return (EXPOSED_EPILOGUE_RATE if a_on_grid else 1.0), EXPOSED_EPILOGUE_RATE
    return (SMALL_K_COOPERATIVE_RATE,) * 2 if a_on_grid else (1.0, 1.0)


def tile_column_operands(info: dict) -> tuple:
    """The argument indices of the tensors every tile column of the grid reads (A of a GEMM, X of a linear layer)."""
    return _operands_along(info, "BLOCK_M", "BLOCK_N")


def tile_row_operands(info: dict) -> tuple:
    """The argument indices of the tensors every tile row of the grid reads (B of a GEMM, W of a linear layer)."""
    return _operands_along(info, "BLOCK_N", "BLOCK_M")


def _operands_along(info: dict, read: str, other: str) -> tuple:
    """The argument indices of the tensors whose dims name the symbol the grid tiles by `read` but not the one it
    tiles by `other` (none unless the grid tiles a symbol by each)."""
    tiles = dict((c, sym) for c, sym in info.get("tiles", []))
    if not {read, other} <= set(tiles):
        return ()
    return tuple(index for index, dims in info.get("operands", [])
                 if tiles[read] in dims and tiles[other] not in dims)


def watched_operands(info: dict) -> tuple:
    """The argument indices whose rows' alignment the rules read (`misaligned` of `shape_defaults`), checked at
    every launch: the tensors every tile row reads (B), and, for one dot over a grid of output tiles alone (the
    only kernels whose rules read it), every tile column reads (A)."""
    columns = tile_column_operands(info) if _plain(info) and info.get("dots") == 1 else ()
    return tile_row_operands(info) + columns


def rows_off_sector(array) -> bool:
    """Whether a tensor's rows (its next-to-last dimension) start off the 32-byte sector grid while TMA can still
    copy them: a row pitch that is a multiple of 16 bytes but not of 32 (torch, numpy, CuPy, anything with
    `__cuda_array_interface__`; False for anything else)."""
    try:
        if array.shape[-2] <= 1:
            return False
        strides = getattr(array, "strides", None)                   # numpy, CuPy: strides in bytes
        if strides is not None:
            pitch = strides[-2]
        elif callable(getattr(array, "stride", None)):               # torch: strides in elements
            pitch = array.stride()[-2] * array.element_size()
        else:
            cai = array.__cuda_array_interface__
            if cai.get("strides") is not None:
                pitch = cai["strides"][-2]
            else:                                                    # C-contiguous: the row's bytes
                pitch = int(cai["shape"][-1]) * int(cai["typestr"][2:])
        return pitch % TMA_ALIGN_BYTES == 0 and pitch % SECTOR_BYTES != 0
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, RuntimeError):
        return False


def misaligned_operands(indices, args) -> tuple:
    """The indices among `indices` of the arguments whose rows sit off the sector grid (`rows_off_sector`)."""
    return tuple(index for index in indices if index < len(args) and rows_off_sector(args[index]))
