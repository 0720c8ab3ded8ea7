"""Streams and several GPUs on real hardware, with the hand-written PTX kernels (tests/runtime/ptx_kernels.py):
a launch is ordered with torch work on a non-default stream (current or passed explicitly), arguments on cuda:1
launch on device 1 with the module loaded there while torch's current device stays 0, tensor maps are encoded
per device, and arguments or streams of different devices are refused before anything is launched. The two-GPU
tests skip, saying why, on a machine with one."""
from __future__ import annotations

import pytest

from tawa.errors import LaunchError
from tawa.runtime import tensor_map as tm
from tawa.runtime.launcher import GpuLauncher

import ptx_kernels as K

pytestmark = pytest.mark.gpu

#: GPU clock cycles torch.cuda._sleep spins for: tens of milliseconds, far longer than the launch takes to reach
#: the GPU, so work queued on another stream would run before the sleeping stream's next op.
SLEEP_CYCLES = 50_000_000


@pytest.fixture(scope="module")
def torch(cuda_torch):
    return cuda_torch


@pytest.fixture
def two_gpus(torch):
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {count}")
    return torch


def test_launch_is_ordered_with_torch_on_the_current_stream(torch):
    n = 1 << 22
    src, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    a, c = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    launcher = GpuLauncher(K.vadd_kernel())
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)            # the stream is busy; the default stream is idle
        a.copy_(src)
        launcher.launch([a, b, c])                 # no stream given: torch's current stream, s
        d = c * 2
    s.synchronize()
    torch.testing.assert_close(d, (src + b) * 2, rtol=0, atol=0)


def test_launch_is_ordered_on_an_explicit_stream(torch):
    from tawa.runtime.kernel import Kernel
    n = 1 << 22
    src, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    a, c = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    kernel = Kernel(K.vadd_kernel())
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
        a.copy_(src)
    kernel(a, b, c, stream=s)                      # current stream: the default one; the launch goes to s
    with torch.cuda.stream(s):
        d = c * 2
    s.synchronize()
    torch.testing.assert_close(d, (src + b) * 2, rtol=0, atol=0)
    # The control: the same launch on the (idle) default stream overtakes the sleeping stream's copy.
    a.zero_()
    c.fill_(-1.0)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
        a.copy_(src)
    kernel(a, b, c, stream=torch.cuda.default_stream())
    torch.cuda.default_stream().synchronize()
    torch.testing.assert_close(c, b, rtol=0, atol=0)  # read a before the copy: zeros
    s.synchronize()


def test_arguments_on_the_second_gpu(two_gpus):
    torch = two_gpus
    torch.cuda.set_device(0)
    n = 100_003
    launcher = GpuLauncher(K.vadd_kernel())
    for device in ("cuda:1", "cuda:0", "cuda:1"):
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        c = torch.full((n,), float("nan"), device=device)
        launcher.launch([a, b, c])
        torch.cuda.synchronize(device)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
        assert torch.cuda.current_device() == 0    # the launch left the caller's device alone
        assert torch.empty(1, device="cuda").device.index == 0
    assert len(launcher._functions) == 2           # one module per device, loaded once each


def test_tensor_maps_on_the_second_gpu(two_gpus):
    torch = two_gpus
    m, n = 50, 37
    cache = tm.TensorMapCache()
    launcher = GpuLauncher(K.tma_copy_kernel(True), tensor_maps=cache)
    rows, cols = K.BOX
    for device in ("cuda:1", "cuda:0"):
        a = torch.randn(m, 40, device=device)[:, :n]
        out = torch.full((-(-m // rows) * rows, -(-n // cols) * cols), float("nan"), device=device)
        launcher.launch([a, out])
        torch.cuda.synchronize(device)
        expected = torch.zeros_like(out)
        expected[:m, :n] = a
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert cache.encodes == 2


def test_second_gpu_follows_its_own_current_stream(two_gpus):
    torch = two_gpus
    n = 1 << 22
    dev = torch.device("cuda:1")
    src, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    a, c = torch.zeros(n, device=dev), torch.zeros(n, device=dev)
    torch.cuda.synchronize(dev)
    launcher = GpuLauncher(K.vadd_kernel())
    s1 = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(s1):                    # also makes device 1 torch's current device here
        torch.cuda._sleep(SLEEP_CYCLES)
        a.copy_(src)
        launcher.launch([a, b, c])
        d = c * 2
    s1.synchronize()
    torch.testing.assert_close(d, (src + b) * 2, rtol=0, atol=0)
    launcher.launch([a, b, c], stream=s1)          # an explicit stream of device 1: accepted
    s1.synchronize()


def test_different_devices_are_refused(two_gpus):
    torch = two_gpus
    launcher = GpuLauncher(K.vadd_kernel())
    a, b = torch.randn(64, device="cuda:0"), torch.randn(64, device="cuda:1")
    c = torch.zeros(64, device="cuda:0")
    with pytest.raises(LaunchError, match=r"argument 'B' is on GPU 1 but 'A' is on GPU 0; all arguments must be "
                                          r"on one device"):
        launcher.launch([a, b, c])
    s0 = torch.cuda.Stream(device="cuda:0")
    a1, c1 = a.to("cuda:1"), c.to("cuda:1")
    with pytest.raises(LaunchError, match=r"the stream 0x[0-9a-f]+ belongs to GPU 0, but the arguments \('A', "
                                          r"'B', 'C'\) are on GPU 1"):
        launcher.launch([a1, b, c1], stream=s0)
    assert launcher.launches == 0
    assert torch.cuda.current_device() == 0
