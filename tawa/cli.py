"""`tawac`: the ahead-of-time compiler. Needs no GPU.

    tawac examples/gemm.tawa --emit mlir             # tile IR after the tile-level passes
    tawac examples/gemm.tawa --emit ptx -o gemm.ptx -D BLOCK_N=256 --consumer-registers 224
    tawac examples/gemm.tawa --emit cubin -o gemm.cubin --verbose  # ptxas resource report
    tawac examples/gemm.tawa --emit ptx --dump-ir-after-all 2> passes.mlir
    tawac kernel.mlir --passes aref-insertion,partition   # named passes on textual tile IR (see tawa.opt)
    tawac examples/gemm.tawa --autotune-space [-o CACHE_DIR]  # every autotuning candidate, into the kernel cache

The compile-option flags are generated from the fields of `tawa.options.CompileOptions` (name with dashes, type
from the annotation, help from the field's metadata), so every option of `tawa.compile` is a flag, and their
values are checked by `CompileOptions.validate()`.

Exit status: 0; 1 on an error in the program or while compiling or writing (printed without a traceback);
2 on bad usage (a bad flag or option value, an output path that cannot be written).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import typing

EMITS = ("tawa", "mlir", "ptx", "cubin", "json")
PROG = "tawac"

from tawa.option_flags import add_option_flags, constants_from_defines, flag_name, option_values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Compile a .tawa kernel ahead of time, or run named passes "
                                                       "on tile IR (.mlir).")
    p.add_argument("file", help="the .tawa kernel file, or a .mlir file of tile IR (with --passes)")
    p.add_argument("--emit", choices=EMITS, default=None,
                   help="tawa: frontend output; mlir: tile IR after the tile-level passes (the default); ptx; "
                        "cubin; json: launch metadata")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a const parameter of the kernel")
    p.add_argument("-o", dest="output", help="write here instead of standard output")
    p.add_argument("--passes", action="append", default=[], metavar="A,B,...",
                   help="run these passes, in this order, on the input (a .mlir file of tile IR, or a .tawa "
                        "kernel after the frontend) and print the IR; implies --emit mlir")
    p.add_argument("--verbose", action="store_true", help="print ptxas's resource report (registers, spills, smem)")
    p.add_argument("--autotune-space", action="store_true",
                   help="compile every candidate configuration of the kernel's tuning space (its @autotune "
                        "declaration, else the default space; -D values and option flags are fixed for all) into "
                        "the kernel cache, or into the cache directory -o DIR, in parallel, and list them; a GPU "
                        "machine with that cache then tunes without the compiler")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="compile processes for --autotune-space (default: one per core)")
    add_option_flags(p)
    return p


def _costly(ptxas_note: str, spill_bytes: int) -> bool:
    """Whether a ptxas note tells of a slow kernel: its resource report when registers spill, or a performance
    note (wgmma serialized, C75xx)."""
    return bool(re.search(r"\(C75\d\d\)", ptxas_note)) or (spill_bytes > 0 and "spill stores" in ptxas_note)


def _error(message: str, status: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _options(args, constants: dict):
    """CompileOptions from the flags given, validated."""
    from tawa.options import CompileOptions

    return CompileOptions(constants=constants, **option_values(args)).validate()


def _check_output(path: str) -> str | None:
    """Why `path` cannot be written (checked before compiling), or None."""
    if os.path.isdir(path):
        return f"cannot write -o {path}: it is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write -o {path}: no such directory: {os.path.dirname(path) or folder}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write -o {path}: permission denied on {os.path.dirname(path) or folder}"
    return None


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from tawa.errors import TawaError
    from tawa.options import InvalidOptionError
    from tawa.source import read_file, read_source

    try:
        constants = constants_from_defines(args.defines)
    except ValueError as e:
        return _error(str(e))
    try:
        options = _options(args, constants)
    except InvalidOptionError as e:
        # Named as argparse names its own errors: every spelling of the flag.
        spellings = [a.option_strings for a in parser._actions if a.dest == e.option and a.option_strings]
        flag = "/".join(spellings[0]) if spellings else flag_name(e.option)
        given = getattr(args, e.option, e.value)
        return _error(f"argument {flag}: invalid value {given!r}: expected {e.expected}")
    except TawaError as e:
        return _error(e.message)

    if args.autotune_space:
        return _autotune_space(args, constants)
    if args.jobs is not None:
        return _error("--jobs applies to --autotune-space only")
    args.emit = args.emit or "mlir"

    passes = [n.strip() for arg in args.passes for n in arg.split(",") if n.strip()]
    is_mlir = args.file.endswith(".mlir")
    if args.passes and not passes:
        return _error("--passes expects a comma-separated list of pass names")
    if (is_mlir or passes) and args.emit != "mlir":
        what = ".mlir input" if is_mlir else "--passes"
        return _error(f"{what} prints the IR after the passes: --emit {args.emit} is not available (use --emit mlir)")
    if passes:
        from tawa.compiler import PASSES
        unknown = [n for n in passes if n not in PASSES]
        if unknown:
            return _error(f"unknown pass '{unknown[0]}' (passes: {', '.join(PASSES)})")
    if args.emit == "cubin" and not args.output:
        return _error("--emit cubin needs -o FILE")
    if args.output:
        problem = _check_output(args.output)
        if problem:
            return _error(problem)

    try:
        if not os.path.isfile(args.file):
            from tawa.errors import CompilationError
            raise CompilationError(f"no such {'kernel ' if not is_mlir else ''}file: {args.file}")
        if is_mlir:
            source, filename = read_file(args.file), args.file
        else:
            source, filename = read_source(args.file)
        if is_mlir or passes:
            from tawa.opt import run_passes_on_text
            out = run_passes_on_text(source, filename, passes, options)
        elif args.emit in ("tawa", "mlir"):
            from tawa.compiler import compile_source
            out = str(compile_source(source, filename, options, emit=args.emit))
        else:
            from tawa.compiler import compile_source
            kernel = compile_source(source, filename, options)
            for note in kernel.notes:
                # ptxas's resource report (registers, spills, stack) is shown with --verbose only, unless the
                # kernel spills registers or ptxas serialized its wgmmas (C75xx): those are warned about always.
                if args.verbose or not note.startswith("ptxas"):
                    print(f"{filename}: note: {note}", file=sys.stderr)
                elif _costly(note, kernel.spill_bytes):
                    print(f"{filename}: warning: {note}", file=sys.stderr)
            if args.emit == "ptx":
                if not kernel.ptx:
                    raise TawaError("this target produces no PTX (use --target cuda)")
                out = kernel.ptx
            elif args.emit == "cubin":
                if not kernel.cubin:
                    raise TawaError("no cubin: ptxas was not found (pip install 'tawa[dev]' or put ptxas on PATH)")
                out = kernel.cubin
            else:
                out = json.dumps(kernel.to_json(), indent=2)
    except TawaError as e:
        print(str(e), file=sys.stderr)
        return 1

    if isinstance(out, str) and not out.endswith("\n"):
        out += "\n"
    if not args.output:
        sys.stdout.write(out)
        return 0
    try:
        if isinstance(out, bytes):
            with open(args.output, "wb") as f:
                f.write(out)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
    except OSError as e:
        return _error(f"cannot write {args.output}: {e.strerror or e}", status=1)
    return 0


def _autotune_space(args, constants: dict) -> int:
    """`--autotune-space`: compile the kernel's whole candidate set into the cache (or -o DIR) and list it."""
    from tawa.errors import TawaError
    from tawa.options import NOT_TUNABLE

    if args.emit or args.passes:
        return _error("--autotune-space compiles every candidate into the kernel cache: --emit and --passes are "
                      "not available with it")
    if args.jobs is not None and args.jobs < 1:
        return _error(f"argument --jobs: invalid value {args.jobs}: expected a positive integer")
    if args.output:
        parent = os.path.dirname(os.path.abspath(args.output))
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            return _error(f"cannot use -o {args.output} as the cache directory: it is a file")
        if not os.path.isdir(parent):
            return _error(f"cannot use -o {args.output} as the cache directory: no such directory: {parent}")
    fixed = dict(constants)
    fixed.update({k: v for k, v in option_values(args).items() if k not in NOT_TUNABLE})
    target = option_values(args).get("target", "cuda")
    saved = os.environ.get("TAWA_CACHE_DIR")
    if args.output:
        # The compile workers are separate processes: the cache directory reaches them through the environment.
        os.environ["TAWA_CACHE_DIR"] = os.path.abspath(args.output)
    try:
        if not os.path.isfile(args.file):
            from tawa.errors import CompilationError
            raise CompilationError(f"no such kernel file: {args.file}")
        from tawa.autotune import compile_space
        outcomes = compile_space(args.file, jobs=args.jobs, target=target, **fixed)
    except TawaError as e:
        print(str(e), file=sys.stderr)
        return 1
    finally:
        if args.output:
            if saved is None:
                os.environ.pop("TAWA_CACHE_DIR", None)
            else:
                os.environ["TAWA_CACHE_DIR"] = saved
    ok = 0
    for o in outcomes:
        label = o.config.label()
        if o.kernel is None:
            first = (o.error or "").splitlines()[0] if o.error else "?"
            print(f"{label}: does not compile: {first}")
            if args.verbose and o.error:
                print(o.error, file=sys.stderr)
            continue
        ok += 1
        k = o.kernel
        spills = k.spill_bytes
        facts = [f"{k.shared_bytes} bytes shared", f"{k.num_threads} threads"]
        if spills is not None:
            facts.append(f"{spills} bytes spilled")
        if o.from_cache:
            facts.append("cached")
        print(f"{label}: ok ({', '.join(facts)})")
    print(f"{ok} of {len(outcomes)} candidates compiled", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
