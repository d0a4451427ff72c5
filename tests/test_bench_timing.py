"""The decode benchmark's timing helpers (``benchmarks/bench_decode.py``), run on the CPU with the
timer replaced: the rounds rotate their order, every output is checked before anything is timed,
and the comparison of two variants' rounds reports the ratio of medians and whether it exceeds
the run-to-run spread. The GPU timings themselves are the benchmark's job, not a test's."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
bench_decode = pytest.importorskip("bench_decode")


def fake_timer(monkeypatch, times: dict):
    """bench_us replaced by a timer that calls the function once and returns the next of its
    times; the order of calls is recorded."""
    order = []

    def bench_us(fn, warmup=25, rep=100):
        name = fn()
        order.append(name)
        return times[name].pop(0)

    monkeypatch.setattr(bench_decode, "bench_us", bench_us)
    return order


def test_rotated_rounds_time_every_variant_once_per_round_in_a_rotated_order(monkeypatch):
    times = {"a": [3.0, 1.0, 2.0], "b": [5.0, 6.0, 4.0], "c": [7.0, 9.0, 8.0]}
    order = fake_timer(monkeypatch, {k: list(v) for k, v in times.items()})
    runs = bench_decode.rotated_rounds({name: (lambda name=name: name) for name in times}, rounds=3)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert runs == times


def test_checked_rounds_check_every_output_before_timing(monkeypatch):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(4, 8, generator=g)
    wrong = ref + 0.5 * torch.randn(4, 8, generator=g)
    calls = []

    def variant(name, out):
        def run():  # the check gets the output, the timer the name
            calls.append(name)
            return out if len(calls) <= 2 else name
        return run

    rounds = bench_decode.ROUNDS
    times = {"right": [1.0 + r for r in range(rounds)], "wrong": [10.0 + r for r in range(rounds)]}
    fake_timer(monkeypatch, {k: list(v) for k, v in times.items()})
    errs, runs = bench_decode.checked_rounds({"right": variant("right", ref.clone()), "wrong": variant("wrong", wrong)}, ref)
    assert calls[:2] == ["right", "wrong"] and len(calls) == 2 + 2 * rounds
    assert errs["right"] == 0.0
    assert errs["wrong"] > 0.1
    assert runs == times


def test_compare_rounds_reports_the_ratio_of_medians_and_the_spread():
    ours, base = [101.0, 99.0, 100.0], [104.0, 100.0, 102.0]
    cmp_ = bench_decode.compare_rounds(ours, base)
    assert cmp_["ratio"] == pytest.approx(100.0 / 102.0)
    assert cmp_["ratio_min"] == pytest.approx(99.0 / 100.0)
    assert cmp_["spread"] == pytest.approx(4.0 / 102.0)
    assert cmp_["within_spread"]
    far = bench_decode.compare_rounds([110.0, 111.0, 110.5], base)
    assert far["ratio"] == pytest.approx(110.5 / 102.0) and not far["within_spread"]
    entry = bench_decode.rounds_entry([3.0, 1.0, 2.0])
    assert entry == {"us": 2.0, "us_min": 1.0, "us_runs": [3.0, 1.0, 2.0], "spread": 1.0}


def test_the_repeated_rounds_count_wins_and_give_the_sign_test():
    """benchmarks/decode_repeat.py: per row, the rounds flash_decode won and the two-sided sign test
    of that count (exact binomial, p = 1/2)."""
    decode_repeat = pytest.importorskip("decode_repeat")
    assert decode_repeat.sign_test_p(6, 12) == pytest.approx(1.0)
    assert decode_repeat.sign_test_p(0, 10) == pytest.approx(2 / 1024)
    assert decode_repeat.sign_test_p(10, 10) == pytest.approx(2 / 1024)
    assert decode_repeat.sign_test_p(2, 10) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    entry = decode_repeat.row_entry([99.0, 101.0, 98.0, 100.0], [100.0, 100.0, 100.0, 100.0])
    assert entry["rounds_flash_decode_faster"] == 2 and entry["rounds_decided"] == 3  # a tie decides nothing
    assert entry["round_ratios"] == [0.99, 1.01, 0.98, 1.0]
    assert entry["ratio_of_medians"] == pytest.approx(99.5 / 100.0)
    assert entry["min_round_ratio"] == 0.98 and entry["max_round_ratio"] == 1.01


def test_the_unpacked_probe_views_a_grouped_cache_as_multi_head_without_copying():
    torch = pytest.importorskip("torch")
    probe = pytest.importorskip("decode_unpacked_probe")
    g = torch.Generator().manual_seed(5)
    B, H, Hkv, N, d = 2, 6, 2, 7, 4
    q = torch.randn(B, H, 1, d, generator=g)  # (B, H, 1, d)
    k, v = (torch.randn(B, Hkv, N, d, generator=g) for _ in range(2))  # (B, Hkv, N, d)
    qe, ke, ve = probe.expanded(q, k, v)
    assert qe.shape == (B * Hkv, H // Hkv, 1, d) and ke.shape == ve.shape == (B * Hkv, H // Hkv, N, d)
    assert ke.stride(1) == 0 and ke.data_ptr() == k.data_ptr()
    want = torch.softmax(q @ k.repeat_interleave(H // Hkv, 1).transpose(-1, -2), -1) @ v.repeat_interleave(H // Hkv, 1)
    got = (torch.softmax(qe @ ke.transpose(-1, -2), -1) @ ve).reshape(q.shape)
    torch.testing.assert_close(got, want)


@pytest.mark.interpreter
def test_the_pool_probe_kernel_gives_the_reference():
    """benchmarks/decode_pool_probe.py: the persistent kernel whose programs share the ends of the key
    ranges counts every key once (own parts, pieces clipped at their lanes' ends, extra programs, the
    walk order) and leaves its scratch clean for the next call; in the interpreter here, compiled on a GPU."""
    torch = pytest.importorskip("torch")
    probe = pytest.importorskip("decode_pool_probe")
    assert probe.check("cuda" if torch.cuda.is_available() else "cpu") == []
