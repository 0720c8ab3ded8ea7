"""Reading array arguments: the CUDA array interface, DLPack capsules, host arrays."""
from __future__ import annotations

import numpy as np
import pytest

from tawa.errors import LaunchError
from tawa.runtime.arrays import array_info, dtype_matches, from_cuda_array_interface, read_dlpack_capsule

from runtime_fakes import FakeDeviceArray


def test_cuda_array_interface_contiguous_and_strided():
    info = array_info(FakeDeviceArray((30, 50), "f16", ptr=0x1234500), "A")
    assert (info.ptr, info.shape, info.strides, info.dtype, info.host) == (0x1234500, (30, 50), (50, 1), "f16", False)
    info = array_info(FakeDeviceArray((30, 50), "f32", strides=(64, 1)), "A")
    assert info.strides == (64, 1) and info.dtype == "f32"
    info = array_info(FakeDeviceArray((7,), "i32"), "A")
    assert info.strides == (1,) and info.dtype == "i32"
    assert array_info(FakeDeviceArray((4, 4), "i1"), "A").dtype == "i1"


def test_typestr_names():
    cai = lambda t: {"shape": (2,), "typestr": t, "data": (0, False), "version": 2}
    assert from_cuda_array_interface(cai("<f4"), "x").dtype == "f32"
    assert from_cuda_array_interface(cai("<f8"), "x").dtype == "f64"
    assert from_cuda_array_interface(cai("|u1"), "x").dtype == "u8"
    assert from_cuda_array_interface(cai(">f4"), "x").dtype == "big-endian f4"
    assert from_cuda_array_interface(cai("<V2"), "x").dtype == "raw16"
    named = dict(cai("<V2"), descr=[("bfloat16", "<V2")])
    assert from_cuda_array_interface(named, "x").dtype == "bf16"


def test_untyped_elements_match_types_of_their_width():
    assert dtype_matches("raw16", "bf16") and dtype_matches("raw8", "f8E4M3FN")
    assert not dtype_matches("raw16", "f32") and not dtype_matches("f16", "bf16")


def test_byte_strides_must_be_whole_elements():
    cai = {"shape": (4, 4), "typestr": "<f4", "data": (0, False), "strides": (18, 4), "version": 3}
    with pytest.raises(LaunchError, match="not a multiple of the element size"):
        from_cuda_array_interface(cai, "A")


def test_masked_and_malformed_interfaces():
    with pytest.raises(LaunchError, match="masked"):
        from_cuda_array_interface({"shape": (2,), "typestr": "<f4", "data": (0, False), "mask": object()}, "A")
    with pytest.raises(LaunchError, match="malformed"):
        from_cuda_array_interface({"typestr": "<f4"}, "A")


@pytest.mark.parametrize("dtype, name", [(np.float32, "f32"), (np.float16, "f16"), (np.int32, "i32"),
                                         (np.bool_, "i1")])
def test_dlpack_capsule(dtype, name):
    base = np.zeros((6, 40), dtype=dtype)
    view = base[1:, 2:35]
    capsule = view.__dlpack__()
    info = read_dlpack_capsule(capsule, "A")
    assert info.dtype == name
    assert info.shape == (5, 33)
    assert info.strides == (40, 1)
    assert info.ptr == view.__array_interface__["data"][0]
    assert info.host and info.device is None


def test_host_arrays_are_flagged():
    info = array_info(np.ones((3, 4), np.float32), "A")
    assert info.host


def test_non_arrays():
    assert array_info(3.0, "x") is None
    assert array_info([1, 2, 3], "x") is None


def test_dlpack_device_array_without_interface():
    class DlpackOnly:
        def __init__(self, arr, device):
            self.arr, self.device = arr, device

        def __dlpack_device__(self):
            return self.device

        def __dlpack__(self, stream=None):
            return self.arr.__dlpack__()

    host_info = array_info(DlpackOnly(np.ones(4, np.float32), (1, 0)), "A")
    assert host_info.host
    # A producer that says it is on CUDA device 0: the capsule itself decides (here numpy's, which says CPU).
    arr = np.ones((2, 8), np.float32)
    info = array_info(DlpackOnly(arr, (2, 0)), "A")
    assert info.shape == (2, 8) and info.ptr == arr.ctypes.data


def _capsule(code, bits, shape, strides=None, data=0x7F0000001000, byte_offset=0, device=(2, 1),
             versioned=False):
    """A DLPack capsule built by hand, as a CUDA producer would export it (the structs stay alive on it)."""
    import ctypes

    from tawa.runtime import arrays as A
    n = len(shape)
    shape_arr = (ctypes.c_int64 * n)(*shape)
    strides_arr = (ctypes.c_int64 * n)(*strides) if strides is not None else None
    tensor = A._DLTensor(data, A._DLDevice(*device), n, A._DLDataType(code, bits, 1),
                         ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
                         ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)) if strides_arr else None,
                         byte_offset)
    if versioned:
        managed = A._DLManagedTensorVersioned(1, 0, None, None, 0, tensor)
        name = b"dltensor_versioned"
    else:
        managed = A._DLManagedTensor(tensor, None, None)
        name = b"dltensor"
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    keep = (shape_arr, strides_arr, managed, name)
    return new(ctypes.addressof(managed), name, None), keep


@pytest.mark.parametrize("code, bits, name", [(4, 16, "bf16"), (10, 8, "f8E4M3FN"), (12, 8, "f8E5M2"),
                                              (2, 16, "f16"), (6, 8, "i1"), (0, 32, "i32")])
@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_cuda_capsule(code, bits, name, versioned):
    capsule, keep = _capsule(code, bits, (3, 5, 7), byte_offset=64, versioned=versioned)
    info = read_dlpack_capsule(capsule, "A")
    assert info.dtype == name
    assert info.shape == (3, 5, 7) and info.strides == (35, 7, 1)        # no strides: row-major
    assert info.ptr == 0x7F0000001000 + 64
    assert not info.host and info.device == 1
    capsule, keep = _capsule(code, bits, (4, 6), strides=(16, 1), device=(13, 0), versioned=versioned)
    info = read_dlpack_capsule(capsule, "A")
    assert info.strides == (16, 1) and not info.host and info.device == 0


def test_dlpack_unknown_type_keeps_a_descriptive_name():
    capsule, keep = _capsule(2, 64, (2,))
    assert read_dlpack_capsule(capsule, "A").dtype == "f64"
    capsule, keep = _capsule(5, 64, (2,))
    assert "code=5" in read_dlpack_capsule(capsule, "A").dtype
