"""A `Kernel` reads a call's arguments once: a signature (types, shapes, strides, devices) seen before launches the
kernel an earlier call with it launched (the kernel itself or the shape variant its launch rule chose) with that
call's checked plan, without asking the rule again. What a plan checks per launch (TMA alignment of the data
addresses, scalars assumed positive) still sends a call down the full path. Real launchers over a recording
stand-in for the driver (the GPU measurement is in docs/performance.md, "Launch overhead")."""
from __future__ import annotations

import dataclasses
import warnings

import pytest

from tawa.errors import TawaPerformanceWarning
from tawa.runtime.kernel import Kernel
from tawa.runtime.launcher import param_size_align

from runtime_fakes import FakeDeviceArray, FakeDriver
from test_launcher import BASE, gemm_kernel


class CountingVariants:
    """A shape rule that sends every call to `variant` (None: the kernel itself) and counts how often it is asked."""

    def __init__(self, variant):
        self.variant, self.asked = variant, 0

    def pick(self, args, target, own=None):
        self.asked += 1
        return self.variant


def make(variant=None) -> tuple:
    own = Kernel(gemm_kernel(), shape_variants=None)
    rule = CountingVariants(variant)
    own._shapes = rule
    return own, rule


def call_args(a_ptr=BASE, alpha=1.5):
    return [FakeDeviceArray((300, 200), "bf16", ptr=a_ptr), FakeDeviceArray((200, 504), "bf16", ptr=BASE + 0x100000),
            FakeDeviceArray((300, 504), "f32", ptr=BASE + 0x200000), alpha, 7,
            FakeDeviceArray((4,), "f32", ptr=BASE + 0x300000)]


@pytest.fixture
def fake(monkeypatch):
    return FakeDriver().install(monkeypatch, [param_size_align(p)[0] for p in gemm_kernel().abi])


def test_a_known_signature_launches_the_chosen_variant_without_the_rule(fake):
    variant = Kernel(dataclasses.replace(gemm_kernel(), name="gemm_variant"))
    own, rule = make(variant)
    for _ in range(4):
        own(*call_args())
    assert len(fake.launches) == 4
    assert own._launcher.launches == 0 and variant._launcher.launches == 4
    # the first call takes the full path and asks the rule twice (to launch, then to remember the launcher)
    assert rule.asked == 2
    # other data addresses and scalar values reuse the plan; other shapes take the full path once
    own(*call_args(a_ptr=BASE + 0x400000, alpha=2.5))
    assert rule.asked == 2 and variant._launcher.launches == 5
    changed = call_args()
    changed[0] = FakeDeviceArray((301, 200), "bf16", ptr=BASE)
    changed[2] = FakeDeviceArray((301, 504), "f32", ptr=BASE + 0x200000)
    own(*changed)
    own(*changed)
    assert rule.asked == 4 and variant._launcher.launches == 7
    # the bytes of the last launch are those of the new extents (dims of A along M: 301)
    assert int.from_bytes(fake.launches[-1].params[0][:4], "little") == 301


def test_the_kernel_itself_is_remembered_too(fake):
    own, rule = make(None)
    for _ in range(3):
        own(*call_args())
    assert rule.asked == 2 and own._launcher.launches == 3


def test_an_unaligned_address_on_a_known_signature_takes_the_full_path(fake):
    """The plan rechecks TMA's 16-byte alignment of each data address; an address off it raises before anything
    is launched, and the full path launches the kernel's variant without TMA."""
    kernel = gemm_kernel()
    plain = [dataclasses.replace(p, kind="ptr", box=None, swizzle=0, by_value=True) if p.kind == "tensormap" else p
             for p in kernel.abi]
    without = Kernel(dataclasses.replace(kernel, name="gemm_without_tma", abi=plain))
    own = Kernel(gemm_kernel(), without_tma=lambda: without)
    own(*call_args())
    own(*call_args())
    assert own._launcher.launches == 2
    with pytest.warns(TawaPerformanceWarning, match="without TMA"):
        own(*call_args(a_ptr=BASE + 8))
    assert own._launcher.launches == 2 and without._launcher.launches == 1 and len(fake.launches) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own(*call_args())                     # aligned again: the known plan
    assert own._launcher.launches == 3


def test_keywords_and_wrong_argument_counts_take_the_full_path(fake):
    from tawa.errors import LaunchError
    own, rule = make(None)
    own(*call_args())
    own(*call_args())
    with pytest.raises(LaunchError, match="takes 6 arguments"):
        own(*call_args()[:5])
    own(*call_args(), stream=0)                # (a keyword: the full path, which asks the rule once)
    assert own._launcher.launches == 3 and rule.asked == 4
