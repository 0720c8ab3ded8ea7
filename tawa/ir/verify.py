"""The `tawa` verifier (placeholder until the rules land): MLIR's own structural verification."""
from __future__ import annotations

from mlir import ir

from tawa.errors import InternalCompilerError


def verify(module: ir.Module, after: str | None = None) -> None:
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise InternalCompilerError(f"the IR does not verify: {e}", after) from None
