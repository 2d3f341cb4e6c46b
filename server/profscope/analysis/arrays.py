"""Small numpy helpers shared by the analyses."""

from __future__ import annotations

from typing import Any

import numpy as np


def lookup(values: np.ndarray, index: np.ndarray, missing: Any) -> np.ndarray:
    """``values[index]`` where ``index >= 0`` and ``missing`` elsewhere (also when ``values`` is empty)."""
    index = np.asarray(index)
    if len(values) == 0:
        return np.full(
            len(index), missing, dtype=np.asarray(values).dtype if np.asarray(values).dtype != bool else bool
        )
    return np.where(index >= 0, np.asarray(values)[np.maximum(index, 0)], missing)
