"""ipywidgets around the figures: a step slider with a play button, and sliders for d, M, itemsize, causal.

The figures are ordinary matplotlib figures rendered to PNG into an ``ipywidgets.Image``; a
change of a control updates the figure's artists in place (no new figure) and re-renders the
PNG. This needs no extra Jupyter extension (ipympl is not required) and works the same headless,
which is how the tests drive the callbacks: ``widget.on_step({"new": 5})``.
"""
from __future__ import annotations

import io

from ..hardware import H200
from ..tracer import TrafficTracer
from .tiles import TileSchedule, TileScheduleView, step_title
from .traffic_plots import TrafficVsNView, traffic_vs_n_data, traffic_vs_n_limits


def figure_png(fig, dpi: int | None = None) -> bytes:
    """The figure as PNG bytes (what the Image widget shows)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi or fig.dpi)
    return buffer.getvalue()


class TileScheduleWidget:
    """View 1 with a step slider and a play button. ``.widget`` is what a notebook displays.

    The run is traced once (the tracer you pass); moving the slider only redraws. Steps are
    0-based everywhere: the slider's value t is the figure's "step t (of 0..n-1)" and
    ``schedule.frame(t)``.
    """

    def __init__(self, tracer: TrafficTracer | TileSchedule, sram_capacity: int | None = H200.smem_per_sm,
                 interval_ms: int = 400, dpi: int = 80) -> None:
        import ipywidgets as widgets

        schedule = tracer if isinstance(tracer, TileSchedule) else TileSchedule(tracer, sram_capacity)
        self.view = TileScheduleView(schedule, 0, dpi=dpi, managed=False)
        last = schedule.n_steps - 1
        self.slider = widgets.IntSlider(value=0, min=0, max=last, description="step",
                                        tooltip=f"{step_title(0, schedule.n_steps)}: the figure's step",
                                        continuous_update=True, layout=widgets.Layout(width="60%"))
        self.play = widgets.Play(value=0, min=0, max=last, interval=interval_ms, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.image = widgets.Image(value=self.view.render_png(), format="png")
        self.slider.observe(self.on_step, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.play, self.slider]), self.image])

    def on_step(self, change) -> None:
        """Slider callback: redraw step ``change['new']``."""
        self.view.update(int(change["new"]))
        self.image.value = self.view.render_png()

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


class TrafficVsNWidget:
    """View 3 with sliders for head dimension d, SRAM size M, element size and a causal checkbox.

    The axes hold every setting of the controls, so a change moves the curves, not the axes, and
    redraws only them (blitting). Traced points are drawn for the N in ``traced_ns`` whose
    schedule has at most ``max_traced_tiles`` tiles, so that no change waits on a long traced run.
    """

    MAX_TRACED_TILES = 256  # a traced run costs about 0.3 ms per tile: <= about 0.1 s per N

    D_CHOICES = (32, 64, 128, 256)
    SRAM_KIB_CHOICES = (16, 32, 48, 64, 100, 128, 164, 192, 228)
    ITEMSIZE_CHOICES = (("fp32 (4 B)", 4), ("fp16/bf16 (2 B)", 2), ("fp8 (1 B)", 1))

    def __init__(self, d: int = 64, sram_kib: int = 128, itemsize: int = 2, causal: bool = False,
                 traced_ns=(128, 256, 512), dpi: int = 80, max_traced_tiles: int | None = MAX_TRACED_TILES) -> None:
        import ipywidgets as widgets

        self.traced_ns = traced_ns
        self.max_traced_tiles = max_traced_tiles
        self.d = widgets.SelectionSlider(options=self.D_CHOICES, value=d, description="d")
        self.sram = widgets.SelectionSlider(options=[(f"{m} KiB", m) for m in self.SRAM_KIB_CHOICES],
                                            value=sram_kib, description="SRAM M")
        self.itemsize = widgets.Dropdown(options=self.ITEMSIZE_CHOICES, value=itemsize, description="element")
        self.causal = widgets.Checkbox(value=causal, description="causal")
        self.view = TrafficVsNView(self._data(), dpi=dpi, managed=False, limits=self._limits())
        self.image = widgets.Image(value=self.view.render_png(), format="png")
        for control in (self.d, self.sram, self.itemsize, self.causal):
            control.observe(self.on_change, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.d, self.sram]), widgets.HBox([self.itemsize, self.causal]),
                                    self.image])

    def _data(self):
        return traffic_vs_n_data(d=self.d.value, sram_bytes=self.sram.value * 1024, itemsize=self.itemsize.value,
                                 causal=self.causal.value, traced_ns=self.traced_ns,
                                 max_traced_tiles=self.max_traced_tiles)

    def _limits(self):
        """Axes that hold the curves of every setting: traffic grows with d and the element size,
        falls with M and with causal masking, so the extreme settings bound all the others."""
        sizes = [size for _, size in self.ITEMSIZE_CHOICES]
        corners = [traffic_vs_n_data(d=d, sram_bytes=m * 1024, itemsize=size, causal=causal, traced_ns=())
                   for d in self.D_CHOICES for m in (min(self.SRAM_KIB_CHOICES), max(self.SRAM_KIB_CHOICES))
                   for size in (min(sizes), max(sizes)) for causal in (False, True)]
        return traffic_vs_n_limits(corners)

    def on_change(self, change=None) -> None:
        """Any control's callback: recompute the curves (formulas + small traced runs) and redraw them."""
        self.view.update(self._data())
        self.image.value = self.view.render_png()

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


def tile_schedule_widget(tracer: TrafficTracer | TileSchedule, sram_capacity: int | None = H200.smem_per_sm,
                         **kwargs):
    """View 1 as a widget (step slider + play button); display the returned object in a notebook.

    ``sram_capacity`` (bytes) defaults to the H200's shared memory per SM (228 KiB); a
    :class:`TileSchedule` passed in keeps its own capacity."""
    return TileScheduleWidget(tracer, sram_capacity, **kwargs)


def traffic_vs_n_widget(**kwargs):
    """View 3 as a widget (sliders for d, M, element size, causal)."""
    return TrafficVsNWidget(**kwargs)
