"""`import tawa` (and `import tawa.torch_ops`) never imports torch: the package runs where torch is not installed."""
import subprocess
import sys


def test_importing_tawa_does_not_import_torch():
    code = ("import sys, tawa, tawa.torch_ops, tawa.runtime.launcher, tawa.runtime.kernel; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
