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


@dataclass
class FakeContext:
    ordinal: int = 0
    key: int = 0xC0FFEE
    name: str = "fake sm_90"
    shared_optin_limit: int = 227 * 1024


@dataclass
class FakeDriver:
    """Replaces the driver calls the launcher and tensor-map cache make; records launches and encodings."""
    launches: list = field(default_factory=list)
    encoded: list = field(default_factory=list)
    sizes: list = field(default_factory=list)     # parameter sizes of the kernel being launched

    def install(self, monkeypatch, sizes):
        from tawa.runtime import driver, tensor_map
        self.sizes = sizes
        monkeypatch.setattr(driver, "context_for", lambda ordinal=None: FakeContext(ordinal or 0))
        monkeypatch.setattr(driver, "current_context_device", lambda: None)
        monkeypatch.setattr(driver, "load_function", lambda ctx, key, image, entry, shared: ("fn", entry))
        monkeypatch.setattr(driver, "launch", self._launch)
        monkeypatch.setattr(driver, "mem_alloc", lambda n: 0x7E0000000000 + 256 * len(self.encoded))
        monkeypatch.setattr(driver, "memcpy_htod", lambda dst, data: None)
        monkeypatch.setattr(driver, "memset_async", lambda dst, n, stream: None)
        monkeypatch.setattr(tensor_map, "encode", self._encode)
        return self

    def _encode(self, args):
        self.encoded.append(args)
        return hashlib.sha512(repr(args).encode()).digest() * 2

    def _launch(self, fn, grid, block, shared_bytes, stream, params_addr):
        pointers = (ctypes.c_void_p * len(self.sizes)).from_address(params_addr)
        params = [ctypes.string_at(pointers[i], size) for i, size in enumerate(self.sizes)]
        self.launches.append(LaunchRecord(grid, block, shared_bytes, stream, params))


def host(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
