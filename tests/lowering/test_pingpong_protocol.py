"""The consumer ping-pong's named-barrier protocol (to_nvvm/ws_consumer_loop.py), simulated: two warp groups run
the same loop; before iteration k's first dot group g waits on barrier g when `pingpong_waits(g, k)`, after
issuing it arrives on barrier 1 - g when `pingpong_arrives(g, k, trips)`. A `bar.sync` of 256 threads completes
once the other group's 128 arrived; a barrier's arrivals must all be consumed by the end (a stray arrival would
complete a later, unrelated sync early). Checked for every trip count up to 9 under random interleavings."""
import random

import pytest

from tawa.lowering.to_nvvm.ws_consumer_loop import pingpong_arrives, pingpong_final_wait, pingpong_waits


def simulate(trips: int, seed: int):
    rng = random.Random(seed)
    pending = [0, 0]          # arrivals on barrier 0 / 1 not yet consumed by a sync
    k = [0, 0]                # next iteration of each group
    stage = ["wait", "wait"]  # where each group stands in its iteration
    order = []                # which group issued its first dot, in order
    final = [pingpong_final_wait(g, trips) for g in (0, 1)]
    while k[0] < trips or k[1] < trips or any(final):
        runnable = []
        for g in (0, 1):
            if k[g] >= trips:
                if final[g] and pending[g]:
                    runnable.append(g)
                continue
            if stage[g] == "wait" and pingpong_waits(g, k[g]) and pending[g] == 0:
                continue      # blocked on its barrier
            runnable.append(g)
        if not runnable:
            raise AssertionError(f"deadlock at iterations {k} with {trips} trips")
        g = rng.choice(runnable)
        if k[g] >= trips:         # the wait after the loop
            pending[g] -= 1
            final[g] = False
            continue
        if stage[g] == "wait":
            if pingpong_waits(g, k[g]):
                pending[g] -= 1
            stage[g] = "issue"
        else:
            order.append(g)
            if pingpong_arrives(g, k[g], trips):
                pending[1 - g] += 1
            stage[g] = "wait"
            k[g] += 1
    return order, pending


@pytest.mark.parametrize("trips", range(0, 10))
def test_no_deadlock_and_no_stray_arrival(trips):
    for seed in range(50):
        order, pending = simulate(trips, seed)
        assert pending == [0, 0], f"stray arrivals {pending} after {trips} trips"
        # the groups alternate strictly: group 0 issues iteration k's first dot before group 1 does, and group 1
        # issues iteration k before group 0 issues iteration k + 1
        assert order == [0, 1] * trips


def test_a_broken_rule_is_caught():
    """The simulation can fail: without group 0's wait after the loop, group 1's last arrival is left over."""
    global pingpong_final_wait
    saved = pingpong_final_wait
    pingpong_final_wait = lambda g, trips: False   # noqa: E731
    try:
        with pytest.raises(AssertionError, match="stray"):
            test_no_deadlock_and_no_stray_arrival(3)
    finally:
        pingpong_final_wait = saved
