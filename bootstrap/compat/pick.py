"""Which locked torch variant of an env to install on this host: every candidate judged by the
compat rules, one picked. Pure: `bootstrap.checks.variant` reads the locks.
Docs: docs/checks.md, "Torch variants: which build this host runs".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from bootstrap.compat import jetson
from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget, suggest_builds
from bootstrap.compat.versions import cuda_to_int, release_key
from bootstrap.report import Check, Status, remedies, result, worst

RUNS = (Status.OK, Status.WARN)
NOT_LOCKED_HERE = (
    "`make env` has nothing to install on this platform: add it to `platforms:` in the env's spec "
    "(and to a variant's, one whose torch has wheels for it), then `make lock`"
)


def not_locked_remedy(nvidia: DriverFacts) -> str:
    """What to do where no lock covers the platform; on a Jetson no PyPI aarch64 torch has kernels for
    its integrated GPU (server SBSA builds), so locking the platform would not help."""
    if nvidia.jetson:
        return f"`make env` has nothing to install here: {jetson.torch_remedy(nvidia)}"
    return NOT_LOCKED_HERE


@dataclass(frozen=True)
class Candidate:
    """One lock of an env as the pick sees it: the variant, its lock, the torch it installs here."""

    name: str  # the variant's name; "" for an env that declares none
    lock_path: Path
    target: Optional[TorchTarget]  # None: nothing to judge, `why` says why (not locked here, no torch entry)
    why: str = ""
    default: bool = False
    installs: bool = True  # False: `make env` installs nothing from it here (no lock, or not for this platform)
    lock: object = field(
        default=None, compare=False, repr=False
    )  # the lock read (a lock.lockfile.Lock), for the caller

    @property
    def label(self) -> str:
        return self.name or self.lock_path.name


@result
class Verdict:
    """One candidate judged on this host: its status and, when it is not ok, the reasons."""

    candidate: Candidate
    status: Status
    reasons: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()

    @property
    def runs(self) -> bool:
        return self.status in RUNS

    @property
    def build(self) -> str:
        """'torch 2.10.0+cu126 (CUDA 12.6)', 'torch 2.10.0+cpu (CPU build)', or why there is none."""
        target = self.candidate.target
        if target is None:
            return "no torch to judge"
        return f"torch {target.label} ({'CUDA ' + target.cuda if target.cuda else 'CPU build'})"

    def to_dict(self) -> dict[str, Any]:
        target = self.candidate.target
        return {
            "name": self.candidate.name or None,
            "lock": str(self.candidate.lock_path),
            "default": self.candidate.default,
            "torch": None if target is None else target.label,
            "cuda": None if target is None else target.cuda,
            "status": self.status.value,
            "reasons": list(self.reasons),
        }


@result
class Pick:
    """Every candidate's verdict, the one to install (None: none runs here), why, and the way out."""

    verdicts: tuple[Verdict, ...]
    chosen: Optional[Verdict]
    why: str
    remedy: str = ""
    note: str = ""  # what the user should know of the pick although it runs (CUDA libraries without a GPU)

    @property
    def status(self) -> Status:
        """The chosen one's status; fail when none runs or none can be installed here, skip when nothing
        could be judged."""
        if self.chosen is not None:
            return self.chosen.status
        failed = any(v.status is Status.FAIL for v in self.verdicts)
        return Status.FAIL if failed or not self.installs_here else Status.SKIP

    @property
    def installs_here(self) -> bool:
        """Whether any candidate has something for `make env` to install on this platform."""
        return any(v.candidate.installs for v in self.verdicts)

    @property
    def others(self) -> tuple[Verdict, ...]:
        """The other candidates that would run here too."""
        return tuple(v for v in self.verdicts if v.runs and v is not self.chosen)

    def find(self, name: str) -> Optional[Verdict]:
        return next((v for v in self.verdicts if v.candidate.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        chosen = self.chosen.candidate if self.chosen is not None else None
        return {
            "variants": [v.to_dict() for v in self.verdicts],
            "chosen": None if chosen is None else chosen.name or None,
            "chosen_lock": None if chosen is None else str(chosen.lock_path),
            "status": self.status.value,
            "why": self.why,
            "remedy": self.remedy,
            "note": self.note,
            "others": [v.candidate.label for v in self.others],
        }

    def lines(self, starred: Optional[str] = None) -> list[str]:
        """One line per candidate, the chosen one (or the one named `starred`) starred, then why: for people."""
        star = self.find(starred) if starred is not None else self.chosen
        rows = [(v.candidate.label, v.build, v.status.value, v.candidate.lock_path.name) for v in self.verdicts]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        out = []
        for verdict, row in zip(self.verdicts, rows):
            cells = "  ".join(cell.ljust(width) for cell, width in zip(row, widths))
            reason = f"  {verdict.reasons[0]}" if verdict.reasons else ""
            out.append(f"{'*' if verdict is star else ' '} {cells}{reason}".rstrip())
        return out + [f"pick: {self.why}"]


def runs_on_cpu(nvidia: DriverFacts) -> bool:
    """No GPU here (a Jetson's is, listed or not): any torch build runs, on the CPU, whatever the driver."""
    return not nvidia.gpus and not nvidia.jetson


def judge(nvidia: DriverFacts, candidate: Candidate) -> Verdict:
    """One candidate's verdict: the worst of its compat checks on these facts; without a GPU, a build they
    judge runs (on the CPU), as `lock.torch` says."""
    target = candidate.target
    if target is None:
        return Verdict(candidate=candidate, status=Status.SKIP, reasons=(candidate.why,))
    checks = tuple(evaluate(nvidia, target))
    if target.unknown:
        return Verdict(candidate=candidate, status=Status.SKIP, reasons=(target.unknown,), checks=checks)
    status = worst(checks)
    if status is Status.OK or (status is not Status.SKIP and runs_on_cpu(nvidia)):
        return Verdict(candidate=candidate, status=Status.OK, checks=checks)
    reasons = tuple(
        f"{c.id}: {c.detail or c.observed}" if status is Status.SKIP else f"{c.id}: {c.observed}, needs {c.expected}"
        for c in checks
        if c.status is status
    )
    return Verdict(candidate=candidate, status=status, reasons=reasons, checks=checks)


def pick_variant(nvidia: DriverFacts, candidates: Sequence[Candidate]) -> Pick:
    """Judge every candidate on these facts and name the one to install, and why."""
    verdicts = tuple(judge(nvidia, c) for c in candidates)
    if nvidia.gpus:
        chosen, why = _with_gpus(verdicts)
    elif nvidia.gpu_signs or nvidia.jetson:
        chosen, why = _unseen_gpus(verdicts, nvidia.jetson)
    else:
        chosen, why = _without_gpu(verdicts)
    if chosen is None:
        return _none_chosen(nvidia, verdicts)
    if len(verdicts) == 1:
        why = f"{chosen.candidate.label}: the env's only lock, " + (
            "runs here" if chosen.status is Status.OK else f"runs with a caveat ({chosen.reasons[0]})"
        )
    caveats = "; ".join(remedies(c for c in chosen.checks if c.status is Status.WARN))
    return Pick(
        verdicts=verdicts,
        chosen=chosen,
        why=why + _default_note(chosen, verdicts),
        remedy=caveats if chosen.status is Status.WARN else "",
        note=_cuda_without_gpu(nvidia, chosen, verdicts),
    )


CPU_VARIANT_DOCS = 'docs/lock.md, "A CPU-only torch beside a CUDA one"'


def _cuda_without_gpu(nvidia: DriverFacts, chosen: Verdict, verdicts: Sequence[Verdict]) -> str:
    """A CUDA build picked on a host with no sign of an NVIDIA GPU, for want of a CPU build: it runs,
    but brings gigabytes of CUDA libraries nothing here uses. The way to a CPU variant."""
    if nvidia.gpus or nvidia.gpu_signs or nvidia.jetson or chosen.candidate.target is None or _cpu_build(chosen):
        return ""
    if any(_cpu_build(v) for v in verdicts):
        return ""
    return (
        f"no NVIDIA GPU here and no CPU variant locked: {chosen.candidate.label} installs CUDA libraries "
        f"nothing here uses; declare a CPU variant in the spec and `make lock` ({CPU_VARIANT_DOCS})"
    )


def _none_chosen(nvidia: DriverFacts, verdicts: tuple[Verdict, ...]) -> Pick:
    """Nothing runs: the default when the tables cannot judge it (they may be older than the lock),
    else no pick, with the remedy."""
    unjudged = next(
        (v for v in verdicts if v.candidate.default and v.status is Status.SKIP and v.candidate.target is not None),
        None,
    )
    if unjudged is not None:
        return Pick(
            verdicts=verdicts,
            chosen=unjudged,
            why=f"{unjudged.candidate.label}, the default: not judged ({unjudged.reasons[0]})",
        )
    return Pick(verdicts=verdicts, chosen=None, why=_none_runs(verdicts), remedy=_remedy(nvidia, verdicts))


def _ranked(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Fully running first, then the newest torch, the default, the newest CUDA, the order declared."""
    order = {id(v): i for i, v in enumerate(verdicts)}

    def key(v: Verdict) -> tuple[bool, tuple[int, ...], bool, int, int]:
        target = v.candidate.target
        newest = tuple(-n for n in release_key(target.version)) if target is not None else ()
        return (v.status is not Status.OK, newest, not v.candidate.default, -_cuda(v), order[id(v)])

    return sorted(verdicts, key=key)


def _with_gpus(verdicts: Sequence[Verdict]) -> tuple[Optional[Verdict], str]:
    runs = _ranked([v for v in verdicts if v.runs])
    if not runs:
        return None, ""
    chosen = runs[0]
    if chosen.status is Status.OK:
        return chosen, f"{chosen.candidate.label}: the newest torch that runs fully on this driver and every GPU"
    return chosen, (
        f"{chosen.candidate.label}: no variant runs fully here; it runs with a caveat ({chosen.reasons[0]})"
    )


def _unseen_gpus(verdicts: Sequence[Verdict], release: str = "") -> tuple[Optional[Verdict], str]:
    """GPUs the kernel shows without a driver to ask (a container started without --gpus), or a Jetson
    without NVML (`release`): the host's GPUs all the same, so no CPU build, which would outlive the fix;
    and no driver to judge newer CUDA builds by, so the default, else the CUDA build the oldest drivers run."""
    builds = [v for v in verdicts if v.runs and not _cpu_build(v)]
    if not builds:
        return _with_gpus(verdicts)
    default = next((v for v in builds if v.candidate.default), None)
    chosen = default or min(builds, key=_cuda)
    which = "the default variant" if default else "the CUDA build the oldest drivers run"
    if release:
        return chosen, (
            f"{chosen.candidate.label}: this Jetson ({release}) has no NVML to judge its GPU by: "
            f"{which}, not judged; NVIDIA's PyTorch for Jetson wheels are the builds made for it"
        )
    return chosen, (
        f"{chosen.candidate.label}: the kernel shows NVIDIA GPUs but no driver answers here (a "
        f"container started without --gpus?): {which}, until the driver can be judged"
    )


def _without_gpu(verdicts: Sequence[Verdict]) -> tuple[Optional[Verdict], str]:
    runs = [v for v in verdicts if v.runs]
    cpu = _ranked([v for v in runs if _cpu_build(v)])
    default = next((v for v in runs if v.candidate.default), None)
    if default is not None and _cpu_build(default):
        return default, f"{default.candidate.label}: no NVIDIA GPU here, and the default variant is a CPU build"
    if cpu:
        return cpu[0], f"{cpu[0].candidate.label}: no NVIDIA GPU here, and a CPU build needs no CUDA libraries"
    if default is not None:
        return default, (
            f"{default.candidate.label}: no NVIDIA GPU here and no CPU build locked: "
            "the default variant, which runs on the CPU"
        )
    if runs:
        best = _ranked(runs)[0]
        return best, f"{best.candidate.label}: no NVIDIA GPU here; the newest torch locked for this platform"
    return None, ""


def _cuda(verdict: Verdict) -> int:
    """The CUDA of the verdict's build (12080 = 12.8); 0 for a CPU build or none."""
    target = verdict.candidate.target
    return cuda_to_int(target.cuda) if target is not None and target.cuda else 0


def _cpu_build(verdict: Verdict) -> bool:
    return verdict.candidate.target is not None and verdict.candidate.target.cuda is None


def _default_note(chosen: Verdict, verdicts: Sequence[Verdict]) -> str:
    """Why not the default, when another was picked."""
    default = next((v for v in verdicts if v.candidate.default), None)
    if default is None or default is chosen:
        return ""
    if default.status is Status.FAIL:
        return f"; the default {default.candidate.label} will not run here ({default.reasons[0]})"
    if default.status is Status.WARN:
        return f"; the default {default.candidate.label} runs with a caveat ({default.reasons[0]})"
    if default.status is Status.SKIP:
        return f"; the default {default.candidate.label} is not judged ({default.reasons[0]})"
    return f"; the default {default.candidate.label} runs too ({default.build})"


def _none_runs(verdicts: Sequence[Verdict]) -> str:
    if not any(v.candidate.target is not None for v in verdicts):
        return "no variant is locked for this platform: " + "; ".join(
            f"{v.candidate.label}: {v.reasons[0]}" for v in verdicts
        )
    failing = [f"{v.candidate.label}: {v.reasons[0]}" for v in verdicts if v.status is Status.FAIL]
    return "no locked variant runs here: " + "; ".join(failing)


def _remedy(nvidia: DriverFacts, verdicts: Sequence[Verdict]) -> str:
    """The default's remedies (those `lock.torch` gives), and a torch build that would run here."""
    judged = [v for v in verdicts if v.status is Status.FAIL]
    if not any(v.candidate.installs for v in verdicts):
        return not_locked_remedy(nvidia)
    if not judged:
        return "lock the env for this platform: `make lock`"
    near = next((v for v in judged if v.candidate.default), judged[0])
    fixes = remedies(c for c in near.checks if c.status is Status.FAIL)
    ccs = [g.compute_capability for g in nvidia.gpus if g.compute_capability]
    target = near.candidate.target  # a build that fails is a locked one
    # A Jetson without NVML lists no GPU to match a build to: its remedy is JetPack's torch
    suggestions = [] if jetson.unlisted(nvidia) or target is None else suggest_builds(ccs, target, nvidia)
    if suggestions:
        fixes.append(f"or declare a variant with {suggestions[0].text} in the spec and run `make lock`")
    return "; ".join(fixes)
