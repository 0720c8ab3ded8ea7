"""CUDA-event timing shared by the benchmarks that run torch anchors beside Tawa kernels in one process.

`time_ms(fn)`: the mean time of `fn` over `reps` launches after `warmup` (torch CUDA events on the current
stream). `race(fns, rounds)`: the best of `rounds` such means for each of several functions, timed in turn, so
that clock and power drift hit every column alike.
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
