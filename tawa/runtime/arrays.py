"""What the GPU launcher needs to know about an array argument, from whichever library made it.

Takes a kernel argument: a PyTorch tensor, anything with `__cuda_array_interface__` (CuPy, Numba, ...), or
anything with `__dlpack__`/`__dlpack_device__`. Gives an `ArrayInfo`: device pointer, shape, strides in elements,
element type in tawa's names (`f32 f16 bf16 f8E4M3FN f8E5M2 i32 i1`; other types keep a descriptive name so an
error can say what was passed), and the device ordinal. Host arrays (NumPy, CPU tensors) give
`ArrayInfo.host = True`, which the launcher turns into a `LaunchError`. PyTorch is never imported here: a tensor
is recognised only if the caller already imported torch.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Optional

from tawa.elements import ELEMENT_BYTES  # noqa: F401  (bytes per element; re-exported for the launcher)
from tawa.errors import LaunchError

#: Untyped element kinds (raw bytes of a known width) and the tawa types they may carry.
_RAW_MATCHES = {"raw16": ("bf16", "f16"), "raw8": ("f8E4M3FN", "f8E5M2")}


@dataclass(frozen=True)
class ArrayInfo:
    ptr: int
    shape: tuple
    strides: tuple              # in elements
    dtype: str
    device: Optional[int]       # CUDA ordinal; None when the producer did not say
    host: bool = False
    source: str = ""            # "torch" | "cuda_array_interface" | "dlpack"


def dtype_matches(actual: str, expected: str) -> bool:
    """True when an argument of element type `actual` may be passed for a parameter of type `expected`."""
    return actual == expected or expected in _RAW_MATCHES.get(actual, ())


def array_info(obj, name: str, stream: Optional[int] = None) -> Optional[ArrayInfo]:
    """Read `obj` as an array, or None when it is not one. `stream` is the launch stream, handed to DLPack
    producers so they can order their pending work before it."""
    if _torch_tensor_type(obj):
        return _from_torch(obj, name)
    try:
        cai = obj.__cuda_array_interface__       # read once: producers build the dictionary on each access
    except AttributeError:
        cai = None
    except Exception as exc:
        raise LaunchError(f"argument '{name}': reading its __cuda_array_interface__ failed: {exc}")
    if cai is not None:
        return from_cuda_array_interface(cai, name)
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name, stream)
    if hasattr(obj, "__array_interface__"):
        ai = obj.__array_interface__
        return ArrayInfo(0, tuple(ai.get("shape", ())), (), _typestr_dtype(ai.get("typestr", ""), None),
                         None, host=True, source="array_interface")
    return None


# -- PyTorch ------------------------------------------------------------------------------------------------------

_TORCH_DTYPES = {
    "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16",
    "torch.float8_e4m3fn": "f8E4M3FN", "torch.float8_e5m2": "f8E5M2", "torch.int32": "i32", "torch.bool": "i1",
}


def _torch_tensor_type(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _from_torch(t, name: str) -> ArrayInfo:
    dtype_name = str(t.dtype)
    dtype = _TORCH_DTYPES.get(dtype_name, dtype_name.replace("torch.", ""))
    dev = t.device
    if dev.type != "cuda":
        return ArrayInfo(0, tuple(t.shape), tuple(t.stride()), dtype, None, host=True, source="torch")
    return ArrayInfo(int(t.data_ptr()), tuple(t.shape), tuple(t.stride()), dtype,
                     dev.index if dev.index is not None else None, source="torch")


# -- __cuda_array_interface__ -------------------------------------------------------------------------------------

_TYPESTR = {"f4": "f32", "f2": "f16", "i4": "i32", "b1": "i1", "V2": "raw16", "V1": "raw8",
            "f8": "f64", "i8": "i64", "i2": "i16", "i1": "i8", "u1": "u8", "u2": "u16", "u4": "u32", "u8": "u64"}
_DESCR_NAMES = {"bfloat16": "bf16", "bf16": "bf16", "float8_e4m3fn": "f8E4M3FN", "e4m3fn": "f8E4M3FN",
                "float8_e5m2": "f8E5M2", "e5m2": "f8E5M2"}


def _typestr_dtype(typestr: str, descr) -> str:
    if not typestr:
        return "unknown"
    if typestr[0] == ">" and typestr[1:] not in ("b1", "i1", "u1", "V1"):
        return f"big-endian {typestr[1:]}"
    dtype = _TYPESTR.get(typestr[1:], typestr)
    if dtype.startswith("raw") and descr:
        # Producers of bf16 / fp8 data (which have no typestr code) may name the type in the first descr field.
        for field in descr:
            label = str(field[0]).lower() if field else ""
            if label in _DESCR_NAMES:
                return _DESCR_NAMES[label]
    return dtype


def from_cuda_array_interface(cai: dict, name: str) -> ArrayInfo:
    """Read a `__cuda_array_interface__` dictionary (version 2 or 3)."""
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr = int(cai["data"][0] or 0)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise LaunchError(f"argument '{name}': malformed __cuda_array_interface__ ({exc!r})")
    if cai.get("mask") is not None:
        raise LaunchError(f"argument '{name}': masked arrays are not supported")
    dtype = _typestr_dtype(typestr, cai.get("descr"))
    try:
        itemsize = int(typestr[2:])
    except ValueError:
        raise LaunchError(f"argument '{name}': unsupported element type '{typestr}'")
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = _row_major(shape)
    else:
        if any(int(s) % itemsize for s in byte_strides):
            raise LaunchError(f"argument '{name}': strides {tuple(byte_strides)} bytes are not a multiple of "
                              f"the element size ({itemsize} bytes)")
        strides = tuple(int(s) // itemsize for s in byte_strides)
    return ArrayInfo(ptr, shape, strides, dtype, None, source="cuda_array_interface")


def _row_major(shape: tuple) -> tuple:
    strides, acc = [], 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= max(int(extent), 1)
    return tuple(reversed(strides))


# -- DLPack -------------------------------------------------------------------------------------------------------

_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (10, 8): "f8E4M3FN", (12, 8): "f8E5M2",
             (0, 32): "i32", (6, 8): "i1", (1, 8): "u8", (0, 8): "i8", (0, 64): "i64", (2, 64): "f64"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def read_dlpack_capsule(capsule, name: str) -> ArrayInfo:
    """Read a DLPack capsule without consuming it: the capsule keeps ownership and frees the managed tensor when
    it is collected (the memory itself stays owned by the exporting array)."""
    if _capsule_is_valid(capsule, b"dltensor"):
        tensor = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor
    elif _capsule_is_valid(capsule, b"dltensor_versioned"):
        tensor = _DLManagedTensorVersioned.from_address(
            _capsule_pointer(capsule, b"dltensor_versioned")).dl_tensor
    else:
        raise LaunchError(f"argument '{name}': __dlpack__ did not return a DLPack capsule")
    dt = tensor.dtype
    if dt.lanes != 1:
        raise LaunchError(f"argument '{name}': vector element types (lanes={dt.lanes}) are not supported")
    dtype = _DL_CODES.get((dt.code, dt.bits), f"dlpack(code={dt.code}, bits={dt.bits})")
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else _row_major(shape)
    ptr = (tensor.data or 0) + tensor.byte_offset
    dev_type, dev_id = tensor.device.device_type, tensor.device.device_id
    host = dev_type not in (_DL_CUDA, _DL_CUDA_MANAGED)
    return ArrayInfo(ptr, shape, strides, dtype, None if host else dev_id, host=host, source="dlpack")


def _from_dlpack(obj, name: str, stream: Optional[int]) -> ArrayInfo:
    try:
        dev_type, dev_id = obj.__dlpack_device__()
    except Exception as exc:
        raise LaunchError(f"argument '{name}': __dlpack_device__ failed: {exc}")
    if int(dev_type) not in (_DL_CUDA, _DL_CUDA_MANAGED):
        return ArrayInfo(0, (), (), "unknown", None, host=True, source="dlpack")
    # DLPack reserves stream 0 (ambiguous); 1 names the legacy default stream.
    dl_stream = 1 if not stream else int(stream)
    try:
        capsule = obj.__dlpack__(stream=dl_stream)
    except TypeError:
        capsule = obj.__dlpack__()
    except Exception as exc:
        raise LaunchError(f"argument '{name}': __dlpack__ failed: {exc}")
    return read_dlpack_capsule(capsule, name)
