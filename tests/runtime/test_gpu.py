"""The runtime on a real Hopper GPU, with hand-written PTX kernels (tests/runtime/ptx_kernels.py): loading PTX
and cubins, packing pointers / dims / strides / scalars, by-value and by-pointer tensor maps read by TMA,
streams, CuPy and DLPack arguments, and argument errors raised before anything is launched."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tawa.errors import LaunchError
from tawa.runtime import tensor_map as tm
from tawa.runtime.launcher import GpuLauncher

import ptx_kernels as K

pytestmark = pytest.mark.gpu


def _gpu_or_skip():
    from tawa.runtime.driver import gpu_available
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    _gpu_or_skip()
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    torch.manual_seed(0)
    return torch


def test_vadd_from_ptx(torch):
    n = 100_003
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.full((n,), float("nan"), device="cuda")
    launcher = GpuLauncher(K.vadd_kernel())
    launcher.launch([a, b, c])
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_vadd_from_cubin(torch, tmp_path):
    ptxas = shutil.which("ptxas") or shutil.which("ptxas", path="/usr/local/cuda/bin")
    if ptxas is None:
        pytest.skip("ptxas not found")
    (tmp_path / "k.ptx").write_text(K.VADD_PTX)
    subprocess.run([ptxas, "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)
    n = 777
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.empty(n, device="cuda")
    GpuLauncher(K.vadd_kernel(cubin=(tmp_path / "k.cubin").read_bytes())).launch([a, b, c])
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_kernel_object_launch(torch):
    from tawa.runtime.kernel import Kernel
    n = 4099
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    k = Kernel(K.vadd_kernel())
    k(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_strides_and_scalars(torch):
    m, n = 77, 301
    base = torch.randn(m, 320, device="cuda")
    x = base[:, 5:5 + n]                              # row stride 320, offset start: no TMA, so no alignment
    y = torch.full((m, n), float("nan"), device="cuda")
    GpuLauncher(K.affine_kernel()).launch([x, y, 1.75, -3])
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 1.75 - 3, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype, box, swizzle", [("bf16", [128, 64], 128), ("f8E4M3FN", [64, 128], 128),
                                                 ("f32", [16, 32], 0)])
def test_tensor_map_bytes_reach_the_kernel(torch, dtype, box, swizzle):
    tdtype = {"bf16": torch.bfloat16, "f8E4M3FN": torch.float8_e4m3fn, "f32": torch.float32}[dtype]
    a = torch.zeros(300, 512, device="cuda").to(tdtype)
    out = torch.zeros(32, dtype=torch.int32, device="cuda")
    GpuLauncher(K.tmap_bytes_kernel(dtype, box, swizzle)).launch([a, out])
    torch.cuda.synchronize()
    expected = tm.encode(tm.tensor_map_args(dtype, a.data_ptr(), tuple(a.shape), a.stride(), box, swizzle))
    assert bytes(out.cpu().numpy().tobytes()) == expected


@pytest.mark.parametrize("by_value", [True, False])
def test_tma_copy_ragged_tensor(torch, by_value):
    m, n = 50, 37
    base = torch.randn(m, 40, device="cuda")
    a = base[:, :n]                                  # padded rows: 160-byte stride, 37 valid columns
    rows, cols = K.BOX
    out = torch.full((-(-m // rows) * rows, -(-n // cols) * cols), float("nan"), device="cuda")
    cache = tm.TensorMapCache()
    launcher = GpuLauncher(K.tma_copy_kernel(by_value), tensor_maps=cache)
    launcher.launch([a, out])
    torch.cuda.synchronize()
    expected = torch.zeros_like(out)
    expected[:m, :n] = a
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    # Again with the same tensors: the map is reused, the result the same.
    out.fill_(float("nan"))
    launcher.launch([a, out])
    torch.cuda.synchronize()
    assert cache.encodes == 1
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_launch_on_torch_stream(torch):
    n = 1 << 20
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.zeros(n, device="cuda")
    launcher = GpuLauncher(K.vadd_kernel())
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launcher.launch([a, b, c])                 # current stream = s
        d = c * 2                                   # ordered after the kernel on s
    s.synchronize()
    torch.testing.assert_close(d, (a + b) * 2, rtol=0, atol=0)
    c.zero_()
    launcher.launch([a, b, c], stream=s)
    s.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_dlpack_only_arguments(torch):
    class DlpackOnly:
        def __init__(self, t):
            self.t = t

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

    n = 1025
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.zeros(n, device="cuda")
    GpuLauncher(K.vadd_kernel()).launch([DlpackOnly(a), DlpackOnly(b), DlpackOnly(c)])
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_cupy_arguments(torch):
    cupy = pytest.importorskip("cupy")
    n = 5000
    a = cupy.random.standard_normal(n, dtype=cupy.float32)
    b = cupy.random.standard_normal(n, dtype=cupy.float32)
    c = cupy.zeros(n, dtype=cupy.float32)
    GpuLauncher(K.vadd_kernel()).launch([a, b, c])
    cupy.cuda.get_current_stream().synchronize()
    assert cupy.array_equal(c, a + b)


def test_errors_before_launch(torch):
    launcher = GpuLauncher(K.tma_copy_kernel(True))
    out = torch.zeros(64, 64, device="cuda")
    good = torch.randn(50, 40, device="cuda")
    with pytest.raises(LaunchError, match=r"argument 'A'.*has dtype f16, expected f32"):
        launcher.launch([good.half(), out])
    with pytest.raises(LaunchError, match=r"argument 'A': stride of dimension 0 is 37 elements"):
        launcher.launch([torch.randn(50, 37, device="cuda"), out])
    with pytest.raises(LaunchError, match=r"argument 'A': its data address"):
        launcher.launch([good.view(-1)[1:1 + 50 * 36].view(50, 36), out])
    with pytest.raises(LaunchError, match=r"argument 'OUT' is a host \(CPU\) array"):
        launcher.launch([good, out.cpu()])
    vadd = GpuLauncher(K.vadd_kernel())
    with pytest.raises(LaunchError, match=r"argument 'B'.*dimension 0 is 9 but N = 10"):
        vadd.launch([torch.zeros(10, device="cuda"), torch.zeros(9, device="cuda"), torch.zeros(10, device="cuda")])
    assert launcher.launches == 0 and vadd.launches == 0


def test_repeated_launch_overhead(torch):
    n = 1024
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    launcher = GpuLauncher(K.tma_copy_kernel(True))
    src, out = torch.randn(64, 64, device="cuda"), torch.zeros(64, 64, device="cuda")
    vadd = GpuLauncher(K.vadd_kernel())
    for k, args in ((vadd, [a, b, c]), (launcher, [src, out])):
        k.launch(args)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(500):
            k.launch(args)
        per_launch = (time.perf_counter() - t0) / 500
        torch.cuda.synchronize()
        print(f"{k.kernel.name}: {per_launch * 1e6:.1f} us per launch (host side)")
        assert per_launch < 200e-6
