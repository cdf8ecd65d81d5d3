"""training.png, drawn with Pillow as bench.png is (`plot.Chart`): the step's samples/s, then its peak memory,
against the micro-batch, one line per precision and memory format, the recommendation ringed. `layout`
places every mark as data, so tests check the chart without reading pixels; `render_png` only paints it."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from bootstrap.bench.plot import GREY, MARGIN, WIDTH, Chart, Colour, chart_png
from bootstrap.bench.recipe import GridRow, TrainingAdvice

PANEL = 220  # each panel's height in pixels
LEFT, RIGHT = 90, WIDTH - 190  # the plot area; the legend goes right of it
SERIES_COLOURS: dict[tuple[str, bool], Colour] = {
    ("fp32", False): (60, 100, 200),
    ("fp32", True): (120, 160, 230),
    ("bf16", False): (214, 96, 77),
    ("bf16", True): (240, 160, 120),
    ("fp16", False): (60, 150, 90),
    ("fp16", True): (130, 200, 140),
}
RING = (0, 0, 0)


def series(grid: Sequence[GridRow]) -> dict[tuple[str, bool], list[GridRow]]:
    """The grid's rows by (precision, channels_last), each sorted by micro-batch."""
    out: dict[tuple[str, bool], list[GridRow]] = {}
    for row in grid:
        out.setdefault((row.precision, row.channels_last), []).append(row)
    return {key: sorted(rows, key=lambda r: r.micro) for key, rows in out.items()}


def layout(advice: TrainingAdvice, font: Any = None) -> Chart:
    """Every mark of the chart, placed; `font` measures the labels (default: Pillow's default font)."""
    if font is None:
        from PIL import ImageFont

        font = ImageFont.load_default()
    chart = Chart(WIDTH, 40 + 2 * (PANEL + 40), font)
    title = (
        f"bootstrap bench --effective-batch {advice.effective_batch}: {advice.device}, recommended "
        f"{advice.micro_batch} x {advice.accumulation_steps} {advice.precision}"
        + (" channels_last" if advice.channels_last else "")
    )
    chart.text(MARGIN, 8, title, "title")
    sizes = sorted({row.micro for row in advice.grid})
    lines = series(advice.grid)
    chosen = (advice.micro_batch, advice.precision, advice.channels_last)
    panels: tuple[tuple[str, str, Callable[[GridRow], Optional[float]]], ...] = (
        ("rate", "samples/s (higher is faster)", lambda r: r.samples_per_s if r.fits else None),
        ("memory", "peak memory (MiB)", lambda r: None if r.peak_bytes is None else r.peak_bytes / 2**20),
    )
    for index, panel in enumerate(panels):
        _panel(chart, 36 + index * (PANEL + 40), sizes, lines, chosen, panel)
    _legend(chart, list(lines), top=36)
    return chart


def _panel(
    chart: Chart,
    top: int,
    sizes: Sequence[int],
    lines: dict[tuple[str, bool], list[GridRow]],
    chosen: tuple[int, str, bool],
    panel: tuple[str, str, Callable[[GridRow], Optional[float]]],
) -> None:
    """One panel (role, label, the value a row plots): its axes, y ticks from 0 to the largest value, the
    micro-batch ticks, a line per series."""
    role, label, value = panel
    bottom = top + PANEL - 30
    values = [v for rows in lines.values() for v in map(value, rows) if v is not None]
    peak = max(values, default=0.0) or 1.0

    def x_of(micro: int) -> int:  # micro-batches evenly spaced, in order: they are powers of two, mostly
        place = sizes.index(micro)
        return LEFT + (RIGHT - LEFT) * (2 * place + 1) // (2 * max(1, len(sizes)))

    def y_of(v: float) -> int:
        return bottom - int((bottom - top - 16) * max(0.0, v) / peak)

    chart.text(LEFT, top, label, f"{role}-axis")
    chart.shape("line", (LEFT, bottom, RIGHT, bottom), "x-axis", GREY)
    chart.shape("line", (LEFT, top + 16, LEFT, bottom), "y-axis", GREY)
    for fraction in (0.0, 0.5, 1.0):
        tick = peak * fraction
        chart.text(MARGIN, y_of(tick) - 6, f"{tick:,.0f}" if peak >= 100 else f"{tick:.3g}", f"{role}-tick")
    for micro in sizes:
        chart.text(x_of(micro) - chart.text_width(str(micro)) // 2, bottom + 4, str(micro), "micro-tick")
    chart.text(LEFT, bottom + 16, "micro-batch (samples a step)", "x-axis", GREY)
    for key, rows in lines.items():
        colour = SERIES_COLOURS.get(key, GREY)
        points = [(x_of(r.micro), y_of(v)) for r in rows for v in [value(r)] if v is not None]
        if len(points) > 1:
            chart.shape("line", tuple(c for point in points for c in point), f"{role}-line", colour, width=2)
        for x, y in points:
            chart.shape("dot", (x - 3, y - 3, x + 3, y + 3), f"{role}-dot", colour)
        for r in rows:
            v = value(r)
            if r.key == chosen and v is not None:
                x, y = x_of(r.micro), y_of(v)
                chart.shape("ring", (x - 7, y - 7, x + 7, y + 7), "recommended", RING, width=2)


def _legend(chart: Chart, keys: Sequence[tuple[str, bool]], top: int) -> None:
    x = RIGHT + 20
    for row, key in enumerate(keys):
        y = top + 20 + 16 * row
        chart.shape("line", (x, y + 6, x + 20, y + 6), "legend-line", SERIES_COLOURS.get(key, GREY), width=3)
        chart.text(x + 26, y, f"{key[0]}{' channels_last' if key[1] else ''}", "legend")
    chart.text(x, top + 24 + 16 * len(keys), "ringed: recommended", "legend", GREY)


def render_png(advice: TrainingAdvice) -> bytes:
    """The chart as PNG bytes."""
    return chart_png(layout(advice))
