"""The training-step tuner (`tune_training`): the micro-batch search against a memory limit and through
out-of-memory errors, the checks on precision and accumulation, the recommendation from a grid, the input
checks, and the advice's snippet and JSON. Real torch on the CPU, tiny models; the decisions are tested
on given grids, never on timings."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from bootstrap.bench.recipe import GridRow, TrainingAdvice  # noqa: E402
from bootstrap.bench.training import (  # noqa: E402
    Clock,
    Found,
    Plan,
    Probe,
    TrainingOptions,
    Workbench,
    accumulation_plan,
    advise,
    compare_losses,
    grid_sizes,
    largest_fitting,
    recommend,
    run_training,
    search,
    tune_training,
)
from bootstrap.errors import InputError  # noqa: E402
from bootstrap.report import Check, Status  # noqa: E402


def dataset(n: int = 64, features: int = 8, classes: int = 3):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(n, features, generator=generator)
    return torch.utils.data.TensorDataset(inputs, torch.randint(0, classes, (n,), generator=generator))


def linear(features: int = 8, classes: int = 3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))


def bench(model=None, step=None, data=None, **options):
    options.setdefault("effective_batch", 32)
    options.setdefault("tune_loader", False)
    return Workbench(data or dataset(), model or linear(), step, TrainingOptions(**options).validate())


def steady(monkeypatch, workbench, grid):
    """Re-timings that find the grid's rates again: the decision is the grid's, and nothing is timed."""
    rates = {r.key: r for r in grid}
    monkeypatch.setattr(workbench, "time_row", lambda m, p, cl, s: rates[(m, p, cl)])
    return workbench


def never() -> bool:
    return False


def row(micro, precision="fp32", channels_last=False, rate=100.0, fits=True):
    return GridRow(micro, precision, channels_last, rate if fits else None, 1000 * micro, fits)


# --------------------------------------------------------------------------- the micro-batch search


def test_the_search_stops_at_the_largest_size_under_the_memory_limit() -> None:
    workbench = bench(effective_batch=64)
    peaks = {size: workbench.peak(size) for size in (36, 37, 38)}
    assert peaks[36] < peaks[37] < peaks[38]  # activations grow with the batch
    limit = (peaks[37] + peaks[38]) // 2
    found, tried = largest_fitting(workbench.prober(limit), 64, never)
    assert found == 37
    assert workbench.peak(found) <= limit < workbench.peak(found + 1)
    refused = [p for p in tried if not p.fits]
    assert refused and all(p.size > found for p in refused)
    assert any(p.size == found + 1 for p in refused)  # bisection closed on the boundary
    assert all(p.size <= 64 for p in tried)


def test_the_search_survives_out_of_memory_errors_above_a_size() -> None:
    def step(model, batch, device):
        inputs, targets = batch
        if len(inputs) > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return nn.functional.cross_entropy(model(inputs), targets)

    workbench = bench(step=step)
    found, tried = largest_fitting(workbench.prober(None), 32, never)
    assert found == 5
    assert [p.how for p in tried if p.size > 5] and all(p.how == "out of memory" for p in tried if p.size > 5)
    assert isinstance(torch.cuda.OutOfMemoryError("x"), RuntimeError)  # a class on a CPU build of torch too


def test_the_search_is_capped_at_the_dataset_and_the_effective_batch() -> None:
    workbench = bench(data=dataset(n=20), effective_batch=64)
    assert search(workbench, Clock(60.0), []) == (20, 21)
    workbench = bench(data=dataset(n=64), effective_batch=12)
    assert search(workbench, Clock(60.0), []) == (12, 13)


def test_the_ceiling_is_the_smallest_size_that_did_not_fit() -> None:
    workbench = bench(memory_limit=10**9, effective_batch=64)
    workbench.prober = lambda limit: lambda size: Probe(size, None, size <= 5, "measured")
    assert search(workbench, Clock(60.0), []) == (5, 6)


def test_a_search_cut_short_still_times_the_users_own_size() -> None:
    """A step slow while the search runs (cold caches, lazy initialisation) uses up the search's share of a
    small budget at size 2: the user's 16 is not known not to fit, so it is timed, never called too big."""
    phase = []

    def cold_start(model, batch, device):
        if phase[-1:] == ["search"]:
            time.sleep(0.5)
        inputs, labels = batch
        return nn.functional.cross_entropy(model(inputs), labels)

    options = TrainingOptions(effective_batch=32, batch_size=16, budget_s=2.0, tune_loader=False)
    advice = run_training(dataset(), linear(), cold_start, options, progress=lambda event: phase.append(event.phase))
    assert any("ran out of its budget share at 2" in n for n in advice.notes), advice.notes
    assert not any("above the largest micro-batch" in n for n in advice.notes), advice.notes
    assert any(r.micro == 16 and r.fits and r.samples_per_s for r in advice.grid), advice.grid
    assert advice.max_micro_batch >= 16
    not_slower = next(c for c in advice.checks if c.id == "training.not_slower")
    assert not_slower.status is not Status.SKIP, not_slower


def test_a_step_that_does_not_fit_one_sample_is_refused_in_one_line() -> None:
    workbench = bench(memory_limit=1)
    with pytest.raises(InputError) as caught:
        search(workbench, Clock(60.0), [])
    assert caught.value.where == "tune_training(model=...)"
    assert "does not fit even one sample" in caught.value.problem and "memory_limit" in caught.value.fix


def test_a_step_that_raises_is_named_in_one_line() -> None:
    def step(model, batch, device):
        raise KeyError("label")

    with pytest.raises(InputError) as caught:
        search(bench(step=step), Clock(60.0), [])
    assert caught.value.where == "tune_training(step=...)" and "KeyError" in caught.value.problem


# --------------------------------------------------------------------------- the checks


def test_accumulated_gradients_match_one_batch_for_a_linear_model() -> None:
    from bootstrap.bench.training import _accumulation_check

    check = _accumulation_check(bench(), Plan(8, 4), 32)
    assert check.id == "training.accumulation" and check.status is Status.OK, check


def test_a_summed_loss_fails_the_accumulation_check() -> None:
    from bootstrap.bench.training import _accumulation_check

    def step(model, batch, device):
        inputs, targets = batch
        return nn.functional.cross_entropy(model(inputs), targets, reduction="sum")

    check = _accumulation_check(bench(step=step), Plan(8, 4), 32)
    assert check.status is Status.FAIL and "reduction='sum'" in check.remedy


def test_batchnorm_gets_a_warning_instead_of_the_gradient_check() -> None:
    from bootstrap.bench.training import _accumulation_check

    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    check = _accumulation_check(bench(model=model), Plan(8, 4), 32)
    assert check.status is Status.WARN and "BatchNorm" in check.observed
    assert _accumulation_check(bench(model=model), Plan(32, 1), 32).status is Status.OK  # nothing accumulated


def test_the_precision_check_fails_when_the_loss_moves_and_fp32_is_recommended(monkeypatch) -> None:
    grid = [row(16, rate=100.0), row(16, "bf16", rate=300.0), row(32, rate=150.0), row(32, "bf16", rate=400.0)]
    workbench = steady(monkeypatch, bench(loss_tolerance=0.0), grid)  # bf16 rounds: any difference is too much
    advice = advise(workbench, Clock(60.0), grid, Found(32, (16, "fp32", False), False, ()))
    precision = next(c for c in advice.checks if c.id == "training.precision")
    assert precision.status is Status.FAIL and "fp32 is recommended" in precision.remedy
    assert (advice.precision, advice.micro_batch, advice.accumulation_steps) == ("fp32", 32, 1)


def test_bf16_within_tolerance_is_kept(monkeypatch) -> None:
    grid = [row(16, rate=100.0), row(16, "bf16", rate=300.0)]
    workbench = steady(monkeypatch, bench(), grid)
    advice = advise(workbench, Clock(60.0), grid, Found(16, (16, "fp32", False), False, ()))
    assert advice.precision == "bf16" and advice.accumulation_steps == 2
    assert [c.status for c in advice.checks] == [Status.OK, Status.OK, Status.OK]
    assert advice.gains["over_current"] == pytest.approx(3.0)


def test_compare_losses_reads_relative_gaps() -> None:
    assert compare_losses([2.0, 1.0], [2.02, 1.01], "bf16", 0.05).status is Status.OK
    failed = compare_losses([2.0, 1.0], [2.0, 9.0], "bf16", 0.05)
    assert failed.status is Status.FAIL and "800.00%" in failed.observed
    assert compare_losses([None], [None], "bf16", 0.05).status is Status.SKIP


def test_a_step_that_ignores_autocast_is_seen() -> None:
    def own_precision(model, batch, device):
        inputs, targets = batch
        with torch.autocast("cpu", enabled=False):
            return nn.functional.cross_entropy(model(inputs.float()), targets)

    assert bench().autocast_applies("bf16", 4)
    assert not bench(step=own_precision).autocast_applies("bf16", 4)


def test_a_step_that_keeps_its_own_precision_is_measured_as_it_is() -> None:
    from bootstrap.bench.training import run_training

    def own_precision(model, batch, device):
        inputs, targets = batch
        with torch.autocast("cpu", enabled=False):
            return nn.functional.cross_entropy(model(inputs), targets)

    options = TrainingOptions(effective_batch=16, budget_s=1.0, device="cpu", tune_loader=False)
    result = run_training(dataset(), linear(), own_precision, options)
    assert result.precision_by_step and result.precision == "fp32"
    assert {r.precision for r in result.grid} == {"fp32"}  # bf16 would time the same step again
    precision = next(c for c in result.checks if c.id == "training.precision")
    assert precision.status is Status.SKIP and "could not be changed from outside" in precision.observed
    assert "the step's own precision" in repr(result) and "autocast" not in result.snippet()


# --------------------------------------------------------------------------- the recommendation, from a grid


def test_nothing_faster_than_the_users_own_keeps_theirs() -> None:
    from bootstrap.bench.training import not_slower_check

    grid = [row(16, rate=100.0), row(16, "bf16", rate=90.0), row(32, rate=102.0), row(64, fits=False)]
    choice = recommend(grid, (16, "fp32", False), min_gain=0.03)
    assert choice is grid[0]  # 32 is 2% faster: within the noise the gain must clear
    check = not_slower_check(grid, choice, (16, "fp32", False))
    assert check.status is Status.OK and "yours kept" in check.observed
    unasked = not_slower_check(grid, grid[2], (16, "fp32", False), given=False)  # no batch_size: none is "yours"
    assert "yours" not in unasked.observed + unasked.expected and "1.02x plain fp32" in unasked.observed
    assert recommend(grid, (16, "fp32", False), min_gain=0.0) is grid[2]


def test_among_rows_within_the_noise_the_least_change_wins() -> None:
    grid = [row(16, rate=100.0), row(32, "bf16", True, rate=200.0), row(32, rate=197.0), row(64, rate=196.0)]
    assert recommend(grid, (16, "fp32", False), 0.03).key == (64, "fp32", False)  # fp32, contiguous, fewest steps
    assert recommend(grid, (16, "fp32", False), 0.0).key == (32, "bf16", True)
    grid.append(row(16, "bf16", rate=300.0))
    assert recommend(grid, (16, "fp32", False), 0.03).key == (16, "bf16", False)  # well beyond the noise


def test_a_choice_that_is_slower_when_timed_again_gives_way_to_the_users(monkeypatch) -> None:
    from bootstrap.bench.training import confirm

    workbench = bench()
    again = {(32, "fp32", False): iter([95.0, 90.0]), (16, "fp32", False): iter([100.0, 101.0])}
    monkeypatch.setattr(workbench, "time_row", lambda m, p, cl, s: row(m, p, cl, rate=next(again[(m, p, cl)])))
    grid = [row(16, rate=100.0), row(32, rate=200.0)]  # a busy moment slowed the user's own in the grid
    kept, choice = confirm(workbench, Clock(60.0), grid, grid[1], (16, "fp32", False))
    assert choice.key == (16, "fp32", False)
    assert [r.samples_per_s for r in kept] == [100.0, 95.0]  # each the median of its three timings


def test_the_fastest_rows_are_timed_again_and_the_choice_is_made_among_them(monkeypatch) -> None:
    """The grid's fastest row owed its place to one lucky timing: re-timed in turns with the next
    fastest and the user's own, it falls behind, and the row that held its rate is recommended. A row
    outside the contenders is not timed again."""
    from bootstrap.bench.training import CONTENDERS, confirm

    workbench = bench()
    again = {
        (16, "fp32", False): iter([100.0, 100.0]),
        (64, "bf16", True): iter([120.0, 118.0]),  # the grid's 300 was a lucky window
        (32, "fp32", False): iter([190.0, 195.0]),
        (64, "fp32", False): iter([150.0, 152.0]),
    }
    timed: list[tuple[int, str, bool]] = []

    def time_row(m, p, cl, s):
        timed.append((m, p, cl))
        return row(m, p, cl, rate=next(again[(m, p, cl)]))

    monkeypatch.setattr(workbench, "time_row", time_row)
    grid = [
        row(16, rate=100.0),
        row(64, "bf16", True, rate=300.0),
        row(32, rate=200.0),
        row(64, rate=160.0),
        row(128, rate=50.0),
    ]
    choice = recommend(grid, (16, "fp32", False), 0.03)
    assert choice is not None and choice.key == (64, "bf16", True)
    kept, choice = confirm(workbench, Clock(60.0), grid, choice, (16, "fp32", False))
    assert choice.key == (32, "fp32", False)
    assert set(timed) == set(again) and len(timed) == 2 * len(again) and CONTENDERS + 1 == len(again)
    by_key = {r.key: r for r in kept}
    assert by_key[(64, "bf16", True)].samples_per_s == 120.0 and by_key[(64, "bf16", True)].timings == 3
    assert by_key[(128, "fp32", False)].timings == 1  # not a contender: its one timing stands


def test_after_a_failed_precision_check_only_fp32_rows_contend(monkeypatch) -> None:
    from bootstrap.bench.training import confirm

    workbench = bench()
    timed: list[tuple[int, str, bool]] = []

    def time_row(m, p, cl, s):
        timed.append((m, p, cl))
        return row(m, p, cl, rate=500.0 if p == "bf16" else 150.0)

    monkeypatch.setattr(workbench, "time_row", time_row)
    grid = [row(16, rate=100.0), row(32, "bf16", rate=400.0), row(32, rate=160.0), row(64, "bf16", rate=390.0)]
    _, choice = confirm(workbench, Clock(60.0), grid, grid[2], (16, "fp32", False), ("fp32",))
    assert choice.precision == "fp32" and {p for _, p, _ in timed} == {"fp32"}


def test_a_user_size_that_does_not_fit_is_not_the_baseline() -> None:
    grid = [row(64, fits=False), row(16, rate=100.0), row(32, rate=90.0)]
    assert recommend(grid, (64, "fp32", False), 0.03) is grid[1]
    assert recommend([row(8, fits=False)], (8, "fp32", False), 0.03) is None
    assert recommend(grid, (16, "fp32", False), 0.03, ("bf16",)) is None


@pytest.mark.parametrize(
    "effective, micro, max_micro, plan",
    [
        (256, 64, 64, (64, 4)),
        (256, 256, 256, (256, 1)),
        (96, 40, 64, (48, 2)),  # 40 does not divide 96: 48, the nearest divisor that fits
        (97, 32, 64, (32, 3)),  # a prime: no divisor near 32, so 3 steps of 32 (96) with a note
    ],
)
def test_accumulation_plans(effective: int, micro: int, max_micro: int, plan: tuple[int, int]) -> None:
    found = accumulation_plan(effective, micro, max_micro)
    assert (found.micro, found.steps) == plan
    assert bool(found.note) == (effective % micro != 0)


def test_grid_sizes_divide_the_effective_batch_and_keep_the_users() -> None:
    assert grid_sizes(100, 256, 24) == [8, 16, 24, 32, 64]
    assert grid_sizes(1, 256, None) == [1]
    assert grid_sizes(50, 96, 200) == [8, 16, 32, 48]  # 48 divides 96; 200 does not fit


def test_grid_sizes_time_one_sample_only_where_nothing_larger_fits() -> None:
    assert grid_sizes(100, 7, None) == [7]  # not 1, which BatchNorm cannot train on
    assert grid_sizes(5, 16, None) == [2, 4]
    assert grid_sizes(5, 7, None) == [5]  # no larger divisor fits: the largest that does, rounded later
    assert grid_sizes(1, 7, None) == [1]


# --------------------------------------------------------------------------- input checks


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8", None])
def test_a_bad_effective_batch_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(InputError) as caught:
        tune_training(dataset(), linear(), effective_batch=bad, device="cpu")
    assert caught.value.where == "tune_training(effective_batch=...)"
    assert "whole number >= 1" in caught.value.problem and "effective_batch=256" in caught.value.fix


def test_a_precision_the_device_lacks_is_refused() -> None:
    with pytest.raises(InputError) as caught:
        tune_training(dataset(), linear(), effective_batch=8, device="cpu", precisions=["fp16"])
    assert caught.value.where == "tune_training(precisions=...)" and "fp32 or bf16" in caught.value.fix


def test_a_dataset_without_len_is_refused() -> None:
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield torch.zeros(8), 0

    with pytest.raises(InputError) as caught:
        tune_training(Stream(), linear(), effective_batch=8, device="cpu")
    assert caught.value.where == "tune_training(dataset=...)"


class Ragged(torch.utils.data.Dataset):
    """Sequences of three lengths: default_collate cannot stack them; a padding collate can."""

    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.ones(8 + index % 3), index % 3


def pad(samples):
    inputs = torch.nn.utils.rnn.pad_sequence([s for s, _ in samples], batch_first=True)[:, :8]
    return inputs, torch.tensor([label for _, label in samples])


class BadLength(torch.utils.data.Dataset):
    def __len__(self):
        return -1

    def __getitem__(self, index):
        return torch.zeros(8), 0


def broken_factory():
    raise ZeroDivisionError("division by zero")


# Each: (keywords, where, what the problem says). Generated where a value stands for a kind of mistake.
BAD_INPUT = [
    (dict(data=Ragged()), "dataset", "do not batch with default_collate: RuntimeError: stack expects"),
    (dict(data=BadLength()), "dataset", "raised ValueError: __len__() should return >= 0"),
    (dict(model=broken_factory), "model", "raised ZeroDivisionError: division by zero"),
    (dict(data=Ragged(), collate_fn=lambda samples: 1 / 0), "collate_fn", "raised ZeroDivisionError"),
    (dict(collate_fn="pad"), "collate_fn", "is a str, not a callable"),
    (dict(batch_size=64, effective_batch=32), "batch_size", "64 is above the effective batch, 32"),
    *((dict(budget=b), "budget", "expected seconds in (0, 86400]") for b in (float("inf"), float("nan"), 0, 1e9)),
]


@pytest.mark.parametrize(("keywords", "keyword", "said"), BAD_INPUT)
def test_bad_input_is_one_line_naming_its_keyword(keywords: dict, keyword: str, said: str) -> None:
    keywords = {"effective_batch": 32, "budget": 5.0, **keywords}
    data, model = keywords.pop("data", dataset()), keywords.pop("model", linear())
    with pytest.raises(InputError) as caught:
        tune_training(data, model, device="cpu", **keywords)
    assert caught.value.where == f"tune_training({keyword}=...)", caught.value
    assert said in caught.value.problem and "\n" not in str(caught.value), caught.value


def test_a_collate_fn_batches_what_default_collate_cannot() -> None:
    model = nn.Sequential(nn.Linear(8, 3))
    advice = tune_training(Ragged(), model, effective_batch=16, collate_fn=pad, budget=1.5, device="cpu")
    assert advice.micro_batch * advice.accumulation_steps == 16 and any(r.samples_per_s for r in advice.grid)
    assert advice.collate_fn == "pad" and ", collate_fn=pad)" in advice.snippet()


def test_a_batch_size_past_the_dataset_is_said_so_not_called_out_of_memory() -> None:
    options = TrainingOptions(effective_batch=64, batch_size=32, budget_s=1.5, tune_loader=False)
    advice = run_training(dataset(n=20), linear(), None, options)
    assert "your batch_size 32 is above the dataset's 20 samples: not timed" in advice.notes, advice.notes
    assert not any("fits" in n for n in advice.notes if "batch_size 32" in n)
    not_slower = next(c for c in advice.checks if c.id == "training.not_slower")
    assert "memory" not in not_slower.observed, not_slower


def test_the_facade_hands_out_tune_training() -> None:
    import bootstrap
    import bootstrap.bench

    assert bootstrap.tune_training is bootstrap.bench.tune_training is tune_training


# --------------------------------------------------------------------------- the advice


def advice(precision: str = "bf16", channels_last: bool = False, pin: bool = True) -> TrainingAdvice:
    kwargs = {"num_workers": 2, "pin_memory": pin, "prefetch_factor": 2, "persistent_workers": True}
    return TrainingAdvice(
        micro_batch=32,
        accumulation_steps=4,
        precision=precision,
        channels_last=channels_last,
        dataloader_kwargs=kwargs,
        grid=(row(16, rate=100.0), row(32, precision, channels_last, rate=250.5), row(64, fits=False)),
        max_micro_batch=48,
        effective_batch=128,
        device="cuda",
        checks=(Check("training.precision", Status.OK, "within 0.4%", "within 5%"),),
        notes=("a note",),
        gains={"over_current": 2.505, "over_fixed_advice": None},
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_snippet_compiles_and_scales_only_fp16(precision: str) -> None:
    text = advice(precision, channels_last=True).snippet()
    compile(text, "<snippet>", "exec")
    assert ("GradScaler" in text) == (precision == "fp16")
    assert ("torch.autocast" in text) == (precision != "fp32")
    assert "channels_last" in text and "non_blocking=True" in text
    assert "loss = loss / steps" in text and "zero_grad(set_to_none=True)" in text
    assert "batch_size=32" in text and "steps = 4" in text
    plain = advice("fp32", pin=False).snippet()
    assert "non_blocking" not in plain and "channels_last" not in plain and "collate_fn" not in plain


@pytest.mark.parametrize(("name", "written"), [("pad", "collate_fn=pad)"), ("<lambda>", "collate_fn=collate_fn)")])
def test_the_snippet_batches_with_the_collate_function_the_tuning_used(name: str, written: str) -> None:
    text = replace(advice(), collate_fn=name).snippet()
    compile(text, "<snippet>", "exec")
    assert written in next(line for line in text.splitlines() if line.startswith("loader = DataLoader("))


def test_the_advice_round_trips_through_json() -> None:
    original = replace(advice(), collate_fn="pad")
    data = json.loads(json.dumps(original.to_json(), allow_nan=False))
    assert data["format"] == "bootstrap.training" and data["version"] == 1
    assert TrainingAdvice.from_json(data) == original
    assert "32 x 4 steps = 128" in repr(original) and "2.50x yours" in repr(original)


@pytest.mark.slow
def test_a_real_run_on_the_cpu() -> None:
    images = torch.utils.data.TensorDataset(torch.rand(64, 3, 16, 16), torch.randint(0, 3, (64,)))
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    options = TrainingOptions(effective_batch=32, batch_size=8, budget_s=8.0, device="cpu", tune_loader=False)
    from bootstrap.bench.training import run_training

    result = run_training(images, model, None, options)
    assert result.micro_batch * result.accumulation_steps == 32
    assert {r.channels_last for r in result.grid} == {False, True}  # 4-D float inputs: both layouts timed
    assert any(r.key == (8, "fp32", False) and r.samples_per_s for r in result.grid)
    assert {c.id for c in result.checks} == {"training.precision", "training.accumulation", "training.not_slower"}
    assert all(c.status is not Status.FAIL for c in result.checks if c.id == "training.not_slower")


@pytest.mark.slow
def test_a_real_run_tunes_the_dataloader_for_the_chosen_step() -> None:
    images = torch.utils.data.TensorDataset(torch.rand(256, 3, 16, 16), torch.randint(0, 3, (256,)))
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    events = []
    result = tune_training(
        images, model, effective_batch=64, batch_size=16, budget=60, device="cpu", progress=events.append
    )
    assert "num_workers" in result.dataloader_kwargs
    assert result.gains["over_fixed_advice"] is not None
    assert any(e.phase == "loader" for e in events) and all(e.budget_s == 60 for e in events)
