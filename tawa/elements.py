"""Element types as plain facts: THE one table of element sizes, shared by the compiler (`tawa.ir.types`) and the
runtime (`tawa.runtime.arrays`, the launcher, tensor maps).

Keys are the MLIR spellings of the element types, which are also the `tawa.params` / `CompiledKernel.params`
dtype names the runtime sees. Pure Python with no imports: a kernel found in the cache launches without MLIR.
An element type missing here is an error wherever it is looked up, never a silent default size.
"""

#: The MLIR spelling of the language's dtype names where the two differ (`f8e4m3` is `f8E4M3FN`).
IR_NAMES = {"f8e4m3": "f8E4M3FN", "f8e5m2": "f8E5M2", "bool": "i1"}

#: The fp8 element types, by their MLIR spelling.
FP8 = ("f8E4M3FN", "f8E5M2")

#: Bytes per element, by the MLIR spelling of the element type.
ELEMENT_BYTES = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2,
                 "f8E4M3FN": 1, "f8E5M2": 1, "i8": 1, "i1": 1}
