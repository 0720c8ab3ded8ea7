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
    #: Run the `tawa` verifier after every pass (also on with dump_ir_after_all or TAWA_VERIFY_EACH=1).
    verify_each: bool = False

    def cache_key_fields(self) -> dict:
        fields = asdict(self)
        fields.pop("dump_ir_after_all")
        fields.pop("verify_each")
        return fields

    def validate(self) -> "CompileOptions":
        """Check every field, in this one place; raises CompilationError naming the option."""
        from tawa.errors import CompilationError
        from tawa import hopper

        def bad(name, value, want):
            raise CompilationError(f"invalid option {name}={value!r}: expected {want}")

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        if self.target not in ("cuda", "cpu"):
            bad("target", self.target, "'cuda' or 'cpu'")
        if self.warp_specialize not in (None, True, False):
            bad("warp_specialize", self.warp_specialize, "True, False or None (auto)")
        if self.num_consumer_groups is not None and (not is_int(self.num_consumer_groups)
                                                     or self.num_consumer_groups not in (1, 2)):
            bad("num_consumer_groups", self.num_consumer_groups, "1 or 2")
        if self.num_buffers is not None and (not is_int(self.num_buffers) or self.num_buffers < 1):
            bad("num_buffers", self.num_buffers, "a positive integer")
        if not is_int(self.num_stages) or self.num_stages < 1:
            bad("num_stages", self.num_stages, "a positive integer")
        if self.num_warps is not None and (not is_int(self.num_warps) or self.num_warps not in (4, 8)):
            bad("num_warps", self.num_warps, "4 or 8 (one or two warp groups)")
        for name in ("producer_registers", "consumer_registers"):
            v = getattr(self, name)
            if not is_int(v) or v % hopper.SETMAXNREG_STEP or not hopper.SETMAXNREG_MIN <= v <= hopper.SETMAXNREG_MAX:
                bad(name, v, f"a multiple of {hopper.SETMAXNREG_STEP} between {hopper.SETMAXNREG_MIN} and "
                             f"{hopper.SETMAXNREG_MAX} (what setmaxnreg accepts)")
        if not isinstance(self.constants, dict):
            bad("constants", self.constants, "a dict of constant overrides")
        return self

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
