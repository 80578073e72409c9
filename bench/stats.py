"""Small statistics: percentiles and a latency summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    p50: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(
            n=len(values),
            p50=percentile(values, 50),
            p99=percentile(values, 99),
            max=max(values),
            mean=sum(values) / len(values),
        )
