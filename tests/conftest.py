"""Shared test setup: the `gpu` marker skips tests when no Hopper GPU is present (reported as skipped)."""
from __future__ import annotations

import functools
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@functools.lru_cache(maxsize=1)
def hopper_gpu_available() -> bool:
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return False
        err, dev = driver.cuDeviceGet(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, major = driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        return err == driver.CUresult.CUDA_SUCCESS and major == 9
    except Exception:
        return False


@pytest.fixture(scope="module")
def cuda_torch():
    """torch, for a test that runs on the GPU through it: skipped unless the CUDA driver and torch both see a GPU;
    seeded."""
    torch = pytest.importorskip("torch")
    from tawa.runtime.driver import gpu_available
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    torch.manual_seed(0)
    return torch


def pytest_collection_modifyitems(config, items):
    # TAWA_PREFILL=1: GPU tests compile their kernels into the cache and skip themselves (tests/e2e/e2e_support.py).
    if hopper_gpu_available() or os.environ.get("TAWA_PREFILL") == "1":
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA Hopper GPU (sm_90)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _verify_each():
    """Every compile in the tests runs the `tawa` verifier after every pass (TAWA_VERIFY_EACH=1, tawa.ir.verify)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TAWA_VERIFY_EACH", "1")
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session compiles into its own cache directory, unless TAWA_TEST_KEEP_CACHE is set (then the
    caller's TAWA_CACHE_DIR, e.g. a cache prefilled with TAWA_PREFILL=1 on a machine with the compiler) or while
    prefilling."""
    if "TAWA_TEST_KEEP_CACHE" not in os.environ and "TAWA_PREFILL" not in os.environ:
        monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tawa-cache"))
