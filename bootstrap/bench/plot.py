"""bench.png, drawn with Pillow (matplotlib is not in the env's lock): samples/s per measured window, then
utilisation over time. `layout` places every mark as data, so tests check the chart without reading pixels;
`render_png` only paints it. docs/benchmark.md, "Reading the report"."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from bootstrap.bench.results import BenchResult

WIDTH = 960
ROW = 16
MAX_BARS = 40
MARGIN = 10
TIMELINE_HEIGHT = 260
COLOURS = {  # a bar by its phase
    "ceiling": (90, 90, 90),
    "ceiling_h2d": (140, 140, 140),
    "loader": (170, 120, 200),
    "naive": (214, 96, 77),
    "scaling": (200, 160, 220),
    "tune": (240, 180, 80),
    "knob": (250, 210, 120),
    "tuned": (60, 150, 90),
}
OTHER_BAR = (120, 120, 120)  # a phase not in COLOURS
TRIALS = ("tune", "knob")  # the phases whose bars give way, slowest first, past MAX_BARS
GPU_LINE = (40, 140, 60)
HOST_LINE = (60, 100, 200)
TUNED_LINE = (30, 110, 60)
GREY = (80, 80, 80)
PHASE_SHADES = ((245, 245, 245), (232, 236, 244))
PHASE_LABEL_ROWS = 3  # a phase's label goes down these rows where a longer phase's label takes its place
PHASE_LABEL_ROW = 12
Colour = tuple[int, int, int]
Bar = tuple[str, str, float]  # (phase, label, samples/s)


@dataclass(frozen=True)
class Text:
    x: int
    y: int
    text: str
    role: str  # what it says: "title", "x-axis", "ceiling", "tuned", "bar-label", ...
    fill: Colour = (0, 0, 0)


@dataclass(frozen=True)
class Shape:
    kind: str  # "rect" | "line" | "dashed" | "dot"
    points: tuple[int, ...]  # rect/dot: x0, y0, x1, y1; line/dashed: x0, y0, x1, y1, ...
    role: str
    fill: Optional[Colour] = None
    outline: Optional[Colour] = None
    width: int = 1


@dataclass
class Chart:
    width: int
    height: int
    font: Any
    texts: list[Text] = field(default_factory=list)
    shapes: list[Shape] = field(default_factory=list)

    def text(self, x: int, y: int, text: str, role: str, fill: Colour = (0, 0, 0)) -> None:
        """A label at (x, y), moved left where it would run past the right edge."""
        x = max(0, min(x, self.width - MARGIN // 2 - self.text_width(text)))
        self.texts.append(Text(x, y, text, role, fill))

    def shape(self, kind: str, points: tuple[int, ...], role: str, fill: Colour, width: int = 1) -> None:
        self.shapes.append(Shape(kind, points, role, fill=fill, width=width))

    def text_width(self, text: str) -> int:
        left, _, right, _ = self.font.getbbox(text)
        return int(right - left) + 1

    def text_box(self, item: Text) -> tuple[int, int, int, int]:
        """Where `item` lands in the image (left, top, right, bottom)."""
        left, top, right, bottom = self.font.getbbox(item.text)
        return item.x + int(left), item.y + int(top), item.x + int(right), item.y + int(bottom)

    def roles(self) -> list[str]:
        return [t.role for t in self.texts] + [s.role for s in self.shapes]


def chart_height(bars: int, timeline: bool) -> int:
    """The image's height for `bars` rows (at most MAX_BARS), with or without the utilisation timeline."""
    return 32 + ROW * max(1, min(bars, MAX_BARS)) + 56 + (TIMELINE_HEIGHT if timeline else 0)


def layout(result: BenchResult, font: Any = None) -> Chart:
    """Every mark of the chart, placed; `font` measures the labels (default: Pillow's default font)."""
    if font is None:
        from PIL import ImageFont

        font = ImageFont.load_default()
    bars = _bars(result)
    timeline = bool(result.sampler.gpu_timeline or result.sampler.host_timeline)
    chart = Chart(WIDTH, chart_height(len(bars), timeline), font)
    title = f"bootstrap bench: {result.device.get('type', '?')} {result.device.get('name', '')}"
    chart.text(MARGIN, 8, title + ("  (partial)" if result.partial else ""), "title")
    bottom = _place_bars(chart, bars, result, top=32)
    if timeline:
        _place_timeline(chart, result, top=bottom + 56, height=TIMELINE_HEIGHT - 20)
    return chart


def render_png(result: BenchResult) -> bytes:
    """The chart as PNG bytes."""
    return chart_png(layout(result))


def chart_png(chart: Chart) -> bytes:
    """A laid-out chart drawn as PNG bytes."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (chart.width, chart.height), "white")
    draw = ImageDraw.Draw(image)
    for shape in chart.shapes:
        _paint(draw, shape)
    for item in chart.texts:
        draw.text((item.x, item.y), item.text, fill=item.fill, font=chart.font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _paint(draw: Any, shape: Shape) -> None:
    if shape.kind == "rect":
        draw.rectangle(list(shape.points), fill=shape.fill, outline=shape.outline)
    elif shape.kind == "dot":
        draw.ellipse(list(shape.points), fill=shape.fill)
    elif shape.kind == "ring":
        draw.ellipse(list(shape.points), outline=shape.fill, width=shape.width)
    elif shape.kind == "dashed":
        x0, y0, x1, y1 = shape.points
        for y in range(y0, y1, 6):
            draw.line([x0, y, x1, min(y + 3, y1)], fill=shape.fill, width=shape.width)
    else:
        draw.line(list(shape.points), fill=shape.fill, width=shape.width)


def _bars(result: BenchResult) -> list[Bar]:
    """A bar a measured window; past MAX_BARS, every bar but the trials, then the fastest trials."""
    bars = []
    for m in result.measurements:
        says_phase = m.label.startswith(m.phase.split("_")[0])  # "ceiling w=0", "tuned #1"
        bars.append((m.phase, m.label if says_phase else f"{m.phase} {m.label}", m.samples_per_s))
    if len(bars) <= MAX_BARS:
        return bars
    fixed = [bar for bar in bars if bar[0] not in TRIALS]
    trials = sorted((bar for bar in bars if bar[0] in TRIALS), key=lambda bar: -bar[2])
    return fixed + trials[: max(0, MAX_BARS - len(fixed))]


def _fit(chart: Chart, text: str, width: int) -> str:
    """`text`, cut to `width` pixels with an ellipsis: a long label must not run into its bar."""
    if chart.text_width(text) <= width:
        return text
    while text and chart.text_width(text + "...") > width:
        text = text[:-1]
    return text + "..."


def _place_bars(chart: Chart, bars: Sequence[Bar], result: BenchResult, top: int) -> int:
    """The bars, their rates, the ceiling and tuned marks, and the axis; returns the bars' bottom."""
    left, right = 300, WIDTH - 120
    ceiling = result.metrics.ceiling_samples_per_s
    tuned = result.metrics.tuned_samples_per_s
    peak = max([bar[2] for bar in bars] + [ceiling or 0.0, tuned or 0.0, 1e-9])

    def x_of(rate: float) -> int:
        return left + int((right - left) * max(0.0, rate) / peak)

    for row, (phase, label, rate) in enumerate(bars):
        y = top + row * ROW
        chart.text(MARGIN, y + 2, _fit(chart, label, left - 2 * MARGIN), "bar-label")
        chart.shape("rect", (left, y + 2, max(left + 1, x_of(rate)), y + ROW - 3), "bar", COLOURS.get(phase, OTHER_BAR))
        chart.text(x_of(rate) + 6, y + 2, f"{rate:,.0f}/s", "bar-rate")
    bottom = top + ROW * max(1, len(bars))
    chart.shape("line", (left, bottom, right, bottom), "x-axis", GREY)
    marks = [(tuned, "tuned", TUNED_LINE, "line"), (ceiling, "ceiling", (0, 0, 0), "dashed")]
    for row, (mark, name, colour, kind) in enumerate(marks):
        if mark:
            chart.shape(kind, (x_of(mark), top, x_of(mark), bottom), name, colour, width=2)
            text = f"{name} {mark:,.0f} samples/s"
            chart.text(x_of(mark) - chart.text_width(text) // 2, bottom + 4 + 13 * row, text, name, colour)
    chart.text(left, bottom + 32, "throughput (samples/s; longer is faster)", "x-axis", GREY)
    return bottom


def _place_timeline(chart: Chart, result: BenchResult, top: int, height: int) -> None:
    """GPU utilisation and host CPU busy % over the run, on shaded phase bands."""
    left, right = 60, WIDTH - 20
    bottom = top + height - 30
    sampler = result.sampler
    series = ((sampler.host_timeline, HOST_LINE, "host-busy"), (sampler.gpu_timeline, GPU_LINE, "gpu-utilization"))
    span = max([result.seconds, 1e-3] + [t for timeline, _, _ in series for t, _ in timeline])

    def x_of(seconds: float) -> int:
        return left + int((right - left) * max(0.0, seconds) / span)

    def y_of(percent: float) -> int:
        return bottom - int((bottom - top - 16) * max(0.0, min(100.0, percent)) / 100.0)

    for index, phase in enumerate(result.phases):
        x0, x1 = x_of(phase.started_s), x_of(phase.started_s + phase.seconds)
        chart.shape("rect", (x0, top + 16, max(x0 + 1, x1), bottom), "phase", PHASE_SHADES[index % 2])
    placed: list[tuple[int, int, int, int]] = []
    for phase in sorted(result.phases, key=lambda phase: -phase.seconds):  # the longest phases choose first
        _place_phase_label(chart, phase.name, x_of(phase.started_s) + 2, top + 18, right, placed)
    chart.shapes.append(Shape("rect", (left, top + 16, right, bottom), "frame", outline=(0, 0, 0)))
    for percent in (0, 50, 100):
        chart.text(MARGIN, y_of(percent) - 6, f"{percent}%", "y-tick")
    for timeline, colour, role in series:
        points = [(x_of(t), y_of(v)) for t, v in timeline]
        if len(points) > 1:
            chart.shape("line", tuple(c for point in points for c in point), role, colour, width=2)
        elif points:
            ((x, y),) = points
            chart.shape("dot", (x - 2, y - 2, x + 2, y + 2), role, colour)
    chart.text(left, top, "utilisation (%) over time:", "y-axis")
    chart.text(left + 180, top, "GPU utilization.gpu (%)", "legend", GPU_LINE)
    chart.text(left + 350, top, "host CPU busy (%)", "legend", HOST_LINE)
    chart.text(left, bottom + 8, f"time since start (s), 0 to {span:.0f}", "x-axis", GREY)


def _place_phase_label(
    chart: Chart, name: str, x: int, y: int, right: int, placed: list[tuple[int, int, int, int]]
) -> None:
    """`name` at the start of its phase's band, on the first of PHASE_LABEL_ROWS rows where it meets no label
    already `placed`; else abbreviated the same way; else left out, as adjacent short phases leave no room."""
    for text in (name, name[:3] + "."):
        for row in range(PHASE_LABEL_ROWS):
            item = Text(max(0, min(x, right - chart.text_width(text))), y + row * PHASE_LABEL_ROW, text, "phase-label")
            box = chart.text_box(item)
            if not any(_overlap(box, other) for other in placed):
                placed.append(box)
                chart.text(item.x, item.y, text, "phase-label", (90, 90, 90))
                return


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int], gap: int = 8) -> bool:
    """Whether boxes `a` and `b` (left, top, right, bottom) share a row and come closer than `gap` pixels."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] and b[1] < a[3]
