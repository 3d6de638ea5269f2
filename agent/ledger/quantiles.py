"""The one percentile the project reports, benchmarks and dashboard alike.

Nearest rank: the smallest measured value with at least the share ``q`` of the
values at or below it, so every figure shown is a latency that happened.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 < q <= 1) of ``values`` by nearest rank; ``values`` not empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
