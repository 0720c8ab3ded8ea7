"""What cuTensorMapEncodeTiled would receive for a tensor argument, and the rules checked before it runs."""
from __future__ import annotations

import pytest

from tawa.errors import LaunchError
from tawa.runtime.tensor_map import TensorMapCache, tensor_map_args


def test_2d_bf16_row_major():
    a = tensor_map_args("bf16", 0x10000, (300, 200), (200, 1), [128, 64], 128, "A")
    assert a.data_type == "BFLOAT16"
    assert a.rank == 2
    assert a.global_address == 0x10000
    assert a.global_dim == (200, 300)            # innermost first
    assert a.global_strides == (400,)            # bytes, outer dims only
    assert a.box_dim == (64, 128)
    assert a.element_strides == (1, 1)
    assert (a.swizzle, a.interleave, a.oob_fill) == ("128B", "NONE", "NONE")
    assert a.l2_promotion in ("L2_128B", "L2_256B")


def test_padded_rows_and_3d():
    # A row-strided view: 37 valid columns out of 40 (160-byte rows).
    a = tensor_map_args("f32", 0x20000, (50, 37), (40, 1), [16, 32], 0, "A")
    assert a.global_dim == (37, 50) and a.global_strides == (160,) and a.box_dim == (32, 16)
    assert a.swizzle == "NONE"
    b = tensor_map_args("f16", 0x20000, (4, 96, 80), (96 * 88, 88, 1), [1, 64, 64], 128, "B")
    assert b.global_dim == (80, 96, 4)
    assert b.global_strides == (176, 96 * 88 * 2)
    assert b.box_dim == (64, 64, 1)


def test_lower_rank_box_reads_leading_dims_with_extent_one():
    a = tensor_map_args("f16", 0, (8, 256, 128), (256 * 128, 128, 1), [64, 64], 128, "A")
    assert a.box_dim == (64, 64, 1)


def test_fp8_and_bool_travel_as_bytes():
    assert tensor_map_args("f8E4M3FN", 0, (64, 256), (256, 1), [64, 128], 128).data_type == "UINT8"
    assert tensor_map_args("f8E5M2", 0, (64, 256), (256, 1), [64, 128], 128).data_type == "UINT8"
    assert tensor_map_args("i1", 0, (64, 256), (256, 1), [64, 16], 0).data_type == "UINT8"
    assert tensor_map_args("i32", 0, (64, 256), (256, 1), [64, 16], 64).data_type == "INT32"


def test_extent_one_dims_get_a_legal_stride():
    # A [1, N] view of a longer buffer may report any stride for its unit dim; TMA never steps along it.
    a = tensor_map_args("f16", 0, (1, 100), (7, 1), [1, 64], 128, "A")
    assert a.global_strides[0] % 16 == 0 and a.global_strides[0] >= 200
    b = tensor_map_args("f32", 0, (3, 1, 8), (8, 99, 1), [1, 1, 8], 0, "B")
    assert all(s % 16 == 0 for s in b.global_strides)


@pytest.mark.parametrize("args, message", [
    (("f32", 0x1004, (64, 64), (64, 1), [16, 32], 0), "not 16-byte aligned"),
    (("f32", 0, (64, 63), (63, 1), [16, 32], 0), "stride of dim 0"),
    (("bf16", 0, (64, 64), (64, 1), [16, 4], 0), "multiple of 16"),
    (("bf16", 0, (64, 128), (128, 1), [16, 128], 128), "exceeds the 128-byte swizzle span"),
    (("bf16", 0, (512, 64), (64, 1), [512, 64], 128), "outside 1..256"),
    (("f32", 0, (64, 64), (64, 1), [16, 32], 48), "swizzle 48"),
    (("f32", 0, (2,) * 6, (1,) * 6, [1] * 6, 0), "rank 1 to 5"),
    (("f32", 0, (64, 64), (64, 1), [1, 16, 32], 0), "does not fit"),
    (("f64", 0, (64, 64), (64, 1), [16, 32], 0), "cannot be copied by TMA"),
    (("f32", 0, (0, 64), (64, 1), [16, 32], 0), "extent 0"),
])
def test_rules(args, message):
    with pytest.raises(LaunchError, match=message) as info:
        tensor_map_args(*args, name="A")
    assert "'A'" in str(info.value)


def test_cache_encodes_once_per_geometry(monkeypatch):
    from tawa.runtime import tensor_map
    calls = []
    monkeypatch.setattr(tensor_map, "encode", lambda args: calls.append(args) or bytes(128))
    c = TensorMapCache(capacity=2)
    get = lambda ptr, shape=(64, 64): c.get(0, "f32", ptr, shape, (64, 1), (16, 32), 0, True, "A")
    assert get(0x1000) == bytes(128)
    get(0x1000)
    assert len(calls) == 1 and c.encodes == 1
    get(0x2000)
    get(0x1000, shape=(32, 64))
    assert c.encodes == 3
    get(0x2000)                              # still cached (capacity 2, recently used)
    assert c.encodes == 3
    get(0x1000)                              # evicted earlier
    assert c.encodes == 4
