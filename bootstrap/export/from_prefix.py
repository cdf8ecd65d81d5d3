"""`export --from-prefix DIR`: the portable environment.yml of an existing environment: its requested
specs from `conda-meta/history` (conda, mamba) or the records' `requested_specs` (rattler, pixi), and
its pip distributions, each pinned to what is installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from bootstrap.errors import InputError
from bootstrap.export.portable import (
    ExportOptions,
    Line,
    PortableEnv,
    canonical_pip,
    channel_prefix,
    check_options,
    conda_line,
    portable_channel,
    portable_channels,
    requested_build,
)
from bootstrap.export.render import render_environment_yml
from bootstrap.export.result import ExportResult
from bootstrap.install.history import requested_specs, spec_name
from bootstrap.prefix import (
    InstalledConda,
    InstalledPip,
    conda_records,
    metadata_names,
    pip_distributions,
    read_install_record,
)
from bootstrap.urls import scrub_credentials


def export_prefix(
    prefix: Path, options: ExportOptions = ExportOptions(), output: Optional[Path] = None
) -> ExportResult:
    """The portable environment.yml of an existing environment (`bootstrap export --from-prefix DIR`)."""
    check_options(options)
    portable = portable_from_prefix(prefix, options)
    target = output if output is not None else Path("environment.yml")
    return ExportResult(
        kind="portable",
        name=portable.name,
        source=portable.source,
        platforms=portable.platforms,
        files={target: render_environment_yml(portable)},
        notes=portable.notes,
    )


def portable_from_prefix(prefix: Path, options: ExportOptions = ExportOptions()) -> PortableEnv:
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        raise InputError(
            prefix,
            "not a conda environment (no conda-meta/ directory)",
            "pass the environment's directory, e.g. --from-prefix $CONDA_PREFIX",
        )
    records = conda_records(prefix)
    if not records:
        raise InputError(meta, "no package records", "is the environment empty?")
    notes: list[str] = []
    requested, how = requested_conda_specs(meta / "history", records)
    notes.append(f"requested conda specs taken from {how}")
    by_name = {r.name: r for r in records}
    conda = tuple(
        conda_line(f"{channel_prefix(spec)}{name}", {"installed": by_name[name].version}, requested_build(spec))
        for name, spec in sorted(requested.items())
    )
    pip, pip_notes = _pip_lines(prefix, records)
    notes += pip_notes
    platforms = _prefix_platforms(records)
    channels = options.channels or _prefix_channels(records)
    given = _env_name(prefix)
    return PortableEnv(
        name=options.name or given,
        channels=portable_channels(channels, bool(options.channels)),
        platforms=platforms,
        conda=conda,
        pip=pip,
        source=f"the environment '{given}' ({', '.join(platforms) or 'unknown platform'})",
        notes=tuple(notes),
        from_lock=False,
    )


def requested_conda_specs(history: Path, records: Sequence[InstalledConda]) -> tuple[dict[str, str], str]:
    """name -> requested spec, and where the answer came from.

    1. `conda-meta/history`, replayed like conda's `History.get_requested_specs_map`:
       `# update specs:` / `# install specs:` / `# create specs:` add, `# remove specs:`
       drop, `# neutered specs:` override. (Its `+`/`-` lines list every linked
       package, requested or not, so they say nothing about requests.)
    2. The records' `requested_specs` (rattler, pixi: py-rattler 0.28 leaves
       history empty and fills these only when `install(requested_specs=...)` is given).
    3. Failing both (`bootstrap env` records neither), the packages no other
       package depends on, plus `python` (pip, setuptools and wheel depend on it).
    """
    installed = {r.name for r in records if not r.name.startswith("__")}
    specs = requested_specs(history)
    if specs:
        return {n: s for n, s in specs.items() if n in installed}, "conda-meta/history"
    from_records = {
        spec_name(spec): spec for record in records for spec in record.requested_specs if spec_name(spec) in installed
    }
    if from_records:
        return from_records, "the records' requested_specs"
    needed = {spec_name(d) for r in records for d in r.depends}
    leaves = {n: n for n in installed if n not in needed or n == "python"}
    return leaves, "the packages nothing else depends on (no history recorded)"


def _env_name(prefix: Path) -> str:
    """The env's name: the prefix's directory as given, links not followed (`.envs/py310` links to its
    generation `.py310.gens/1`); for a variant's own prefix (`.envs/py310/cu128`), the env's (py310)."""
    given = Path(os.path.abspath(prefix))
    try:
        record = read_install_record(given)
    except (OSError, ValueError, TypeError):
        record = None
    if record is not None and record.variant and given.name == record.variant and given.parent.name == record.env:
        return record.env
    return given.name


def _prefix_platforms(records: Sequence[InstalledConda]) -> tuple[str, ...]:
    subdirs = sorted({r.subdir for r in records if r.subdir and r.subdir != "noarch"})
    return tuple(subdirs)


def _prefix_channels(records: Sequence[InstalledConda]) -> tuple[str, ...]:
    """Channels by number of packages taken from each (ties: first seen); the busiest first."""
    counts: dict[str, int] = {}
    for record in records:
        if record.channel and record.channel != "pypi":
            key = portable_channel(record.channel)
            counts[key] = counts.get(key, 0) + 1
    return tuple(sorted(counts, key=lambda c: -counts[c]))


def _pip_lines(prefix: Path, records: Sequence[InstalledConda]) -> tuple[tuple[Line, ...], list[str]]:
    owned = metadata_names(records)
    dists = [d for d in pip_distributions(prefix) if d.installer != "conda" and d.dist_info.name not in owned]
    if not dists:
        return (), []
    notes = []
    flagged = [d for d in dists if d.requested]
    if flagged and len(flagged) < len(dists):
        chosen, how = flagged, "their REQUESTED files"
    else:
        # No REQUESTED files, or every one has it (an install with --no-deps from a full
        # lock marks everything requested): the distributions nothing else requires.
        needed = {canonical_pip(r) for d in dists for r in d.requires}
        chosen, how = (
            [d for d in dists if canonical_pip(d.name) not in needed],
            "the distributions nothing else requires",
        )
    notes.append(f"requested pip packages taken from {how}")
    lines = []
    for dist in sorted(chosen, key=lambda d: canonical_pip(d.name)):
        line = _pip_dist_line(dist)
        if line is None:
            notes.append(
                f"pip: {dist.name} {dist.version} was installed from a local path and is left out (not portable)"
            )
        else:
            lines.append(line)
    return tuple(lines), notes


def _pip_dist_line(dist: InstalledPip) -> Optional[Line]:
    url = str(dist.direct_url.get("url", "")) if dist.direct_url else ""
    if not url:
        return Line(f"{dist.name}=={dist.version}")
    if url.startswith("file:") or "dir_info" in dist.direct_url:
        return None
    vcs = dist.direct_url.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") and vcs.get("commit_id"):
        return Line(f"{dist.name} @ {vcs['vcs']}+{scrub_credentials(url)}@{vcs['commit_id']}")
    return Line(f"{dist.name}=={dist.version}")  # a wheel from a URL: pinned by version, portably
