"""A kernel's tuning space: the candidates to try, where they come from, and which a given call can skip.

Candidates come from, in this order of precedence: the `configs=` given to `tawa.autotune`; the kernel file's
`@autotune(configs=...)` declaration; else the default space below. The tuner's own keyword arguments are applied
on top of every candidate (they are fixed, not tuned) and repeats collapse.

The default space is for kernels with a `dot` and `BLOCK_M` / `BLOCK_N` constants (the GEMM family): the Hopper
tiles that win on large problems (256x128 and 128x256 warp specialized, then 128x128), 64-row tiles for small M,
two uniform-warp schedules, split-K for grids too small to fill the GPU (decode shapes), and 2x1 clusters of
the 128x256 tile; `BLOCK_K` stays at the kernel's default or 64, whichever is larger (64 bf16
elements are one 128-byte swizzle row; fp8 kernels declare 128); the ring depth is left to the compiler (as many
slots as fit). Other kernels with a dot try their defaults with and without warp specialization; kernels
without one have nothing to tune unless they declare a space.

Shape pruning (`prune_by_shape`) drops candidates whose tile along a key symbol is larger than needed: with
`@grid(cdiv(M, BLOCK_M), ...)` and M = 8, a 256-row tile computes 97% padding where a 64-row one would do. It also
drops split-K candidates (`split_k` > 1) when the unsplit grid already has enough programs to fill the GPU, so
that a space with splits costs nothing to tune on large problems; clustered candidates (`cluster`) where it
has too few (their gain is the shared tiles' L2 traffic of a full GPU) or where they would also split K; and
stream-K candidates (`schedule="streamk"`) where their tiles leave no sparse last wave to share.

`space_info` reads what the above needs from the source (`tawa.frontend.tuning.space_info`) and keeps it in the
kernel cache directory, so a machine without the compiler (no MLIR, no Lark) can tune from a prefilled cache.
"""
from __future__ import annotations

import difflib
import json
import warnings
from typing import Optional

from tawa import hopper, tile_plan
from tawa.options import cluster_name, tunable_options

from .config import Config, dedupe
from .errors import AutotuneError

#: (BLOCK_M, BLOCK_N) of the default space, best first on large problems (docs/performance.md); the first that
#: fits a call's shape is what runs when tuning is off.
DEFAULT_TILES = ((256, 128), (128, 256), (128, 128), (64, 128), (64, 256))
#: Uniform-warp (software-pipelined) candidates of the default space: (BLOCK_M, BLOCK_N, num_warps).
DEFAULT_UNIFORM = ((128, 128, 4), (128, 256, 8))
#: Smallest BLOCK_K of the default space: one 128-byte swizzled row of 16-bit elements.
MIN_BLOCK_K = 64
#: Split-K candidates of the default space, for grids too small to fill the GPU: (BLOCK_M, BLOCK_N, split_k).
DEFAULT_SPLITS = ((64, 128, 2), (64, 128, 4), (64, 64, 4))
#: Clustered candidates of the default space: (BLOCK_M, BLOCK_N, cluster).
DEFAULT_CLUSTERS = ((128, 256, "2x1"),)
#: A split-K candidate is tried only when the unsplit grid has fewer programs than this (about the SMs of an
#: H100 / H200: a grid that already fills them gains nothing from splitting, and pays the partials' traffic).
SPLIT_BELOW_PROGRAMS = 128


# ---- reading the space from the source ------------------------------------------------------------------
def space_key(source: str) -> str:
    """Where a source's space record is kept: keyed like a kernel, by the source text and the compiler's version
    (which covers the frontend that reads the declaration)."""
    from tawa.runtime import cache
    return cache.cache_key(source, {"autotune_space": 1})


def _space_path(key: str):
    from tawa.runtime import cache
    return cache.cache_dir() / "autotune" / "spaces" / f"{key}.json"


def space_info(source: str, filename: str) -> dict:
    """The tuner's view of a kernel source (see `tawa.frontend.tuning.space_info`), from the cache when it is
    there, else parsed (which needs the compiler) and stored."""
    key = space_key(source)
    info = load_space(key)
    if info is not None:
        return info
    try:
        from tawa.frontend.tuning import space_info as read
    except ImportError as e:
        raise AutotuneError(f"the tuning space of {filename} is not in the kernel cache, and this machine cannot "
                            f"read .tawa files ({e})",
                            note="tune or run `tawac FILE --autotune-space` once on a machine with the compiler "
                                 "and copy its cache directory here, or import results exported there "
                                 "(tawa.autotune.import_results)") from None
    info = read(source, filename)
    info["space_key"] = key
    store_space(key, info)
    return info


def store_space(key: str, info: dict) -> None:
    """Write a space record under `key` (atomically); an unwritable cache only warns, as for kernels."""
    path = _space_path(key)
    try:
        write_json_atomic(path, info)
    except OSError as e:
        warnings.warn(f"tawa: could not write the autotuning cache at {path}: {e}", RuntimeWarning, stacklevel=3)


def load_space(key: str) -> Optional[dict]:
    """The space record stored under `key`, or None."""
    try:
        info = json.loads(_space_path(key).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("name") else None


def write_json_atomic(path, data) -> None:
    """Write JSON to a temporary name and rename it into place: readers see all of it or none."""
    from tawa.runtime import cache
    path.parent.mkdir(parents=True, exist_ok=True)
    cache.atomic_write(path, json.dumps(data, indent=1).encode())


# ---- the candidates --------------------------------------------------------------------------------------
def default_configs(info: dict) -> list:
    """The default candidates for a kernel that declares none (see the module docstring), best guess first."""
    consts = info.get("constants", {})
    if not info.get("has_dot"):
        return [{}]
    if "BLOCK_M" not in consts or "BLOCK_N" not in consts or not info.get("tile_invariant", True):
        # (a program whose results depend on its tiles, `partial[pid_n]`, keeps them: `tuning.tile_invariant`)
        return [{}, {"warp_specialize": False}]
    k = {}
    if "BLOCK_K" in consts and isinstance(consts["BLOCK_K"], int):
        k = {"BLOCK_K": max(MIN_BLOCK_K, consts["BLOCK_K"])}
    out = [{"BLOCK_M": m, "BLOCK_N": n, **k} for m, n in DEFAULT_TILES]
    out += [{"BLOCK_M": m, "BLOCK_N": n, **k, "warp_specialize": False, "num_warps": w}
            for m, n, w in DEFAULT_UNIFORM]
    out += [{"BLOCK_M": m, "BLOCK_N": n, **k, "split_k": s} for m, n, s in DEFAULT_SPLITS]
    out += [{"BLOCK_M": m, "BLOCK_N": n, **k, "cluster": c} for m, n, c in DEFAULT_CLUSTERS]
    return out


def plain_defaults(info: dict) -> dict:
    """The kernel's constants whose default is a value of its own, not computed from other constants: a candidate
    restating one of these is the same kernel as without it (`Config.without_defaults`). A derived default
    (`BLOCK_N = 64 + 64 * (HEAD_DIM >= 64)`) changes with the constants it reads, so a candidate's BLOCK_N=128 next to
    HEAD_DIM=64 must stay."""
    derived = set(info.get("derived_constants", ()))
    return {n: v for n, v in info.get("constants", {}).items() if n not in derived}


def _reduction_symbol(info: dict):
    """The one shape symbol neither tiled by the grid nor one of its axes (a GEMM's K; a batch axis `Z` is the
    latter), or None."""
    axes = set(info.get("grid_symbols") or [])
    tiled = {symbol for _, symbol in info.get("tiles", [])}
    others = [name for name, _, _ in info.get("symbols", []) if name not in tiled and name not in axes]
    return others[0] if len(others) == 1 else None


def candidates(info: dict, configs: Optional[list], fixed: dict) -> tuple:
    """(candidates, where they came from: "python", "declared" or "default") with `fixed` applied to each."""
    if configs is not None:
        base, origin = configs, "python"
    elif (info.get("declared") or {}).get("configs"):
        base, origin = [Config(c) for c in info["declared"]["configs"]], "declared"
    else:
        base, origin = [Config(c) for c in default_configs(info)], "default"
    return dedupe(c.merged(fixed) for c in base), origin


def check_names(info: dict, configs: list) -> None:
    """Every name a candidate sets is a const parameter of the kernel or a compile option: a typo is one error
    when the tuner is built, not a compile failure of every candidate."""
    constants = list(info.get("constants", {}))
    known = set(constants) | set(tunable_options())
    for config in configs:
        for name in config.as_dict():
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                raise AutotuneError(f"'{name}' is neither a const parameter of kernel '{info.get('name')}' nor a "
                                    f"compile option",
                                    note=f"did you mean {close[0]}?" if close else
                                    f"const parameters: {', '.join(constants) or 'none'}")


def resolve_key(info: dict, key) -> list:
    """The key's shape symbols: `key` as given (checked), else the declared one, else every shape symbol."""
    symbols = list(symbol_positions(info))
    if key is None:
        key = (info.get("declared") or {}).get("key") or symbols
    elif isinstance(key, str):
        key = [key]
    try:
        key = list(key)
    except TypeError:
        raise AutotuneError(f"key is a list of shape symbol names, got {type(key).__name__}") from None
    for name in key:
        if name not in symbols:
            raise AutotuneError(f"key: {name!r} is not a shape symbol of kernel '{info.get('name')}' (shape "
                                f"symbols: {', '.join(symbols) or 'none'})")
    if len(set(key)) != len(key):
        raise AutotuneError(f"key: a shape symbol appears twice in {key}")
    return key


def symbol_positions(info: dict) -> dict:
    """Each shape symbol -> (argument index, axis) it is read from, in the kernel's declaration order."""
    return {name: (arg, axis) for name, arg, axis in info.get("symbols", [])}


def constant_value(info: dict, config: Config, name: str):
    """The value `config` gives constant `name`: its own, else the kernel's default."""
    return config.get(name, info.get("constants", {}).get(name))


def prune_by_shape(info: dict, configs: list, extents: dict, sms: int = hopper.TYPICAL_SMS) -> tuple:
    """(kept, [(config, reason)]) for a call whose key symbols have `extents`, on a GPU of `sms` SMs.

    For each grid tile pair (CONST, SYMBOL) with SYMBOL in `extents`: the smallest candidate tile that covers the
    extent (or the largest tile, when none does) is the cap, and candidates with a larger tile go. The cap is
    itself a candidate's tile, so at least one candidate always stays. Then split-K candidates go where the unsplit
    grid has `SPLIT_BELOW_PROGRAMS` programs or more, and stream-K ones where their tiles would not share a last
    wave (`tawa.tile_plan.shares_tail`: every tile would run whole, as in the persistent kernel, only slower)
    (unless nothing else is left)."""
    kept, pruned = list(configs), []
    for const, symbol in info.get("tiles", []):
        if symbol not in extents:
            continue
        extent = extents[symbol]
        sizes = {constant_value(info, c, const) for c in kept}
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            continue
        covering = [s for s in sizes if s >= extent]
        cap = min(covering) if covering else max(sizes)
        still = []
        for c in kept:
            size = constant_value(info, c, const)
            if size > cap:
                pruned.append((c, f"{const}={size} is larger than {symbol}={extent} needs ({const}={cap} "
                                  f"covers it)"))
            else:
                still.append(c)
        kept = still
    still = []
    for c in kept:
        splits = c.get("split_k", 1)
        programs = grid_programs(info, c, extents)
        clustered = cluster_name(c.get("cluster")) not in (None, "1x1")
        if isinstance(splits, int) and splits > 1 and programs is not None and programs >= SPLIT_BELOW_PROGRAMS:
            pruned.append((c, f"split_k={splits}: the grid has {programs} programs without splitting, enough to "
                              f"fill the GPU"))
        elif clustered and isinstance(splits, int) and splits > 1:
            pruned.append((c, f"cluster={c.get('cluster')} with split_k={splits}: clusters do not split K"))
        elif clustered and programs is not None and programs < SPLIT_BELOW_PROGRAMS:
            pruned.append((c, f"cluster={c.get('cluster')}: the grid has {programs} programs, too few to fill the GPU "
                              f"for the shared tiles' traffic to matter"))
        elif c.get("schedule") == "streamk" and _stream_k_shares(info, c, extents, programs, sms) is False:
            pruned.append((c, f"schedule=streamk: its {programs} tiles leave no sparse last wave on {sms} SMs to "
                              f"share"))
        else:
            still.append(c)
    if not still:                   # only split candidates: keep them rather than nothing
        return kept, pruned[:len(pruned) - len(kept)]
    return still, pruned


def _stream_k_shares(info: dict, config, extents: dict, programs, sms: int):
    """Whether the kernel under `config` as stream-K, its grid `programs` tiles, would share its tail at these
    extents (`tawa.tile_plan.shares_tail`); None where that cannot be told (the tiles, K or BLOCK_K unknown)."""
    k = extents.get(_reduction_symbol(info))
    block_k = constant_value(info, config, "BLOCK_K")
    if programs is None or k is None or not isinstance(block_k, int) or isinstance(block_k, bool) or block_k <= 0:
        return None
    return tile_plan.shares_tail(programs, sms, tile_plan.cdiv(k, block_k))


def grid_programs(info: dict, config, extents: dict):
    """Programs of the grid over its tiled axes (`cdiv(SYMBOL, CONST)`) for these extents, or None when a tiled
    symbol is not in `extents` or a tile is not an integer."""
    programs = 1
    for const, symbol in info.get("tiles", []):
        size = constant_value(info, config, const)
        if symbol not in extents or not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            return None
        programs *= -(-extents[symbol] // size)
    return programs if info.get("tiles") else None
