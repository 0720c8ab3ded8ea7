"""`tawa-opt`: run named passes of the compiler on textual IR and print the result (like `mlir-opt`).

    python -m tawa.opt kernel.mlir --passes aref-insertion,partition
    python -m tawa.opt kernel.mlir --passes protocol-check --split-input-file
    python -m tawa.opt examples/gemm.tawa --passes canonicalize,aref-insertion -D BLOCK_N=64 --num-buffers 3

The input is MLIR in the `tawa` dialect (docs/ir.md) or, for a `.tawa` file, kernel source that the frontend
lowers first (with the `-D NAME=VALUE` constants), so a test may start from source. The passes are those of
`tawa.compiler.PIPELINE`, by name, run in the order given (not the pipeline's order, and without the driver's
`decide`: a WS pass run on a kernel that cannot be specialized says why, at its source line). Every field of
`CompileOptions` is a flag (`--num-buffers 3`, `--warp-specialize on|off|auto`, `--verify-each`) or
`--option NAME=VALUE`.

`--split-input-file` runs each chunk of the input between `// -----` lines (`# -----` in a `.tawa` file) on its
own, in a fresh context; the outputs are separated by `// -----`, and an error in one chunk is reported and the
others still run. Line numbers in locations and errors are those of the whole file.

Exit status: 0; 1 on an error in the input or a pass (`TawaError`, printed to stderr without a traceback; an
MLIR syntax error names the file, line and column); 2 on bad usage (an unknown pass: the passes are listed).
`tests/passes/` holds FileCheck tests driven by this tool.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing

from tawa.option_flags import TRISTATE, add_option_flags, constants_from_defines, option_values
from tawa.options import CompileOptions

PROG = "tawa-opt"

#: A line that separates two inputs under --split-input-file, per input kind.
_SPLIT_MLIR = re.compile(r"^//\s*-----\s*$", re.M)
_SPLIT_TAWA = re.compile(r"^#\s*-----\s*$", re.M)
_LOC_RE = re.compile(r'loc\("((?:[^"\\]|\\.)*)":(\d+):(\d+)\)')


class UsageError(Exception):
    """Bad command line (exit status 2)."""


# ----------------------------------------------------------------------------------------------------------
# The library entry point (also used by `tawac FILE.mlir --passes ...`).
def run_passes_on_text(text: str, filename: str, pass_names: list[str], options: CompileOptions) -> str:
    """Parse `text` (MLIR, or `.tawa` source when `filename` ends in `.tawa`), run the named passes in order
    and return the printed module. Raises `TawaError` for errors in the input, the options or a pass."""
    module = _run(text, filename, pass_names, options)
    return str(module)


def _run(text: str, filename: str, pass_names, options: CompileOptions):
    from tawa.compiler import get_pass, run_pass

    passes = [get_pass(name) for name in pass_names]     # unknown names fail before any work
    options.validate()
    module = parse_input(text, filename, options)
    for p in passes:
        module = run_pass(p, module, options)
    if passes:
        _verify(module, passes[-1].name)
    return module


def _verify(module, after: str) -> None:
    """MLIR's own verifier on the result (as mlir-opt does): a failure is a bug in the last pass."""
    from mlir import ir
    from tawa.errors import InternalCompilerError

    try:
        ok = module.operation.verify()
    except ir.MLIRError as e:
        raise InternalCompilerError(f"the IR does not verify: {e}", after) from None
    if ok is False:
        raise InternalCompilerError("the IR does not verify", after)


def parse_input(text: str, filename: str, options: CompileOptions):
    """The module of one input: the frontend's output for `.tawa` source, else the parsed MLIR."""
    from tawa.ir.dialect import make_context

    context = make_context()
    if filename.endswith(".tawa"):
        from tawa.frontend import parse_and_lower
        module = parse_and_lower(text, filename, dict(options.constants), context=context)
        if options.dump_ir_after_all:
            print("// -----// IR Dump After frontend //----- //", file=sys.stderr)
            print(module, file=sys.stderr)
        return module
    return parse_mlir(text, filename, context)


def parse_mlir(text: str, filename: str, context):
    """Parse MLIR text; locations the text does not give name `filename` (as mlir-opt does), so errors about
    hand-written IR point into the file. A syntax or verifier error is a `CompilationError` at its line."""
    from mlir import ir
    from tawa.errors import CompilationError, location_of

    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as e:
        diags = list(getattr(e, "error_diagnostics", []) or [])
        message = diags[0].message if diags else str(e)
        location = None
        m = _LOC_RE.search(str(diags[0].location)) if diags else None
        if m and m.group(1) in ("-", ""):
            location = location_of(filename, text, int(m.group(2)), int(m.group(3)))
        notes = [f"{_where(n.location, filename)}{n.message}" for d in diags[:1] for n in d.notes]
        notes += [f"{_where(d.location, filename)}error: {d.message}" for d in diags[1:]]
        raise CompilationError(f"cannot parse the MLIR input: {message}" if location else
                               f"cannot parse the MLIR input {filename}: {message}", location,
                               note="\n".join(notes) or None) from None
    with context:
        _name_locations(module.operation, filename)
    return module


def _where(location, filename: str) -> str:
    m = _LOC_RE.search(str(location))
    if not m:
        return ""
    name = filename if m.group(1) in ("-", "") else m.group(1)
    return f"{name}:{m.group(2)}:{m.group(3)}: "


def _name_locations(op, filename: str) -> None:
    from mlir import ir

    loc = op.location
    if loc.is_a_file() and loc.filename in ("-", ""):
        op.location = ir.Location.file(filename, loc.start_line, loc.start_col)
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                _name_locations(child.operation, filename)


def split_input(text: str, filename: str) -> list[str]:
    """The chunks of `text` between separator lines, each padded with newlines so that its lines keep their
    numbers in the whole file."""
    sep = _SPLIT_TAWA if filename.endswith(".tawa") else _SPLIT_MLIR
    chunks, start, line = [], 0, 0
    for m in sep.finditer(text):
        chunks.append("\n" * line + text[start:m.start()])
        line += text.count("\n", start, m.end()) + (1 if m.end() < len(text) else 0)
        start = m.end() + 1
    chunks.append("\n" * line + text[start:])
    return chunks


# ----------------------------------------------------------------------------------------------------------
# Command line
def _option_fields() -> dict:
    """CompileOptions fields that are flags, name -> type (constants come from -D)."""
    hints = typing.get_type_hints(CompileOptions)
    return {f.name: hints[f.name] for f in dataclasses.fields(CompileOptions) if f.name != "constants"}


def _converter(name: str, tp):
    """For `--option NAME=VALUE`: text -> a value of the field's type, raising UsageError on a bad value."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)
    base = args[0] if optional and len(args) == 1 else tp

    def convert(text: str):
        t = text.strip().lower()
        if base is bool:
            if t in TRISTATE and (optional or TRISTATE[t] is not None):
                return TRISTATE[t]
            raise UsageError(f"option {name} expects one of {'auto/on/off' if optional else 'on/off'}, got '{text}'")
        if optional and t in ("none", "auto"):
            return None
        try:
            return base(text.strip())
        except ValueError:
            raise UsageError(f"option {name} expects a value of type {base.__name__}, got '{text}'") from None
    return convert


def _parser() -> argparse.ArgumentParser:
    from tawa.compiler import PASSES

    p = argparse.ArgumentParser(
        prog=PROG, description="Run passes of the Tawa compiler on an MLIR (or .tawa) file and print the IR.",
        epilog="passes (tawa.compiler.PIPELINE):\n  " + "\n  ".join(PASSES),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="input: .mlir (tawa dialect) or .tawa (lowered by the frontend first); - for stdin")
    p.add_argument("--passes", action="append", default=[], metavar="A,B,...",
                   help="comma-separated pass names, run in the order given")
    p.add_argument("--split-input-file", action="store_true",
                   help="process each chunk between '// -----' lines ('# -----' in .tawa) separately")
    p.add_argument("-o", dest="output", help="write the IR here instead of standard output")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="kernel constant for .tawa input")
    p.add_argument("--option", dest="options", action="append", default=[], metavar="NAME=VALUE",
                   help="any CompileOptions field, e.g. --option num_buffers=3")
    add_option_flags(p)
    return p


def options_from_args(args) -> CompileOptions:
    fields = _option_fields()
    values = {}
    for text in args.options:
        if "=" not in text:
            raise UsageError(f"--option expects NAME=VALUE, got '{text}'")
        name, value = (s.strip() for s in text.split("=", 1))
        name = name.lstrip("-").replace("-", "_")
        if name == "num_buffers_warp_spec":
            name = "num_buffers"
        if name not in fields:
            raise UsageError(f"unknown option '{name}' (options: {', '.join(fields)})")
        values[name] = _converter(name, fields[name])(value)
    values.update(option_values(args))
    try:
        constants = constants_from_defines(args.defines)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return CompileOptions(constants=constants, **values)


def main(argv=None) -> int:
    from tawa.compiler import PASSES
    from tawa.errors import TawaError

    args = _parser().parse_args(argv)
    pass_names = [n.strip() for arg in args.passes for n in arg.split(",") if n.strip()]
    unknown = [n for n in pass_names if n not in PASSES]
    if unknown:
        print(f"{PROG}: error: unknown pass '{unknown[0]}'\nnote: passes: {', '.join(PASSES)}", file=sys.stderr)
        return 2
    try:
        options = options_from_args(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    filename = args.file
    try:
        if filename == "-":
            text, filename = sys.stdin.read(), "<stdin>"
        else:
            with open(filename, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        print(f"{PROG}: error: cannot read '{filename}': {e.strerror}", file=sys.stderr)
        return 1

    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    status = 0
    try:
        chunks = split_input(text, filename) if args.split_input_file else [text]
        for i, chunk in enumerate(chunks):
            if i:
                out.write("// -----\n")
            try:
                module = _run(chunk, filename, pass_names, options)
                printed = module.operation.get_asm(enable_debug_info=args.mlir_print_debuginfo)
                out.write(printed if printed.endswith("\n") else printed + "\n")
            except TawaError as e:
                status = 1
                out.flush()
                print(str(e), file=sys.stderr)
                sys.stderr.flush()
                if not args.split_input_file:
                    break
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
