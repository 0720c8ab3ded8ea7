"""How the tuner reports what goes wrong: one `AutotuneError` (a TawaError, so it prints as every Tawa error does,
without a traceback) for bad configurations or keys, unusable result files, and tuning runs where no candidate
survives (its message lists why each was dropped)."""
from __future__ import annotations

from tawa.errors import TawaError


class AutotuneError(TawaError):
    """Autotuning cannot go on: a bad configuration, key or result file, or no usable candidate."""
