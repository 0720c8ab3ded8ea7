"""Several GPUs and streams without a GPU: which device a launch goes to, that it leaves the caller's current
device as it found it, one module load per device, arguments on different devices and streams of another device
refused before anything is launched; and the driver layer's context switching and stream-capture mode, against
stand-ins for `cuda.bindings.driver`."""
from __future__ import annotations

import types

import pytest

from tawa.errors import DriverError, LaunchError
from tawa.runtime import driver
from tawa.runtime.launcher import GpuLauncher, param_size_align
from tawa.runtime.tensor_map import TensorMapCache

from runtime_fakes import FakeDriver, FakeTorchTensor, install_fake_torch
from test_launcher import BASE, gemm_kernel


@pytest.fixture
def fake(monkeypatch):
    sizes = [param_size_align(p)[0] for p in gemm_kernel().abi]
    return FakeDriver().install(monkeypatch, sizes)


@pytest.fixture
def fake_torch(monkeypatch):
    return install_fake_torch(monkeypatch)


def tensors(device=0, M=300, K=200, N=504, **devices):
    """The gemm test kernel's arguments as torch tensors on `device` (per-argument devices by name)."""
    a = dict(A=FakeTorchTensor((M, K), "bf16", ptr=BASE, device=devices.get("A", device)),
             B=FakeTorchTensor((K, N), "bf16", ptr=BASE + 0x100000, device=devices.get("B", device)),
             C=FakeTorchTensor((M, N), "f32", ptr=BASE + 0x200000, device=devices.get("C", device)),
             alpha=1.5, steps=7,
             bias=FakeTorchTensor((4,), "f32", ptr=BASE + 0x300000, device=devices.get("bias", device)))
    return list(a.values())


# -- the launcher ---------------------------------------------------------------------------------------------

def test_arguments_on_gpu1_launch_on_gpu1_and_leave_gpu0_current(fake, fake_torch):
    fake.current = 0                                   # the caller's (torch's) current device
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    launcher.launch(tensors(device=1))
    assert fake.launch_devices == [1]                  # launched with GPU 1's context current
    assert fake.launches[0].stream == 0x5001           # on torch's current stream of GPU 1
    assert fake_torch == [1]
    assert fake.current == 0 and fake.switches == 2    # switched for the launch, then back


def test_module_loaded_once_per_device(fake, fake_torch):
    fake.current = 0
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    for device in (0, 1, 0, 1, 1):
        launcher.launch(tensors(device=device))
    assert fake.loads == [(0, "gemm"), (1, "gemm")]
    assert fake.launch_devices == [0, 1, 0, 1, 1]
    assert fake.current == 0


def test_tensor_maps_are_encoded_per_device(fake, fake_torch):
    cache = TensorMapCache()
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=cache)
    launcher.launch(tensors(device=0))
    launcher.launch(tensors(device=1))                 # the same addresses on another device
    launcher.launch(tensors(device=1))
    assert cache.encodes == 4                          # A and B, once per device


@pytest.mark.parametrize("other", ["B", "C", "bias"])
def test_arguments_on_different_gpus_are_refused_by_name(fake, fake_torch, other):
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=rf"argument '{other}' is on GPU 1 but 'A' is on GPU 0; all arguments "
                                          r"must be on one device"):
        launcher.launch(tensors(device=0, **{other: 1}))
    assert fake.launches == [] and fake.loads == []


def test_stream_of_another_gpu_is_refused(fake, fake_torch):
    fake.current = 0
    fake.stream_devices = {0xAAAA: 0, 0xBBBB: 1}
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(LaunchError, match=r"the stream 0xaaaa belongs to GPU 0, but the arguments \('A', 'B', "
                                          r"'C', 'bias'\) are on GPU 1") as err:
        launcher.launch(tensors(device=1), stream=0xAAAA)
    assert "torch.cuda.Stream(device=1)" in err.value.note
    assert fake.launches == [] and fake.current == 0  # nothing launched, the caller's device restored
    launcher.launch(tensors(device=1), stream=0xBBBB)
    assert fake.launches[-1].stream == 0xBBBB and fake.launch_devices == [1]


def test_streams_are_checked_once_and_special_handles_not_at_all(fake, fake_torch, monkeypatch):
    asked = []
    real = driver.stream_context
    monkeypatch.setattr(driver, "stream_context", lambda s: asked.append(s) or real(s))
    fake.stream_devices = {0xBBBB: 1}
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    for stream in (0xBBBB, 0xBBBB, 0, 1, 2):
        launcher.launch(tensors(device=1), stream=stream)
    assert asked == [0xBBBB]
    assert [r.stream for r in fake.launches] == [0xBBBB, 0xBBBB, 0, 1, 2]


def test_current_device_restored_when_the_launch_fails(fake, fake_torch, monkeypatch):
    fake.current = 0

    def failing(*a):
        raise DriverError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    monkeypatch.setattr(driver, "launch", failing)
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    with pytest.raises(DriverError, match="OUT_OF_RESOURCES"):
        launcher.launch(tensors(device=1))
    assert fake.current == 0


def test_arrays_without_a_device_use_the_current_context(fake):
    from runtime_fakes import FakeDeviceArray
    fake.current = 1                                   # e.g. CuPy's current device
    launcher = GpuLauncher(gemm_kernel(), tensor_maps=TensorMapCache())
    args = [FakeDeviceArray((300, 200), "bf16", ptr=BASE), FakeDeviceArray((200, 504), "bf16", ptr=BASE + 0x100000),
            FakeDeviceArray((300, 504), "f32", ptr=BASE + 0x200000), 1.5, 7,
            FakeDeviceArray((4,), "f32", ptr=BASE + 0x300000)]
    launcher.launch(args)
    fake.current = 0
    launcher.launch(args)                              # the same plan, read again per launch
    assert fake.launch_devices == [1, 0] and fake.loads == [(1, "gemm"), (0, "gemm")]


# -- the driver layer -----------------------------------------------------------------------------------------

class _Ok(int):
    pass


class _FakeCu:
    """A stand-in for `cuda.bindings.driver` with one thread's current context and capture mode."""

    def __init__(self):
        self.current = 0                               # handle of the current context (0: none)
        self.mode = "global"
        self.calls = []                                # (call, capture mode at the time)
        self.CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED="relaxed")
        self.CUcontext = lambda h: h
        self.CUstream = lambda s: s
        self.CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="smem",
                                                          CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT="carve")
        self.CUshared_carveout = types.SimpleNamespace(CU_SHAREDMEM_CARVEOUT_MAX_SHARED=100)
        self.stream_owner = {}

    def _log(self, name):
        self.calls.append((name, self.mode))

    def cuCtxGetCurrent(self):
        return _Ok(0), (self.current or None)

    def cuCtxSetCurrent(self, handle):
        self._log("cuCtxSetCurrent")
        self.current = int(handle or 0)
        return (_Ok(0),)

    def cuThreadExchangeStreamCaptureMode(self, mode):
        previous, self.mode = self.mode, mode
        return _Ok(0), previous

    def cuModuleLoadDataEx(self, data, n, opts, vals):
        self._log("cuModuleLoadDataEx")
        return _Ok(0), "module"

    def cuModuleGetFunction(self, module, name):
        return _Ok(0), "function"

    def cuFuncSetAttribute(self, fn, attr, value):
        self._log("cuFuncSetAttribute")
        return (_Ok(0),)

    def cuMemAlloc(self, n):
        self._log("cuMemAlloc")
        return _Ok(0), 0x1000

    def cuStreamGetCtx(self, stream):
        return _Ok(0), self.stream_owner[stream]


@pytest.fixture
def cu(monkeypatch):
    fake_cu = _FakeCu()
    monkeypatch.setattr(driver, "_cu", fake_cu)
    contexts = {i: driver.Context(i, 0x5000 + i, 0x5000 + i, f"gpu{i}", (9, 0), 232448) for i in range(2)}
    monkeypatch.setattr(driver, "_contexts", contexts)
    monkeypatch.setattr(driver, "_functions", {})
    return fake_cu


def test_enter_context_switches_only_when_needed(cu):
    cu.current = 0x5000
    ctx, previous = driver.enter_context(0)
    assert ctx.ordinal == 0 and previous is None and cu.calls == []
    ctx, previous = driver.enter_context(1)
    assert ctx.ordinal == 1 and cu.current == 0x5001 and previous == 0x5000
    driver.restore_context(previous)
    assert cu.current == 0x5000


def test_enter_context_with_none_current(cu):
    cu.current = 0
    ctx, previous = driver.enter_context(0)            # device 0 is what the runtime would pick: left current
    assert previous is None and cu.current == 0x5000
    cu.current = 0
    ctx, previous = driver.enter_context(1)            # device 1 is not: no context current again afterwards
    assert previous is not None and cu.current == 0x5001
    driver.restore_context(previous)
    assert cu.current == 0


def test_module_loads_and_allocations_run_in_relaxed_capture_mode(cu):
    fn = driver.load_function(driver._contexts[1], "key", b"\x7fELF cubin", "k", 100 * 1024)
    assert fn.handle == "function" and fn.shared_bytes == 100 * 1024
    assert driver.mem_alloc(256) == 0x1000
    # (two attributes: the dynamic shared memory, and the carveout that gives the SM's memory to shared memory)
    assert cu.calls == [("cuModuleLoadDataEx", "relaxed"), ("cuFuncSetAttribute", "relaxed"),
                        ("cuFuncSetAttribute", "relaxed"), ("cuMemAlloc", "relaxed")]
    assert cu.mode == "global"                         # the thread's mode is given back


def test_relaxed_capture_restores_the_mode_after_an_error(cu):
    with pytest.raises(RuntimeError):
        with driver.relaxed_capture():
            assert cu.mode == "relaxed"
            raise RuntimeError("boom")
    assert cu.mode == "global"


def test_stream_context_and_its_device(cu):
    cu.stream_owner = {0xABC: 0x5001, 0xDEF: 0x9999}
    assert driver.stream_context(0xABC) == 0x5001 and driver.context_device(0x5001) == 1
    assert driver.context_device(driver.stream_context(0xDEF)) is None
