"""Test doubles: device arrays that exist only as `__cuda_array_interface__` dictionaries, and a recording
stand-in for the CUDA driver, so argument checks and parameter packing run on machines without a GPU."""
from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field

import numpy as np

_TYPESTR = {"f32": "<f4", "f16": "<f2", "i32": "<i4", "i1": "|b1", "bf16": "<V2", "f8E4M3FN": "|V1",
            "f8E5M2": "|V1", "f64": "<f8"}
_ITEMSIZE = {"f32": 4, "f16": 2, "i32": 4, "i1": 1, "bf16": 2, "f8E4M3FN": 1, "f8E5M2": 1, "f64": 8}


class FakeDeviceArray:
    """An array that claims to live at `ptr` in GPU memory (nothing is ever read from it)."""

    def __init__(self, shape, dtype="f32", strides=None, ptr=0x7F0000000000, descr=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.itemsize = _ITEMSIZE[dtype]
        self.elem_strides = tuple(strides) if strides is not None else None
        self.ptr = ptr
        self.descr = descr

    @property
    def __cuda_array_interface__(self):
        d = {"shape": self.shape, "typestr": _TYPESTR[self.dtype], "data": (self.ptr, False), "version": 3,
             "strides": None if self.elem_strides is None else tuple(s * self.itemsize for s in self.elem_strides)}
        if self.descr is not None:
            d["descr"] = self.descr
        return d


@dataclass
class LaunchRecord:
    grid: tuple
    block: tuple
    shared_bytes: int
    stream: int
    params: list            # bytes of each parameter, in ABI order
    cluster: int = 1        # CTAs per thread-block cluster


@dataclass
class FakeContext:
    ordinal: int = 0
    key: int = 0xC0FFEE
    name: str = "fake sm_90"
    shared_optin_limit: int = 227 * 1024


def fake_context(ordinal: int) -> FakeContext:
    """Device `ordinal`'s stand-in primary context (a distinct key per device)."""
    return FakeContext(ordinal, 0xC0FFEE + 0x100 * ordinal)


@dataclass
class FakeDriver:
    """Replaces the driver calls the launcher and tensor-map cache make; records launches and encodings.

    It also keeps a current context per process (`current`, a device ordinal or None) as the real driver keeps
    one per thread, records each module load (`loads`: (device, entry)) and the device whose context was current
    at each launch (`launch_devices`), and knows which device each stream belongs to (`stream_devices`)."""
    launches: list = field(default_factory=list)
    encoded: list = field(default_factory=list)
    sizes: list = field(default_factory=list)     # parameter sizes of the kernel being launched
    current: object = None                        # the device whose context is current, or None
    loads: list = field(default_factory=list)
    launch_devices: list = field(default_factory=list)
    stream_devices: dict = field(default_factory=dict)
    #: Clusters the fake device holds at once, for each cluster size (`max_active_clusters`); SMs / size if unset.
    resident_clusters: dict = field(default_factory=dict)
    switches: int = 0                             # context changes made by launches (entering and restoring)

    def install(self, monkeypatch, sizes):
        from tawa.runtime import driver, tensor_map
        self.sizes = sizes
        monkeypatch.setattr(driver, "context_for", lambda ordinal=None: fake_context(ordinal or 0))
        monkeypatch.setattr(driver, "current_context_device", lambda: self.current)
        monkeypatch.setattr(driver, "enter_context", self._enter_context)
        monkeypatch.setattr(driver, "restore_context", self._restore_context)
        monkeypatch.setattr(driver, "stream_context", self._stream_context)
        monkeypatch.setattr(driver, "context_device", lambda key: (key - 0xC0FFEE) // 0x100)
        monkeypatch.setattr(driver, "load_function", self._load_function)
        monkeypatch.setattr(driver, "launch", self._launch)
        monkeypatch.setattr(driver, "max_active_clusters",
                            lambda fn, grid, block, shared, n: self.resident_clusters.get(n, 132 // n))
        monkeypatch.setattr(driver, "mem_alloc", lambda n: 0x7E0000000000 + 256 * len(self.encoded))
        monkeypatch.setattr(driver, "memcpy_htod", lambda dst, data: None)
        monkeypatch.setattr(driver, "memset_async", lambda dst, n, stream: None)
        monkeypatch.setattr(tensor_map, "encode", self._encode)
        return self

    def _enter_context(self, ordinal):
        previous = self.current
        if previous == ordinal or (previous is None and ordinal == 0):
            self.current = ordinal
            return fake_context(ordinal), None
        self.current = ordinal
        self.switches += 1
        return fake_context(ordinal), ("restore", previous)

    def _restore_context(self, previous):
        self.switches += 1
        self.current = previous[1]

    def _stream_context(self, stream):
        return fake_context(self.stream_devices.get(stream, 0)).key

    def _load_function(self, ctx, key, image, entry, shared):
        self.loads.append((ctx.ordinal, entry))
        return ("fn", entry, ctx.ordinal)

    def _encode(self, args):
        self.encoded.append(args)
        return hashlib.sha512(repr(args).encode()).digest() * 2

    def _launch(self, fn, grid, block, shared_bytes, stream, params_addr, cluster=1):
        pointers = (ctypes.c_void_p * len(self.sizes)).from_address(params_addr)
        params = [ctypes.string_at(pointers[i], size) for i, size in enumerate(self.sizes)]
        self.launches.append(LaunchRecord(grid, block, shared_bytes, stream, params, cluster))
        self.launch_devices.append(self.current)


def host(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# -- torch tensors without torch ----------------------------------------------------------------------------------

class _FakeTorchDevice:
    def __init__(self, index):
        self.type, self.index = ("cuda", index) if index is not None else ("cpu", None)


class FakeTorchTensor:
    """What the launcher reads from a torch tensor (data_ptr, shape, stride, dtype, device), on GPU `device`
    (None: a CPU tensor), row-major unless `strides` are given."""
    _DTYPES = {"bf16": "torch.bfloat16", "f32": "torch.float32", "f16": "torch.float16"}

    def __init__(self, shape, dtype="f32", ptr=0x7F0000000000, device=0, strides=None):
        self.shape, self._ptr, self._index = tuple(shape), ptr, device
        self.dtype = self._DTYPES[dtype]
        acc, st = 1, []
        for extent in reversed(self.shape):
            st.append(acc)
            acc *= max(extent, 1)
        self._strides = tuple(strides) if strides else tuple(reversed(st))

    is_cuda = property(lambda self: self._index is not None)
    device = property(lambda self: _FakeTorchDevice(self._index))

    def get_device(self):
        return -1 if self._index is None else self._index

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides


def install_fake_torch(monkeypatch) -> list:
    """Make `FakeTorchTensor` the `torch.Tensor` the launcher sees. torch's current stream on device d reads as
    0x5000 + d; the returned list records the devices whose current stream was asked for."""
    import sys
    import types
    asked = []
    torch = types.ModuleType("torch")
    torch.Tensor = FakeTorchTensor
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: asked.append(dev) or 0x5000 + dev)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return asked
