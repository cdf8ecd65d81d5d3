"""Many hosts at once (`doctor --fleet DIR`): the variant each host gets, the hosts grouped by what they
are, the newest torch release of the packaged tables that every host runs, and, for each locked variant,
the hosts it does not run on with what each would need. Pure: facts and candidates in, a result out;
`bootstrap.checks.fleet` reads the files and the locks. Docs: docs/cluster.md, "The fleet view".
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from bootstrap.compat import data, jetson
from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.forward import newer_than_driver
from bootstrap.compat.pick import Candidate, Pick, Verdict, judge, pick_variant
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.compat.versions import (
    cuda_from_int,
    cuda_to_int,
    first_cuda_for,
    full_support_driver,
    minor_version_floor,
    release_key,
)
from bootstrap.platforms import conda_subdir
from bootstrap.report import Status, result

# platform (a compat key) -> the env's locked variants as candidates there
CandidatesFor = Callable[[str], Sequence[Candidate]]


@result
class FleetHost:
    """One host as its facts file records it."""

    name: str  # the recorded hostname, else the file's name without .json
    path: Path
    platform: str  # a compat key: 'linux_x86_64'
    nvidia: DriverFacts


def host_kind(host: FleetHost) -> str:
    """What a host is, in the terms a variant is picked by: platform, driver, GPUs ('8x NVIDIA H200 (CC
    9.0)'). Hosts of one kind get the same verdicts."""
    nvidia = host.nvidia
    if nvidia.has_driver:
        supported, _ = nvidia.supported_cuda()
        cuda = f" (CUDA {cuda_from_int(supported)})" if supported else ""
        driver = f"driver {nvidia.driver_version or '?'}{cuda}"
    elif nvidia.jetson:
        driver = "no NVML"
    elif nvidia.gpu_signs:
        driver = "no driver answers, GPUs seen"
    else:
        driver = "no NVIDIA driver"
    where = (
        host.platform + (", WSL2" if nvidia.wsl else "") + (f", Jetson {_l4t(nvidia.jetson)}" if nvidia.jetson else "")
    )
    counts = Counter((gpu.name, gpu.cc_text, bool(gpu.mig_uuids)) for gpu in sorted(nvidia.gpus, key=lambda g: g.index))
    gpus = ", ".join(f"{n}x {name} (CC {cc}{', MIG' if mig else ''})" for (name, cc, mig), n in counts.items())
    return f"{where}; {driver}; {gpus or 'no GPU listed'}"


def _l4t(release: str) -> str:
    """'R36 (release), REVISION: 4.0, ...' -> 'R36.4'."""
    major = release.split(" ", 1)[0]
    revision = release.partition("REVISION: ")[2].split(",", 1)[0].split(".", 1)[0]
    return f"{major}.{revision}" if revision.isdigit() else major


@result
class Release:
    """The newest release of the packaged tables a kind of host runs, and the build of it that runs."""

    release: str
    build: str  # 'cu126', or 'cpu' where no GPU is listed
    status: Status  # ok, or warn (minor-version compatibility)


def releases_run(nvidia: DriverFacts, platform: str) -> dict[str, Release]:
    """Every release of the tables with a build that runs on these facts (the pick's own rules), by
    release: the build of it that runs fully, else with a caveat, the newest CUDA first. A host with no
    sign of a GPU is given the CPU build, which any release has."""
    out: dict[str, Release] = {}
    subdir = conda_subdir(platform)
    cpu_host = not (nvidia.gpus or nvidia.jetson or nvidia.gpu_signs)
    if not cpu_host and not nvidia.gpus:  # GPUs no driver lists (a Jetson without NVML): nothing to judge
        return out
    for row in data.TORCH_RELEASES:
        version = row["versions"][-1]
        running = []
        for tag in ["cpu"] if cpu_host else [variant["tag"] for variant in row["variants"]]:
            target = torch_target_from_lock_entry(f"{version}+{tag}", subdir)
            verdict = judge(nvidia, Candidate(tag, Path(tag), target))
            # A build whose kernels the tables do not list is not judged to run: the pick may still take
            # one a lock holds, but the fleet's release must be one known to run everywhere
            if verdict.runs and (cpu_host or target.arch_list is not None):
                running.append((verdict.status is Status.OK, _tag_cuda(tag), tag, verdict.status))
        if running:
            _, _, tag, status = max(running)
            out[row["release"]] = Release(release=row["release"], build=tag, status=status)
    return out


def _tag_cuda(tag: str) -> int:
    return int(tag[2:]) if tag.startswith("cu") and tag[2:].isdigit() else 0


@result
class Group:
    """Hosts of one kind: what they are, the variant they get, the newest release they run."""

    kind: str
    platform: str
    hosts: tuple[str, ...]
    nvidia: DriverFacts  # the first host's: every host of the kind is judged the same
    pick: Pick
    newest: Optional[Release]
    releases: tuple[str, ...]  # every release of the tables they run

    def to_dict(self) -> dict[str, Any]:
        chosen = self.pick.chosen
        return {
            "kind": self.kind,
            "platform": self.platform,
            "hosts": list(self.hosts),
            "variant": None if chosen is None else chosen.candidate.label,
            "torch": None if chosen is None or chosen.candidate.target is None else chosen.candidate.target.label,
            "status": self.pick.status.value,
            "why": self.pick.why,
            "newest_release": None if self.newest is None else self.newest.release,
            "newest_build": None if self.newest is None else self.newest.build,
        }


@result
class Blocked:
    """A host a locked variant does not run on, and what it would need."""

    host: str
    need: str

    def to_dict(self) -> dict[str, str]:
        return {"host": self.host, "need": self.need}


@result
class VariantReach:
    """One locked variant across the fleet: the hosts it runs on, and those it does not."""

    name: str
    torch: str
    cuda: Optional[str]
    runs_on: tuple[str, ...]
    blocked: tuple[Blocked, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "torch": self.torch,
            "cuda": self.cuda,
            "runs_on": list(self.runs_on),
            "blocked": [b.to_dict() for b in self.blocked],
        }


@result
class Fleet:
    """Every host's verdict, by kind; the release every host runs; each variant's reach."""

    groups: tuple[Group, ...]
    release: Optional[str]  # the newest release of the tables every host (but `beyond`) runs
    beyond: tuple[str, ...]  # hosts no release of the tables is known to run on (a Jetson: JetPack's torch)
    variants: tuple[VariantReach, ...]

    @property
    def hosts(self) -> int:
        return sum(len(g.hosts) for g in self.groups)

    @property
    def unserved(self) -> tuple[str, ...]:
        """Hosts no locked variant runs on."""
        return tuple(h for g in self.groups if g.pick.chosen is None for h in g.hosts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": [g.to_dict() for g in self.groups],
            "release": self.release,
            "beyond": list(self.beyond),
            "variants": [v.to_dict() for v in self.variants],
            "unserved": list(self.unserved),
        }


def judge_fleet(hosts: Sequence[FleetHost], candidates_for: CandidatesFor) -> Fleet:
    """Group the hosts by kind, pick each kind's variant, and find the release they all run."""
    kinds: dict[str, list[FleetHost]] = {}
    for host in sorted(hosts, key=lambda h: h.name):
        kinds.setdefault(host_kind(host), []).append(host)
    groups = []
    for kind, members in kinds.items():
        first = members[0]
        runs = releases_run(first.nvidia, first.platform)
        newest = runs[max(runs, key=release_key)] if runs else None
        groups.append(
            Group(
                kind=kind,
                platform=first.platform,
                hosts=tuple(h.name for h in members),
                nvidia=first.nvidia,
                pick=pick_variant(first.nvidia, candidates_for(first.platform)),
                newest=newest,
                releases=tuple(sorted(runs, key=release_key)),
            )
        )
    groups.sort(key=lambda g: (-len(g.hosts), g.kind))
    served = [g for g in groups if g.releases]
    common = set.intersection(*(set(g.releases) for g in served)) if served else set()
    return Fleet(
        groups=tuple(groups),
        release=max(common, key=release_key) if common else None,
        beyond=tuple(sorted(h for g in groups if not g.releases for h in g.hosts)),
        variants=_reach(groups),
    )


def _reach(groups: Sequence[Group]) -> tuple[VariantReach, ...]:
    """Each locked variant (newest torch first): the hosts it runs on and, for the others, what they need."""
    found: dict[str, tuple[Verdict, list[str], list[Blocked]]] = {}
    for group in groups:
        for verdict in group.pick.verdicts:
            name = verdict.candidate.label
            entry = found.setdefault(name, (verdict, [], []))
            if entry[0].candidate.target is None and verdict.candidate.target is not None:
                found[name] = entry = (verdict, entry[1], entry[2])
            if verdict.runs:
                entry[1].extend(group.hosts)
            else:
                need = blocker_need(verdict, group.nvidia)
                entry[2].extend(Blocked(host=h, need=need) for h in group.hosts)
    out = []
    for name, (verdict, runs, blocked) in found.items():
        target = verdict.candidate.target
        out.append(
            VariantReach(
                name=name,
                torch=target.label if target is not None else "",
                cuda=target.cuda if target is not None else None,
                runs_on=tuple(sorted(runs)),
                blocked=tuple(sorted(blocked, key=lambda b: b.host)),
            )
        )
    out.sort(key=lambda v: tuple(-n for n in release_key(v.torch.split("+")[0] or "0")))
    return tuple(out)


def blocker_need(verdict: Verdict, nvidia: DriverFacts) -> str:
    """What a host needs to run a variant that does not run on it: the driver (the lowest that runs the
    build's CUDA at all, and the one that supports it fully), or why no driver helps."""
    target = verdict.candidate.target
    if not verdict.candidate.installs:
        return verdict.reasons[0] if verdict.reasons else "nothing locked for this platform"
    if target is None or verdict.status is Status.SKIP:
        return f"not judged: {verdict.reasons[0] if verdict.reasons else 'no torch to judge'}"
    failed = {c.id for c in verdict.checks if c.status is Status.FAIL}
    if nvidia.jetson:
        return f"JetPack's own torch: {jetson.torch_remedy(nvidia)}"
    if "torch.cuda_build" in failed:
        return "a CUDA build: this is a CPU build on a GPU host"
    no_kernel = [
        gpu
        for gpu in nvidia.gpus
        if f"cuda.arch.gpu{gpu.index}" in failed
        and not (gpu.compute_capability and newer_than_driver(gpu.compute_capability, nvidia))
    ]
    if no_kernel:
        gpu = no_kernel[0]
        return f"no kernel for the {gpu.name} (CC {gpu.cc_text}) in torch {target.label}: no driver helps"
    wheel = cuda_to_int(target.cuda) if target.cuda else 0
    for gpu in nvidia.gpus:  # a GPU newer than the driver: the driver of the CUDA that first targets it
        first = first_cuda_for(gpu.compute_capability) if gpu.compute_capability else None
        wheel = max(wheel, first or 0) if f"cuda.arch.gpu{gpu.index}" in failed else wheel
    return driver_need(nvidia, wheel)


def driver_need(nvidia: DriverFacts, wheel: int) -> str:
    """'driver >= 580.65.06 (has 535.183.01; >= 580.65.06 for full CUDA 13.0 support)'."""
    floor, _ = minor_version_floor(wheel // 1000, nvidia.os)
    full, _ = full_support_driver(wheel, nvidia.os)
    series = "Windows host's driver" if nvidia.wsl else "driver"
    has = f"has {nvidia.driver_version}" if nvidia.driver_version else "no driver answers"
    fully = f"; >= {full} for full CUDA {cuda_from_int(wheel)} support" if full and full != floor else ""
    return f"{series} >= {floor or full or '?'} ({has}{fully})"
