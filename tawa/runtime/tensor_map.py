"""TMA tensor maps: the 128-byte `CUtensorMap` descriptors a kernel's `cp.async.bulk.tensor` copies read.

Takes an argument's element type, device address, shape and strides (outermost first, strides in elements, as
PyTorch reports them) and the backend's box and swizzle; gives the descriptor bytes (for a by-value kernel
parameter) or the device address of a copy of them (for a by-pointer parameter).

`tensor_map_args` is the pure part: it turns those into exactly what `cuTensorMapEncodeTiled` takes (dims
innermost first, the rank-1 outer strides in bytes, unit element strides, no interleave, 256-byte L2 promotion,
out-of-bounds elements filled with zeros) and checks the driver's rules first, so a bad argument gives a
`LaunchError` naming it instead of a bare CUDA_ERROR_INVALID_VALUE. `TensorMapCache` encodes once per distinct
(device, address, geometry, box, swizzle): a repeated launch on the same tensors does no encoding.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from tawa import hopper
from tawa.errors import LaunchError, TmaAlignmentError
from tawa.runtime.arrays import ELEMENT_BYTES

#: cuTensorMapEncodeTiled data type per tawa element type; fp8 and bool travel as raw bytes.
TMA_DATA_TYPE = {"f32": "FLOAT32", "f16": "FLOAT16", "bf16": "BFLOAT16", "f8E4M3FN": "UINT8",
                 "f8E5M2": "UINT8", "i32": "INT32", "i1": "UINT8"}
_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
TENSOR_MAP_BYTES = 128
MAX_RANK = 5


@dataclass(frozen=True)
class TensorMapArgs:
    """The arguments of one cuTensorMapEncodeTiled call (enum members by their short names)."""
    data_type: str
    rank: int
    global_address: int
    global_dim: tuple           # innermost first
    global_strides: tuple       # bytes, dims 1 .. rank-1, innermost first
    box_dim: tuple              # innermost first
    element_strides: tuple
    swizzle: str
    interleave: str = "NONE"
    l2_promotion: str = "L2_256B"
    oob_fill: str = "NONE"      # NONE fills out-of-bounds elements with zeros


def tensor_map_args(dtype: str, ptr: int, shape, strides, box, swizzle: int, name: str = "?") -> TensorMapArgs:
    """Check and convert one tensor's geometry (outermost-first `shape`, `strides` in elements, `box`) into the
    arguments of cuTensorMapEncodeTiled. Raises `LaunchError` naming argument `name` on any violated rule."""
    if dtype not in TMA_DATA_TYPE:
        raise LaunchError(f"argument '{name}': element type {dtype} cannot be copied by TMA")
    if swizzle not in _SWIZZLE:
        raise LaunchError(f"argument '{name}': swizzle {swizzle} is not one of 0, 32, 64, 128")
    esize = ELEMENT_BYTES[dtype]
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise LaunchError(f"argument '{name}': TMA copies tensors of rank 1 to {MAX_RANK}, not {rank}")
    box = [int(b) for b in box]
    if len(box) > rank:
        raise LaunchError(f"argument '{name}': a {len(box)}-d tile box does not fit a rank-{rank} tensor")
    # A tile of lower rank reads the leading dims with extent 1 (docs/ir.md, tawa.load).
    box = [1] * (rank - len(box)) + box
    if ptr % hopper.TMA_ALIGN_BYTES:
        raise TmaAlignmentError(f"argument '{name}': its data address 0x{ptr:x} is not 16-byte aligned, as TMA "
                                "needs",
                          note="pass a tensor whose storage offset keeps it 16-byte aligned (or copy it)")
    for axis, b in enumerate(box):
        if not 1 <= b <= hopper.TMA_BOX_MAX:
            raise LaunchError(f"argument '{name}': tile box extent {b} (dim {axis}) is outside 1..{hopper.TMA_BOX_MAX}")
    inner_bytes = box[-1] * esize
    if inner_bytes % hopper.TMA_ALIGN_BYTES:
        raise LaunchError(f"argument '{name}': the tile's innermost extent is {inner_bytes} bytes; TMA needs a "
                          "multiple of 16")
    if swizzle and inner_bytes > swizzle:
        raise LaunchError(f"argument '{name}': the tile's innermost extent ({inner_bytes} bytes) exceeds the "
                          f"{swizzle}-byte swizzle span")
    dims = [int(s) for s in shape]
    for axis, extent in enumerate(dims):
        if extent < 1 or extent > 1 << 32:
            raise LaunchError(f"argument '{name}': dim {axis} has extent {extent}; TMA needs 1..2^32")
    byte_strides = []
    # Outer strides innermost first. A dim of extent 1 is never stepped, so its stride is free: use a legal one.
    for axis in range(rank - 2, -1, -1):
        stride = int(strides[axis]) * esize
        if dims[axis] == 1:
            inner = byte_strides[-1] * dims[axis + 1] if byte_strides else dims[-1] * esize
            stride = -(-max(inner, 16) // 16) * 16
        if stride <= 0 or stride % hopper.TMA_ALIGN_BYTES:
            raise TmaAlignmentError(f"argument '{name}': stride of dim {axis} is {int(strides[axis])} elements "
                              f"({stride} bytes); TMA needs a positive multiple of 16 bytes",
                              note="pad the row length so each row starts 16-byte aligned, or pass a "
                                   "contiguous copy")
        if stride >= 1 << 40:
            raise LaunchError(f"argument '{name}': stride of dim {axis} ({stride} bytes) is 2^40 or more")
        byte_strides.append(stride)
    return TensorMapArgs(
        data_type=TMA_DATA_TYPE[dtype], rank=rank, global_address=int(ptr),
        global_dim=tuple(reversed(dims)), global_strides=tuple(byte_strides), box_dim=tuple(reversed(box)),
        element_strides=(1,) * rank, swizzle=_SWIZZLE[swizzle])


def encode(args: TensorMapArgs) -> bytes:
    """Run cuTensorMapEncodeTiled; gives the 128 descriptor bytes."""
    import ctypes

    from tawa.runtime import driver as drv
    cu = drv.driver()
    tmap = drv.check(cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{args.data_type}"),
        args.rank,
        args.global_address,
        [cu.cuuint64_t(d) for d in args.global_dim],
        [cu.cuuint64_t(s) for s in args.global_strides],
        [cu.cuuint32_t(b) for b in args.box_dim],
        [cu.cuuint32_t(e) for e in args.element_strides],
        getattr(cu.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{args.interleave}"),
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{args.swizzle}"),
        getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{args.l2_promotion}"),
        getattr(cu.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{args.oob_fill}"),
    ), f"cuTensorMapEncodeTiled({args})")
    return ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)


@dataclass
class _Entry:
    data: bytes
    device_copy: Optional[int] = None   # device address of a copy of `data` (by-pointer parameters)


class Geometry:
    """Everything a tensor map depends on but the address: (dtype, shape, strides, box, swizzle). Interned by
    `TensorMapCache.geometry`, hashed by identity, so a per-launch lookup key is (geometry, device, address) and
    costs a few pointer hashes instead of hashing nested tuples."""
    __slots__ = ("dtype", "shape", "strides", "box", "swizzle")

    def __init__(self, dtype: str, shape: tuple, strides: tuple, box: tuple, swizzle: int):
        self.dtype, self.shape, self.strides, self.box, self.swizzle = dtype, shape, strides, box, swizzle

    def __repr__(self) -> str:
        return f"Geometry({self.dtype}, {self.shape}, {self.strides}, box={self.box}, swizzle={self.swizzle})"


class TensorMapCache:
    """Encoded tensor maps by (device, dtype, address, shape, strides, box, swizzle), least recently used first
    out. Device copies made for by-pointer parameters are freed when their entry leaves."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self._entries: OrderedDict = OrderedDict()   # (Geometry, device, address) -> _Entry
        self._geometries: dict = {}                  # (dtype, shape, strides, box, swizzle) -> Geometry
        self.encodes = 0                 # how many maps were encoded (a cache miss each)

    def geometry(self, dtype: str, shape, strides, box, swizzle: int) -> Geometry:
        """The interned `Geometry` for these values (equal values give the same object while it is interned)."""
        key = (dtype, tuple(shape), tuple(strides), tuple(box), swizzle)
        geom = self._geometries.get(key)
        if geom is None:
            if len(self._geometries) >= 4 * self.capacity:
                # Entries keyed by dropped geometries stay valid; they simply age out of the LRU.
                self._geometries.clear()
            geom = self._geometries[key] = Geometry(*key)
        return geom

    def contains(self, key: tuple) -> bool:
        device, dtype, ptr, shape, strides, box, swizzle = key
        geom = self._geometries.get((dtype, tuple(shape), tuple(strides), tuple(box), swizzle))
        return geom is not None and (geom, device, ptr) in self._entries

    def get(self, device: int, dtype: str, ptr: int, shape: tuple, strides: tuple, box: tuple, swizzle: int,
            by_value: bool, name: str):
        """The descriptor bytes (by_value) or the device address of a copy of them; encodes on a miss (the
        device's context must be current)."""
        return self.lookup(self.geometry(dtype, shape, strides, box, swizzle), device, ptr, by_value, name)

    def lookup(self, geom: Geometry, device: int, ptr: int, by_value: bool, name: str):
        """`get` for an interned geometry: the launcher's per-launch path."""
        key = (geom, device, ptr)
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(encode(tensor_map_args(geom.dtype, ptr, geom.shape, geom.strides, geom.box,
                                                  geom.swizzle, name)))
            self.encodes += 1
            self._entries[key] = entry
            while len(self._entries) > self.capacity:
                self._release(self._entries.popitem(last=False)[1])
        else:
            self._entries.move_to_end(key)
        if by_value:
            return entry.data
        if entry.device_copy is None:
            from tawa.runtime import driver as drv
            entry.device_copy = drv.mem_alloc(TENSOR_MAP_BYTES)
            drv.memcpy_htod(entry.device_copy, entry.data)
        return entry.device_copy

    def clear(self) -> None:
        while self._entries:
            self._release(self._entries.popitem()[1])

    @staticmethod
    def _release(entry: _Entry) -> None:
        if entry.device_copy is not None:
            from tawa.runtime import driver as drv
            try:
                # A launch still queued may read the copy: wait for the device before freeing it.
                drv.synchronize()
                drv.mem_free(entry.device_copy)
            except Exception:
                pass
            entry.device_copy = None


#: The process-wide cache the launchers share.
default_cache = TensorMapCache()
