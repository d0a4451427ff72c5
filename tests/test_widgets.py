"""The notebook widgets: the tile-schedule slider and its picture name the same step; the tile colours
stay apart for every reader; the traffic-vs-N widget redraws only what changed, from vectorised
formulas that equal flashlab.traffic's."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import matplotlib

matplotlib.use("Agg")

from flashlab import traffic  # noqa: E402
from flashlab.viz import style, tiles  # noqa: E402
from flashlab.viz.traffic_plots import forward_totals, traced_forward  # noqa: E402

pytest.importorskip("ipywidgets")

# -- colour vision: Machado, Oliveira & Fernandes (2009), "A physiologically-based model for simulation
# of color vision deficiency", Table 1 at severity 1.0; the matrices act on linear RGB
CVD = {
    "normal vision": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _linear_rgb(colour: str) -> np.ndarray:
    srgb = np.array(matplotlib.colors.to_rgb(colour))
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""
    lum = sorted(float(_linear_rgb(c) @ [0.2126, 0.7152, 0.0722]) for c in (a, b))
    return (lum[1] + 0.05) / (lum[0] + 0.05)


def _lab(linear: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    xyz = xyz / [0.95047, 1.0, 1.08883]  # D65 white
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _delta_e(a: str, b: str, vision: str) -> float:
    """CIE76 colour difference of a and b as seen with ``vision`` (about 2.3 is just noticeable)."""
    seen = [np.clip(CVD[vision] @ _linear_rgb(c), 0, 1) for c in (a, b)]
    return float(np.linalg.norm(_lab(seen[0]) - _lab(seen[1])))


def _schedule(causal=True, n=256, block=64):
    return tiles.TileSchedule(traced_forward(n, 32, block, block, causal=causal, seed=3), sram_capacity=64 * 1024)


# -- the tile-schedule widget -------------------------------------------------------------------

def test_tile_slider_value_and_the_figure_name_the_same_step():
    from flashlab.viz.widgets import tile_schedule_widget

    schedule = _schedule()
    w = tile_schedule_widget(schedule)
    n = schedule.n_steps
    assert (w.slider.min, w.slider.max, w.play.max) == (0, n - 1, n - 1)
    for value in (6, 0, n - 1, 3):
        w.slider.value = value
        title = w.view.step_text.get_text().splitlines()[0]
        assert title.startswith(f"step {value} (of 0..{n - 1}): "), (value, title)
        assert w.view.frame.step == value
        assert title.endswith(schedule.tracer.steps[value].label), "the title names the traced step shown"
    fig = tiles.plot_tile_schedule(schedule, step=5)
    assert fig.view.step_text.get_text().startswith(f"step 5 (of 0..{n - 1}): ")


def test_tile_states_done_and_not_yet_done_stay_apart_in_greyscale_and_for_colour_blind_readers():
    states = {"not yet done": style.TILE_IDLE, "done": style.TILE_DONE, "skipped": style.TILE_SKIPPED,
              "current": style.TILE_CURRENT}
    ratio = _contrast_ratio(style.TILE_DONE, style.TILE_IDLE)
    assert ratio >= 4.5, f"S/P done vs not yet done: contrast {ratio:.2f}:1, want >= 4.5:1 (WCAG AA)"
    for vision in CVD:
        gap = _delta_e(style.TILE_DONE, style.TILE_IDLE, vision)
        assert gap >= 40, f"{vision}: done vs not yet done differ by only {gap:.0f} (CIE76 delta E)"
        for (a, ca), (b, cb) in itertools.combinations(states.items(), 2):
            gap = _delta_e(ca, cb, vision)
            assert gap >= 10, f"{vision}: tile states {a!r} and {b!r} differ by only {gap:.1f} (CIE76 delta E)"
    gap = min(_delta_e(style.TILE_RESIDENT, style.TILE_IDLE, v) for v in CVD)
    assert gap >= 10, f"in SRAM vs in HBM differ by only {gap:.1f} for some reader"


def test_tile_legend_shows_every_tile_state_in_the_colour_drawn():
    fig = tiles.plot_tile_schedule(_schedule(), step=4)
    legend = fig.legends[0]
    shown = {text.get_text(): matplotlib.colors.to_hex(patch.get_facecolor())
             for text, patch in zip(legend.get_texts(), legend.get_patches())
             if isinstance(patch, matplotlib.patches.Patch)}
    drawn = {matplotlib.colors.to_hex(c) for c in tiles.TILE_COLOURS}
    assert set(shown.values()) == drawn, f"legend colours {shown} vs the colours drawn {sorted(drawn)}"
    labels = " | ".join(shown)
    assert shown[next(k for k in shown if "S/P done" in k)] == style.TILE_DONE.lower()
    assert shown[next(k for k in shown if "not yet done" in k)] == style.TILE_IDLE.lower(), labels


# -- the traffic-vs-N widget --------------------------------------------------------------------

def test_vectorised_forward_totals_equal_the_traffic_formulas():
    rng = np.random.default_rng(7)
    for _ in range(200):
        d, bq, bk = (int(x) for x in rng.integers(1, 130, 3))
        causal, itemsize, stat = bool(rng.integers(2)), int(rng.choice([1, 2, 4])), int(rng.choice([2, 4]))
        ns = rng.integers(1, 700, 3)
        fa2, fa1 = forward_totals(ns, d, bq, bk, causal, itemsize, stat)
        kw = dict(block_q=bq, block_k=bk, causal=causal, itemsize=itemsize, stat_itemsize=stat)
        for n, got2, got1 in zip(ns, fa2, fa1):
            n = int(n)
            assert got2 == traffic.fa2_forward_traffic(n, n, d, **kw).total, (n, d, kw)
            assert got1 == traffic.fa1_forward_traffic(n, n, d, **kw).total, (n, d, kw)


def _widget(**kwargs):
    from flashlab.viz.widgets import traffic_vs_n_widget

    return traffic_vs_n_widget(**{"d": 64, "sram_kib": 128, "traced_ns": (128, 256), **kwargs})


def _full_draw(view) -> np.ndarray:
    """The figure drawn from scratch (every artist, no cached background)."""
    for artist in view._dynamic_artists():
        artist.set_animated(False)
    view.fig.canvas.draw()
    pixels = np.asarray(view.fig.canvas.buffer_rgba()).copy()
    for artist in view._dynamic_artists():
        artist.set_animated(True)
    return pixels


def test_traffic_widget_redraw_equals_a_full_draw_and_keeps_its_axes(monkeypatch):
    w = _widget()
    limits = (w.view.ax.get_xlim(), w.view.ax.get_ylim())
    full_draws = []
    real_draw = w.view.fig.canvas.draw
    monkeypatch.setattr(w.view.fig.canvas, "draw", lambda *a, **k: (full_draws.append(1), real_draw(*a, **k)))
    # the extreme settings: the axes must hold them all
    for control, value in ((w.d, 256), (w.sram, 16), (w.itemsize, 4), (w.causal, True), (w.d, 32),
                           (w.sram, 228), (w.itemsize, 1)):
        control.value = value
        assert (w.view.ax.get_xlim(), w.view.ax.get_ylim()) == limits, f"{control.description}={value} moved the axes"
    assert not full_draws, "a control change redrew the whole figure instead of the changed curves"
    blitted = np.asarray(w.view.fig.canvas.buffer_rgba()).copy()
    monkeypatch.undo()
    different = np.any(blitted != _full_draw(w.view), axis=-1)
    assert different.mean() < 1e-3, f"the fast redraw differs from a full draw in {different.sum()} pixels"


def test_traffic_widget_change_uses_no_python_loop_over_blocks(monkeypatch):
    w = _widget()

    def loop(*args, **kwargs):
        raise AssertionError("the widget called a per-block Python loop of flashlab.traffic")

    monkeypatch.setattr(traffic, "fa1_forward_traffic", loop)
    monkeypatch.setattr(traffic, "fa2_forward_traffic", loop)
    w.sram.value = 16
    w.causal.value = True
    data = w.view.data
    assert data.sram_bytes == 16 * 1024 and data.causal


def test_traffic_widget_traces_only_short_runs_and_its_points_lie_on_the_fa2_curve():
    w = _widget(traced_ns=(128, 256, 4096), max_traced_tiles=256)
    data = w.view.data  # d=64, M=128 KiB of 2-byte elements: blocks 64 x 256
    assert (data.block_q, data.block_k) == (64, 256)
    assert data.traced_ns == (128, 256), "N=4096 has 1024 tiles: above the limit, not traced"
    for n, traced in zip(data.traced_ns, data.traced_fa2):
        kw = dict(block_q=data.block_q, block_k=data.block_k, causal=False, itemsize=2, stat_itemsize=4)
        assert traced == traffic.fa2_forward_traffic(n, n, 64, **kw).total
    w.causal.value = True
    assert w.view.data.traced_ns == (128, 256) and w.view.data.causal
