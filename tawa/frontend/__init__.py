"""The frontend: a .tawa kernel's text -> a verified MLIR module in the `tawa` dialect (see docs/language.md
for the language and docs/ir.md for the IR it produces).

Entry points: `parse_and_lower(source, filename, constants, context)` and `read_source(path_or_source)` (defined
in `tawa.source`, re-exported here).
Lark and the parser are loaded on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tawa.source import read_source  # noqa: F401  (the one implementation; pure Python)

if TYPE_CHECKING:
    from mlir import ir

__all__ = ["parse_and_lower", "read_source"]


def parse_and_lower(source: str, filename: str = "<string>", constants: dict | None = None,
                    context: "ir.Context | None" = None) -> "ir.Module":
    """Parse a kernel source (a .tawa file's text or a Python string) and lower it to a verified tawa module.

    `constants` overrides the kernel's `const` parameters (unknown names are an error). Raises
    `tawa.errors.CompilationError` with file:line:column for any mistake in the program.
    """
    from mlir import ir
    from ..errors import CompilationError
    from ..ir.dialect import make_context, load_dialect
    from .diag import TOO_DEEP, Diagnostics, deep_recursion
    from .kernel import build_kernel
    from .parser import parse

    diag = Diagnostics(filename, source)
    kernels = parse(source, filename)
    if context is None:
        context = make_context()
    else:
        load_dialect(context)
    with context, ir.Location.unknown(context):
        module = ir.Module.create()
        with deep_recursion():
            try:
                build_kernel(kernels, dict(constants or {}), diag, module)
            except RecursionError:
                # Statements convert this themselves (at their own position); this is the fallback for the
                # signature and decorators.
                raise diag.error(kernels[0], TOO_DEEP) from None
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise CompilationError(f"internal error: the generated IR does not verify: {e}",
                                   diag.error(kernels[0], "").location) from None
    return module
