"""The `--json` contract: every verb prints one envelope of a registered format, at its version, with
the top-level keys pinned here. Renaming or dropping a key bumps the format's version in
`bootstrap.report.FORMATS` and the pin below, in the same commit.

Each case runs the verb in-process (`bootstrap.cli.main`) against fixture data, offline, and reads
the whole of stdout as JSON: nothing else may be printed there. To cover another verb, add a `Case`
to `CASES` (and its format's keys to `KEYS`, if new).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from bootstrap.cli import main
from bootstrap.project import Project
from bootstrap.report import FORMATS
from tests.fixtures import DATA, REPO
from tests.fixtures.fakes import RecordedNvml
from tests.fixtures.project import make_project

FACTS = DATA / "verify" / "h200x1-580.159.04.facts.json"

# format -> the keys of its envelope, `format` and `version` included.
KEYS: dict[str, frozenset[str]] = {
    "bootstrap.lock": frozenset({"format", "version", "dry_run", "envs", "dropped"}),
    "bootstrap.lock-check": frozenset({"format", "version", "fresh", "envs"}),
    "bootstrap.change": frozenset(
        {"format", "version", "verb", "env", "spec_path", "dry_run", "edits", "locks", "written", "seconds", "install"}
    ),
    "bootstrap.export": frozenset({"format", "version", "kind", "name", "source", "platforms", "files", "notes"}),
    "bootstrap.monitor": frozenset(
        {
            "format",
            "version",
            "available",
            "reason",
            "interval_s",
            "samples",
            "duration_s",
            "gpu_count",
            "gpus",
            "last_sample",
            "log",
            "notes",
        }
    ),
    "bootstrap.checks": frozenset({"format", "version", "kind", "checks", "summary", "extra"}),
    "bootstrap.cache": frozenset({"format", "version", "cache_dir", "usage", "removed", "left", "kept_for"}),
    "bootstrap.error": frozenset({"format", "version", "verb", "error"}),
    "bootstrap.fleet": frozenset(
        {
            "format",
            "version",
            "directory",
            "env",
            "hosts",
            "groups",
            "release",
            "beyond",
            "variants",
            "unserved",
            "left_out",
        }
    ),
    "bootstrap.env": frozenset(
        {
            "format",
            "version",
            "prefix",
            "platform",
            "generation",
            "base",
            "recycled",
            "made",
            "changed",
            "dry_run",
            "plan",
            "removed",
            "notes",
            "seconds",
            "variant",
            "size",
            "link",
        }
    ),
    "bootstrap.bundle-result": frozenset(
        {"format", "version", "path", "envs", "platforms", "artifacts", "tools_wheels", "bytes"}
    ),
    "bootstrap.training": frozenset(
        {
            "format",
            "version",
            "micro_batch",
            "accumulation_steps",
            "precision",
            "precision_by_step",
            "channels_last",
            "dataloader_kwargs",
            "collate_fn",
            "grid",
            "max_micro_batch",
            "effective_batch",
            "device",
            "checks",
            "summary",
            "notes",
            "gains",
        }
    ),
}
# format -> {a list in the envelope: the keys of each of its items}, where the items are this format's own.
ITEM_KEYS: dict[str, dict[str, frozenset[str]]] = {
    "bootstrap.lock": {
        "envs": frozenset({"env", "variant", "lock_path", "written", "new", "solved", "platforms", "seconds"})
    },
    "bootstrap.lock-check": {"envs": frozenset({"env", "variant", "lock_path", "platforms", "fresh", "stale"})},
    "bootstrap.change": {
        "edits": frozenset({"action", "manager", "name", "text", "before", "why"}),
        "locks": frozenset({"env", "variant", "lock_path", "written", "new", "solved", "platforms", "seconds"}),
    },
    "bootstrap.export": {"files": frozenset({"path", "bytes", "sha256"})},
    "bootstrap.fleet": {
        "groups": frozenset(
            {"kind", "platform", "hosts", "variant", "torch", "status", "why", "newest_release", "newest_build"}
        ),
        "variants": frozenset({"name", "torch", "cuda", "runs_on", "blocked"}),
        "left_out": frozenset({"file", "why"}),
    },
    "bootstrap.training": {
        "grid": frozenset({"micro", "precision", "channels_last", "samples_per_s", "peak_bytes", "fits", "timings"}),
        "checks": frozenset({"id", "status", "observed", "expected", "remedy", "detail"}),
    },
    "bootstrap.monitor": {
        "gpus": frozenset(
            {
                "index",
                "name",
                "samples",
                "utilization_mean_pct",
                "utilization_p95_pct",
                "utilization_max_pct",
                "memory_used_peak_mib",
                "power_mean_w",
                "temperature_max_c",
            }
        )
    },
}
# Objects nested in an envelope, by their path ("*": each item of a list): the keys each holds, where
# a case names them (a null there is fine: an env without variants has no pick).
PICK = {
    ("pick",): frozenset({"variants", "chosen", "chosen_lock", "status", "why", "remedy", "note", "others"}),
    ("pick", "variants", "*"): frozenset({"name", "lock", "default", "torch", "cuda", "status", "reasons"}),
}
DOCTOR = {
    ("extra",): frozenset({"facts_source", "lock", "platform", "target", "facts", "env", "pick"}),
    **{("extra", *path): keys for path, keys in PICK.items()},
}
ENV_VARIANT = {
    ("variant",): frozenset({"name", "lock", "how", "why", "skipped", "facts_source", "pick"}),
    ("variant", "skipped", "*"): frozenset({"name", "lock", "why"}),
    **{("variant", *path): keys for path, keys in PICK.items()},
}
# Formats whose verbs have no case here yet; whoever adds one removes the format from this set.
PENDING: set = set()


@dataclass(frozen=True)
class Offline:
    """What a case's command line may point at: all local, nothing served from the network."""

    locked: Path  # a fixture project with its lock (conda-only, from the fixture channel); read it, don't edit it
    unlocked: Path  # the same spec, not locked yet: this test's own
    channel: Path  # the fixture channel, mirrored as conda-forge
    tmp: Path  # this test's own directory


@dataclass(frozen=True)
class Case:
    argv: Callable[[Offline], list[str]]  # without --json, which every case gets
    format: str
    exit_codes: tuple[int, ...] = (0,)
    prepare: Optional[Callable[[pytest.MonkeyPatch], None]] = None  # e.g. a recorded NVML in place of pynvml
    nested: Optional[dict[tuple[str, ...], frozenset[str]]] = None  # keys of nested objects (see DOCTOR)


def recorded_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml.load("h200x2-ddp.json"))


def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml({}, init_error=9))


def lock_argv(o: Offline, *extra: str) -> list[str]:
    return [
        "lock",
        "--root",
        str(o.unlocked),
        "--mirror",
        f"conda-forge={o.channel}",
        "--cache-dir",
        str(o.tmp / "repodata"),
        *extra,
    ]


def change_sources(o: Offline) -> list[str]:
    """`add` and `remove` on the unlocked project, its conda-forge served from the fixture channel."""
    return [
        "--root",
        str(o.unlocked),
        "--mirror",
        f"conda-forge={o.channel}",
        "--repodata-cache",
        str(o.tmp / "repodata"),
    ]


TRAINING_DATA = """\
import torch
from torch.utils.data import TensorDataset


def make():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g))


def model():
    return torch.nn.Linear(8, 3)
"""


def training_argv(o: Offline) -> list[str]:
    """bench --effective-batch on a tiny dataset and model written to the test's directory: a short budget,
    the DataLoader left untuned; the envelope is what is checked, not the advice."""
    (o.tmp / "report_training_data.py").write_text(TRAINING_DATA)
    data = "report_training_data"
    workload = ["--path", str(o.tmp), "--dataset", f"{data}:make", "--model", f"{data}:model"]
    run = ["--effective-batch", "16", "--budget", "1", "--device", "cpu", "--quiet", "--no-png"]
    return ["bench", *workload, *run, "--out", str(o.tmp / "out")]


def from_channel(o: Offline) -> list[str]:
    """The locked project's linux-64 env, its conda-forge served from the fixture channel."""
    return [
        "--root",
        str(o.locked),
        "--platform",
        "linux-64",
        "--mirror",
        f"conda-forge={o.channel}",
        "--cache-dir",
        str(o.tmp / "cache"),
    ]


CASES: dict[str, Case] = {
    "lock": Case(lambda o: lock_argv(o), "bootstrap.lock"),
    "lock --dry-run": Case(lambda o: lock_argv(o, "--dry-run"), "bootstrap.lock"),
    "lock --check": Case(lambda o: ["lock", "--check", "--root", str(o.locked)], "bootstrap.lock-check"),
    "lock --check, a platform not locked": Case(
        lambda o: ["lock", "--check", "--root", str(o.locked), "--platform", "linux-aarch64"], "bootstrap.error", (2,)
    ),
    "add --no-install": Case(
        lambda o: ["add", "--no-install", "--conda", "zlibstub", *change_sources(o)], "bootstrap.change"
    ),
    "remove --dry-run": Case(lambda o: ["remove", "--dry-run", "torchlike", *change_sources(o)], "bootstrap.change"),
    "export": Case(
        lambda o: ["export", "--root", str(o.locked), "-o", str(o.tmp / "environment.yml")], "bootstrap.export"
    ),
    "export --pinned": Case(
        lambda o: ["export", "--root", str(o.locked), "--pinned", "-o", str(o.tmp / "{platform}.lock")],
        "bootstrap.export",
    ),
    "monitor --once": Case(lambda o: ["monitor", "--once"], "bootstrap.monitor", prepare=recorded_gpus),
    "monitor --count": Case(
        lambda o: ["monitor", "--count", "2", "--interval", "0.001", "--csv", str(o.tmp / "gpu.csv")],
        "bootstrap.monitor",
        prepare=recorded_gpus,
    ),
    "monitor --once, no driver": Case(lambda o: ["monitor", "--once"], "bootstrap.monitor", prepare=no_driver),
    "monitor --count, no driver": Case(
        lambda o: ["monitor", "--count", "2"], "bootstrap.error", (2,), prepare=no_driver
    ),
    # A recorded machine may fail a check (exit 1); the envelope is the contract here, not the verdict.
    "verify --facts": Case(
        lambda o: ["verify", "--facts", str(FACTS), "--root", str(REPO)], "bootstrap.checks", (0, 1)
    ),
    "doctor --facts": Case(
        lambda o: ["doctor", "--facts", str(FACTS), "--root", str(REPO)], "bootstrap.checks", (0, 1), nested=DOCTOR
    ),
    "doctor --fleet": Case(
        lambda o: ["doctor", "--fleet", str(FACTS.parent), "--root", str(REPO)], "bootstrap.fleet", (0, 1)
    ),
    "cache, empty": Case(lambda o: ["cache", "--cache-dir", str(o.tmp / "cache")], "bootstrap.cache"),
    "env --dry-run": Case(
        lambda o: ["env", *from_channel(o), "--prefix", str(o.tmp / "env"), "--dry-run"],
        "bootstrap.env",
        nested=ENV_VARIANT,
    ),
    "bundle": Case(
        lambda o: ["bundle", *from_channel(o), "--no-tools", "-o", str(o.tmp / "b.tar")], "bootstrap.bundle-result"
    ),
    # A busy host may make a check fail (exit 1): the envelope is the contract here, not the advice.
    "bench --effective-batch": Case(training_argv, "bootstrap.training", (0, 1)),
}


@pytest.fixture(scope="module")
def locked(tmp_path_factory, fixture_channel: Path) -> Project:
    project = make_project(tmp_path_factory.mktemp("report") / "proj", pip=())
    assert (
        main(
            [
                "lock",
                "--root",
                str(project.root),
                "--mirror",
                f"conda-forge={fixture_channel}",
                "--cache-dir",
                str(project.root.parent / "repodata"),
            ]
        )
        == 0
    )
    return project


@pytest.mark.parametrize("name", CASES, ids=list(CASES))
def test_every_verb_prints_one_envelope_of_its_format(
    name: str, locked: Project, fixture_channel: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    case = CASES[name]
    if case.prepare is not None:
        case.prepare(monkeypatch)
    offline = Offline(
        locked=locked.root, unlocked=make_project(tmp_path / "proj", pip=()).root, channel=fixture_channel, tmp=tmp_path
    )
    capsys.readouterr()
    code = main([*case.argv(offline), "--json"])
    out, err = capsys.readouterr()
    assert code in case.exit_codes, err
    envelope = json.loads(out)  # the whole of stdout
    assert envelope["format"] == case.format and case.format in FORMATS
    assert envelope["version"] == FORMATS[case.format]
    assert set(envelope) == KEYS[case.format]
    for key, item_keys in ITEM_KEYS.get(case.format, {}).items():
        for item in envelope[key]:
            assert set(item) == item_keys, (key, item)
    for path, keys in (case.nested or {}).items():
        for found in objects_at(envelope, path):
            assert set(found) == keys, (path, found)


def objects_at(value: object, path: tuple[str, ...]) -> list[dict]:
    """The objects at `path` in `value` ("*": every item of a list), leaving out nulls."""
    if value is None:
        return []
    if not path:
        return [value]
    head, rest = path[0], path[1:]
    items = value if head == "*" else [value[head]]
    return [found for item in items for found in objects_at(item, rest)]


def test_every_format_is_pinned_or_pending() -> None:
    assert set(KEYS) | PENDING == set(FORMATS)
    assert not set(KEYS) & PENDING
    assert {case.format for case in CASES.values()} == set(KEYS)  # a pinned format is also run
