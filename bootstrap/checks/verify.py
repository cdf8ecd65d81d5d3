"""`verify`: is this env exactly the locked one, and does this machine's NVIDIA stack run it?

It runs inside the env (Python 3.9 possible; stdlib, pyyaml and, lazily, torch and pynvml) or from
the tools venv with `--prefix`; `run_verify` returns a `VerifyResult` and never prints.
Docs: docs/checks.md.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from bootstrap.checks.env import env_checks
from bootstrap.checks.envstate import is_running_in, read_env_state, resolve_prefix
from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.checks.torch import check_torch_import, device_checks, find_torch, first_line, installed_torch_target
from bootstrap.checks.variant import installed_variant_check
from bootstrap.compat.host import LoaderNeeds, host_checks
from bootstrap.compat.probe import Facts, collect_facts, load_facts, save_facts
from bootstrap.compat.rules import evaluate
from bootstrap.errors import EXIT_INTERRUPTED, InputError
from bootstrap.fsutil import check_output
from bootstrap.lock.candidates import lock_torch_target
from bootstrap.platforms import conda_subdir, host_platform
from bootstrap.prefix import python_executable
from bootstrap.project import default_lock_path, refuse_input
from bootstrap.report import Check, Status, body, exit_code, result
from bootstrap.runner import Runner, run

if TYPE_CHECKING:
    from bootstrap.bench import BenchOptions, BenchResult
    from bootstrap.checks.envstate import EnvState
    from bootstrap.checks.torch import TorchFound
    from bootstrap.compat.target import TorchTarget

BENCH_BUDGET_S = 20.0  # the default workload's setup and three timed windows fit on a 2-core host


@dataclass(frozen=True)
class VerifyOptions:
    prefix: Optional[Path] = None  # None: sys.prefix when bootstrap made it, else <root>/.envs/<default env>
    lock_path: Optional[Path] = None  # None: the lock the env was created from
    deep: bool = False  # sha256 of every installed file instead of size + change time
    bench: bool = True
    bench_budget_s: float = BENCH_BUDGET_S
    facts_path: Optional[Path] = None  # re-evaluate recorded facts (host/driver/torch rules only)
    save_facts: Optional[Path] = None
    root: Optional[Path] = None  # project root; None: found from the prefix or the current directory
    needs: LoaderNeeds = field(default_factory=LoaderNeeds)
    gpu: Optional[int] = None  # compute-check this GPU only (a torchrun rank's own); None: every GPU
    prolog: bool = False  # a pre-job check: no torch import, no device work, files by sizes and times


@result
class VerifyResult:
    checks: tuple[Check, ...]
    prefix: Optional[Path]
    lock_path: Optional[Path]
    inside: bool  # verified the interpreter's own env (torch checks ran)
    facts: Optional[Facts]
    facts_source: str
    seconds: dict[str, float] = field(default_factory=dict)
    ranks: tuple[dict[str, Any], ...] = ()  # `--distributed`: each rank's host and what it runs

    @property
    def exit_code(self) -> int:
        """1 when a check failed; 130 (as `bench` and a shell say it) when that is the benchmark,
        cut short by Ctrl-C."""
        return EXIT_INTERRUPTED if bench_interrupted(self.checks) else exit_code(self.checks)

    def extra(self) -> dict[str, Any]:
        return {
            "prefix": None if self.prefix is None else str(self.prefix),
            "lock": None if self.lock_path is None else str(self.lock_path),
            "inside": self.inside,
            "facts_source": self.facts_source,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "facts": None if self.facts is None else self.facts.to_dict(),
            **({"ranks": list(self.ranks)} if self.ranks else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        """The `bootstrap.checks` envelope's body, kind 'verify'."""
        return body(self.checks, "verify", self.extra())


# --------------------------------------------------------------------------- bench

_INTERRUPTED = " (interrupted)"  # how the bench check's observation ends when Ctrl-C cut the benchmark short


def bench_interrupted(checks: Sequence[Check]) -> bool:
    """Whether the benchmark was cut short (read off the checks, so a rank's checks sent as JSON tell it too)."""
    return any(c.id == "bench" and c.status is Status.FAIL and c.observed.endswith(_INTERRUPTED) for c in checks)


def bench_checks(
    enabled: bool,
    inside: bool,
    budget_s: float,
    nvml: Any = None,
    bench: Optional[Callable[[BenchOptions], BenchResult]] = None,
) -> list[Check]:
    """The acceptance benchmark on a small budget, its verdicts as checks (`python -m bootstrap bench --budget S`).

    `bench` is `bootstrap.bench.run_bench` (tests pass a stand-in). On a
    CPU-only host the figures size the host rather than accept a GPU, so
    its failures are reported as warnings there.
    """
    cid = "bench"
    expected = "the acceptance benchmark passes"
    if not enabled:
        return [Check(cid, Status.SKIP, "--no-bench", expected, detail="skipped on request")]
    if not inside:
        return [
            Check(
                cid,
                Status.SKIP,
                "not inside the env",
                expected,
                detail="run `python -m bootstrap verify` with the env's python to benchmark it",
            )
        ]
    rerun = f"`python -m bootstrap --debug bench --budget {budget_s:g}` shows the traceback"
    try:
        from bootstrap.bench import BenchOptions, run_bench
    except ImportError as exc:
        return [Check(cid, Status.SKIP, "bench: not available", expected, detail=str(exc))]
    try:
        result = (bench or run_bench)(BenchOptions(budget_s=budget_s, nvml_module=nvml))
    except InputError as exc:
        return [Check(cid, Status.FAIL, f"could not start: {exc}", expected, rerun)]
    except Exception as exc:  # noqa: BLE001 - a crashed bench is a failed check; the rest must still report
        return [Check(cid, Status.FAIL, f"crashed: {type(exc).__name__}: {first_line(exc)}", expected, rerun)]
    device = result.device or {}
    on_cpu = device.get("type") != "cuda"
    best = result.best.label if result.best is not None else "no winner"
    observed = (
        f"{device.get('name', '?')} ({device.get('type', '?')}), {result.seconds:.0f} s of a "
        f"{result.budget_s:g} s budget, best loader: {best}" + (_INTERRUPTED if result.partial else "")
    )
    if result.partial:  # Ctrl-C: what was measured is reported, but an acceptance run cut short is no pass
        checks = [
            Check(
                cid,
                Status.FAIL,
                observed,
                expected,
                "run it to the end, or skip it with --no-bench",
                "; ".join(result.notes),
            )
        ]
    else:
        checks = [Check(cid, Status.OK, observed, expected, detail="; ".join(result.notes))]
    for check in result.checks:
        if on_cpu and check.status is Status.FAIL:
            check = Check(
                check.id,
                Status.WARN,
                check.observed,
                check.expected,
                check.remedy,
                "host run on the CPU: a sizing figure, not a GPU acceptance verdict; " + check.detail,
            )
        checks.append(check)
    return checks


# --------------------------------------------------------------------------- verify


def run_verify(
    options: VerifyOptions, *, nvml: Any = None, runner: Runner = run, torch_module: Any = None
) -> VerifyResult:
    """Every check for one env on this machine (or for recorded facts with `facts_path`)."""
    if options.facts_path is not None:
        return replay(options, options.facts_path)
    if options.save_facts is not None:
        check_output(options.save_facts, "--save-facts")  # a typo fails before the benchmark, not after
        if options.lock_path is not None:
            refuse_input(options.save_facts, "--save-facts", {options.lock_path: "the lock --lock names"})
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    prefix = resolve_prefix(options.prefix, options.root)
    inside = is_running_in(prefix)
    state = read_env_state(prefix, options.root, options.lock_path)
    checks = env_checks(state, deep=options.deep, inside=inside, runner=runner, hash_changed=not options.prolog)
    seconds["env"] = _lap(started)
    facts = collect_facts(nvml, runner, disk_path=str(prefix if prefix.is_dir() else Path.cwd()))
    seconds["facts"] = _lap(started, seconds)
    checks += [c for c in (installed_variant_check(state, facts.nvidia),) if c is not None]
    # torch is imported only inside the env and only with a GPU to test (or when the caller passes one).
    found = find_torch(bool(facts.nvidia.gpus) and not options.prolog, torch_module) if inside else None
    if found is not None:
        facts = replace(facts, torch=found.target, torch_reason=found.how)
    else:
        facts = replace(facts, torch=None, torch_reason=f"verifying {prefix} from another interpreter ({sys.prefix})")
    seconds["torch_import"] = _lap(started, seconds)
    target, target_why, locked_target = _targets(state, found)
    checks += nvidia_checks(facts.nvidia, facts.host)
    if found is not None:
        checks.append(check_torch_import(found, state))
    checks += (
        evaluate(facts.nvidia, target, facts.visible())
        if target is not None
        else [Check("torch.cuda_build", Status.SKIP, "no torch", "a torch build", detail=target_why)]
    )
    checks += _device_checks(options, found, facts, locked_target, prefix)
    seconds["torch"] = _lap(started, seconds)
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    checks += bench_checks(options.bench, inside, options.bench_budget_s, nvml)
    seconds["bench"] = _lap(started, seconds)
    if options.save_facts is not None:
        save_facts(facts, options.save_facts)
    seconds["total"] = time.perf_counter() - started
    return VerifyResult(
        checks=tuple(checks),
        prefix=prefix,
        lock_path=state.lock_path,
        inside=inside,
        facts=facts,
        facts_source="this host",
        seconds=seconds,
    )


def _device_checks(
    options: VerifyOptions,
    found: Optional[TorchFound],
    facts: Facts,
    locked: Optional[TorchTarget],
    prefix: Path,
) -> list[Check]:
    """torch on the GPUs, inside the env; a skip saying why not (outside it, or a pre-job check)."""
    if found is not None and not options.prolog:
        return device_checks(found.module, facts.nvidia, found.target, locked, only=options.gpu)
    observed, why = (
        ("--prolog", "a pre-job check imports no torch and runs nothing on the GPUs")
        if options.prolog
        else ("not inside the env", facts.torch_reason)
    )
    return [
        Check(
            "torch.gpu",
            Status.SKIP,
            observed,
            "CUDA, matmul, conv and pinned memory",
            detail=f"{why}: run `{python_executable(prefix)} -m bootstrap verify` for them",
        )
    ]


def _targets(state: EnvState, found: Optional[TorchFound]) -> tuple[Optional[TorchTarget], str, Optional[TorchTarget]]:
    """(the torch build to judge, why that one, the build the lock installs): the imported torch's, else
    the one installed in the env, else (no env yet) the lock's, as doctor judges it."""
    locked_target, locked_why = None, "no lock"
    if state.lock is not None:
        locked_target, locked_why = lock_torch_target(state.lock, state.platform or host_platform())
    if found is not None:
        return found.target, found.how, locked_target
    if state.record is not None:
        return (*installed_torch_target(state), locked_target)
    return locked_target, locked_why, locked_target


def _lap(started: float, seconds: Optional[dict[str, float]] = None) -> float:
    return time.perf_counter() - started - sum((seconds or {}).values())


def replay(options: VerifyOptions, facts_path: Path) -> VerifyResult:
    """`verify --facts FILE`: the host, NVIDIA and CUDA rules on recorded facts; no env, no device, no bench."""
    from bootstrap.lock.lockfile import read_lock

    facts = load_facts(facts_path)
    source = str(facts_path)
    lock_path = options.lock_path or default_lock_path(options.root)
    target, why = facts.torch, facts.torch_reason
    if target is None and lock_path is not None:
        lock = read_lock(lock_path)
        target, why = lock_torch_target(lock, conda_subdir(facts.platform, lock.platforms))
    checks = [
        Check(
            "env",
            Status.SKIP,
            "recorded facts",
            "the env itself",
            detail=f"re-evaluating {source}: the env checks need the env (run verify inside it)",
        )
    ]
    checks += nvidia_checks(facts.nvidia, facts.host)
    checks += (
        evaluate(facts.nvidia, target, facts.visible())
        if target is not None
        else [Check("torch.cuda_build", Status.SKIP, "no torch", "a torch build", detail=why or "no lock at hand")]
    )
    checks.append(
        Check(
            "torch.gpu",
            Status.SKIP,
            "recorded facts",
            "a live GPU",
            detail="CUDA, matmul, conv and pinned memory need the machine itself",
        )
    )
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    checks.append(
        Check(
            "bench",
            Status.SKIP,
            "recorded facts",
            "the acceptance benchmark",
            detail="the benchmark needs the machine itself",
        )
    )
    return VerifyResult(
        checks=tuple(checks), prefix=None, lock_path=lock_path, inside=False, facts=facts, facts_source=source
    )
