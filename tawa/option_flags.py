"""Command-line flags for the compile options, shared by `tawac` and `python -m tawa.opt`.

Every `CompileOptions` field is a flag (`num_buffers` -> `--num-buffers`), typed from its annotation, with the
field's help text; an `Optional[bool]` field takes `auto|on|off`. Values are checked by
`CompileOptions.validate()`, not here: one place, one message. `-D NAME=VALUE` gives kernel constants.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing

from tawa.options import ALIASES, CompileOptions

#: --warp-specialize (any Optional[bool] option): the word on the command line -> the option's value.
TRISTATE = {"auto": None, "on": True, "off": False}


def constant_value(text: str):
    """A -D value: True or False (any case), an int, a float, else the text (a dtype name such as bf16)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _unwrap_optional(tp) -> tuple[object, bool]:
    """(base type, whether None is allowed) of an annotation such as Optional[int]."""
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _option_fields() -> list[tuple[dataclasses.Field, object, bool]]:
    """(field, base type, optional) of each CompileOptions field that is a flag (constants come from -D)."""
    hints = typing.get_type_hints(CompileOptions)
    out = []
    for f in dataclasses.fields(CompileOptions):
        if f.name == "constants":
            continue
        base, optional = _unwrap_optional(hints[f.name])
        out.append((f, base, optional))
    return out


def add_option_flags(p: argparse.ArgumentParser) -> None:
    """One flag per CompileOptions field; only the flags given reach the options (argparse.SUPPRESS)."""
    group = p.add_argument_group("compile options", "the fields of tawa.options.CompileOptions; the keyword "
                                                    "arguments of tawa.compile")
    for f, base, optional in _option_fields():
        flags = [flag_name(f.name)] + [flag_name(alias) for alias, name in ALIASES.items() if name == f.name]
        help_text = f.metadata.get("help")
        kw = dict(dest=f.name, default=argparse.SUPPRESS, help=help_text)
        if base is bool and not optional:
            group.add_argument(*flags, action="store_true", **kw)
        elif base is bool:
            group.add_argument(*flags, choices=tuple(TRISTATE), **kw)
        elif base in (int, float, str):
            choices = f.metadata.get("choices")
            metavar = "{" + ",".join(map(str, choices)) + "}" if choices else ("N" if base is int else None)
            # Values are checked by CompileOptions.validate(), not by argparse `choices`: one place, one message.
            group.add_argument(*flags, type=base, metavar=metavar, **kw)
        else:  # a field of a type the command line cannot spell: a bug in this table, not in the user's input
            raise TypeError(f"CompileOptions.{f.name}: no command-line form for {base!r}")




def option_values(args) -> dict:
    """The option fields given on the command line (flags not given are absent), as option values."""
    values = {}
    for f, base, optional in _option_fields():
        if f.name in vars(args):
            v = getattr(args, f.name)
            values[f.name] = TRISTATE[v] if base is bool and optional else v
    return values


def constants_from_defines(defines) -> dict:
    """Kernel constants from `-D NAME=VALUE` arguments; raises ValueError naming a malformed one."""
    constants = {}
    for d in defines:
        if "=" not in d:
            raise ValueError(f"-D expects NAME=VALUE, got '{d}'")
        name, value = d.split("=", 1)
        constants[name.strip()] = constant_value(value.strip())
    return constants
