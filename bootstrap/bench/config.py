"""What a bench run is asked to do (workload, budget, verdict thresholds) and the checks of each value;
a threshold remembers where it came from. docs/benchmark.md, "Verdicts" and "`tune_loader` keywords"."""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import AbstractSet, Any, Callable, Mapping, Optional, Sequence

from bootstrap.errors import InputError, excerpt
from bootstrap.fsutil import check_directory

MODELS = ("auto", "tiny", "resnet18", "resnet50")
STORAGES = ("memory", "files", "packed")
MAX_BUDGET_S = 24 * 3600.0  # a day: longer is a soak test, not an acceptance benchmark
MIN_CROP = 16  # the small CNN's 4x4 stride-4 stem and its BatchNorms need a few pixels left
Namer = Callable[[str], str]


@dataclass(frozen=True)
class Rule:
    """What one option or threshold accepts: a kind and, for numbers, an inclusive range."""

    kind: str  # int | number | bool | choice | text | path
    low: Optional[float] = None
    high: Optional[float] = None
    above: bool = False  # `low` itself is excluded (> low)
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        noun = {"int": "an integer", "number": "a number", "bool": "true or false", "text": "text"}
        what = noun.get(self.kind, "a path")
        if self.low is not None and self.high is not None and not self.above:
            return f"{what} from {_bound(self.low)} to {_bound(self.high)}"
        bounds = [f"{'>' if self.above else '>='} {_bound(self.low)}"] if self.low is not None else []
        bounds += [f"<= {_bound(self.high)}"] if self.high is not None else []
        return f"{what} {' and '.join(bounds)}" if bounds else what

    def check(self, value: Any, where: str, python: bool = False) -> Any:
        """`value` (a number as float, a path as Path), or InputError `WHERE: expected ..., got ...` with the
        value as YAML writes it (or Python, for a script)."""
        if not self.accepts(value):
            raise InputError(where, f"expected {self.describe()}, got {_shown(value, python)}")
        if self.kind == "path":
            return Path(value)
        return float(value) if self.kind == "number" else value

    def accepts(self, value: Any) -> bool:
        """Whether `value` is of this kind and in range: a bool is no number here, nor NaN or infinity."""
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind in ("choice", "text"):
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if self.kind == "path":
            return isinstance(value, (str, os.PathLike)) and bool(str(value))
        numeric = int if self.kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric):
            return False
        if isinstance(value, float) and not math.isfinite(value):  # an int of any size is finite
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high


def _bound(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e13 else f"{value:g}"


def _shown(value: Any, python: bool) -> str:
    if python or not (value is None or isinstance(value, (bool, str))):  # a script's values as Python writes them
        return excerpt(value)
    if isinstance(value, str):
        return f"{excerpt(value)} (text)"
    return "null" if value is None else str(value).lower()


OPTION_RULES: dict[str, Rule] = {
    "samples": Rule("int", 1, 1_000_000),
    "epoch_batches": Rule("int", 1, 10_000_000),
    "image_size": Rule("int", MIN_CROP, 8192),
    "crop_size": Rule("int", MIN_CROP, 8192),
    "batch_size": Rule("int", 1, 65536),
    "num_classes": Rule("int", 1, 1_000_000),
    "cpu_ms": Rule("number", 0, 60_000),
    "io_ms": Rule("number", 0, 60_000),
    "step_ms": Rule("number", 0, 60_000),
    "storage": Rule("choice", choices=STORAGES),
    "cold_cache": Rule("bool"),
    "model": Rule("choice", choices=MODELS),
    "jpeg_quality": Rule("int", 1, 100),
    "seed": Rule("int", 0, 2**32 - 1),
    "budget_s": Rule("number", 0, MAX_BUDGET_S, above=True),
    "device": Rule("text"),
    "max_workers": Rule("int", 0, 1024),
    "target_rate": Rule("number", 0, 1e12, above=True),
    "data_dir": Rule("path"),
    "batched": Rule("bool"),
}
# tune_loader's keyword for each option it takes: its errors name what the script wrote, not a flag
KEYWORDS = {"batch_size": "batch_size", "budget_s": "budget", "device": "device", "max_workers": "max_workers"}


def flag_name(name: str) -> str:
    """The command-line spelling of option `name` (`batch_size` -> `--batch-size`, `budget_s` -> `--budget`)."""
    return "--budget" if name == "budget_s" else "--" + name.replace("_", "-")


def option_name(name: str, script: bool = False, where: bool = False) -> str:
    """Option `name` in a message: its flag, or a `script`'s keyword (`where`: `tune_loader(batch_size=...)`)."""
    if not script or name not in KEYWORDS:
        return flag_name(name)
    return f"tune_loader({KEYWORDS[name]}=...)" if where else KEYWORDS[name]


def option(name: str, value: object = None, script: bool = False) -> str:
    """Option `name` set to `value` in a remedy, as the caller writes it: `--budget 25` on the command
    line, `tune_loader(budget=25)` in a script (`...` for no value)."""
    if script and name in KEYWORDS:
        return f"tune_loader({KEYWORDS[name]}={'...' if value is None else value})"
    return flag_name(name) + ("" if value is None else f" {value}")


def check_value(value: Any, rule: Rule, where: str, python: bool = False) -> Any:
    return rule.check(value, where, python)


def check_options(values: Mapping[str, Any], where: Namer, python: bool = False) -> dict[str, Any]:
    """Every value of `values` checked against OPTION_RULES, errors named by `where(name)`."""
    return {name: OPTION_RULES[name].check(value, where(name), python) for name, value in values.items()}


@dataclass(frozen=True)
class Thresholds:
    """Verdict thresholds: `*_pass` the ok bound, `*_warn` the fail bound; fractions 0..1, percentages 0..100.
    docs/benchmark.md, "Thresholds and their basis"."""

    efficiency_pass: float = 0.90  # tuned / ceiling >= this: ok
    efficiency_warn: float = 0.75  # below this: fail
    device_idle_pass: float = 0.10  # device-idle stall fraction <= this: ok
    device_idle_warn: float = 0.25  # above this: fail
    speedup_pass_fraction: float = 0.85  # tuned/naive >= this x predicted: ok; tuned < naive: fail
    util_p95_pass: float = 70.0  # NVML utilization.gpu p95 below this: fail
    util_p5_pass: float = 10.0  # p5 below this: warn (idle bursts)
    sm_active_pass: float = 0.80  # GPM SM activity; warn only
    sm_active_warn: float = 0.50
    pss_growth_pass: float = 0.05  # loader workers' PSS growth over the tuned windows
    pss_growth_warn: float = 0.20
    shm_pass_factor: float = 2.0  # free /dev/shm >= this x need: ok
    shm_warn_factor: float = 1.0  # below this x need: fail
    matmul_pass: float = 0.70  # matmul TFLOP/s / dense peak
    matmul_warn: float = 0.55
    h2d_pass: float = 0.70  # pinned H2D / PCIe link theoretical
    h2d_warn: float = 0.50
    loader_scaling_pass: float = 0.60  # CPU-only: S(W) / (W x S(1)); below: warn
    noise_floor_min: float = 0.03  # a difference is real above max(this, 2 x CV)
    early_stop_efficiency: float = 0.95  # the tuner stops once a candidate reaches this
    host_saturated_pct: float = 90.0  # others' CPU busy % before the run >= this: rate verdicts inconclusive
    noise_inconclusive: float = 0.15  # tuned windows' spread or re-measure gap above this: inconclusive

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


_PERCENT = ("util_p95_pass", "util_p5_pass", "host_saturated_pct", "shm_pass_factor", "shm_warn_factor")
THRESHOLD_RULES: dict[str, Rule] = {n: Rule("number", 0, 100 if n in _PERCENT else 1) for n in Thresholds.names()}
# (pass bound, warn bound, higher is better)
THRESHOLD_PAIRS: tuple[tuple[str, str, bool], ...] = (
    ("efficiency_pass", "efficiency_warn", True),
    ("device_idle_pass", "device_idle_warn", False),
    ("sm_active_pass", "sm_active_warn", True),
    ("pss_growth_pass", "pss_growth_warn", False),
    ("shm_pass_factor", "shm_warn_factor", True),
    ("matmul_pass", "matmul_warn", True),
    ("h2d_pass", "h2d_warn", True),
)


@dataclass(frozen=True)
class ThresholdSet:
    """Thresholds plus where each value came from ('default', 'FILE', '--threshold')."""

    values: Thresholds = field(default_factory=Thresholds)
    sources: tuple[tuple[str, str], ...] = ()

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, "default")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {n: {"value": getattr(self.values, n), "source": self.source(n)} for n in Thresholds.names()}

    def override(self, updates: Mapping[str, Any], source: str) -> ThresholdSet:
        """A new set with `updates` from `source` (a file, or `--threshold`) applied, each name, value and
        pass/warn pair checked."""
        prefix = "--threshold " if source == "--threshold" else f"{source}: thresholds."
        clean: dict[str, float] = {}
        for name, raw in updates.items():
            _check_threshold_name(name, source)
            if source == "--threshold" and isinstance(raw, str):
                raw = _flag_number(raw)
            clean[name] = THRESHOLD_RULES[name].check(raw, prefix + name)
        merged = {**dict(self.sources), **{name: source for name in clean}}
        result = ThresholdSet(replace(self.values, **clean), tuple(sorted(merged.items())))
        result.check_pairs(set(clean), prefix)
        return result

    def check_pairs(self, changed: AbstractSet[str], prefix: str) -> None:
        """Each `*_pass` bound must not be on the failing side of its `*_warn` bound (the changed one is named)."""
        for good, bad, higher_is_better in THRESHOLD_PAIRS:
            ok, warn = getattr(self.values, good), getattr(self.values, bad)
            crossed = ok < warn if higher_is_better else ok > warn
            if not crossed or not changed & {good, bad}:
                continue
            name, other = (good, bad) if good in changed else (bad, good)
            side = "below" if (name == good) == higher_is_better else "above"
            value, bound = getattr(self.values, name), getattr(self.values, other)
            problem = f"{value:g} is {side} {other} {bound:g} (from {self.source(other)})"
            raise InputError(prefix + name, problem, f"{good} must be {'>=' if higher_is_better else '<='} {bad}")


def _check_threshold_name(name: Any, source: str) -> None:
    if name in Thresholds.names():
        return
    close = difflib.get_close_matches(str(name), Thresholds.names(), n=1)
    hint = f"one of {len(Thresholds.names())} names such as efficiency_pass or device_idle_pass"
    fix = f"did you mean {close[0]}?" if close else f"{hint}; docs/benchmark.md lists them"
    raise InputError(source, f"unknown threshold {excerpt(name)}", fix)


def _flag_number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text  # refused by the rule, which shows it


def parse_threshold_flags(pairs: Sequence[str]) -> dict[str, str]:
    """['efficiency_pass=0.85', ...] -> {'efficiency_pass': '0.85'} (values checked by `override`)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            fix = "write e.g. --threshold efficiency_pass=0.85"
            raise InputError("--threshold", f"{pair!r} is not NAME=VALUE", fix)
        out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class WorkloadSpec:
    """The built-in workload (JPEG images decoded, cropped and flipped per sample), and the batch size."""

    samples: int = 512  # distinct samples stored
    epoch_batches: int = 1000  # batches per epoch: the dataset repeats its samples
    image_size: int = 256  # stored (encoded) side
    crop_size: int = 224  # random crop fed to the model
    batch_size: int = 64
    num_classes: int = 100
    cpu_ms: float = 0.0  # extra CPU time per sample, on the worker's own CPU clock (the same on a busy host)
    io_ms: float = 0.0  # extra latency per sample: a sleep (storage or network), no CPU
    step_ms: float = 0.0  # extra time per step: a known stand-in for a slower device (0 for real runs)
    storage: str = "memory"  # memory | files | packed
    cold_cache: bool = False  # files/packed: drop our files from the page cache before each phase
    model: str = "auto"  # auto | tiny | resnet18 | resnet50
    jpeg_quality: int = 90
    seed: int = 0
    batched: bool = False  # the user's dataset yields whole batches: batch_size is their length

    @property
    def loader_batch_size(self) -> Optional[int]:
        """DataLoader's batch_size: None when the dataset batches itself (no automatic batching)."""
        return None if self.batched else self.batch_size

    def validate(self, names: Optional[Mapping[str, str]] = None, script: bool = False) -> WorkloadSpec:
        """Each field, then those that depend on each other; errors name a field as `names` spells it
        (`FILE: options.crop_size`), else by its flag or (`script`) keyword."""
        where = _namer(names, script)
        check_options(self.to_dict(), where, python=script)
        if self.crop_size > self.image_size:
            name = "crop_size" if names is None or "crop_size" in names else "image_size"
            problem = f"the crop ({self.crop_size}) is larger than the image ({self.image_size})"
            raise InputError(where(name), problem, "keep crop_size <= image_size")
        if self.cold_cache and self.storage == "memory":
            problem = "only applies to files on disk: the memory store has no page cache"
            fix = "add --storage files or --storage packed, or drop --cold-cache"
            raise InputError(where("cold_cache"), problem, fix)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RUN_OPTIONS = ("budget_s", "device", "max_workers", "target_rate", "data_dir")


@dataclass(frozen=True)
class BenchOptions:
    """One bench run. `budget_s` bounds the whole run, set-up included."""

    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    budget_s: float = 120.0
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    thresholds: ThresholdSet = field(default_factory=ThresholdSet)
    max_workers: Optional[int] = None  # hard cap on the worker search (None: derived from the host)
    cpus: Optional[int] = None  # usable CPUs for this process (torchrun: affinity / local ranks)
    target_rate: Optional[float] = None  # CPU sizing: samples/s a future GPU should be fed
    data_dir: Optional[Path] = None  # files/packed: a fresh directory is made (and removed) in it; None: TMPDIR
    nvml_module: Any = None  # pynvml stand-in for tests (None: the real pynvml)
    sampler_interval_s: float = 0.2
    user: Any = None  # user.UserWorkload: the team's own dataset (None: the synthetic images)

    def validate(self, names: Optional[Mapping[str, str]] = None) -> BenchOptions:
        """The workload's fields and this run's, named as `names` spells them (else by flag or keyword)."""
        script = self.from_script
        where = _namer(names, script)
        self.workload.validate(names, script)
        given = {name: getattr(self, name) for name in RUN_OPTIONS if getattr(self, name) is not None}
        check_options(given, where, python=script)
        if self.workload.batched and self.user is None:
            raise InputError(where("batched"), "only applies to your own dataset", "add --dataset MODULE:FACTORY")
        device = self.device
        if device not in ("auto", "cpu", "cuda", "mps") and not (device.startswith("cuda:") and device[5:].isdigit()):
            fix = "e.g. device='cuda:0'" if script else "e.g. --device cuda:0"
            raise InputError(where("device"), f"{device!r} is not auto, cpu, cuda, cuda:N or mps", fix)
        if self.data_dir is not None:
            if self.workload.storage == "memory":
                fix = "add --storage files or --storage packed, or drop --data-dir"
                raise InputError(where("data_dir"), "only used by --storage files or packed", fix)
            check_directory(Path(self.data_dir), where("data_dir"))
        return self

    @property
    def from_script(self) -> bool:
        """Whether the run came from a script (`tune_loader`: a dataset object): messages name keywords."""
        return self.user is not None and not isinstance(self.user.dataset, str)


def _namer(names: Optional[Mapping[str, str]], script: bool = False) -> Namer:
    return lambda name: (names or {}).get(name) or option_name(name, script, where=True)


def load_config(path: Path, thresholds: Optional[ThresholdSet] = None) -> tuple[ThresholdSet, dict[str, Any]]:
    """A YAML or JSON file's `thresholds:` applied to `thresholds`, and its `options:` (`budget_s`, ...), checked."""
    from bootstrap.yamlfile import load_yaml  # YAML is a superset of JSON: one reader serves both

    where = str(path)
    data = load_yaml(path)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise InputError(where, "top level must be a mapping", "write `thresholds:` and/or `options:` keys")
    unknown = sorted(set(data) - {"thresholds", "options"})
    if unknown:
        raise InputError(where, f"unknown key {unknown[0]!r}", "only `thresholds` and `options` are read")
    raw: dict[str, Any] = {key: data.get(key) or {} for key in ("thresholds", "options")}
    for key, value in raw.items():
        if not isinstance(value, dict):
            raise InputError(f"{where}: {key}", "must be a mapping of name: value", f"e.g. {key}: {{name: value}}")
    unknown = sorted(set(raw["options"]) - set(OPTION_RULES))
    if unknown:
        fix = f"use one of: {', '.join(OPTION_RULES)}"
        raise InputError(f"{where}: options", f"unknown option {unknown[0]!r}", fix)
    options = check_options(raw["options"], lambda name: f"{where}: options.{name}")
    return (thresholds or ThresholdSet()).override(raw["thresholds"], where), options
