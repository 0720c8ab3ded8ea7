import pathlib
import sys

# The runtime tests' hand-written PTX kernels (ptx_kernels) serve the CUDA graph tests here too.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "runtime"))
sys.path.insert(0, str(pathlib.Path(__file__).parent))
