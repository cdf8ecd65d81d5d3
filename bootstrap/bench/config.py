"""What a bench run is asked to do: workload, budget, verdict thresholds.

All plain frozen dataclasses, built once by the CLI (or a caller such as
`verify`) and passed down. Thresholds start from the defaults of
../shared/reference/bench_method.md (section 5, "Thresholds"); a YAML/JSON
config file and `--threshold NAME=VALUE` flags override them, and every
value remembers where it came from so the report can say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from bootstrap.errors import InputError

MODELS = ("auto", "tiny", "resnet18", "resnet50")
STORAGES = ("memory", "files", "packed")


@dataclass(frozen=True)
class Thresholds:
    """Verdict thresholds; names say which side passes (`*_pass` is the ok bound, `*_warn` the fail bound).

    Defaults are bench_method.md's table. Fractions are 0..1, utilisation
    percentages are 0..100.
    """

    efficiency_pass: float = 0.90        # tuned / ceiling >= this: ok
    efficiency_warn: float = 0.75        # below this: fail
    device_idle_pass: float = 0.10       # device-idle stall fraction <= this: ok
    device_idle_warn: float = 0.25       # above this: fail
    speedup_pass_fraction: float = 0.85  # tuned/naive >= this x predicted: ok; tuned < naive: fail
    util_p95_pass: float = 70.0          # NVML utilization.gpu p95 below this: fail
    util_p5_pass: float = 10.0           # p5 below this: warn (idle bursts)
    sm_active_pass: float = 0.80         # GPM SM activity; warn only
    sm_active_warn: float = 0.50
    pss_growth_pass: float = 0.05        # loader workers' PSS growth over the tuned windows
    pss_growth_warn: float = 0.20
    shm_pass_factor: float = 2.0         # free /dev/shm >= this x need: ok
    shm_warn_factor: float = 1.0         # below this x need: fail
    matmul_pass: float = 0.70            # matmul TFLOP/s / dense peak
    matmul_warn: float = 0.55
    h2d_pass: float = 0.70               # pinned H2D / PCIe link theoretical
    h2d_warn: float = 0.50
    loader_scaling_pass: float = 0.60    # CPU-only: S(W) / (W x S(1)); below: warn
    noise_floor_min: float = 0.03        # a difference is real above max(this, 2 x CV)
    early_stop_efficiency: float = 0.95  # the tuner stops once a candidate reaches this

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class ThresholdSet:
    """Thresholds plus where each value came from ('default', 'FILE', '--threshold')."""

    values: Thresholds = field(default_factory=Thresholds)
    sources: Tuple[Tuple[str, str], ...] = ()

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, "default")

    def to_dict(self) -> Dict[str, Dict[str, Any]]:
        return {name: {"value": getattr(self.values, name), "source": self.source(name)}
                for name in Thresholds.names()}

    def override(self, updates: Mapping[str, Any], source: str) -> "ThresholdSet":
        """New set with `updates` applied; unknown names and non-numbers are InputErrors naming `source`."""
        clean: Dict[str, float] = {}
        for name, raw in updates.items():
            if name not in Thresholds.names():
                raise InputError(source, f"unknown threshold {name!r}",
                                 f"use one of: {', '.join(Thresholds.names())}")
            try:
                clean[name] = float(raw)
            except (TypeError, ValueError):
                raise InputError(source, f"threshold {name}: {raw!r} is not a number", "write e.g. 0.85") from None
        merged = dict(self.sources)
        merged.update({name: source for name in clean})
        return ThresholdSet(replace(self.values, **clean), tuple(sorted(merged.items())))


def parse_threshold_flags(pairs: Sequence[str]) -> Dict[str, str]:
    """['efficiency_pass=0.85', ...] -> {'efficiency_pass': '0.85'} (values checked by `override`)."""
    out: Dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise InputError("--threshold", f"{pair!r} is not NAME=VALUE", "write e.g. --threshold efficiency_pass=0.85")
        out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class WorkloadSpec:
    """The synthetic workload: images held encoded, decoded + cropped + flipped per sample.

    `cpu_ms` is extra CPU time per sample (spent on the worker's own CPU
    clock, so it is the same on a busy machine); `io_ms` is extra latency
    per sample (a sleep: storage or network latency, costs no CPU);
    `step_ms` is extra consumer time per step (a known stand-in for a
    slower device step; 0 for real runs).
    """

    samples: int = 512           # distinct samples stored
    epoch_batches: int = 1000    # batches per epoch: the dataset repeats its samples (see SyntheticImages)
    image_size: int = 256        # stored (encoded) side
    crop_size: int = 224         # random crop fed to the model
    batch_size: int = 64
    num_classes: int = 100
    cpu_ms: float = 0.0
    io_ms: float = 0.0
    step_ms: float = 0.0
    storage: str = "memory"      # memory | files | packed (W2)
    cold_cache: bool = False     # files/packed: drop our files from the page cache before each phase
    model: str = "auto"          # auto | tiny | resnet18 | resnet50
    jpeg_quality: int = 90
    seed: int = 0

    def validate(self) -> "WorkloadSpec":
        problems = []
        if self.storage not in STORAGES:
            problems.append(("--storage", f"{self.storage!r} is not one of {', '.join(STORAGES)}"))
        if self.model not in MODELS:
            problems.append(("--model", f"{self.model!r} is not one of {', '.join(MODELS)}"))
        if not 1 <= self.crop_size <= self.image_size:
            problems.append(("--crop-size", f"{self.crop_size} must be between 1 and --image-size {self.image_size}"))
        if self.batch_size < 1 or self.samples < 1:
            problems.append(("--batch-size", f"need batch size ({self.batch_size}) and samples ({self.samples}) >= 1"))
        if self.epoch_batches < 1:
            problems.append(("--epoch-batches", f"{self.epoch_batches} must be >= 1"))
        for name in ("cpu_ms", "io_ms", "step_ms"):
            if getattr(self, name) < 0:
                problems.append((f"--{name.replace('_', '-')}", "must be >= 0"))
        if problems:
            where, problem = problems[0]
            raise InputError(where, problem, "fix the option")
        return self

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BenchOptions:
    """One bench run. `budget_s` bounds the measured phases (setup excluded from no phase: it is spent first)."""

    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    budget_s: float = 120.0
    device: str = "auto"                 # auto | cpu | cuda | cuda:N
    thresholds: ThresholdSet = field(default_factory=ThresholdSet)
    max_workers: Optional[int] = None    # hard cap on the worker search (None: derived from the host)
    cpus: Optional[int] = None           # usable CPUs for this process (torchrun: affinity / local ranks)
    target_rate: Optional[float] = None  # CPU sizing: samples/s a future GPU should be fed
    data_dir: Optional[Path] = None      # files/packed storage location (None: a temporary directory)
    nvml_module: Any = None              # pynvml stand-in for tests (None: the real pynvml)
    sampler_interval_s: float = 0.2

    def validate(self) -> "BenchOptions":
        self.workload.validate()
        if self.budget_s <= 0:
            raise InputError("--budget", f"{self.budget_s} is not a positive number of seconds", "e.g. --budget 120")
        if self.max_workers is not None and self.max_workers < 0:
            raise InputError("--max-workers", "must be >= 0", "e.g. --max-workers 8")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise InputError("--device", f"{self.device!r} is not auto, cpu, cuda or cuda:N", "e.g. --device cuda:0")
        return self


def load_config(path: Path, thresholds: Optional[ThresholdSet] = None) -> Tuple[ThresholdSet, Dict[str, Any]]:
    """Read a YAML or JSON config: `{thresholds: {name: value}, options: {...}}`.

    Returns the thresholds with the file's overrides applied and the raw
    `options` mapping (CLI option names with `_`, e.g. `budget_s`), which
    the CLI applies under its own flags.
    """
    from bootstrap.spec import load_yaml  # YAML is a superset of JSON, so one reader serves both

    data = load_yaml(path)
    where = str(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(where, "top level must be a mapping", "write `thresholds:` and/or `options:` keys")
    unknown = sorted(set(data) - {"thresholds", "options"})
    if unknown:
        raise InputError(where, f"unknown key {unknown[0]!r}", "only `thresholds` and `options` are read")
    raw_thresholds = data.get("thresholds") or {}
    raw_options = data.get("options") or {}
    for key, value in (("thresholds", raw_thresholds), ("options", raw_options)):
        if not isinstance(value, dict):
            raise InputError(f"{where}: {key}", "must be a mapping of name: value", f"e.g. {key}: {{name: value}}")
    base = thresholds or ThresholdSet()
    return base.override(raw_thresholds, where), dict(raw_options)
