"""Candidate configurations given from Python: how they split into constants and options, compare, and fail."""
from __future__ import annotations

import numpy as np
import pytest

from tawa.autotune import AutotuneError, Config
from tawa.autotune.config import dedupe, parse_configs


def test_constants_and_options_are_split_as_tawa_compile_splits_them():
    options = Config.parse({"BLOCK_M": 64, "num_warps": 8, "warp_specialize": False, "DTYPE": "f16"}).options()
    assert options.constants == {"BLOCK_M": 64, "DTYPE": "f16"}
    assert (options.num_warps, options.warp_specialize, options.target) == (8, False, "cuda")
    assert Config({"num_buffers_warp_spec": 3}).options("cpu").num_buffers == 3      # aliases as in tawa.compile


def test_equality_and_hash_ignore_the_order_of_names():
    a, b = Config({"BLOCK_M": 64, "BLOCK_N": 128}), Config({"BLOCK_N": 128, "BLOCK_M": 64})
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert a != Config({"BLOCK_M": 64, "BLOCK_N": 256})
    assert dedupe([a, Config({"BLOCK_M": 1}), b]) == [a, Config({"BLOCK_M": 1})]
    assert a.label() == "BLOCK_M=64 BLOCK_N=128" and Config({}).label() == "defaults"
    assert a.merged({"BLOCK_N": 32, "DTYPE": "f16"}).as_dict() == {"BLOCK_M": 64, "BLOCK_N": 32, "DTYPE": "f16"}


def test_numpy_scalars_become_plain_json_values():
    c = Config.parse({"BLOCK_M": np.int64(64), "SCALE": np.float32(0.5)})
    assert c.as_dict() == {"BLOCK_M": 64, "SCALE": 0.5}
    assert type(c.get("BLOCK_M")) is int and type(c.get("SCALE")) is float


@pytest.mark.parametrize("configs, message", [
    ([{"BLOCK_M": 64}, {"num_warps": 3}], "configs[1]: invalid option num_warps=3: expected 4 or 8"),
    ([{"target": "cpu"}], "configs[0]: 'target' cannot vary between candidates"),
    ([{"verify_each": True}], "configs[0]: 'verify_each' cannot vary between candidates"),
    ([{"BLOCK_M": [64, 128]}], "configs[0]: value of 'BLOCK_M' is [64, 128]; expected a number"),
    ([{64: 1}], "configs[0]: configuration names are identifiers, got 64"),
    ([["BLOCK_M", 64]], "configs[0]: a configuration is a dict of constants and compile options, got list"),
    ([{"num_buffers": 4, "num_buffers_warp_spec": 2}], "configs[0]: options num_buffers and num_buffers_warp_spec"),
    ([], "configs is empty"),
    ({"BLOCK_M": 64}, "configs is a list of configurations (dicts), got dict"),
])
def test_bad_configurations_name_the_candidate(configs, message):
    with pytest.raises(AutotuneError) as e:
        parse_configs(configs)
    assert message in e.value.message
    assert "Traceback" not in str(e.value)
