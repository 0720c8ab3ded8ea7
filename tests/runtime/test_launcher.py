"""The launcher without a GPU: argument checks (raised before any driver call), grid evaluation, tensor-map
reuse and the exact bytes handed to cuLaunchKernel, through a recording stand-in for the driver."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tawa.errors import LaunchError
from tawa.abi import AbiParam, CompiledKernel
from tawa.runtime.launcher import GpuLauncher, pack_params, param_layout, param_size_align
from tawa.runtime.tensor_map import TensorMapCache

from runtime_fakes import FakeDeviceArray, FakeDriver

BASE = 0x7F0000000000


def gemm_kernel(by_value=True) -> CompiledKernel:
    return CompiledKernel(
        name="gemm", target="cuda",
        params=[{"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]},
                {"name": "B", "kind": "tensor", "dtype": "bf16", "shape": ["K", "N"]},
                {"name": "C", "kind": "tensor", "dtype": "f32", "shape": ["M", "N"]},
                {"name": "alpha", "kind": "scalar", "dtype": "f32"},
                {"name": "steps", "kind": "scalar", "dtype": "i32"},
                {"name": "bias", "kind": "tensor", "dtype": "f32", "shape": [4]}],
        grid=["cdiv(M, BM)", "cdiv(N, BN)"], constants={"BM": 128, "BN": 256},
        abi=[AbiParam("dim", 0, axis=0),
             AbiParam("tensormap", 0, box=[128, 64], swizzle=128, by_value=by_value),
             AbiParam("tensormap", 1, box=[64, 64], swizzle=128, by_value=by_value),
             AbiParam("ptr", 2), AbiParam("stride", 2, axis=0), AbiParam("dim", 1, axis=1),
             AbiParam("scalar", 3, dtype="f32"), AbiParam("scalar", 4, dtype="i32"), AbiParam("ptr", 5)],
        num_threads=384, shared_bytes=200 * 1024, ptx="// not loaded by the fake driver")


def args(M=300, K=200, N=504, **over):
    a = dict(A=FakeDeviceArray((M, K), "bf16", ptr=BASE),
             B=FakeDeviceArray((K, N), "bf16", ptr=BASE + 0x100000),
             C=FakeDeviceArray((M, N), "f32", ptr=BASE + 0x200000),
             alpha=1.5, steps=7, bias=FakeDeviceArray((4,), "f32", ptr=BASE + 0x300000))
    a.update(over)
    return list(a.values())


@pytest.fixture
def fake(monkeypatch):
    layout_sizes = [param_size_align(p)[0] for p in gemm_kernel().abi]
    return FakeDriver().install(monkeypatch, layout_sizes)


def test_layout_offsets_and_alignment():
    abi = gemm_kernel().abi
    offsets, total = param_layout(abi)
    # dim@0, tensormaps aligned to 64, ptr / stride to 8, 4-byte scalars packed, last ptr aligned to 8.
    assert offsets == [0, 64, 192, 320, 328, 336, 340, 344, 352]
    assert total == 360
    assert param_size_align(AbiParam("tensormap", 0, by_value=True)) == (128, 64)
    assert param_size_align(AbiParam("tensormap", 0, by_value=False)) == (8, 8)
    ptr_abi = gemm_kernel(by_value=False).abi
    assert param_layout(ptr_abi) == ([0, 8, 16, 24, 32, 40, 44, 48, 56], 64)


def test_pack_params_bytes():
    abi = [AbiParam("dim", 0, axis=0), AbiParam("tensormap", 0, by_value=True), AbiParam("stride", 0, axis=0),
           AbiParam("scalar", 1, dtype="f32"), AbiParam("scalar", 2, dtype="i32"), AbiParam("ptr", 0)]
    tmap = bytes(range(128))
    buf = pack_params(abi, [77, tmap, -3, 0.5, -9, 0xDEADBEEF00])
    assert len(buf) == 216
    assert struct.unpack_from("<i", buf, 0)[0] == 77
    assert buf[64:192] == tmap
    assert struct.unpack_from("<q", buf, 192)[0] == -3
    assert struct.unpack_from("<f", buf, 200)[0] == 0.5
    assert struct.unpack_from("<i", buf, 204)[0] == -9
    assert struct.unpack_from("<Q", buf, 208)[0] == 0xDEADBEEF00


def test_launch_passes_each_parameter(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args())
    (rec,) = fake.launches
    assert rec.grid == (3, 2, 1)                     # cdiv(300, 128), cdiv(504, 256)
    assert rec.block == (384, 1, 1) and rec.shared_bytes == 200 * 1024 and rec.stream == 0
    p = rec.params
    assert struct.unpack("<i", p[0])[0] == 300
    a_map, b_map = fake.encoded
    assert a_map.global_dim == (200, 300) and a_map.global_strides == (400,) and a_map.box_dim == (64, 128)
    assert a_map.global_address == BASE and a_map.data_type == "BFLOAT16" and a_map.swizzle == "128B"
    assert b_map.global_dim == (504, 200) and b_map.global_strides == (1008,) and b_map.box_dim == (64, 64)
    assert p[1] == fake._encode(a_map) and p[2] == fake._encode(b_map)
    assert struct.unpack("<Q", p[3])[0] == BASE + 0x200000
    assert struct.unpack("<q", p[4])[0] == 504
    assert struct.unpack("<i", p[5])[0] == 504
    assert struct.unpack("<f", p[6])[0] == 1.5
    assert struct.unpack("<i", p[7])[0] == 7
    assert struct.unpack("<Q", p[8])[0] == BASE + 0x300000


def test_repeated_launch_reuses_tensor_maps(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    a = args()
    launcher.launch(a)
    launcher.launch(a)
    assert len(fake.encoded) == 2 and len(fake.launches) == 2
    launcher.launch(args(M=256))                    # A changes shape, B does not
    assert len(fake.encoded) == 3


def test_tensor_maps_by_pointer(fake):
    launcher = GpuLauncher(gemm_kernel(by_value=False), tensor_maps=TensorMapCache())
    fake.sizes = [param_size_align(p)[0] for p in launcher.abi]
    launcher.launch(args())
    p = fake.launches[0].params
    assert len(p[1]) == 8 and struct.unpack("<Q", p[1])[0] != 0
    assert struct.unpack("<Q", p[1])[0] != struct.unpack("<Q", p[2])[0]


def test_explicit_grid_and_stream(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(), grid=(5,), stream=1234)
    assert fake.launches[0].grid == (5, 1, 1) and fake.launches[0].stream == 1234

    class Stream:
        cuda_stream = 99
    launcher.launch(args(), grid=7, stream=Stream())
    assert fake.launches[1].grid == (7, 1, 1) and fake.launches[1].stream == 99


def test_empty_grid_does_not_launch(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(M=0))
    launcher.launch(args(), grid=(4, 0))
    assert fake.launches == [] and fake.encoded == []


def test_empty_tensor_uses_scratch_map(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(K=0))
    assert len(fake.launches) == 1
    a_map = fake.encoded[0]
    assert a_map.global_dim == (1, 1) and a_map.global_address != BASE


def test_untyped_two_byte_arrays_pass_as_bf16(fake):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    a = args()
    a[0] = FakeDeviceArray((300, 200), "bf16", ptr=BASE)          # typestr <V2, no descr
    launcher.launch(a)
    assert len(fake.launches) == 1


# -- errors, all raised before the driver is touched ---------------------------------------------------------------

@pytest.fixture
def no_driver(monkeypatch):
    from tawa.runtime import driver

    def fail(*a, **k):
        raise AssertionError("the driver was used before the arguments were checked")
    for name in ("driver", "context_for", "load_function", "launch", "current_context_device", "mem_alloc"):
        monkeypatch.setattr(driver, name, fail)


def test_extents_past_32_bits_are_refused_in_tensor_maps_too(no_driver):
    """K reaches this kernel only inside A's and B's tensor maps (no `dim` entry): an extent past 2**31 - 1 is
    refused all the same, as the kernel's tile coordinates are 32-bit."""
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"argument 'A': dimension 1 has 2147483776 elements"):
        launcher.launch(args(K=2**31 + 128))


def test_a_broadcast_view_is_refused_where_the_kernel_writes(no_driver):
    kernel = gemm_kernel()
    kernel.params[2]["written"] = True
    launcher = GpuLauncher(kernel, tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"argument 'C' is written by the kernel, but its dimension 0 has stride 0"):
        launcher.launch(args(C=FakeDeviceArray((300, 504), "f32", strides=(0, 1), ptr=BASE + 0x200000)))


def test_an_overlapping_view_is_refused_where_the_kernel_writes(no_driver):
    """Rows 8 elements apart over rows of 504: row 1 starts at element 8 of row 0."""
    kernel = gemm_kernel()
    kernel.params[2]["written"] = True
    launcher = GpuLauncher(kernel, tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"argument 'C' is written by the kernel, but its elements overlap: index 8 "
                                          r"along dimension 1 \(stride 1\) and index 1 along dimension 0 \(stride 8\)"):
        launcher.launch(args(C=FakeDeviceArray((300, 504), "f32", strides=(8, 1), ptr=BASE + 0x200000)))


def test_a_broadcast_view_is_accepted_where_the_kernel_reads(fake):
    """(The same C as above, in a kernel that does not mark it written: read as given.)"""
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(C=FakeDeviceArray((300, 504), "f32", strides=(0, 1), ptr=BASE + 0x200000)))
    assert len(fake.launches) == 1


def test_refusals_come_before_the_tma_rules(no_driver):
    """A written broadcast view on rows TMA cannot copy: the refusal, not the TMA breach (which would only switch
    to the variant without TMA)."""
    kernel = gemm_kernel()
    kernel.params[2]["written"] = True
    launcher = GpuLauncher(kernel, tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"argument 'C' is written by the kernel"):
        launcher.launch(args(A=FakeDeviceArray((300, 200), "bf16", strides=(203, 1), ptr=BASE),
                             C=FakeDeviceArray((300, 504), "f32", strides=(0, 1), ptr=BASE + 0x200000)))


def test_requires_is_checked_before_the_driver(no_driver):
    kernel = gemm_kernel()
    kernel.requires = [{"condition": "K % 32 == 0", "source": "@requires(K % 32 == 0)", "line": 3},
                       {"condition": "M <= N // 8", "source": "@requires(M <= N // 8)", "line": 3}]
    launcher = GpuLauncher(kernel, tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"requires K % 32 == 0, but K = 208 \(the @requires on line 3\)"):
        launcher.launch(args(K=208))
    with pytest.raises(LaunchError, match=r"requires M <= N // 8, but M = 300, N = 504"):
        launcher.launch(args(K=224))


@pytest.mark.parametrize("stream, message", [
    (1.5, r"cannot use the float 1.5 as a CUDA stream"), (True, r"cannot use the bool True"),
    (-1, r"stream handle -1 is not a CUDA stream"), (2**64, r"stream handle 18446744073709551616"),
    (np.float32(1.5), r"cannot use the float32 1.5"), (np.True_, r"cannot use the bool"),
    (np.int64(-1), r"stream handle -1 is not a CUDA stream"),
])
def test_bad_stream_values(no_driver, stream, message):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=message):
        launcher.launch(args(), stream=stream)


def test_a_stream_the_driver_does_not_know_is_a_launch_error(fake, monkeypatch):
    from tawa.errors import DriverError
    from tawa.runtime import driver

    def unknown(stream):
        raise DriverError("cuStreamGetCtx failed: CUDA_ERROR_INVALID_HANDLE")
    monkeypatch.setattr(driver, "stream_context", unknown)
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"0xdead is not a CUDA stream the driver knows"):
        launcher.launch(args(), stream=0xDEAD)
    assert fake.launches == []


@pytest.mark.parametrize("change, message", [
    (dict(A=FakeDeviceArray((300, 200), "f16", ptr=BASE)), r"argument 'A'.*has dtype f16, expected bf16"),
    (dict(B=FakeDeviceArray((201, 504), "bf16", ptr=BASE)),
     r"argument 'B'.*dimension 0 is 201 but K = 200 from argument 'A' dimension 1"),
    (dict(C=FakeDeviceArray((300, 499), "f32", ptr=BASE)), r"argument 'C'.*dimension 1 is 499 but N = 504"),
    (dict(bias=FakeDeviceArray((5,), "f32", ptr=BASE)), r"argument 'bias'.*dimension 0 is 5, expected 4"),
    (dict(A=FakeDeviceArray((300, 200, 1), "bf16", ptr=BASE)), r"argument 'A'.*3 dimensions"),
    (dict(A=FakeDeviceArray((300, 200), "bf16", strides=(1, 300), ptr=BASE)),
     r"argument 'A'.*contiguous innermost dimension"),
    (dict(A=FakeDeviceArray((300, 200), "bf16", strides=(203, 1), ptr=BASE)),
     r"argument 'A': stride of dimension 0 is 203 elements \(406 bytes\)"),
    (dict(A=FakeDeviceArray((300, 200), "bf16", ptr=BASE + 2)), r"argument 'A': its data address .* 16-byte"),
    (dict(A=np.zeros((300, 200), np.float32)), r"argument 'A' is a host \(CPU\) array"),
    (dict(A=3.0), r"argument 'A'.*must be an array, got float"),
    (dict(alpha=FakeDeviceArray((1,), "f32")), r"argument 'alpha'.*must be a scalar"),
    (dict(alpha="x"), r"argument 'alpha'.*must be a f32 scalar, got str"),
    (dict(steps=2.5), r"argument 'steps'.*must be a i32 scalar, got float"),
    (dict(steps=2**31), r"argument 'steps'.*does not fit in i32"),
    (dict(alpha=1e300), r"argument 'alpha'.*does not fit in f32"),
    (dict(alpha=-2.0 ** 200), r"argument 'alpha'.*does not fit in f32"),
])
def test_argument_errors(no_driver, change, message):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=message):
        launcher.launch(args(**change))


def test_pointer_only_arguments_need_no_tma_alignment(fake):
    # C is passed as a pointer and a stride: an odd row stride is the kernel's business, not TMA's.
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(args(C=FakeDeviceArray((300, 504), "f32", strides=(505, 1), ptr=BASE + 4)))
    assert struct.unpack("<q", fake.launches[0].params[4])[0] == 505


def test_wrong_argument_count(no_driver):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"takes 6 arguments \(A, B, C, alpha, steps, bias\), got 2"):
        launcher.launch(args()[:2])


def test_bad_grids(no_driver):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match="1 to 3 integers"):
        launcher.launch(args(), grid=(1, 2, 3, 4))
    with pytest.raises(LaunchError, match="outside 0..65535"):
        launcher.launch(args(), grid=(1, 70000))


def test_kernels_that_cannot_launch_on_a_gpu():
    with pytest.raises(LaunchError, match="target 'cpu'"):
        GpuLauncher(CompiledKernel("k", "cpu", [], ["1"], {}))
    with pytest.raises(LaunchError, match="neither a cubin nor PTX"):
        GpuLauncher(CompiledKernel("k", "cuda", [], ["1"], {}))


def test_repeated_launch_skips_rechecking_but_not_scalars(fake, monkeypatch):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    a = args()
    launcher.launch(a)

    def fail(*x):
        raise AssertionError("arguments re-checked on an identical launch")
    monkeypatch.setattr(launcher, "_bind", fail)
    a[3], a[4] = -2.25, 11
    launcher.launch(a)
    p = fake.launches[1].params
    assert struct.unpack("<f", p[6])[0] == -2.25 and struct.unpack("<i", p[7])[0] == 11
    a[4] = 2**31                                     # same type, out of range: still an error
    with pytest.raises(LaunchError, match="does not fit in i32"):
        launcher.launch(a)
    a[4], a[3] = 11, 1e39                             # likewise a float beyond f32 (infinity passes as given)
    with pytest.raises(LaunchError, match="does not fit in f32"):
        launcher.launch(a)
    a[3] = float("inf")
    launcher.launch(a)
    a[3] = 3.4028235e38                               # FLT_MAX as C writes it: finite in f32
    launcher.launch(a)
    monkeypatch.undo()
    fake.install(monkeypatch, fake.sizes)
    a[4] = "7"                                       # another type: a new signature, checked again
    with pytest.raises(LaunchError, match=r"argument 'steps'.*must be a i32 scalar, got str"):
        launcher.launch(a)
