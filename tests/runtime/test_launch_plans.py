"""The launcher's per-signature plans: a launch whose argument signature (array types, dtypes, shapes, strides,
devices; scalar types; grid) was seen before skips the full checks but must pack exactly what the full path packs
and must still raise every error the full path raises."""
from __future__ import annotations

import struct

import pytest

from tawa.errors import LaunchError
from tawa.runtime.launcher import GpuLauncher
from tawa.runtime.tensor_map import TensorMapCache

from runtime_fakes import FakeDeviceArray, FakeTorchTensor, install_fake_torch
from test_launcher import BASE, args, fake, gemm_kernel  # noqa: F401  (fake is a fixture)


def _cold(kernel, cache, a, **kw):
    """Launch through a fresh launcher, so every check and every derived value is computed from scratch."""
    GpuLauncher(kernel, tensor_maps=cache).launch(a, **kw)


ARG_SETS = [
    dict(),
    dict(M=256, K=64, N=512),
    dict(alpha=-0.75, steps=-3),
    dict(A=FakeDeviceArray((300, 200), "bf16", ptr=BASE + 0x4000)),          # same signature, new address
    dict(C=FakeDeviceArray((300, 504), "f32", strides=(512, 1), ptr=BASE + 0x900004)),
    dict(steps=5, alpha=3),                                                    # an int for f32: another type
    dict(),                                                                    # back to the first signature
    dict(M=1, K=8, N=8),
]


@pytest.mark.parametrize("by_value", [True, False])
def test_cached_plans_pack_what_the_full_path_packs(fake, by_value):
    kernel = gemm_kernel(by_value)
    cache = TensorMapCache()
    warm = GpuLauncher(kernel, tensor_maps=cache)
    from tawa.runtime.launcher import param_size_align
    fake.sizes = [param_size_align(p)[0] for p in warm.abi]
    for round_ in range(2):                       # the second round hits the plans made by the first
        for change in ARG_SETS:
            a = args(**change)
            warm.launch(a)
            _cold(kernel, cache, a)
            hot, cold = fake.launches[-2], fake.launches[-1]
            assert hot == cold, change
    assert len(warm._plans) == 5                  # five distinct signatures among the argument sets
    assert warm.launches == 2 * len(ARG_SETS)


def test_new_addresses_reuse_the_plan_but_not_the_tensor_map(fake, monkeypatch):
    cache = TensorMapCache()
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=cache)
    launcher.launch(args())
    encodes = cache.encodes

    def fail(*x):
        raise AssertionError("arguments re-checked for a known signature")
    monkeypatch.setattr(launcher, "_bind", fail)
    a = args(A=FakeDeviceArray((300, 200), "bf16", ptr=BASE + 0x10000))
    launcher.launch(a)
    assert cache.encodes == encodes + 1           # A's map is encoded for its new address; B's is reused
    assert fake.encoded[-1].global_address == BASE + 0x10000
    assert fake.launches[-1].params[1] == fake._encode(fake.encoded[-1])
    assert len(launcher._plans) == 1


def _error(launcher, a, **kw) -> str:
    with pytest.raises(LaunchError) as info:
        launcher.launch(a, **kw)
    return str(info.value)


@pytest.mark.parametrize("change", [
    dict(A=FakeDeviceArray((300, 200), "f16", ptr=BASE)),                      # dtype
    dict(B=FakeDeviceArray((201, 504), "bf16", ptr=BASE)),                     # shape (symbol mismatch)
    dict(bias=FakeDeviceArray((5,), "f32", ptr=BASE)),                         # shape (fixed extent)
    dict(A=FakeDeviceArray((300, 200), "bf16", strides=(203, 1), ptr=BASE)),   # TMA stride
    dict(A=FakeDeviceArray((300, 200), "bf16", ptr=BASE + 2)),                 # misaligned, same signature
    dict(B=FakeDeviceArray((200, 504), "bf16", ptr=BASE + 0x100008)),          # misaligned, same signature
    dict(steps=2**31),                                                         # i32 range, same signature
    dict(steps=-2**31 - 1),
    dict(steps="7"),                                                           # scalar type
    dict(A=3.0),
])
@pytest.mark.parametrize("grid", [None, (0,)])
def test_errors_survive_the_plan_cache(fake, change, grid):
    kernel = gemm_kernel()
    expected = _error(GpuLauncher(kernel, tensor_maps=TensorMapCache()), args(**change), grid=grid)
    launcher = GpuLauncher(kernel, tensor_maps=TensorMapCache())
    launcher.launch(args(), grid=grid)            # warm: the good signature has a plan
    launched = len(fake.launches)
    assert _error(launcher, args(**change), grid=grid) == expected
    assert _error(launcher, args(**change), grid=grid) == expected        # and again: errors are not cached
    assert len(fake.launches) == launched
    launcher.launch(args(), grid=grid)            # the good plan still works
    assert len(fake.launches) == launched + (grid is None)


def test_misaligned_pointer_only_arguments_still_launch(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args())
    launcher.launch(args(C=FakeDeviceArray((300, 504), "f32", ptr=BASE + 0x200004)))
    assert struct.unpack("<Q", fake.launches[-1].params[3])[0] == BASE + 0x200004


def test_empty_tensor_plan_reuses_scratch(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(K=0))
    launcher.launch(args(K=0))
    assert len(fake.launches) == 2 and fake.launches[0].params == fake.launches[1].params
    assert len(fake.encoded) == 2                 # the scratch map for A and for B, encoded once each


# -- torch tensors, read directly (data_ptr, shape, stride, dtype, device) -------------------------------------

@pytest.fixture
def fake_torch(monkeypatch):
    return install_fake_torch(monkeypatch)


def _torch_args(M=300, K=200, N=504, **over):
    a = dict(A=FakeTorchTensor((M, K), "bf16", ptr=BASE), B=FakeTorchTensor((K, N), "bf16", ptr=BASE + 0x100000),
             C=FakeTorchTensor((M, N), "f32", ptr=BASE + 0x200000), alpha=1.5, steps=7,
             bias=FakeTorchTensor((4,), "f32", ptr=BASE + 0x300000))
    a.update(over)
    return list(a.values())


def test_torch_tensors_fast_path(fake, fake_torch):
    cache = TensorMapCache()
    kernel = gemm_kernel()
    warm = GpuLauncher(kernel, tensor_maps=cache)
    for over in (dict(), dict(A=FakeTorchTensor((300, 200), "bf16", ptr=BASE + 0x40)), dict(M=64), dict()):
        a = _torch_args(**over)
        warm.launch(a)
        _cold(kernel, cache, a)
        assert fake.launches[-2] == fake.launches[-1]
        assert fake.launches[-1].stream == 0x5000           # torch's current stream on device 0
    assert _error(warm, _torch_args(A=FakeTorchTensor((300, 200), "bf16", ptr=BASE + 8))) == \
        _error(GpuLauncher(kernel, tensor_maps=cache), _torch_args(A=FakeTorchTensor((300, 200), "bf16", ptr=BASE + 8)))
    assert "16-byte aligned" in _error(warm, _torch_args(A=FakeTorchTensor((300, 200), "bf16", ptr=BASE + 8)))
    assert "host (CPU) array" in _error(warm, _torch_args(C=FakeTorchTensor((300, 504), "f32", ptr=BASE, device=None)))
    assert "has dtype f16" in _error(warm, _torch_args(A=FakeTorchTensor((300, 200), "f16", ptr=BASE)))
    assert "on GPU 1" in _error(warm, _torch_args(C=FakeTorchTensor((300, 504), "f32", ptr=BASE, device=1)))
