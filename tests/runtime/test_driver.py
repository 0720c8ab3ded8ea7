"""Driver-layer behaviour that needs no GPU: error reporting and the sm_90 requirement, against a stand-in
for `cuda.bindings.driver`."""
from __future__ import annotations

import types

import pytest

from tawa.errors import DriverError
from tawa.runtime import driver


class _Err(int):
    pass


def fake_cu(major=9, minor=0, name=b"NVIDIA H100 80GB HBM3"):
    ok = _Err(0)
    attrs = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
                                  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="optin")
    values = {"major": major, "minor": minor, "optin": 232448}
    return types.SimpleNamespace(
        CUdevice_attribute=attrs,
        cuDeviceGetCount=lambda: (ok, 1),
        cuDeviceGet=lambda i: (ok, i),
        cuDeviceGetName=lambda n, dev: (ok, name + b"\0" * 10),
        cuDeviceGetAttribute=lambda attr, dev: (ok, values[attr]),
        cuDevicePrimaryCtxRetain=lambda dev: (ok, 0x5000),
        cuGetErrorName=lambda e: (ok, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (ok, b"invalid argument"),
    )


def test_check_names_the_call_and_the_error(monkeypatch):
    monkeypatch.setattr(driver, "_cu", fake_cu())
    assert driver.check((_Err(0), 5), "cuX") == 5
    assert driver.check((_Err(0), 5, 6), "cuX") == (5, 6)
    assert driver.check((_Err(0),), "cuX") is None
    with pytest.raises(DriverError, match=r"cuTensorMapEncodeTiled failed: CUDA_ERROR_INVALID_VALUE "
                                          r"\(invalid argument\)"):
        driver.check((_Err(1), None), "cuTensorMapEncodeTiled")


def test_hopper_is_required(monkeypatch):
    monkeypatch.setattr(driver, "_cu", fake_cu(8, 0, b"NVIDIA A100"))
    with pytest.raises(DriverError, match=r"sm_90a.*device 0 \(NVIDIA A100\) is sm_80"):
        driver._open_context(0)
    monkeypatch.setattr(driver, "_cu", fake_cu(9, 0))
    ctx = driver._open_context(0)
    assert ctx.name == "NVIDIA H100 80GB HBM3" and ctx.capability == (9, 0) and ctx.shared_optin_limit == 232448


def test_missing_device(monkeypatch):
    monkeypatch.setattr(driver, "_cu", fake_cu())
    with pytest.raises(DriverError, match="device 3 does not exist"):
        driver._open_context(3)


def test_a_clustered_launch_reuses_its_launch_configuration(monkeypatch):
    """Building a CUlaunchConfig through cuda-python costs about as much as the launch: a loop of launches of one
    kernel builds it once per grid, block, shared size, stream and cluster size."""
    built = []

    class Config(types.SimpleNamespace):
        pass

    def config():
        built.append(Config())
        return built[-1]
    cu = fake_cu()
    cu.CUlaunchAttribute = lambda: types.SimpleNamespace(
        value=types.SimpleNamespace(clusterDim=types.SimpleNamespace()))
    cu.CUlaunchAttributeID = types.SimpleNamespace(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION=4)
    cu.CUlaunchConfig = config
    cu.CUstream = lambda s: ("stream", s)
    launched = []
    cu.cuLaunchKernelEx = lambda cfg, fn, params, extra: launched.append(cfg) or (_Err(0),)
    monkeypatch.setattr(driver, "_cu", cu)
    monkeypatch.setattr(driver, "_configs", {})
    fn = types.SimpleNamespace(handle=7)
    for _ in range(3):
        driver.launch(fn, (132, 1, 1), (384, 1, 1), 200000, 0, 1234, cluster=2)
    driver.launch(fn, (132, 1, 1), (384, 1, 1), 200000, 99, 1234, cluster=2)     # another stream
    driver.launch(fn, (66, 1, 1), (384, 1, 1), 200000, 0, 1234, cluster=2)       # another grid
    assert len(built) == 3 and launched[0] is launched[1] is launched[2] is built[0]
    assert built[1].hStream == ("stream", 99) and built[2].gridDimX == 66
    assert (built[0].gridDimX, built[0].blockDimX, built[0].sharedMemBytes) == (132, 384, 200000)
    assert built[0].attrs[0].value.clusterDim.x == 2
