"""The data behind every figure equals the tracer's records and the traffic formulas; widgets redraw.

Figures are built headless (Agg). Each test draws from fresh random inputs traced through the real
tiled functions; expected numbers come from the tracer or from flashlab.traffic, never hard-coded.
"""
import io
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("matplotlib")
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from flashlab import traffic  # noqa: E402
from flashlab.hardware import A100, H100, H200_MEASURED  # noqa: E402
from flashlab.tiled import (causal_tile_skipped, num_blocks, tiled_attention,  # noqa: E402
                            tiled_attention_backward, tiled_attention_fa1)
from flashlab.tracer import READ, TrafficTracer  # noqa: E402
from flashlab.viz import roofline, tiles, traffic_plots  # noqa: E402
from flashlab.viz.style import format_bytes  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _trace(algorithm, nq, nk, d, block_q, block_k, causal, seed=0, batch=()):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, nq, d)).astype(np.float32)
    k = rng.standard_normal((*batch, nk, d)).astype(np.float32)
    v = rng.standard_normal((*batch, nk, d)).astype(np.float32)
    tracer = TrafficTracer(itemsize=2, stat_itemsize=4)
    kw = dict(causal=causal, block_q=block_q, block_k=block_k)
    if algorithm == "fa2":
        tiled_attention(q, k, v, tracer=tracer, **kw)
    elif algorithm == "fa1":
        tiled_attention_fa1(q, k, v, tracer=tracer, **kw)
    else:
        o, lse = tiled_attention(q, k, v, return_lse=True, **kw)
        tiled_attention_backward(q, k, v, o, lse, rng.standard_normal(o.shape).astype(np.float32),
                                 tracer=tracer, **kw)
    return tracer


FORMULAS = {"fa2": traffic.fa2_forward_traffic, "fa1": traffic.fa1_forward_traffic,
            "backward": traffic.backward_traffic}
CASES = [("fa2", 100, 70, 16, 32, 16, True), ("fa2", 64, 96, 8, 16, 32, False),
         ("fa1", 90, 90, 8, 32, 16, True), ("backward", 80, 72, 8, 16, 16, True)]


@pytest.mark.parametrize("algorithm, nq, nk, d, block_q, block_k, causal", CASES)
def test_tile_frames_count_the_traced_bytes_and_match_the_formulas(algorithm, nq, nk, d, block_q, block_k, causal):
    tracer = _trace(algorithm, nq, nk, d, block_q, block_k, causal)
    schedule = tiles.TileSchedule(tracer)
    reads, writes = tracer.cumulative_bytes()
    formula = FORMULAS[algorithm](nq, nk, d, block_q=block_q, block_k=block_k, causal=causal,
                                  itemsize=2, stat_itemsize=4)
    for t in range(schedule.n_steps):
        frame = schedule.frame(t)
        assert (frame.read_bytes_so_far, frame.write_bytes_so_far) == (reads[t], writes[t]), f"step {t}"
        step_events = [e for e in tracer.events if e.step == t]
        assert sum(b for *_, b in frame.reads) == sum(e.nbytes for e in step_events if e.direction == READ)
        assert sum(b for *_, b in frame.writes) == sum(e.nbytes for e in step_events if e.direction != READ)
        assert frame.sram_bytes == sum(r.nbytes for r in tracer.steps[t].resident)
    assert frame.read_bytes_so_far == formula.read_bytes, "final cumulative reads differ from the formula"
    assert frame.write_bytes_so_far == formula.write_bytes, "final cumulative writes differ from the formula"
    naive = (traffic.naive_backward_traffic if algorithm == "backward" else traffic.naive_traffic)(nq, nk, d, itemsize=2)
    assert frame.naive_bytes == naive.total


def test_tile_frame_marks_exactly_the_loaded_and_resident_tiles():
    geo_args = ("fa2", 96, 80, 8, 32, 16, False)
    tracer = _trace(*geo_args)
    schedule = tiles.TileSchedule(tracer)
    geo = schedule.geometry
    for t in range(schedule.n_steps):
        frame = schedule.frame(t)
        expected_reads = sorted((e.tensor, e.rows[0] // (geo.block_k if e.tensor in "KV" else geo.block_q))
                                for e in tracer.events if e.step == t and e.direction == READ)
        assert sorted((name, lo) for name, lo, hi, _ in frame.reads) == expected_reads
        assert all(hi == lo + 1 for _, lo, hi, _ in frame.reads), "a full-width tile spans one block"
        step = tracer.steps[t]
        for r in step.resident:
            if r.tensor == "Q":
                row = frame.query_states[geo.query_tensors.index("Q")]
                assert row[r.rows[0] // geo.block_q] == tiles.RESIDENT
                assert (row == tiles.RESIDENT).sum() == 1, "only one Q tile lives in SRAM"
        if step.q_block is not None and step.k_block is not None:
            assert frame.s_states[step.q_block, step.k_block] == tiles.CURRENT


def test_causal_frames_skip_exactly_the_tiles_never_computed():
    nq, nk, block_q, block_k = 100, 90, 16, 32
    tracer = _trace("fa2", nq, nk, 8, block_q, block_k, True, seed=3)
    schedule = tiles.TileSchedule(tracer)
    last = schedule.frame(schedule.n_steps - 1)
    computed = {(s.q_block, s.k_block) for s in tracer.steps if s.q_block is not None and s.k_block is not None}
    for i in range(num_blocks(nq, block_q)):
        for j in range(num_blocks(nk, block_k)):
            skipped = causal_tile_skipped(i, j, block_q, block_k, nq)
            assert skipped == ((i, j) not in computed), f"tile ({i}, {j})"
            assert (last.s_states[i, j] == tiles.SKIPPED) == skipped
            if not skipped:
                assert last.s_states[i, j] in (tiles.DONE, tiles.CURRENT)


def test_reuse_counts_show_fa2_rereads_kv_and_fa1_rereads_q():
    nq, nk, block_q, block_k = 96, 64, 32, 16
    fa2 = tiles.reuse_counts(_trace("fa2", nq, nk, 8, block_q, block_k, False))
    fa1 = tiles.reuse_counts(_trace("fa1", nq, nk, 8, block_q, block_k, False))
    n_q, n_k = num_blocks(nq, block_q), num_blocks(nk, block_k)
    assert np.array_equal(fa2["Q"], np.ones(n_q)) and np.array_equal(fa2["K"], np.full(n_k, n_q))
    assert np.array_equal(fa1["K"], np.ones(n_k)) and np.array_equal(fa1["Q"], np.full(n_q, n_k))
    assert "O" not in fa2, "FA2 never reads O back"


def test_reuse_heatmap_draws_the_counts():
    tracer = _trace("fa1", 64, 64, 8, 16, 16, True)
    fig = tiles.plot_reuse_heatmap(tracer)
    counts = tiles.reuse_counts(tracer)
    q_side = [t for t in counts if t in tiles.QUERY_SIDE]
    drawn = fig.axes[0].get_images()[0].get_array()
    assert np.array_equal(np.asarray(drawn), np.stack([counts[t] for t in q_side]))


def test_tile_view_update_changes_artists_without_new_figures():
    tracer = _trace("backward", 64, 64, 8, 16, 16, True, batch=(2,))
    fig = tiles.plot_tile_schedule(tracer, step=0, sram_capacity=64 * 1024)
    before = len(plt.get_fignums())
    view = fig.view
    for t in (5, view.schedule.n_steps - 1):
        frame = view.update(t)
        assert np.array_equal(view.im_s.get_array(), frame.s_states)
        assert view.bars[1].get_width() == frame.read_bytes_so_far
        assert view.bar_texts[1].get_text() == format_bytes(frame.read_bytes_so_far)
    assert frame.batch == 1, "the second batch element's steps come last"
    png = view.render_png()
    assert png.startswith(PNG_MAGIC)
    assert len(plt.get_fignums()) == before


def test_tile_view_draws_the_sram_capacity_only_against_the_sram_occupancy():
    tracer = _trace("fa2", 64, 64, 8, 16, 16, True)
    view = tiles.plot_tile_schedule(tracer, step=3, sram_capacity=64 * 1024).view
    assert view.capacity_line.axes is view.ax_sram and view.bars[0].axes is view.ax_sram
    assert all(bar.axes is view.ax_hbm for bar in view.bars[1:]), "HBM bytes have their own panel"
    assert not view.ax_hbm.lines, "no SRAM capacity line across the HBM bars"
    assert view.ax_sram.get_xscale() == "linear" and view.ax_sram.get_xlim()[1] > 64 * 1024
    assert view.bars[0].get_width() == view.frame.sram_bytes
    assert "64 KiB" in view.ax_sram.get_title()


def test_tile_schedule_rejects_bad_input_by_name():
    tracer = _trace("fa2", 32, 32, 8, 16, 16, False)
    schedule = tiles.TileSchedule(tracer)
    with pytest.raises(ValueError, match="step=99"):
        schedule.frame(99)
    with pytest.raises(TypeError, match="step"):
        schedule.frame(1.5)
    with pytest.raises(ValueError, match="tracer holds no steps"):
        tiles.TileSchedule(TrafficTracer())
    with pytest.raises(ValueError, match="sram_capacity"):
        tiles.TileSchedule(tracer, sram_capacity=-1)


def test_frame_data_for_n_4096_is_quick():
    tracer = _trace("fa2", 4096, 4096, 4, 64, 64, False)
    schedule = tiles.TileSchedule(tracer)
    start = time.perf_counter()
    for t in range(0, schedule.n_steps, schedule.n_steps // 20):
        schedule.frame(t)
    per_step = (time.perf_counter() - start) / 21
    assert per_step < 0.05, f"a step's frame data took {per_step * 1e3:.1f} ms for N=4096 (budget 50 ms)"


def test_traffic_vs_n_traced_points_lie_on_the_fa2_curve():
    data = traffic_plots.traffic_vs_n_data(d=16, sram_bytes=16 * 1024, itemsize=2, causal=True,
                                           ns=[64, 96, 128, 1024], traced_ns=(64, 96, 128))
    assert (data.block_q, data.block_k) == traffic.paper_block_sizes(16 * 1024 // 2, 16)
    for n, traced in zip(data.traced_ns, data.traced_fa2):
        index = list(data.ns).index(n)
        assert traced == data.fa2[index], f"traced N={n} is off the formula curve"
    fig = traffic_plots.plot_traffic_vs_n(data)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert np.array_equal(lines["naive (formula)"].get_ydata(), data.naive)
    assert np.array_equal(lines["traced tiled_attention runs"].get_ydata(), data.traced_fa2)
    new = traffic_plots.traffic_vs_n_data(d=32, sram_bytes=16 * 1024, ns=[64, 1024], traced_ns=(64,))
    fig.view.update(new)
    assert np.array_equal(lines["FlashAttention-2 (formula)"].get_ydata(), new.fa2)


def test_traffic_vs_sram_falls_as_one_over_m_and_marks_real_sram_sizes():
    data = traffic_plots.traffic_vs_sram_data(n=2048, d=32, itemsize=2)
    assert np.all(np.diff(data.fa1) <= 0), "FA1 traffic must not grow with SRAM size"
    m_elements = data.sram_bytes // data.itemsize
    assert np.allclose(data.theta * m_elements, data.theta[0] * m_elements[0]), "theta must fall as 1/M"
    assert np.all(data.fa1 >= data.lower_bound) and np.all(data.fa2 >= data.lower_bound)
    marks = dict(data.marks)
    assert marks["A100 per SM"] == A100.smem_per_sm == 164 * 1024
    assert marks["H100/H200 per SM"] == H100.smem_per_sm == 228 * 1024
    assert marks["H100/H200 all 132 SMs"] == 132 * 228 * 1024
    fig = traffic_plots.plot_traffic_vs_sram(data)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert any("A100 per SM" in t for t in labels) and any("all 108 SMs" in t for t in labels)


def test_roofline_points_are_flops_over_formula_bytes():
    from flashlab.flops import attention_flops

    n, d = 512, 32
    data = roofline.roofline_data(n=n, d=d, itemsize=2, block_q=64, block_k=32)
    points = {p.name: p for p in data.points}
    naive_bytes = sum(p.hbm_bytes for p in data.points if p.kind == "naive")
    assert naive_bytes == traffic.naive_traffic(n, n, d, itemsize=2).total
    fwd = points["flash forward"]
    assert fwd.flops == attention_flops(n, n, d, block_q=64, block_k=32)
    assert fwd.hbm_bytes == traffic.fa2_forward_traffic(n, n, d, block_q=64, block_k=32, itemsize=2).total
    for p in data.points:
        assert p.attainable == pytest.approx(min(H200_MEASURED.flops_per_s, p.intensity * H200_MEASURED.hbm_bytes_per_s))
    decode = next(p for p in data.points if p.kind == "decode")
    assert decode.intensity < 2 < H200_MEASURED.ridge_point, "decode must sit deep in the memory-bound region"
    assert fwd.intensity > points["naive S=QKᵀ"].intensity
    roofline.plot_roofline(data)


def test_moved_vs_touched_uses_the_traced_bytes():
    data = traffic_plots.moved_vs_touched_data(n=128, d=16, block_q=32, block_k=32)
    by_name = dict(zip(data.names, zip(data.hbm_bytes, data.sram_bytes)))
    naive = traffic.naive_traffic(128, 128, 16, itemsize=2).total
    assert by_name["naive forward"] == (naive, naive), "naive moves every byte it touches"
    fa2 = _trace("fa2", 128, 128, 16, 32, 32, False, seed=7)
    assert by_name["FA2 forward"] == (fa2.hbm_bytes, fa2.sram_bytes)
    assert by_name["FA2 forward"][0] < naive < by_name["FA2 forward"][1]
    fig = traffic_plots.plot_moved_vs_touched(data)
    heights = [round(bar.get_height()) for bar in fig.axes[0].patches]
    assert heights == list(data.hbm_bytes) + list(data.sram_bytes)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(PNG_MAGIC)


def test_format_bytes_uses_binary_units_and_rejects_negatives():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**20) == "3 MiB"
    assert format_bytes(5 * 2**30) == "5 GiB"
    with pytest.raises(ValueError, match="nbytes"):
        format_bytes(-1)


def test_tile_widget_slider_callback_redraws_the_step():
    pytest.importorskip("ipywidgets")
    from flashlab.viz.widgets import tile_schedule_widget

    tracer = _trace("fa1", 64, 64, 8, 16, 16, True)
    w = tile_schedule_widget(tracer, sram_capacity=32 * 1024)
    first = w.image.value
    assert (w.slider.max, w.play.max) == (len(tracer.steps) - 1, len(tracer.steps) - 1)
    w.slider.value = 6  # what the play button does through its link
    assert w.view.frame.step == 6
    assert bytes(w.image.value) != bytes(first) and bytes(w.image.value).startswith(PNG_MAGIC)
    w.on_step({"new": 2})
    assert w.view.frame.step == 2


def test_traffic_widget_sliders_recompute_the_curves():
    pytest.importorskip("ipywidgets")
    from flashlab.viz.widgets import traffic_vs_n_widget

    w = traffic_vs_n_widget(d=32, sram_kib=32, traced_ns=(64,))
    fa2_line = next(line for line in w.view.ax.get_lines() if line.get_label().startswith("FlashAttention-2"))
    before = np.array(fa2_line.get_ydata())
    w.d.value = 64
    assert w.view.data.d == 64
    assert not np.array_equal(before, fa2_line.get_ydata())
    w.causal.value = True
    assert w.view.data.causal and np.array_equal(fa2_line.get_ydata(), w.view.data.fa2)


def test_importing_viz_does_not_import_matplotlib():
    code = "import sys, flashlab.viz; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _tiles_in_text(text):
    """{(tensor, tile)} named by a describe_transfers text: 'Q[3]' or 'O[0:16]' (a slice of tiles)."""
    import re

    named = set()
    for tensor, lo, hi in re.findall(r"(\w+)\[(\d+)(?::(\d+))?\]", text):
        named |= {(tensor, t) for t in range(int(lo), int(hi) if hi else int(lo) + 1)}
    return named


@pytest.mark.parametrize("algorithm", ["fa1", "backward"])
def test_step_text_names_exactly_the_tiles_moved(algorithm):
    tracer = _trace(algorithm, 72, 56, 4, 8, 8, True, seed=11)
    schedule = tiles.TileSchedule(tracer)
    for t in range(schedule.n_steps):
        frame = schedule.frame(t)
        for transfers in (frame.reads, frame.writes):
            moved = {(name, tile) for name, lo, hi, _ in transfers for tile in range(lo, hi)}
            assert _tiles_in_text(tiles.describe_transfers(transfers, max_ranges=10**6)) == moved, f"step {t}"


def test_long_steps_keep_the_layout_and_a_short_text():
    import warnings

    nq, block_q = 256, 4  # FA1's first step stores every O, l, m tile: 3 x 64 of them
    tracer = _trace("fa1", nq, 64, 4, block_q, 32, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "constrained_layout not applied": a collapsed figure
        fig = tiles.plot_tile_schedule(tracer, step=0)
    text = fig.view.step_text.get_text()
    n_tiles = num_blocks(nq, block_q)
    assert all(f"{name}[0:{n_tiles}]" in text for name in ("O", "l", "m")), text
    assert max(len(line) for line in text.splitlines()) <= 50, f"step text runs out of the figure:\n{text}"
    width, _ = fig.get_size_inches() * fig.dpi
    for ax in fig.axes:
        assert ax.get_position().width * width > 20, "an axes collapsed"


def test_ncu_measurements_match_the_anchor_csv():
    import csv
    from pathlib import Path

    from flashlab.hardware import NCU_FLASH, NCU_NAIVE, NCU_NAIVE_SCALE

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "anchors" / "h200_ncu_naive_vs_flash.csv"
    if not path.exists():
        pytest.skip("benchmarks/anchors is not in this checkout")
    kernels = {}  # kernel id -> (name, {metric: value})
    with path.open() as handle:
        for row in csv.reader(line for line in handle if line.startswith('"')):
            if row[0].isdigit():
                kernels.setdefault(row[0], (row[4], {}))[1][row[12]] = int(row[14].replace(",", ""))
    naive = [m for name, m in kernels.values() if any(s in name for s in ("nvjet", "MulFunctor", "SoftMaxForward"))]
    flash = [m for name, m in kernels.values() if "pytorch_flash::flash_fwd_kernel" in name]
    assert len(naive) == 4 and len(flash) == 1, "the csv should hold naive's 4 kernels and one FA2 kernel"
    assert NCU_NAIVE.read_bytes == sum(m["dram__bytes_read.sum"] for m in naive)
    assert NCU_NAIVE.write_bytes == sum(m["dram__bytes_write.sum"] for m in naive)
    assert NCU_FLASH.read_bytes == flash[0]["dram__bytes_read.sum"]
    assert NCU_FLASH.write_bytes == flash[0]["dram__bytes_write.sum"]
    scale = [m for name, m in kernels.values() if "MulFunctor" in name]
    assert NCU_NAIVE_SCALE.read_bytes == scale[0]["dram__bytes_read.sum"]
    assert NCU_NAIVE_SCALE.write_bytes == scale[0]["dram__bytes_write.sum"]


def test_roofline_speedups_are_roofline_times_of_the_formula_costs():
    n, d, bq, bk = 1024, 64, 64, 64
    data = roofline.roofline_data(n=n, d=d, block_q=bq, block_k=bk)
    ceil = data.ceilings

    def time(flops, nbytes):
        return max(flops / ceil.flops_per_s, nbytes / ceil.hbm_bytes_per_s)

    points = {p.name: p for p in data.points}
    naive = [p for p in data.points if p.kind == "naive"]
    assert data.prefill_seconds[0] == pytest.approx(sum(time(p.flops, p.hbm_bytes) for p in naive))
    fwd = points["flash forward"]
    assert data.prefill_seconds[1] == pytest.approx(time(fwd.flops, fwd.hbm_bytes))
    naive_decode = next(p for name, p in points.items() if name.startswith("naive decode"))
    flash_decode = next(p for name, p in points.items() if name.startswith("flash decode"))
    assert naive_decode.hbm_bytes == traffic.naive_traffic(1, n, d, itemsize=2).total
    assert flash_decode.hbm_bytes == traffic.fa2_forward_traffic(1, n, d, block_q=bq, block_k=bk, itemsize=2).total
    assert data.decode_seconds[1] == pytest.approx(time(flash_decode.flops, flash_decode.hbm_bytes))
    assert 1 <= data.decode_speedup < 1.1, "decode reads K and V either way: little to save"
    assert data.prefill_speedup - 1 > 10 * (data.decode_speedup - 1), "flash should help prefill far more than decode"
    fig = roofline.plot_roofline(data)
    assert any(f"{data.prefill_speedup:.2f}×" in t.get_text() for t in fig.axes[0].texts)


def test_naive_backward_touches_what_it_moves():
    data = traffic_plots.moved_vs_touched_data(n=96, d=8, block_q=32, block_k=16)
    by_name = dict(zip(data.names, zip(data.hbm_bytes, data.sram_bytes)))
    naive = traffic.naive_backward_traffic(96, 96, 8, itemsize=2).total
    assert by_name["naive backward"] == (naive, naive)
    assert by_name["FA2 backward"][0] < naive, "the tiled backward moves fewer bytes than the naive one"


def test_traffic_vs_sram_rejects_an_sram_too_small_for_the_blocks():
    with pytest.raises(ValueError, match="sram_bytes"):
        traffic_plots.traffic_vs_sram_data(n=256, d=64, itemsize=2, sram_bytes=[256, 65536])
