"""flashlab.cpu_cost: notebook 01's CPU measurement of naive attention (memory and time)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from flashlab import cpu_cost


def test_best_ms_does_not_time_the_warm_up_call():
    calls = []

    def slow_first():
        calls.append(1)
        time.sleep(0.2 if len(calls) == 1 else 0.001)

    ms = cpu_cost.best_ms(slow_first, repeats=3, min_time_s=0)
    assert len(calls) == 4, f"expected 1 warm-up + 3 timed calls, got {len(calls)}"
    assert ms < 100, f"the 200 ms warm-up call was timed: best {ms:.1f} ms"


def test_best_ms_times_more_calls_within_min_time():
    calls = []
    cpu_cost.best_ms(lambda: calls.append(1), repeats=2, min_time_s=0.05, max_calls=50)
    assert len(calls) == 51, f"a fast call should be timed max_calls times within min_time_s, got {len(calls) - 1}"


def test_peak_extra_bytes_counts_numpy_allocations():
    peak = cpu_cost.peak_extra_bytes(lambda: np.ones(1_000_000))  # 8 MB of float64
    assert 8_000_000 <= peak < 9_000_000, f"peak {peak} B, expected about 8 MB"


def test_naive_cost_holds_three_n_by_n_float32_matrices():
    rows = cpu_cost.naive_cost([64, 128], d=16, repeats=1)
    for r in rows:
        assert 2.5 < r.peak_bytes / (r.n * r.n * 4) < 3.5, f"N = {r.n}: peak {r.peak_bytes} B"
        assert r.ms > 0
    assert "fastest of at least 1 calls" in cpu_cost.naive_cost_table([64], d=16, repeats=1)


@pytest.mark.parametrize("kwargs, name", [({"repeats": 0}, "repeats"), ({"d": 0}, "d"), ({"sizes": [64, -1]}, "sizes")])
def test_naive_cost_rejects_bad_arguments_by_name(kwargs, name):
    args = {"sizes": [64], **kwargs}
    with pytest.raises(ValueError, match=name):
        cpu_cost.naive_cost(**args)
