"""bench.png readable at a glance: every label inside the image, units on the axes, the ceiling and
the tuned rate marked. Checked on the chart's layout (what `render_png` paints), not on pixels."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from bootstrap.bench.plot import MAX_BARS, chart_height, layout, render_png
from bootstrap.bench.results import Metrics
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
