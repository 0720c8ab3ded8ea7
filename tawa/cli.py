"""`tawac`: the ahead-of-time compiler. Needs no GPU.

    tawac examples/gemm.tawa --emit mlir             # tile IR after the tile-level passes
    tawac examples/gemm.tawa --emit ptx -o gemm.ptx -D BLOCK_N=256
    tawac examples/gemm.tawa --emit cubin --verbose  # ptxas resource report
    tawac examples/gemm.tawa --emit ptx --dump-ir-after-all 2> passes.mlir
"""
from __future__ import annotations

import argparse
import json
import sys

EMITS = ("tawa", "mlir", "ptx", "cubin", "json")


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tawac", description="Compile a .tawa kernel ahead of time.")
    p.add_argument("file", help="the .tawa kernel file")
    p.add_argument("--emit", choices=EMITS, default="mlir",
                   help="tawa: frontend output; mlir: tile IR after the tile-level passes; ptx; cubin; "
                        "json: launch metadata")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a const parameter of the kernel")
    p.add_argument("-o", dest="output", help="write here instead of standard output")
    p.add_argument("--target", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--warp-specialize", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--num-consumer-groups", type=int)
    p.add_argument("--num-buffers", "--num-buffers-warp-spec", dest="num_buffers", type=int)
    p.add_argument("--num-stages", type=int)
    p.add_argument("--num-warps", type=int)
    p.add_argument("--dump-ir-after-all", action="store_true", help="print the IR after every pass to stderr")
    p.add_argument("--verbose", action="store_true", help="print ptxas's resource report (registers, spills, smem)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from tawa import read_source
    from tawa.errors import TawaError
    from tawa.options import CompileOptions

    constants = {}
    for d in args.defines:
        if "=" not in d:
            print(f"tawac: error: -D expects NAME=VALUE, got '{d}'", file=sys.stderr)
            return 2
        name, value = d.split("=", 1)
        constants[name.strip()] = _value(value.strip())
    options = CompileOptions(target=args.target, constants=constants, dump_ir_after_all=args.dump_ir_after_all,
                             warp_specialize={"auto": None, "on": True, "off": False}[args.warp_specialize],
                             num_consumer_groups=args.num_consumer_groups, num_buffers=args.num_buffers,
                             num_warps=args.num_warps)
    if args.num_stages is not None:
        options.num_stages = args.num_stages
    try:
        from tawa.compiler import compile_source
        source, filename = read_source(args.file)
        if args.emit in ("tawa", "mlir"):
            out = str(compile_source(source, filename, options, emit=args.emit))
        else:
            kernel = compile_source(source, filename, options)
            for note in kernel.notes:
                # ptxas's resource report (registers, spills, stack) is shown with --verbose only.
                if args.verbose or not note.startswith("ptxas"):
                    print(f"{filename}: note: {note}", file=sys.stderr)
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
    if isinstance(out, bytes):
        if not args.output:
            print("tawac: error: --emit cubin needs -o FILE", file=sys.stderr)
            return 2
        with open(args.output, "wb") as f:
            f.write(out)
    elif args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out if out.endswith("\n") else out + "\n")
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
