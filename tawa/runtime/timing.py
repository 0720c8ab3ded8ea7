"""Timing kernels for the autotuner: CUDA events on the launch stream, with the L2 cache flushed before each run.

Takes a zero-argument `launch` callable (one launch of one candidate on a given stream); gives its median time in
milliseconds. Why events and a flush: host timers would measure the launch path, not the kernel, and a kernel run
right after itself finds its inputs in the 50+ MiB L2 and looks faster than it will in a model; zeroing a buffer
twice the size of L2 before every timed run evicts them. The number of runs follows from a first estimate, so a
10 µs kernel and a 10 ms kernel both take about `warmup_ms + rep_ms` (as `triton.testing.do_bench` does). The
warm-up is 100 ms because a large kernel on an H100/H200 runs at the power cap, and the clock settles to what
the kernel's own draw allows only after about that long: timed sooner, a kernel borrows the headroom the previous
(cooler) candidate or an idle GPU left, and reads up to 10% faster than it runs in a model.

A timer is any callable `timer(launch, *, stream, device, config) -> milliseconds` with a
`device_name(device) -> str` method (the tuner stores results per device name); tests inject fakes.
`WallClockTimer` times the CPU interpreter with a host clock. Everything goes through `tawa.runtime.driver`
(`cuda.bindings.driver`), imported on first use: this module imports on machines without a GPU.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

from tawa.runtime import driver as drv

#: Runs used for the first estimate of a kernel's time.
_ESTIMATE_RUNS = 5
#: Smallest L2 flush buffer, for devices that do not report their L2 size.
_MIN_FLUSH_BYTES = 64 * 1024 * 1024


class CudaEventTimer:
    """Median of CUDA-event timings of `launch` on `stream`, L2 flushed before each run (see the module doc)."""

    def __init__(self, warmup_ms: float = 100.0, rep_ms: float = 100.0, flush_l2: bool = True,
                 min_reps: int = 5, max_reps: int = 1000):
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self.flush_l2 = flush_l2
        self.min_reps = min_reps
        self.max_reps = max_reps
        self._flush: dict = {}          # context key -> (device address, bytes) of the flush buffer
        self._events: dict = {}         # context key -> list of CUevents, reused between calls

    def device_name(self, device: Optional[int] = None) -> str:
        return drv.context_for(device).name

    def __call__(self, launch: Callable[[], None], *, stream: int = 0, device: Optional[int] = None,
                 config=None) -> float:
        cu = drv.driver()
        ctx = drv.context_for(device)
        s = cu.CUstream(stream)
        # The first run loads the module and surfaces any launch error before anything is measured.
        launch()
        drv.check(cu.cuStreamSynchronize(s), "cuStreamSynchronize")
        start, end = self._event_pair(ctx, 0)
        drv.check(cu.cuEventRecord(start, s), "cuEventRecord")
        for _ in range(_ESTIMATE_RUNS):
            self._flush_l2(ctx, stream)
            launch()
        drv.check(cu.cuEventRecord(end, s), "cuEventRecord")
        drv.check(cu.cuEventSynchronize(end), "cuEventSynchronize")
        estimate = max(self._elapsed(start, end) / _ESTIMATE_RUNS, 1e-4)
        for _ in range(max(1, int(self.warmup_ms / estimate))):
            launch()
        reps = min(self.max_reps, max(self.min_reps, int(self.rep_ms / estimate)))
        pairs = [self._event_pair(ctx, i) for i in range(reps)]
        for start, end in pairs:
            self._flush_l2(ctx, stream)
            drv.check(cu.cuEventRecord(start, s), "cuEventRecord")
            launch()
            drv.check(cu.cuEventRecord(end, s), "cuEventRecord")
        drv.check(cu.cuEventSynchronize(pairs[-1][1]), "cuEventSynchronize")
        return statistics.median(self._elapsed(a, b) for a, b in pairs)

    # -- helpers -------------------------------------------------------------------------------------------
    def _event_pair(self, ctx, i: int) -> tuple:
        cu = drv.driver()
        events = self._events.setdefault(ctx.key, [])
        while len(events) < 2 * (i + 1):
            events.append(drv.check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate"))
        return events[2 * i], events[2 * i + 1]

    @staticmethod
    def _elapsed(start, end) -> float:
        cu = drv.driver()
        fn = getattr(cu, "cuEventElapsedTime", None) or getattr(cu, "cuEventElapsedTime_v2")
        return float(drv.check(fn(start, end), "cuEventElapsedTime"))

    def _flush_l2(self, ctx, stream: int) -> None:
        if not self.flush_l2:
            return
        buf = self._flush.get(ctx.key)
        if buf is None:
            cu = drv.driver()
            dev = drv.check(cu.cuCtxGetDevice(), "cuCtxGetDevice")
            l2 = drv.check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
                           "cuDeviceGetAttribute(L2_CACHE_SIZE)")
            size = max(2 * int(l2), _MIN_FLUSH_BYTES)
            buf = self._flush[ctx.key] = (drv.mem_alloc(size), size)
        drv.memset_async(buf[0], buf[1], stream)

    def close(self) -> None:
        """Free the flush buffers and events (also done when the timer is collected)."""
        try:
            cu = drv.driver()
            for ptr, _ in self._flush.values():
                drv.mem_free(ptr)
            for events in self._events.values():
                for e in events:
                    cu.cuEventDestroy(e)
        except Exception:     # at interpreter exit the driver may already be gone; nothing left to free then
            pass
        self._flush.clear()
        self._events.clear()

    def __del__(self):
        if self._flush or self._events:
            self.close()


class WallClockTimer:
    """Median host time of `launch` (for the CPU interpreter, which runs synchronously on the host)."""

    def __init__(self, rep_ms: float = 50.0, min_reps: int = 1, max_reps: int = 20):
        self.rep_ms = rep_ms
        self.min_reps = min_reps
        self.max_reps = max_reps

    def device_name(self, device=None) -> str:
        return "cpu (interpreter)"

    def __call__(self, launch: Callable[[], None], **info) -> float:
        times = []
        budget_end = time.perf_counter() + self.rep_ms / 1e3
        while len(times) < self.max_reps and (len(times) < self.min_reps or time.perf_counter() < budget_end):
            t0 = time.perf_counter()
            launch()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
