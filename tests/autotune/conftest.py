import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from autotune_support import no_results, own_cache  # noqa: E402,F401  (fixtures)
