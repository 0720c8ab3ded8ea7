"""One candidate configuration: kernel `const` overrides and compile options, as `tawa.compile` takes them.

    {"BLOCK_M": 128, "BLOCK_N": 256, "warp_specialize": True, "num_buffers": 4}

A name that is a `CompileOptions` field (or alias) is a compile option; any other name overrides a `const`
parameter. Why a class rather than the dict: candidates are compared, deduplicated, hashed into the identity of a
tuning run and written to JSON, so each needs one canonical form (`key()`), and a bad value must be reported when
the candidate list is given, naming the candidate, not later in the middle of a tuning run.
"""
from __future__ import annotations

import json
import numbers
from typing import Optional

from tawa.errors import CompilationError
from tawa.options import NOT_TUNABLE, CompileOptions

from .errors import AutotuneError


class Config:
    """An immutable candidate configuration (see the module docstring)."""
    __slots__ = ("_values", "_key")

    def __init__(self, values: dict):
        self._values = dict(values)
        self._key = json.dumps(self._values, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, values, where: str = "config") -> "Config":
        """A Config from a user's mapping, checked: string names, JSON-like values, valid option values."""
        if not isinstance(values, dict):
            raise AutotuneError(f"{where}: a configuration is a dict of constants and compile options, got "
                                f"{type(values).__name__}")
        for name, value in values.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise AutotuneError(f"{where}: configuration names are identifiers, got {name!r}")
            if name in NOT_TUNABLE:
                raise AutotuneError(f"{where}: '{name}' cannot vary between candidates",
                                    note="pass it to tawa.autotune(...) itself; it then applies to every candidate")
            ok = value is None or isinstance(value, (bool, str)) or (
                isinstance(value, numbers.Real) and not isinstance(value, bool))
            if not ok:
                raise AutotuneError(f"{where}: value of '{name}' is {value!r}; expected a number, True, False, "
                                    f"None or a dtype name")
        config = cls({k: (v if isinstance(v, (bool, str)) or v is None else
                          int(v) if isinstance(v, numbers.Integral) else float(v)) for k, v in values.items()})
        try:
            config.options().validate()
        except CompilationError as e:
            raise AutotuneError(f"{where}: {e.message}", note=e.note) from None
        return config

    # -- views ------------------------------------------------------------------------------------------------
    def as_dict(self) -> dict:
        return dict(self._values)

    def options(self, target: str = "cuda") -> CompileOptions:
        """The CompileOptions of this configuration (constants in `.constants`), not yet validated."""
        return CompileOptions.from_kwargs(dict(self._values, target=target))

    def without_defaults(self, defaults: Optional[dict]) -> "Config":
        """This configuration less the constants it sets to the kernel's default value: the same kernel, and the
        same cache key as `tawa.compile` gives it, so a candidate that is the defaults is compiled once."""
        if not defaults:
            return self
        return Config({k: v for k, v in self._values.items()
                       if not (k in defaults and type(defaults[k]) is type(v) and defaults[k] == v)})

    def merged(self, fixed: dict) -> "Config":
        """This configuration with `fixed` (the tuner's own keyword arguments) applied on top."""
        return Config({**self._values, **fixed})

    def get(self, name: str, default=None):
        return self._values.get(name, default)

    def key(self) -> str:
        """The canonical JSON text: equal for equal configurations, whatever the order of the names."""
        return self._key

    def label(self) -> str:
        """`BLOCK_M=128 BLOCK_N=256 warp_specialize=True`; `defaults` for the empty configuration."""
        return " ".join(f"{k}={v}" for k, v in self._values.items()) or "defaults"

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"


def parse_configs(configs, where: str = "configs") -> list:
    """A list of Configs from a user's sequence of dicts (or Configs); at least one."""
    if isinstance(configs, (dict, str, bytes)) or not hasattr(configs, "__iter__"):
        raise AutotuneError(f"{where} is a list of configurations (dicts), got {type(configs).__name__}")
    out = [c if isinstance(c, Config) else Config.parse(c, f"{where}[{i}]") for i, c in enumerate(configs)]
    if not out:
        raise AutotuneError(f"{where} is empty: give at least one configuration, or none for the kernel's space")
    return out


def dedupe(configs) -> list:
    """`configs` without repeats, first occurrences kept in order."""
    seen: set = set()
    out = []
    for c in configs:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out
