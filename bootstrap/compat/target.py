"""The torch build to check: what the running torch is, what a locked wheel installs
(`torch_target_from_lock_entry`; `lock.candidates` finds that entry in a lock), and what to lock
instead (`suggest_builds`). Nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, checked_platform
from bootstrap.compat.forward import judged_as, newer_than_driver
from bootstrap.compat.typed import FieldError, from_mapping
from bootstrap.compat.versions import (
    cuda_from_tag,
    cuda_to_int,
    driver_older_than_tables,
    driver_tuple,
    kernel_for,
    minor_version_floor,
    oldest_tabled_cuda,
    release_key,
    short_source,
)
from bootstrap.platforms import compat_key
from bootstrap.report import Status, result

PYTORCH_INDEX = "https://download.pytorch.org/whl"


@dataclass(frozen=True)
class TorchTarget:
    """The torch build to check against.

    `cuda` is None for a CPU build; `arch_list` is None when unknown (e.g.
    `get_arch_list()` returned [] without a visible GPU). A non-empty
    `unknown` means the build could not be identified: the rules then skip
    with that reason instead of guessing.
    """

    version: str
    cuda: Optional[str]
    arch_list: Optional[tuple[str, ...]] = None
    variant: str = ""
    platform: str = "linux_x86_64"
    cudnn: Optional[str] = None
    nccl: Optional[str] = None
    source: str = ""
    confidence: str = ""
    unknown: str = ""
    notes: tuple[str, ...] = ()
    locked: bool = False  # the build a lock names, rather than one installed in an env

    FREE_TEXT = ("source", "unknown", "notes")  # our and tools' words: a control character is shown escaped

    @property
    def label(self) -> str:
        return f"{self.version}+{self.variant}" if self.variant else self.version

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["arch_list"] = None if self.arch_list is None else list(self.arch_list)
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "torch") -> TorchTarget:
        """Read back `to_dict()`; a field of the wrong type, or a version that is none, is a FieldError
        naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> TorchTarget:
        """Itself, if its versions read as versions (as read back from a file: a FieldError if not)."""
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+a-z0-9]*)", self.version):
            raise FieldError(f"{path}.version: {self.version!r} is not a torch version like '2.10.0'")
        if self.cuda is not None and not re.fullmatch(r"\d+\.\d+", self.cuda):
            raise FieldError(f"{path}.cuda: {self.cuda!r} is not a CUDA version like '12.8' (null for a CPU build)")
        checked_platform(self.platform, f"{path}.platform")
        for number, entry in enumerate(self.arch_list or ()):
            # What torch._C._cuda_getArchFlags() lists: sm_50, sm_90a, sm_100f, compute_120.
            if not re.fullmatch(r"(sm|compute)_[1-9][0-9]{1,2}[af]?", entry):
                raise FieldError(
                    f"{path}.arch_list[{number}]: {entry!r} is not an arch like 'sm_90', 'sm_90a' or 'compute_120'"
                )
        return self


# --------------------------------------------------------------------------- the packaged tables


def find_release(version: str) -> Optional[Mapping[str, Any]]:
    """The table row of a torch version ('2.8.0' -> release '2.8'), None when not in the table."""
    key = ".".join(version.split("+")[0].split(".")[:2])
    for row in data.TORCH_RELEASES:
        if row["release"] == key:
            return row
    return None


def variant_arch_list(variant: Mapping[str, Any], platform: str) -> Optional[tuple[str, ...]]:
    """SASS + confirmed PTX entries of a variant on a platform; None where the table has no list."""
    if platform == "linux_x86_64":
        return tuple(variant["sass"]) + tuple(variant["ptx"])
    if platform == "linux_aarch64":
        arch = variant.get("aarch64_sass")
        return tuple(arch) if arch else None
    if platform == "windows_x86_64":
        arch = data.WINDOWS_ARCH_LISTS["sass"].get(variant["tag"])
        return tuple(arch) if arch else None
    return None


# --------------------------------------------------------------------------- from a lock


def _split_local(version: str) -> tuple[str, str]:
    public, _, local = version.strip().partition("+")
    return public, local.lower()


def _cuda_from_requires(dependencies: Optional[Mapping[str, str]]) -> Optional[str]:
    """The CUDA minor a torch wheel pins: nvidia-cuda-runtime-cu12==12.8.90 or cuda-toolkit==13.0.2."""
    for name, spec in (dependencies or {}).items():
        base = re.split(r"[\[<>=!~ ]", name.lower(), maxsplit=1)[0]
        if base.startswith("nvidia-cuda-runtime") or base == "cuda-toolkit":
            match = re.search(r"==\s*(\d+\.\d+)", f"{name} {spec}")
            if match:
                return match.group(1)
    return None


def torch_target_from_lock_entry(
    version: str,
    platform: str = "linux-64",
    *,
    url: str = "",
    dependencies: Optional[Mapping[str, str]] = None,
) -> TorchTarget:
    """Derive the torch build a locked pip entry installs, from the packaged tables.

    '2.10.0' on linux-64 from PyPI -> CUDA 12.8 with that wheel's arch list;
    '2.8.0+cu126' -> the cu126 variant; macOS and Windows PyPI wheels -> CPU.
    `url` (a download.pytorch.org/whl/cuXYZ link) and `dependencies` (the
    wheel's Requires-Dist pins) refine the answer when the version has no
    local tag.
    """
    public, local = _split_local(version)
    plat = compat_key(platform)
    release = find_release(public) or {}  # {}: not in the packaged table
    base = TorchTarget(version=public, cuda=None, platform=plat, locked=True)
    if plat == "macos":
        return replace(base, variant="cpu", source="macOS torch wheels have no CUDA", confidence="high")
    tag = local or _tag_from_url(url)
    if tag == "cpu":
        return replace(base, variant="cpu", source=f"local version tag +{tag}", confidence="high")
    if tag.startswith("cu"):
        return _target_for_variant(base, release, tag)
    return _target_for_pypi_default(base, release, _cuda_from_requires(dependencies))


def _tag_from_url(url: str) -> str:
    match = re.search(r"download\.pytorch\.org/whl/(cu\d+|cpu)/", url or "")
    return match.group(1) if match else ""


def _variant_row(release: Mapping[str, Any], tag: str) -> Optional[Mapping[str, Any]]:
    variants: Sequence[Mapping[str, Any]] = release.get("variants", ())
    return next((variant for variant in variants if variant["tag"] == tag), None)


def _from_variant(base: TorchTarget, variant: Mapping[str, Any], source: str) -> TorchTarget:
    notes: tuple[str, ...] = (
        () if variant.get("ptx_known", True) else (f"PTX in this build unknown: {variant.get('ptx_note', '')}",)
    )
    arch_list = variant_arch_list(variant, base.platform)
    arch_source = short_source(variant)
    if base.platform == "windows_x86_64":
        # One Windows table is documented, for a span of releases: say so wherever it is applied.
        windows = data.WINDOWS_ARCH_LISTS
        arch_source = (
            f"the Windows list, documented for {windows['applies_to']}, applied to torch {base.version} "
            f"as no per-release list is known ({short_source(windows)})"
        )
        if arch_list is None:
            notes += (
                f"the packaged Windows arch lists have no {variant['tag']} row "
                f"(only {', '.join(sorted(windows['sass']))}): its kernels on Windows are unknown",
            )
    return replace(
        base,
        cuda=variant["cuda"],
        variant=variant["tag"],
        arch_list=arch_list,
        source=f"{source}; arch list: {arch_source}",
        confidence=variant["confidence"],
        notes=notes,
    )


def _target_for_variant(base: TorchTarget, release: Mapping[str, Any], tag: str) -> TorchTarget:
    variant = _variant_row(release, tag)
    if variant is not None:
        return _from_variant(base, variant, f"variant {tag} of torch {release['release']}")
    cuda = cuda_from_tag(tag)
    return replace(
        base,
        cuda=cuda,
        variant=tag,
        source=f"local version tag +{tag}; arch list not in the packaged table",
        confidence="medium",
    )


def _target_for_pypi_default(base: TorchTarget, release: Mapping[str, Any], pinned_cuda: Optional[str]) -> TorchTarget:
    cell = release.get("pypi_default", {}).get(base.platform)
    if cell is None and pinned_cuda is None:
        return replace(
            base,
            unknown=(
                f"torch {base.version} on {base.platform} is not in the packaged table "
                f"(torch {data.TORCH_RELEASES[0]['release']}-{data.TORCH_RELEASES[-1]['release']}); "
                "regenerate bootstrap/compat/data.py with scripts/gen_compat_data.py"
            ),
        )
    cuda = pinned_cuda or (cell or {}).get("cuda")
    if cuda is None:
        return replace(
            base,
            variant="cpu",
            source=f"PyPI wheel: {cell.get('cuda_note', 'CPU-only')}",
            confidence=cell["confidence"],
        )
    cudnn = (cell or {}).get("cudnn")
    nccl = (cell or {}).get("nccl")
    for variant in release.get("variants", ()):
        if variant["cuda"] == cuda:
            target = _from_variant(base, variant, f"PyPI default wheel of torch {release['release']} (CUDA {cuda})")
            return replace(target, variant="", cudnn=cudnn, nccl=nccl)
    return replace(
        base,
        cuda=cuda,
        cudnn=cudnn,
        nccl=nccl,
        confidence="medium",
        source=f"Requires-Dist pins CUDA {cuda}; arch list not in the packaged table",
    )


# --------------------------------------------------------------------------- what to lock instead


@result
class Suggestion:
    """A torch build to lock instead: `pip install torch==<pin> --index-url <index_url>`."""

    pin: str
    tag: str
    cuda: str
    index_url: str
    confidence: str

    @property
    def text(self) -> str:
        return f"torch=={self.pin} (--index-url {self.index_url})"

    def to_dict(self) -> dict[str, str]:
        return {
            "pin": self.pin,
            "tag": self.tag,
            "cuda": self.cuda,
            "index_url": self.index_url,
            "confidence": self.confidence,
        }


def suggest_builds(
    ccs: Sequence[tuple[int, int]],
    near: TorchTarget,
    facts: Optional[DriverFacts] = None,
) -> list[Suggestion]:
    """Other torch builds with SASS for every CC that the driver runs, best first: each passes doctor's
    rules on these facts (`forward.judged_as`: with a refused cuda-compat off).

    Best = the release of `near`, then the nearest release (newer on ties);
    within a release a CUDA the driver fully supports, then the PyPI default
    or stable variants, then the newest CUDA. The build `near` itself (same
    release and CUDA) is never suggested.
    """
    facts = judged_as(facts) if facts is not None else None
    if facts is not None and any(newer_than_driver(cc, facts) for cc in ccs):
        return []  # a GPU newer than the driver runs no build until the driver is upgraded
    home = release_key(near.version)[:2]
    ranked = []
    for release in data.TORCH_RELEASES:
        rkey = release_key(release["release"])
        for variant in release["variants"]:
            if tuple(rkey) == tuple(home) and variant["cuda"] == near.cuda:
                continue
            arch = variant_arch_list(variant, near.platform)
            wheel = cuda_to_int(variant["cuda"])
            if ccs and not (arch and all(kernel_for(cc, _sass_only(arch), wheel)[0] for cc in ccs)):
                continue
            fit = driver_fit(facts, wheel)
            if fit is Status.FAIL:
                continue
            distance = abs((rkey[0] - home[0]) * 100 + rkey[1] - home[1]) if len(home) == 2 else 0
            key = (distance, tuple(-p for p in rkey), fit is not Status.OK, _status_rank(variant), -wheel)
            ranked.append((key, release, variant))
    ranked.sort(key=lambda item: item[0])
    return [
        Suggestion(
            pin=f"{release['versions'][-1]}+{variant['tag']}",
            tag=variant["tag"],
            cuda=variant["cuda"],
            index_url=f"{PYTORCH_INDEX}/{variant['tag']}",
            confidence=variant["confidence"],
        )
        for _, release, variant in ranked
    ]


def unlisted_builds(near: TorchTarget, facts: Optional[DriverFacts] = None) -> list[Suggestion]:
    """Builds this driver runs whose arch list the packaged table lacks on `near`'s platform (Windows
    cu118, cu121, cu124), newest first: whether they run on the GPUs is unknown, not 'no'."""
    found = []
    facts = judged_as(facts) if facts is not None else None
    for release in reversed(data.TORCH_RELEASES):
        for variant in release["variants"]:
            if (
                variant_arch_list(variant, near.platform) is None
                and driver_fit(facts, cuda_to_int(variant["cuda"])) is not Status.FAIL
            ):
                found.append(
                    Suggestion(
                        pin=f"{release['versions'][-1]}+{variant['tag']}",
                        tag=variant["tag"],
                        cuda=variant["cuda"],
                        index_url=f"{PYTORCH_INDEX}/{variant['tag']}",
                        confidence=variant["confidence"],
                    )
                )
    return found


def _status_rank(variant: Mapping[str, Any]) -> int:
    status = str(variant.get("status", "")).lower()
    return 0 if "pypi default" in status else 1 if status.startswith("stable") else 2


def _sass_only(arch: Iterable[str]) -> list[str]:
    # Suggestions promise native kernels; PTX-only coverage is not offered as a fix.
    return [a for a in arch if a.startswith("sm_")]


def older_than_tables(facts: Optional[DriverFacts]) -> bool:
    """No CUDA reported and a driver number below every one the tables list: too old for any CUDA 11+
    build, which is not the same as unknown. A Jetson's driver numbers are L4T's, not that series."""
    return (
        facts is not None
        and not facts.cuda_driver_version
        and not facts.jetson
        and driver_older_than_tables(facts.driver_version, facts.os)
    )


def driver_fit(facts: Optional[DriverFacts], wheel: int) -> Status:
    """OK: full support; WARN: minor-version compatibility; FAIL: driver too old. No driver facts: OK."""
    if facts is None or not facts.has_driver:
        return Status.OK
    supported, _ = facts.supported_cuda()
    if supported is None:
        # Below every tabled driver fails every tabled CUDA; a CUDA older than the tables stays unjudged
        return Status.FAIL if older_than_tables(facts) and wheel >= oldest_tabled_cuda() else Status.OK
    if supported >= wheel:
        return Status.OK
    if supported // 1000 < wheel // 1000:
        return Status.FAIL
    floor, _ = minor_version_floor(wheel // 1000, facts.os)
    number, lowest = driver_tuple(facts.driver_version), driver_tuple(floor)
    if number is not None and lowest is not None and number < lowest:
        return Status.FAIL
    return Status.WARN
