"""CUDA-event timing shared by the benchmarks that run torch anchors beside Tawa kernels in one process.

`time_ms(fn)`: the mean time of `fn` over `reps` launches after `warmup` (torch CUDA events on the current
stream). `race(fns, rounds)`: the best of `rounds` such means for each of several functions, timed in turn, so
that clock and power drift hit every column alike. `check_close` and `report_against_torch` check a kernel's
output and print a race against torch anchors; `build_or_run` is the `build` / `run` command line of the
benchmarks whose kernels are compiled on one machine and timed on another.
"""
from __future__ import annotations


def time_ms(fn, reps: int = 50, warmup: int = 10) -> float:
    import torch
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def race(fns: dict, rounds: int = 5, **kw) -> dict:
    """The best time (ms) of each function over alternating rounds."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], time_ms(fn, **kw))
    return best


def check_close(name: str, out, ref, tol: float = 2e-2, verbose: bool = False) -> None:
    """Exit unless `out` (a torch tensor, NaN-poisoned before the launch) is written everywhere and within `tol`
    of `ref` in relative Frobenius norm."""
    import sys
    import torch
    out = out.float()
    if torch.isnan(out).any():
        sys.exit(f"{name}: {int(torch.isnan(out).sum())} elements not written")
    err = ((out - ref).norm() / ref.norm()).item()
    if not err < tol:
        sys.exit(f"{name}: relative error {err:.3e}")
    if verbose:
        print(f"  checked {name}: relative error {err:.1e}")


def report_against_torch(title: str, unit: str, work: float, times: dict, width: int = 42) -> None:
    """One row per function of a race (`times`, ms): `work / 1e9` per ms in `unit`, and its speed against the
    fastest anchor (the functions whose names do not start with "Tawa")."""
    print(f"\n{title}")
    fastest = min(t for name, t in times.items() if not name.startswith("Tawa"))
    for name, t in times.items():
        print(f"  {name:{width}s} {work / t / 1e9:8.0f} {unit}   {fastest / t:6.3f}x the fastest torch anchor")


def build_or_run(doc: str, root: str, out_name: str, build, run) -> None:
    """The command line `build | run [--out DIR]`: `build` compiles the kernels into the kernel cache DIR/cache
    (default bench/out/OUT_NAME), `run` times them from it."""
    import argparse
    import os
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("step", choices=("build", "run"))
    parser.add_argument("--out", default=os.path.join(root, "bench", "out", out_name),
                        help="the kernel cache the two steps share")
    args = parser.parse_args()
    os.environ["TAWA_CACHE_DIR"] = os.path.join(args.out, "cache")
    build() if args.step == "build" else run()
