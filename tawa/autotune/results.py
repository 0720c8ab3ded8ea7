"""Tuning results on disk: the winning configuration per (kernel, device, key), and their export and import.

A record is one JSON file, `$TAWA_CACHE_DIR/autotune/results/<identity>-<device and key hash>.json`, written to a
temporary name and renamed into place, so processes tuning at once never see half a record and a later process
reuses it without timing anything. The identity hashes what makes a tuning run: the kernel source, the target,
the candidate list (after the tuner's fixed arguments) and the key's symbols; a new candidate list is a new run.
The compiler's version is not in it: a configuration that won stays a good guess across compiler changes, and
it is compiled (or found in the kernel cache) under the current compiler before it runs.

`export_results(path)` writes every record, plus the kernel-cache entries of the winners and the space records
they were tuned from, to one JSON file; `import_results(path)` writes them back into this machine's cache. With
the same Tawa sources on both, the importing machine launches the tuned kernels without MLIR, Lark or any tuning.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import json
import pathlib
import warnings
from typing import Optional

from tawa.version import __version__

from .errors import AutotuneError
from .space import load_space, store_space, write_json_atomic

#: The `format` field of an export file.
EXPORT_FORMAT = "tawa-autotune-results"
EXPORT_VERSION = 1


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def identity(source: str, target: str, candidates: list, key: list) -> str:
    """The identity of a tuning run (see the module docstring); the order the key's symbols are written in does
    not change it."""
    return _sha({"source": hashlib.sha256(source.encode()).hexdigest(), "target": target,
                 "candidates": [c.as_dict() for c in candidates], "key": sorted(key)})


def results_dir() -> pathlib.Path:
    from tawa.runtime import cache
    return cache.cache_dir() / "autotune" / "results"


def record_path(ident: str, device: str, key: dict) -> pathlib.Path:
    return results_dir() / f"{ident[:32]}-{_sha({'device': device, 'key': key})[:32]}.json"


def load(ident: str, device: str, key: dict) -> Optional[dict]:
    """The stored record of this run, device and key values, or None."""
    try:
        record = json.loads(record_path(ident, device, key).read_text())
    except (OSError, ValueError):
        return None
    if not _valid(record) or record["identity"] != ident or record["device"] != device or record["key"] != key:
        return None
    return record


def _valid(record) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("identity"), str)
            and isinstance(record.get("device"), str) and isinstance(record.get("key"), dict)
            and isinstance(record.get("config"), dict))


def new_record(ident: str, kernel: str, device: str, key: dict, config: dict, ms, cache_key, space_key,
               timings: list) -> dict:
    return {"identity": ident, "kernel": kernel, "device": device, "key": key, "config": config, "ms": ms,
            "cache_key": cache_key, "space_key": space_key, "timings": timings, "tawa_version": __version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def store(record: dict) -> Optional[pathlib.Path]:
    """Write a record; None (with a warning) when the cache cannot be written: results only save time."""
    path = record_path(record["identity"], record["device"], record["key"])
    try:
        write_json_atomic(path, record)
    except OSError as e:
        warnings.warn(f"tawa: could not write the autotuning results at {path}: {e}", RuntimeWarning, stacklevel=2)
        return None
    return path


def all_records() -> list:
    """Every readable record in this machine's cache, oldest file name first."""
    out = []
    d = results_dir()
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _valid(record):
            out.append(record)
    return out


# ---- export and import -------------------------------------------------------------------------------------
def export_results(path, kernel: Optional[str] = None, include_kernels: bool = True) -> int:
    """Write the tuning results of this machine (of kernel `kernel` only, when given) to the JSON file `path`;
    with `include_kernels`, also the winners' compiled kernels (PTX and cubin) and the space records, so that
    `import_results` elsewhere needs no compiler. Returns the number of results written."""
    from tawa.runtime import cache
    records = [r for r in all_records() if kernel is None or r.get("kernel") == kernel]
    kernels, spaces = {}, {}
    if include_kernels:
        for r in records:
            key = r.get("cache_key")
            if key and key not in kernels:
                compiled = cache.load(key)
                if compiled is not None:
                    meta = compiled.to_json()
                    meta.pop("ir", None)           # the final MLIR: large, and not needed to launch
                    kernels[key] = {"meta": meta, "cubin": base64.b64encode(compiled.cubin).decode()
                                    if compiled.cubin else None}
            skey = r.get("space_key")
            if skey and skey not in spaces:
                info = load_space(skey)
                if info is not None:
                    spaces[skey] = info
    data = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "tawa_version": __version__,
            "results": records, "kernels": kernels, "spaces": spaces}
    try:
        write_json_atomic(pathlib.Path(path), data)
    except OSError as e:
        raise AutotuneError(f"cannot write {path}: {e.strerror or e}") from None
    return len(records)


def import_results(path) -> int:
    """Read a file written by `export_results` into this machine's cache (results, kernels, spaces); records
    already here for the same run, device and key are replaced. Returns the number of results imported."""
    from tawa.abi import CompiledKernel
    from tawa.runtime import cache
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except OSError as e:
        raise AutotuneError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise AutotuneError(f"{path} is not a JSON file: {e}") from None
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise AutotuneError(f"{path} is not a Tawa autotuning export (no \"format\": \"{EXPORT_FORMAT}\")")
    if data.get("version") != EXPORT_VERSION:
        raise AutotuneError(f"{path} has export version {data.get('version')!r}; this Tawa reads version "
                            f"{EXPORT_VERSION}")
    records = data.get("results")
    if not isinstance(records, list) or not all(_valid(r) for r in records):
        raise AutotuneError(f"{path}: \"results\" must be a list of result records")
    try:
        for key, entry in (data.get("kernels") or {}).items():
            cubin = base64.b64decode(entry["cubin"]) if entry.get("cubin") else None
            cache.store(key, CompiledKernel.from_json(entry["meta"], cubin=cubin))
        for key, info in (data.get("spaces") or {}).items():
            store_space(key, info)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise AutotuneError(f"{path}: a kernel or space entry is malformed ({type(e).__name__}: {e})") from None
    for r in records:
        store(r)
    return len(records)
