"""Compile options: what a user may set in `tawa.compile(...)` or on the `tawac` command line."""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Optional


@dataclass
class CompileOptions:
    #: "cuda" (sm_90a PTX/cubin) or "cpu" (the interpreter).
    target: str = "cuda"
    #: None: specialize where it applies; True/False force either path (`--warp-specialize on|off`).
    warp_specialize: Optional[bool] = None
    #: Consumer warp groups in a specialized kernel (1 or 2).
    num_consumer_groups: Optional[int] = None
    #: Aref ring depth (also accepted as `num_buffers_warp_spec`); None: chosen from shared-memory capacity.
    num_buffers: Optional[int] = None
    #: Loads in flight in the uniform-warp software pipeline.
    num_stages: int = 3
    #: Warps per program on the uniform-warp path (4 = one warp group).
    num_warps: Optional[int] = None
    #: setmaxnreg budgets of a specialized kernel.
    producer_registers: int = 40
    consumer_registers: int = 232
    #: Compile-time constants (overrides of the kernel's `const` defaults).
    constants: dict = field(default_factory=dict)
    #: Print the IR after every pass (to stderr).
    dump_ir_after_all: bool = False

    def cache_key_fields(self) -> dict:
        fields = asdict(self)
        fields.pop("dump_ir_after_all")
        return fields

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> "CompileOptions":
        """Split `tawa.compile` keyword arguments into options and kernel constants."""
        kwargs = dict(kwargs)
        if "num_buffers_warp_spec" in kwargs:
            kwargs["num_buffers"] = kwargs.pop("num_buffers_warp_spec")
        names = {f for f in cls.__dataclass_fields__ if f != "constants"}
        opts = cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})
        opts.constants = dict(kwargs)
        return opts
