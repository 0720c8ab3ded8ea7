"""The CPU interpreter of the `tawa` IR, in small modules (the public entry points are in
`tawa.runtime.interpreter`).

- `dtypes`: MLIR types -> numpy dtypes and value representations.
- `errors`: interpreter errors and op locations.
- `compiler`: turns each op once into a Python closure over a register file.
- `steps`: the step type and helpers the compiler and the scheduler share (neither imports the other back).
- `arith_ops`, `math_ops`, `tawa_ops`, `scf_ops`, `aref_ops`: the closures of each dialect.
- `scheduler`: runs warp-group regions as interleaved tasks and detects deadlocks.
"""
