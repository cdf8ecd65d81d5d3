"""bench.png readable at a glance: every label inside the image, units on the axes, the ceiling and
the tuned rate marked. Checked on the chart's layout (what `render_png` paints), not on pixels."""

from __future__ import annotations

import io
import random
from dataclasses import replace

import pytest

from bootstrap.bench.phases import PHASES
from bootstrap.bench.plot import MAX_BARS, chart_height, layout, render_png
from bootstrap.bench.results import Metrics, PhaseRecord
from tests.fixtures.bench import synthetic_result


@pytest.fixture
def crowded():
    """The recorded result with more tune trials than the chart shows, and long labels."""
    result = synthetic_result()
    trial = next(m for m in result.measurements if m.phase == "tune")
    extra = tuple(
        replace(trial, label=f"{trial.label} prefetch_factor=4 persistent_workers=True #{i}", samples_per_s=100.0 + i)
        for i in range(MAX_BARS + 5)
    )
    return replace(result, measurements=result.measurements + extra)


@pytest.mark.parametrize("which", ["recorded", "crowded"])
def test_every_label_lies_inside_the_image(which, crowded):
    result = synthetic_result() if which == "recorded" else crowded
    chart = layout(result)
    assert chart.height == chart_height(len(result.measurements), timeline=True)
    for item in chart.texts:
        left, top, right, bottom = chart.text_box(item)
        assert 0 <= left and right <= chart.width and 0 <= top and bottom <= chart.height, item


def test_bar_labels_stop_before_their_bars(crowded):
    chart = layout(crowded)
    bars = [s for s in chart.shapes if s.role == "bar"]
    labels = [t for t in chart.texts if t.role == "bar-label"]
    assert len(bars) == len(labels) == MAX_BARS
    assert all(chart.text_box(t)[2] < bars[0].points[0] for t in labels)
    assert any(t.text.endswith("...") for t in labels)


def test_the_ceiling_and_the_tuned_rate_are_marked_and_the_axes_carry_units():
    chart = layout(synthetic_result())
    said = {t.role: t.text for t in chart.texts}
    assert said["ceiling"] == "ceiling 240 samples/s"
    assert said["tuned"] == "tuned 228 samples/s"
    assert {"ceiling", "tuned"} <= {s.role for s in chart.shapes}  # the lines themselves, besides their labels
    axes = [t.text for t in chart.texts if t.role in ("x-axis", "y-axis")]
    assert any("samples/s" in text for text in axes)
    assert any("(s)" in text for text in axes) and any("(%)" in text for text in axes)
    marks = {s.role: s for s in chart.shapes if s.role in ("ceiling", "tuned")}
    assert marks["ceiling"].points[0] > marks["tuned"].points[0]  # 240/s right of 228/s


def test_no_ceiling_or_tuned_rate_no_mark_and_still_a_png():
    from PIL import Image

    result = synthetic_result(partial=True)
    result = replace(
        result, metrics=Metrics(), measurements=tuple(m for m in result.measurements if m.phase == "naive")
    )
    chart = layout(result)
    assert not {"ceiling", "tuned"} & set(chart.roles())
    with Image.open(io.BytesIO(render_png(result))) as image:
        assert image.size == (chart.width, chart.height)


def test_the_png_is_the_layout_painted():
    from PIL import Image

    result = synthetic_result()
    chart = layout(result)
    with Image.open(io.BytesIO(render_png(result))) as image:
        assert image.format == "PNG" and image.size == (chart.width, chart.height)


def timed_phases(seed: int) -> tuple[PhaseRecord, ...]:
    """A run's phases, one after another: many short ones (down to none at all) around one long one."""
    rng = random.Random(seed)
    names = [phase.name for phase in PHASES] * 3
    short = [rng.choice((0.0, rng.uniform(0.0, 0.3), rng.uniform(0.2, 1.5))) for _ in range(rng.randint(4, 20))]
    at = rng.randint(0, len(short))
    durations = short[:at] + [rng.uniform(15.0, 40.0)] + short[at:]
    starts = [sum(durations[:i]) for i in range(len(durations))]
    return tuple(PhaseRecord(n, t, d, d, "done") for n, t, d in zip(names, starts, durations))


@pytest.mark.parametrize("seed", range(40))
def test_phase_labels_never_overlap_and_the_long_phase_keeps_its_name(seed):
    phases = timed_phases(seed)
    result = replace(synthetic_result(), phases=phases, seconds=phases[-1].started_s + phases[-1].seconds)
    chart = layout(result)
    labels = [t for t in chart.texts if t.role == "phase-label"]
    boxes = [chart.text_box(t) for t in labels]
    for i, (a, first) in enumerate(zip(boxes, labels)):
        for b, second in zip(boxes[i + 1 :], labels[i + 1 :]):
            apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
            assert apart, (first, second)
    frame = next(s for s in chart.shapes if s.role == "frame")
    assert all(frame.points[0] <= box[0] and box[2] <= frame.points[2] for box in boxes)
    names = {phase.name for phase in phases}
    assert all(
        t.text in names or (t.text.endswith(".") and any(n.startswith(t.text[:-1]) for n in names)) for t in labels
    )
    longest = max(phases, key=lambda phase: phase.seconds)
    row = min(t.y for t in labels)
    assert any(t.text == longest.name and t.y == row for t in labels)  # on the first row, in full
    assert len(labels) < len(phases) or len({t.y for t in labels}) > 1  # crowded: staggered, or some left out


def test_the_recorded_run_labels_its_short_first_phases_apart():
    """The recorded run's first three phases take 0.0, 0.2 and 1.2 s of 30: once drawn over each other."""
    phases = tuple(
        PhaseRecord(name, start, seconds, seconds, "done")
        for name, start, seconds in (
            ("checks", 2.07, 0.0001),
            ("micro", 2.07, 0.2),
            ("loader", 2.28, 1.24),
            ("ceiling", 3.52, 2.8),
            ("naive", 6.32, 1.47),
            ("scaling", 7.79, 1.34),
            ("tune", 9.13, 10.66),
            ("tuned", 19.79, 10.18),
        )
    )
    chart = layout(replace(synthetic_result(), phases=phases, seconds=30.0))
    said = {t.text: (t.x, t.y) for t in chart.texts if t.role == "phase-label"}
    assert {"checks", "micro", "loader", "ceiling", "naive", "scaling", "tune", "tuned"} <= set(said)
    assert len({said[name] for name in ("checks", "micro", "loader")}) == 3
