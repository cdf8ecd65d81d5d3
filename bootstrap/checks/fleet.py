"""`doctor --fleet DIR`: the facts files of many hosts (`doctor --save-facts`, one per host) judged
against the env's locked variants at once. Reads the files and the locks; the verdicts are
`compat.fleet`'s. A file that cannot be read, or a host recorded twice, is left out with its reason,
never merged. Docs: docs/cluster.md, "The fleet view".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from bootstrap.compat.fleet import Fleet, FleetHost, judge_fleet
from bootstrap.compat.pick import Candidate
from bootstrap.compat.probe import load_facts
from bootstrap.errors import InputError
from bootstrap.platforms import compat_key, conda_subdir, host_platform
from bootstrap.report import result

if TYPE_CHECKING:
    from bootstrap.checks.doctor import Subject
    from bootstrap.compat.fleet import VariantReach

MAX_FILES = 100_000  # a directory this size is not a fleet's facts: refuse it rather than read it all


@dataclass(frozen=True)
class FleetOptions:
    directory: Path
    env: Optional[str] = None  # the project's env whose variants to judge; None: the default env
    root: Optional[Path] = None  # project root; None: found from the current directory


@result
class LeftOut:
    """A facts file not taken into the view, and why, in one line."""

    path: Path
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"file": str(self.path), "why": self.why}


@result
class FleetResult:
    directory: Path
    env: str
    fleet: Fleet
    left_out: tuple[LeftOut, ...]

    def to_dict(self) -> dict[str, Any]:
        """The `bootstrap.fleet` envelope's body."""
        return {
            "directory": str(self.directory),
            "env": self.env,
            "hosts": self.fleet.hosts,
            **self.fleet.to_dict(),
            "left_out": [f.to_dict() for f in self.left_out],
        }

    @property
    def exit_code(self) -> int:
        """1 when a host gets no locked variant that runs there, else 0."""
        return 1 if self.fleet.unserved else 0


def run_fleet(options: FleetOptions) -> FleetResult:
    """Read every `*.json` of the directory as a host's facts, and judge them all."""
    from bootstrap.checks.doctor import DoctorOptions, doctor_subject

    hosts, left_out = read_hosts(options.directory)
    if not hosts:
        raise InputError(
            options.directory,
            "no readable facts file (*.json) here" + (f"; {len(left_out)} left out, named above" if left_out else ""),
            "record one per host: `srun --ntasks-per-node=1 python -m bootstrap doctor --save-facts DIR/%h.json`",
        )
    subject = doctor_subject(DoctorOptions(env=options.env, root=options.root))
    if subject.env is None or subject.project is None:  # doctor_subject names an env without --lock
        raise InputError("--fleet", "judges an env's locks", "run it from the project, or pass --root")
    cache: dict[str, list[Candidate]] = {}

    def candidates_for(platform: str) -> list[Candidate]:
        if platform not in cache:
            cache[platform] = _candidates(subject, platform)
        return cache[platform]

    return FleetResult(
        directory=options.directory,
        env=subject.env,
        fleet=judge_fleet(hosts, candidates_for),
        left_out=tuple(left_out),
    )


def _candidates(subject: Subject, platform: str) -> list[Candidate]:
    """The env's locks as candidates on a platform (a compat key) of the fleet."""
    from bootstrap.lock.candidates import env_candidates, lock_candidate
    from bootstrap.lock.lockfile import read_lock

    assert subject.project is not None and subject.env is not None  # run_fleet refused the others
    if subject.spec is not None:
        return env_candidates(subject.project, subject.env, subject.spec, conda_subdir(platform))
    if not subject.paths:
        path = subject.project.lock_path(subject.env)
        return [Candidate("", path, None, f"not locked yet: no {path.name} (`make lock`)", installs=False)]
    lock = read_lock(subject.paths[0])
    return [lock_candidate(subject.paths[0], conda_subdir(platform, lock.platforms), read=lock)]


def read_hosts(directory: Path) -> tuple[list[FleetHost], list[LeftOut]]:
    """The hosts the directory's facts files record, each host once: a file that does not read as a
    facts file is left out with its error, and a host recorded in two files is left out of both."""
    if not directory.is_dir():
        raise InputError(directory, "not a directory", "give the directory the hosts saved their facts in")
    names = sorted(entry.name for entry in os.scandir(directory) if entry.name.endswith(".json"))
    if len(names) > MAX_FILES:
        raise InputError(directory, f"{len(names)} .json files, more than {MAX_FILES}", "point at one fleet's facts")
    found: dict[str, list[FleetHost]] = {}
    left_out = []
    for name in names:
        path = directory / name
        try:
            facts = load_facts(path)
        except InputError as exc:
            left_out.append(LeftOut(path=path, why=str(exc)))
            continue
        host = facts.hostname or _stem(name)
        platform = facts.platform or compat_key(host_platform())
        found.setdefault(host, []).append(FleetHost(name=host, path=path, platform=platform, nvidia=facts.nvidia))
    hosts = []
    for host, recorded in found.items():
        if len(recorded) == 1:
            hosts.append(recorded[0])
            continue
        for one in recorded:
            others = ", ".join(o.path.name for o in recorded if o is not one)
            left_out.append(
                LeftOut(
                    path=one.path,
                    why=f"{one.path}: host {host} is also recorded in {others}: left out, not merged "
                    "(remove the stale file, or record the host again)",
                )
            )
    left_out.sort(key=lambda f: f.path.name)
    return hosts, left_out


def _stem(name: str) -> str:
    """A host's name from its file's, where the facts predate the recorded hostname: 'node07.json' and
    'node07.facts.json' -> 'node07'."""
    stem = name[: -len(".json")]
    return stem[: -len(".facts")] if stem.endswith(".facts") else stem


def fleet_lines(result: FleetResult) -> list[str]:
    """The fleet view for people: the kinds of host, the variant each gets, the newest release each runs;
    the release every host runs; each locked variant's reach."""
    fleet = result.fleet
    out = [
        f"fleet: {fleet.hosts} host(s) from {result.directory}"
        + (f" ({len(result.left_out)} file(s) left out)" if result.left_out else "")
        + f"; variants of {result.env}"
    ]
    rows = [("HOSTS", "VARIANT", "STATUS", "NEWEST TORCH", "KIND")]
    for group in fleet.groups:
        chosen = group.pick.chosen
        newest = "none" if group.newest is None else f"{group.newest.release} ({group.newest.build})"
        rows.append(
            (
                str(len(group.hosts)),
                "none" if chosen is None else chosen.candidate.label,
                group.pick.status.value,
                newest,
                group.kind,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for index, row in enumerate(rows):
        out.append("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip())
        if index:
            out.append(f"    {_names(fleet.groups[index - 1].hosts)}")
    out.append(_release_line(fleet))
    for reach in fleet.variants:
        out += _reach_lines(reach)
    return out


def _names(hosts: Sequence[str], shown: int = 8) -> str:
    more = f" (+{len(hosts) - shown} more)" if len(hosts) > shown else ""
    return ", ".join(hosts[:shown]) + more


def _release_line(fleet: Fleet) -> str:
    beyond = f"; not counted, no release is known to run there: {_names(fleet.beyond)}" if fleet.beyond else ""
    if fleet.release is None:
        return f"fleet: no torch release of the packaged tables runs on every host{beyond}"
    return f"fleet: torch {fleet.release} is the newest release every host runs{beyond}"


def _reach_lines(reach: VariantReach) -> list[str]:
    build = f"torch {reach.torch}" + (f" (CUDA {reach.cuda})" if reach.cuda else "") if reach.torch else "no torch"
    if not reach.blocked:
        return [f"{reach.name}: {build} runs on every host"]
    lines = [f"{reach.name}: {build} runs on {len(reach.runs_on)} host(s), not on {len(reach.blocked)}:"]
    needs: dict[str, list[str]] = {}
    for blocked in reach.blocked:
        needs.setdefault(blocked.need, []).append(blocked.host)
    lines += [f"    {_names(hosts)}: {need}" for need, hosts in needs.items()]
    return lines
