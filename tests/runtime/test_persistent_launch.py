"""Launching a persistent kernel: one CTA per SM at most, on a 1-D grid, with the grid the kernel was written for
passed in its "grid" parameters (from the declared @grid or from kernel[grid])."""
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

SMS = 132


def persistent_kernel():
    k = gemm_kernel()
    return dataclasses.replace(k, persistent=True, abi=[AbiParam("grid", -1, axis=a) for a in range(3)] + k.abi)


@pytest.fixture
def fake(monkeypatch):
    f = FakeDriver().install(monkeypatch, [param_size_align(p)[0] for p in persistent_kernel().abi])
    monkeypatch.setattr(driver, "sm_count", lambda ordinal: SMS)
    return f


def _grid_params(record) -> tuple:
    return tuple(struct.unpack("<i", record.params[i])[0] for i in range(3))


@pytest.mark.parametrize("M,N,tiles", [(300, 504, (3, 2)), (4096, 4096, (32, 16)), (1, 8, (1, 1)),
                                       (128 * 132, 256, (132, 1))])
def test_persistent_grid_is_bounded_by_the_sms(fake, M, N, tiles):
    GpuLauncher(persistent_kernel()).launch(args(M=M, N=N))
    record = fake.launches[-1]
    programs = tiles[0] * tiles[1]
    assert record.grid == (min(programs, SMS), 1, 1)
    assert _grid_params(record) == (*tiles, 1)


@pytest.mark.parametrize("M,N,tiles", [(4096, 4096, (32, 16)), (128 * 132, 256, (132, 1)), (300, 504, (3, 2))])
def test_two_ctas_per_sm_double_the_persistent_grid(fake, M, N, tiles):
    # A kernel sized for two CTAs per SM (ctas_per_sm=2) is launched with two per SM.
    GpuLauncher(dataclasses.replace(persistent_kernel(), ctas_per_sm=2)).launch(args(M=M, N=N))
    record = fake.launches[-1]
    assert record.grid == (min(tiles[0] * tiles[1], 2 * SMS), 1, 1)
    assert _grid_params(record) == (*tiles, 1)


def test_explicit_grid_reaches_the_grid_parameters(fake):
    launcher = GpuLauncher(persistent_kernel())
    launcher.launch(args(), grid=(5, 7, 2))
    assert fake.launches[-1].grid == (70, 1, 1)
    assert _grid_params(fake.launches[-1]) == (5, 7, 2)
    launcher.launch(args(), grid=(5, 7, 2))          # the cached plan packs the same
    assert fake.launches[-1] == fake.launches[-2]


def test_empty_grid_launches_nothing(fake):
    GpuLauncher(persistent_kernel()).launch(args(M=0))
    assert not fake.launches


def test_grid_parameters_need_a_persistent_kernel():
    k = dataclasses.replace(persistent_kernel(), persistent=False)
    with pytest.raises(LaunchError, match="persistent"):
        GpuLauncher(k)


# ---- clusters: launched where the grid divides into them, or where rounding it up costs no wave, as many as the
# device holds at once
def clustered_kernel(dims):
    return dataclasses.replace(persistent_kernel(), cluster=list(dims))


@pytest.mark.parametrize("dims,M,N,cluster,ctas", [
    ((2, 1), 4096, 4096, 2, 132),     # 32 x 16 tiles: pairs along M
    ((2, 1), 300, 504, 2, 8),         # 3 tile rows rounded up to 2 pairs: 8 tiles, still one wave
    ((1, 2), 300, 504, 2, 6),         # 2 tile columns: pairs along N
    ((1, 2), 4096, 4224, 2, 132),     # 17 tile columns rounded up to 18: still 5 waves
    ((1, 2), 128 * 44, 256 * 3, 1, 132),    # 44 x 3 tiles are one wave; a 4th column would cost a second
    ((2, 1), 128 * 17, 256 * 33, 2, 132),   # 17 x 33 tiles: 18 rows fit in the 5th wave's idle slots
    ((2, 1), 256, 128, 2, 2),         # one pair
    ((2, 1), 128 * 134, 128, 2, 132), # 134 tiles: 66 pairs at once
])
def test_clustered_launch(fake, dims, M, N, cluster, ctas):
    GpuLauncher(clustered_kernel(dims)).launch(args(M=M, N=N))
    record = fake.launches[-1]
    assert (record.cluster, record.grid) == (cluster, (ctas, 1, 1))
    assert record.grid[0] % record.cluster == 0


def test_clustered_launch_fits_the_resident_clusters(fake):
    """A GPU whose GPCs hold fewer pairs than SMs / 2: the persistent grid shrinks to what runs at once."""
    fake.resident_clusters[2] = 60
    GpuLauncher(clustered_kernel((2, 1))).launch(args(M=4096, N=4096))
    assert (fake.launches[-1].cluster, fake.launches[-1].grid) == (2, (120, 1, 1))
