"""Launching a split-K kernel: axis 2 of the grid multiplied by the split, and a workspace of
`workspace_per_tile` bytes per program of the launch grid, allocated zeroed once per context and stream and grown
when a larger grid needs more; stream-K's, one record per CTA; and the tile counter of a kernel with dynamic
tiles."""
from __future__ import annotations

import dataclasses
import struct

import pytest

from tawa.abi import AbiParam
from tawa.errors import LaunchError
from tawa.runtime import driver
from tawa.runtime.launcher import GpuLauncher, param_size_align

from runtime_fakes import FakeDriver
from test_launcher import args, gemm_kernel

PER_TILE = 4096 + 128
SMS = 132


def split_kernel(splits=4, persistent=False):
    k = gemm_kernel()
    abi = [AbiParam("workspace", -1)] + k.abi
    if persistent:
        abi = [AbiParam("grid", -1, axis=a) for a in range(3)] + abi
    return dataclasses.replace(k, abi=abi, split_k=splits, workspace_per_tile=PER_TILE, persistent=persistent)


class Memory:
    """The fake driver's allocations and zero fills, in order."""

    def __init__(self, monkeypatch):
        self.allocs, self.zeroed = [], []
        monkeypatch.setattr(driver, "mem_alloc", self.alloc)
        monkeypatch.setattr(driver, "memset_async", lambda dst, n, stream: self.zeroed.append((dst, n, stream)))
        monkeypatch.setattr(driver, "sm_count", lambda ordinal: SMS)

    def alloc(self, n):
        self.allocs.append(n)
        return 0x500000000000 + 0x10000000 * len(self.allocs)


def _install(monkeypatch, kernel):
    fake = FakeDriver().install(monkeypatch, [param_size_align(p)[0] for p in kernel.abi])
    return fake, Memory(monkeypatch)


def _workspace_param(record, index=0) -> int:
    return struct.unpack("<Q", record.params[index])[0]


def test_grid_axis_2_carries_the_splits_and_the_workspace_is_zeroed_once(monkeypatch):
    fake, mem = _install(monkeypatch, split_kernel())
    launcher = GpuLauncher(split_kernel())
    launcher.launch(args(M=300, N=504))               # 3 x 2 tiles
    record = fake.launches[-1]
    assert record.grid == (3, 2, 4)
    assert mem.allocs == [6 * PER_TILE]
    ptr = _workspace_param(record)
    assert mem.zeroed == [(ptr, 6 * PER_TILE, 0)]
    launcher.launch(args(M=300, N=504))               # the same workspace, not zeroed again
    assert _workspace_param(fake.launches[-1]) == ptr and len(mem.allocs) == 1 and len(mem.zeroed) == 1


def test_a_larger_grid_gets_a_larger_workspace_and_a_stream_its_own(monkeypatch):
    fake, mem = _install(monkeypatch, split_kernel())
    launcher = GpuLauncher(split_kernel())
    launcher.launch(args(M=300, N=504))
    small = _workspace_param(fake.launches[-1])
    launcher.launch(args(M=300, N=504), grid=(3, 2, 5))    # 30 tiles
    assert fake.launches[-1].grid == (3, 2, 20)
    assert mem.allocs == [6 * PER_TILE, 30 * PER_TILE] and _workspace_param(fake.launches[-1]) != small
    launcher.launch(args(M=300, N=504))                      # fits the larger one
    assert len(mem.allocs) == 2
    launcher.launch(args(M=300, N=504), stream=0x1234)
    assert mem.allocs[-1] == 6 * PER_TILE and mem.zeroed[-1][2] == 0x1234


def test_persistent_split_kernel_loops_over_every_split(monkeypatch):
    kernel = split_kernel(splits=3, persistent=True)
    fake, mem = _install(monkeypatch, kernel)
    GpuLauncher(kernel).launch(args(M=4096, N=4096))        # 32 x 16 tiles, 3 splits each
    record = fake.launches[-1]
    assert record.grid == (SMS, 1, 1)
    assert tuple(struct.unpack("<i", record.params[i])[0] for i in range(3)) == (32, 16, 3)
    assert mem.allocs == [32 * 16 * PER_TILE]


def test_split_beyond_the_grid_limit_is_refused(monkeypatch):
    _install(monkeypatch, split_kernel(splits=16))
    with pytest.raises(LaunchError, match="splits K 16 ways"):
        GpuLauncher(split_kernel(splits=16)).launch(args(), grid=(1, 1, 5000))


def test_workspace_parameter_needs_a_split_kernel():
    with pytest.raises(LaunchError, match="split-K"):
        GpuLauncher(dataclasses.replace(split_kernel(), split_k=1))


def test_a_stream_k_workspace_has_one_record_per_cta(monkeypatch):
    """Stream-K's records are the boundaries between CTAs (`tawa.lowering.stream_k`): one per CTA launched, not
    one per program of the grid, and the grid is not multiplied."""
    kernel = dataclasses.replace(split_kernel(splits=1, persistent=True), stream_k=True)
    fake, mem = _install(monkeypatch, kernel)
    launcher = GpuLauncher(kernel)
    launcher.launch(args(M=300, N=504))                      # 3 x 2 tiles: 6 CTAs
    assert fake.launches[-1].grid == (6, 1, 1) and mem.allocs == [6 * PER_TILE]
    launcher.launch(args(M=300, N=504), grid=(20, 10, 1))    # 200 tiles: one CTA per SM
    assert fake.launches[-1].grid == (SMS, 1, 1) and mem.allocs[-1] == SMS * PER_TILE


def dynamic_kernel():
    """A persistent kernel with dynamic tiles: its workspace is one tile counter."""
    k = gemm_kernel()
    abi = [AbiParam("grid", -1, axis=a) for a in range(3)] + [AbiParam("workspace", -1)] + k.abi
    return dataclasses.replace(k, abi=abi, persistent=True, dynamic_tiles=True)


def test_dynamic_tiles_get_one_zeroed_counter_per_stream(monkeypatch):
    """Whatever the grid, the workspace is TILE_COUNTER_BYTES, zeroed when allocated (the kernel leaves its counter
    at zero for the next launch); another stream, whose launches may overlap, gets a counter of its own."""
    from tawa.abi import TILE_COUNTER_BYTES
    kernel = dynamic_kernel()
    fake, mem = _install(monkeypatch, kernel)
    launcher = GpuLauncher(kernel)
    launcher.launch(args(M=4096, N=4096))                   # 32 x 16 tiles
    assert fake.launches[-1].grid == (SMS, 1, 1)
    counter = _workspace_param(fake.launches[-1], 3)
    assert mem.allocs == [TILE_COUNTER_BYTES] and mem.zeroed == [(counter, TILE_COUNTER_BYTES, 0)]
    launcher.launch(args(M=300, N=504))                     # another grid: the same counter, not zeroed again
    assert _workspace_param(fake.launches[-1], 3) == counter and len(mem.zeroed) == 1
    launcher.launch(args(M=300, N=504), stream=0x1234)
    assert mem.allocs == [TILE_COUNTER_BYTES] * 2 and mem.zeroed[-1][1:] == (TILE_COUNTER_BYTES, 0x1234)
    assert _workspace_param(fake.launches[-1], 3) != counter


def test_dynamic_tiles_need_a_persistent_kernel():
    kernel = dynamic_kernel()
    kernel = dataclasses.replace(kernel, abi=[p for p in kernel.abi if p.kind != "grid"], persistent=False)
    with pytest.raises(LaunchError, match="dynamic tiles"):
        GpuLauncher(kernel)
