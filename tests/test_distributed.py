"""Ring attention: the schedule covers every block exactly once, the merge is exact, and the ring
over 2-4 CPU processes (gloo, Triton interpreter) equals single-device attention."""
import math

import numpy as np
import pytest

from flashlab import distributed as ring


@pytest.mark.parametrize("layout", ring.LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_schedule_visits_every_visible_chunk_pair_exactly_once(world_size, layout, causal):
    pieces = world_size * (1 if layout == "contiguous" else 2)
    seen = {}
    for step, row in enumerate(ring.ring_schedule(world_size, layout, causal)):
        sources = [source for source, _ in row]
        assert sorted(sources) == list(range(world_size)), f"step {step}: each shard is held by one rank"
        for rank, (_, work) in enumerate(row):
            for w in work:
                assert w.q_chunk in ring.chunks_of(rank, world_size, layout)
                seen[(w.q_chunk, w.k_chunk)] = seen.get((w.q_chunk, w.k_chunk), 0) + 1
    expected = {(a, b) for a in range(pieces) for b in range(pieces) if not causal or b <= a}
    assert set(seen) == expected and set(seen.values()) == {1}


def test_zigzag_balances_causal_work_and_contiguous_does_not():
    for w in (2, 4, 8):
        contiguous = ring.work_per_rank(w, "contiguous", causal=True)
        zigzag = ring.work_per_rank(w, "zigzag", causal=True)
        assert math.isclose(sum(contiguous), sum(zigzag))  # the same total: half the full square
        assert math.isclose(sum(zigzag), w * w / 2)
        assert max(zigzag) == pytest.approx(min(zigzag))  # every rank the same
        assert max(contiguous) / min(contiguous) == pytest.approx(2 * w - 1)  # last rank vs first


def test_merge_partials_equals_attention_over_the_union_of_keys():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    s = q @ k.transpose(-1, -2)  # (2, 3, 5, 5)

    def part(cols):
        lse = torch.logsumexp(s[..., cols], dim=-1)
        return torch.softmax(s[..., cols], dim=-1) @ v[..., cols, :], lse

    o, lse = ring.merge_partials(*part([0, 1]), *part([2, 3, 4]))
    assert torch.allclose(o, torch.softmax(s, dim=-1) @ v, atol=1e-12)
    assert torch.allclose(lse, torch.logsumexp(s, dim=-1), atol=1e-12)
    empty = torch.full_like(lse, float("-inf"))  # a side that saw no key leaves the other unchanged
    o2, lse2 = ring.merge_partials(o, lse, torch.zeros_like(o), empty)
    assert torch.equal(o2, o) and torch.equal(lse2, lse)
    o3, lse3 = ring.merge_partials(torch.zeros_like(o), empty, torch.zeros_like(o), empty)
    assert not o3.isnan().any() and torch.isneginf(lse3).all()


@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_shard_and_unshard_are_inverse(layout):
    torch = pytest.importorskip("torch")
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    shards = [ring.shard(x, r, 3, layout) for r in range(3)]
    assert all(s.shape == (2, 8, 3) for s in shards)
    assert torch.equal(ring.unshard(shards, layout), x)
    if layout == "zigzag":  # rank 0 holds the first and the last of six chunks
        assert torch.equal(shards[0], torch.cat([x[:, :4], x[:, 20:]], dim=1))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="layout="):
        ring.ring_schedule(2, "striped")
    with pytest.raises(ValueError, match="world_size="):
        ring.ring_schedule(0)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="multiple of 4"):
        ring.shard(torch.zeros(1, 6, 2), 0, 2, "zigzag")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring.ring_attention(torch.zeros(1, 1, 4, 16), torch.zeros(1, 1, 4, 16), torch.zeros(1, 1, 4, 16))


@pytest.mark.interpreter
@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_over_gloo_processes_equals_single_device_attention(world_size):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    configs = ((True, "zigzag"), (True, "contiguous"), (False, "contiguous"))
    n = 16 * 2 * world_size  # chunks of 16 rows: the kernels' smallest tile
    cases = [((1, 2, n, 16), causal, layout) for causal, layout in configs]
    per_rank = ring.run_gloo(world_size, ring.check_against_single_device, (cases, 7 + world_size))
    for i, (causal, layout) in enumerate(configs):
        errors = [r[i]["max_error"] for r in per_rank]
        assert [r[i]["rows"] for r in per_rank] == [n // world_size] * world_size
        assert not np.isnan(errors).any() and max(errors) < 1e-5, (
            f"causal={causal} layout={layout}: max errors per rank {errors}")


def test_ring_schedule_picture_data_matches_the_schedule():
    from flashlab.viz import ring as ring_viz

    data = ring_viz.ring_schedule_data(4, "zigzag", causal=True)
    assert data["source"].shape == data["work"].shape == (4, 4)
    assert (data["source"][0] == range(4)).all()  # step 0: every rank holds its own shard
    assert data["per_rank"].tolist() == ring.work_per_rank(4, "zigzag", causal=True)
    import matplotlib.pyplot as plt

    fig = ring_viz.plot_ring_schedule(3, causal=True)
    assert len(fig.axes) == 2
    plt.close(fig)
    table = ring_viz.ring_results_table(dict(rows=[dict(n=1024, causal=True, layout="zigzag", one_gpu_ms=2.0,
                                                        ring_ms=1.0, speedup_vs_one_gpu=2.0, exposed_comm_ms=0.1,
                                                        naive_one_gpu="ok")]))
    header, row = table.splitlines()
    assert "|" not in table, "the table is printed as text: no Markdown pipes"
    assert row.split() == ["1,024", "yes", "zigzag", "2.00", "1.00", "2.00x", "-", "0.10", "fits"]
    assert header.index("1 GPU/ring") + len("1 GPU/ring") == row.index("2.00x") + len("2.00x"), table


def test_work_table_lists_each_ranks_causal_work_per_layout():
    lines = ring.work_table(world_size=4, causal=True).splitlines()
    per_rank = {line.split(":")[0].strip(): [float(x) for x in line.split("rank ")[1].strip("[]").split(",")]
                for line in lines}
    # contiguous: rank r holds r full blocks below the diagonal and half a diagonal block
    assert per_rank["contiguous"] == [r + 0.5 for r in range(4)]
    # zigzag: every rank the same share of the causal half, W^2 / 2 blocks in all
    assert per_rank["zigzag"] == pytest.approx([4 * 4 / 2 / 4] * 4)
    with pytest.raises(ValueError, match="layouts"):
        ring.work_table(layouts=("striped",))


def test_demo_table_prints_each_ranks_rows_and_error(monkeypatch):
    results = [{"rows": 64, "max_error": 1.25e-7}, {"rows": 64, "max_error": 3.0e-7}]
    monkeypatch.setattr(ring, "demo", lambda **kw: results)
    assert ring.demo_table(world_size=2, n=128).splitlines() == [
        f"rank {r}: 64 query rows, max error against one device {e['max_error']:.1e}" for r, e in enumerate(results)]
    with pytest.raises(ValueError, match="layout"):
        ring.demo_table(layout="striped")
