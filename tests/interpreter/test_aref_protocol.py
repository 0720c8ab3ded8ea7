"""Aref ring semantics under many interleavings, and every protocol violation the interpreter must catch."""
import numpy as np
import pytest
from interp_kernels import gemm_ws, parse, ring

from tawa.errors import TawaError
from tawa.runtime.interpreter import (ArefProtocolError, InterpreterDeadlock, run_kernel,
                                      run_with_interleavings)

GOOD = ["get", "acc", "consumed"]


def data(n_tiles):
    x = np.random.default_rng(n_tiles).standard_normal(4 * n_tiles).astype(np.float32)
    return x, x.reshape(n_tiles, 4)


@pytest.mark.parametrize("depth,puts", [(1, 5), (2, 5), (3, 2), (4, 1)])
def test_ring_delivers_every_value_in_order(depth, puts):
    x, tiles = data(puts)
    # "acc" before "consumed" is the legal order; test_ring_preserves_order checks the order of delivery.
    runs = run_with_interleavings(parse(ring(depth, puts, [(puts, GOOD)])),
                                  lambda: [x, np.zeros(4, np.float32)], (1,), seeds=range(25))
    for _, y in runs:
        np.testing.assert_allclose(y, tiles.sum(0), rtol=1e-6)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_ring_preserves_order(depth):
    x, tiles = data(7)
    weights = 2.0 ** np.arange(6, -1, -1)  # horner: the first tile is doubled most often
    runs = run_with_interleavings(parse(ring(depth, 7, [(7, ["get", "horner", "consumed"])])),
                                  lambda: [x, np.zeros(4, np.float32)], (1,), seeds=range(25))
    for _, y in runs:
        np.testing.assert_allclose(y, (weights[:, None] * tiles).sum(0), rtol=1e-5)


def test_seeds_give_different_interleavings():
    x, _ = data(6)
    module = parse(ring(2, 6, [(6, GOOD)]))
    traces = set()
    for seed in range(10):
        trace = []
        run_kernel(module, [x, np.zeros(4, np.float32)], (1,), seed=seed, trace=trace)
        traces.add(tuple(trace))
        again = []
        run_kernel(module, [x, np.zeros(4, np.float32)], (1,), seed=seed, trace=again)
        assert again == trace  # a seed is reproducible
    assert len(traces) >= 5


def test_two_consumers_share_a_ring():
    x, tiles = data(8)
    runs = run_with_interleavings(parse(ring(2, 8, [(4, GOOD), (4, GOOD)])),
                                  lambda: [x, np.zeros(8, np.float32)], (1,), seeds=range(25))
    sums = set()
    for _, y in runs:
        np.testing.assert_allclose(y[:4] + y[4:], tiles.sum(0), rtol=1e-5)
        sums.add(tuple(np.round(y[:4], 4)))
    assert len(sums) > 1  # which consumer takes which slot depends on the interleaving


def test_never_consumed_deadlocks_when_ring_is_shallower_than_trip_count():
    a = np.ones((32, 37), np.float32)
    b = np.ones((37, 32), np.float32)
    module = parse(gemm_ws("f32", depth=2, consumed=False))  # 3 K iterations > depth 2
    for seed in range(5):
        with pytest.raises(InterpreterDeadlock) as info:
            run_kernel(module, [a, b, np.zeros((32, 32), np.float32)], (1, 1), seed=seed)
        message = str(info.value)
        assert "aref_put" in message and "aref_get" in message and "borrowed" in message
        assert "producer #0" in message and "consumer #0" in message


def test_get_without_producer_deadlocks():
    x, _ = data(2)
    with pytest.raises(InterpreterDeadlock, match=r"consumer #0 waits in tawa.aref_get.*full slot"):
        run_kernel(parse(ring(2, 2, [(2, GOOD)], producer=False)), [x, np.zeros(4, np.float32)], (1,))


def test_gemm_without_producer_deadlocks():
    a = np.ones((32, 20), np.float32)
    b = np.ones((20, 32), np.float32)
    with pytest.raises(InterpreterDeadlock):
        run_kernel(parse(gemm_ws("f32", producer=False)), [a, b, np.zeros((32, 32), np.float32)], (1, 1))


def test_consumed_without_get():
    x, _ = data(2)
    with pytest.raises(ArefProtocolError, match="consumed without a matching aref_get"):
        run_kernel(parse(ring(2, 2, [(2, ["consumed", "get", "acc"])])), [x, np.zeros(4, np.float32)], (1,))


def test_region_finishing_with_borrowed_slots():
    x, _ = data(2)  # depth 2 covers both puts, so nothing blocks: the consumer simply never releases
    with pytest.raises(ArefProtocolError, match="finished while still borrowing 2 slot"):
        run_kernel(parse(ring(2, 2, [(2, ["get", "acc"])])), [x, np.zeros(4, np.float32)], (1,))


def test_values_left_in_the_ring():
    x, _ = data(3)
    with pytest.raises(ArefProtocolError, match="never taken by aref_get"):
        run_kernel(parse(ring(3, 3, [(2, GOOD)])), [x, np.zeros(4, np.float32)], (1,))


def test_use_after_consumed_is_poisoned():
    """A value read after its slot was released may have been overwritten: the interpreter makes that visible."""
    x, _ = data(3)
    y = np.zeros(4, np.float32)
    run_kernel(parse(ring(2, 3, [(3, ["get", "consumed", "acc"])])), [x, y], (1,))
    assert np.isnan(y).all()


def test_errors_are_tawa_errors_and_name_the_seed():
    x, _ = data(2)
    with pytest.raises(TawaError) as info:
        run_with_interleavings(parse(ring(2, 2, [(2, GOOD)], producer=False)),
                               lambda: [x, np.zeros(4, np.float32)], (1,), seeds=[7])
    assert "interleaving seed 7" in str(info.value)
