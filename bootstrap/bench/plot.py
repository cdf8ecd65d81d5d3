"""bench.png with Pillow: samples/s per configuration, and utilisation over time.

Pillow is in the env's lock and matplotlib is not, so the chart is drawn
with `PIL.ImageDraw`: horizontal bars (one per measured window, coloured by
phase, the ceiling as a dashed line) and, when the sampler collected
samples, a timeline of GPU utilisation and host CPU busy % over shaded
phase bands.
"""

from __future__ import annotations

import io
from typing import Any, List, Sequence, Tuple

from bootstrap.bench.results import BenchResult

WIDTH = 960
ROW = 16
MAX_BARS = 40
COLOURS = {
    "ceiling": (90, 90, 90), "ceiling_h2d": (140, 140, 140), "loader": (170, 120, 200), "naive": (214, 96, 77),
    "scaling": (200, 160, 220), "tune": (240, 180, 80), "knob": (250, 210, 120), "tuned": (60, 150, 90),
}
GPU_LINE = (40, 140, 60)
HOST_LINE = (60, 100, 200)


def render_png(result: BenchResult) -> bytes:
    """The chart as PNG bytes."""
    from PIL import Image, ImageDraw, ImageFont

    bars = _bars(result)
    timeline = bool(result.sampler.gpu_timeline or result.sampler.host_timeline)
    bar_height = 40 + ROW * max(1, len(bars)) + 30
    height = bar_height + (260 if timeline else 0)
    image = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    title = f"bootstrap bench: {result.device.get('type', '?')} {result.device.get('name', '')}"
    draw.text((10, 8), title + ("  (partial)" if result.partial else ""), fill="black", font=font)
    _draw_bars(draw, font, bars, result, top=32)
    if timeline:
        _draw_timeline(draw, font, result, top=bar_height + 10, height=230)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _bars(result: BenchResult) -> List[Tuple[str, str, float]]:
    bars = [(m.phase, m.label if m.label.startswith(m.phase.split("_")[0]) else f"{m.phase} {m.label}",
             m.samples_per_s) for m in result.measurements]
    if len(bars) > MAX_BARS:  # keep every non-tune bar and the fastest tune trials
        fixed = [b for b in bars if b[0] not in ("tune", "knob")]
        trials = sorted((b for b in bars if b[0] in ("tune", "knob")), key=lambda b: -b[2])
        bars = fixed + trials[:max(0, MAX_BARS - len(fixed))]
    return bars


def _draw_bars(draw: Any, font: Any, bars: Sequence[Tuple[str, str, float]], result: BenchResult, top: int) -> None:
    left, right = 300, WIDTH - 110
    peak = max([b[2] for b in bars] + [result.metrics.get("ceiling_samples_per_s") or 0.0, 1e-9])
    for row, (phase, label, rate) in enumerate(bars):
        y = top + row * ROW
        draw.text((10, y + 2), label[:46], fill="black", font=font)
        length = int((right - left) * rate / peak)
        draw.rectangle([left, y + 2, left + max(1, length), y + ROW - 3], fill=COLOURS.get(phase, (120, 120, 120)))
        draw.text((left + length + 6, y + 2), f"{rate:,.0f}/s", fill="black", font=font)
    ceiling = result.metrics.get("ceiling_samples_per_s")
    bottom = top + ROW * max(1, len(bars))
    if ceiling:
        x = left + int((right - left) * ceiling / peak)
        for y in range(top, bottom, 6):
            draw.line([x, y, x, y + 3], fill=(0, 0, 0))
        draw.text((x - 40, bottom + 4), "ceiling", fill="black", font=font)
    draw.text((left, bottom + 16), "samples/s (longer is faster)", fill=(80, 80, 80), font=font)


def _draw_timeline(draw: Any, font: Any, result: BenchResult, top: int, height: int) -> None:
    left, right = 60, WIDTH - 20
    bottom = top + height - 30
    span = max([result.seconds, 1e-3] + [t for t, _ in result.sampler.gpu_timeline + result.sampler.host_timeline])

    def x_of(seconds: float) -> int:
        return left + int((right - left) * max(0.0, seconds) / span)

    def y_of(percent: float) -> int:
        return bottom - int((bottom - top - 16) * max(0.0, min(100.0, percent)) / 100.0)

    shades = [(245, 245, 245), (232, 236, 244)]
    for index, phase in enumerate(result.phases):
        x0, x1 = x_of(phase.started_s), x_of(phase.started_s + phase.seconds)
        draw.rectangle([x0, top + 16, max(x0 + 1, x1), bottom], fill=shades[index % 2])
        draw.text((x0 + 2, top + 18), phase.name[:8], fill=(90, 90, 90), font=font)
    draw.rectangle([left, top + 16, right, bottom], outline=(0, 0, 0))
    for percent in (0, 50, 100):
        draw.text((10, y_of(percent) - 6), f"{percent}%", fill="black", font=font)
    for series, colour in ((result.sampler.host_timeline, HOST_LINE), (result.sampler.gpu_timeline, GPU_LINE)):
        points = [(x_of(t), y_of(v)) for t, v in series]
        if len(points) > 1:
            draw.line(points, fill=colour, width=2)
        elif points:
            draw.ellipse([points[0][0] - 2, points[0][1] - 2, points[0][0] + 2, points[0][1] + 2], fill=colour)
    draw.text((left, top), "utilisation over time:", fill="black", font=font)
    draw.text((left + 150, top), "GPU utilization.gpu", fill=GPU_LINE, font=font)
    draw.text((left + 290, top), "host CPU busy", fill=HOST_LINE, font=font)
    draw.text((left, bottom + 8), f"seconds since start (0 - {span:.0f} s)", fill=(80, 80, 80), font=font)
