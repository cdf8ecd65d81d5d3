"""conda-lock's `content_hash` of a spec, computed by conda-lock's own code, offline; and the digest that
lets `lock --check` and `export` trust a recorded hash without importing conda-lock.
Docs: docs/lock.md, "`lock --check`: is the lock stale?".
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from bootstrap.errors import InputError
from bootstrap.lock.lockfile import META_INPUTS, Lock, read_lock
from bootstrap.lock.spec import EnvSpec, VirtualPackages
from bootstrap.lock.variants import META_VARIANT, PYPI
from bootstrap.yamlfile import load_yaml

if TYPE_CHECKING:
    from bootstrap.project import Project


def inputs_digests(
    spec_path: Path, virtual_packages_path: Path, content_hash: Mapping[str, str], variant: str = ""
) -> dict[str, str]:
    """Per platform of `content_hash`, a sha256 binding what that platform's hash is computed from,
    as parsed, to the hash: `{"linux-64": "9f2c..."}`, recorded in the lock (`inputs_key`).

    conda-lock's content hash needs conda-lock, a heavy import, to recompute.
    These digests let `lock --check` (and `env`'s note that a relock is due)
    skip that when the inputs say what they said when the hashes were
    computed. They cover the parsed YAML, not the bytes: a comment,
    whitespace or a reordered mapping key changes nothing that is locked, and
    must not cost the slow path on every run until a relock. Any other edit (a
    list reordered included: channel order is priority) or a hand-edited hash
    changes the digest, and the check falls back to conda-lock's own function,
    which stays the authority.

    Each covers only what its lock and platform are computed from: the spec
    without the other variants (nor the indexes only they use), and that
    platform's virtual packages; so editing one variant leaves another's lock
    trusted, and a `--platform` relock keeps the digests of the platforms it
    keeps, beside new ones for those it solved.
    """
    spec = hashlib.sha256(_canonical_json(_variant_part(load_yaml(spec_path), variant))).digest()
    machines = load_yaml(virtual_packages_path)
    subdirs = machines.get("subdirs") if isinstance(machines, dict) else None
    out = {}
    for platform, value in content_hash.items():
        digest = hashlib.sha256(spec)
        subdir = subdirs.get(platform) if isinstance(subdirs, dict) else None
        digest.update(hashlib.sha256(_canonical_json([platform, subdir, value])).digest())
        if variant:  # one spec, several locks: a variant's lock copied over another's is not fresh
            digest.update(f"variant={variant}".encode())
        out[platform] = digest.hexdigest()
    return out


def inputs_key(platform: str) -> str:
    """The lock's custom_metadata key of `platform`'s inputs digest."""
    return f"{META_INPUTS}.{platform}"


def recorded_digests(lock: Lock) -> dict[str, str]:
    """The inputs digests the lock records, by platform (none for a lock conda-lock wrote)."""
    return {p: lock.custom[inputs_key(p)] for p in lock.platforms if inputs_key(p) in lock.custom}


def trusted_platforms(spec_path: Path, virtual_packages_path: Path, lock: Lock, variant: str) -> set[str]:
    """The platforms whose recorded content hash was computed, for `variant`, from the inputs as they are now."""
    recorded = recorded_digests(lock)
    if not recorded:
        return set()
    current = inputs_digests(spec_path, virtual_packages_path, lock.content_hash, variant)
    return {p for p, value in recorded.items() if current.get(p) == value}


def _variant_part(data: Any, variant: str) -> Any:
    """The spec's data that `variant`'s lock is computed from: its own entry of `variants:`, and of
    `pip-indexes:` the default index and its own."""
    if not variant or not isinstance(data, dict) or not isinstance(data.get("variants"), list):
        return data
    own = [v for v in data["variants"] if isinstance(v, dict) and v.get("name") == variant]
    part = {**data, "variants": own}
    if isinstance(data.get("pip-indexes"), dict):
        index = own[0].get("index") if own else None
        part["pip-indexes"] = {k: v for k, v in data["pip-indexes"].items() if k in (PYPI, index)}
    return part


def spec_changed_since(project: Project, env: str, lock_path: Path, platform: str) -> Optional[str]:
    """A note when the env's spec (or the virtual packages) no longer says what `platform`'s part of
    `lock_path` was locked from, or None: what `lock --check` finds for that platform's content hash
    where the lock records its inputs. Installing still follows the lock, which is what reproduces;
    the note says a relock is due. Only the recorded digests are compared (no conda-lock import): a
    lock conda-lock wrote, which records none, and a spec that cannot be read get no note here
    (`lock --check` says more)."""
    try:
        lock = read_lock(lock_path)
        if platform not in recorded_digests(lock):
            return None
        spec_path = project.spec_path(env)
        if platform in trusted_platforms(
            spec_path, project.virtual_packages_path, lock, lock.custom.get(META_VARIANT, "")
        ):
            return None
    except (InputError, OSError):
        return None
    return (
        f"{spec_path.name} or {project.virtual_packages_path.name} changed since {lock_path.name} was "
        "locked: this installs the lock as it is; `make lock` takes the change"
    )


def _canonical_json(data: object) -> bytes:
    """YAML data as canonical JSON: mapping keys sorted, lists in order, each scalar tagged with its
    type (`1` and `"1"` stay apart), comments and layout gone."""
    return json.dumps(_canonical(data), separators=(",", ":")).encode()


def _canonical(value: object) -> list[object]:
    if isinstance(value, dict):
        items = [[_canonical(k), _canonical(v)] for k, v in value.items()]
        return ["map", sorted(items, key=lambda item: json.dumps(item[0]))]
    if isinstance(value, list):
        return ["list", [_canonical(v) for v in value]]
    if value is None or isinstance(value, (str, int, float, bool)):
        return [type(value).__name__, value]
    return [type(value).__name__, str(value)]  # a date, bytes, a set: what YAML's safe loader builds besides


def conda_lock_content_hashes(spec: EnvSpec, vpkgs: VirtualPackages) -> dict[str, str]:
    """conda-lock's `content_hash` for a spec (or one variant of it), computed by conda-lock's own code, offline."""
    from conda_lock.content_hash import compute_content_hashes

    with _input_files(spec, vpkgs) as paths, conda_lock_inputs(*paths) as (lock_spec, vpr):
        hashes: dict[str, str] = compute_content_hashes(lock_spec, vpr)
        return hashes


def conda_lock_accepts_hash(spec: EnvSpec, vpkgs: VirtualPackages, platform: str, value: str) -> bool:
    """What `conda-lock lock --check-input-hash` decides for one platform."""
    from conda_lock.content_hash import backwards_compatible_content_hashes

    with _input_files(spec, vpkgs) as paths, conda_lock_inputs(*paths) as (lock_spec, vpr):
        if platform not in lock_spec.platforms:
            return False  # a platform the spec no longer lists has no hash (conda-lock raises KeyError)
        return value in backwards_compatible_content_hashes(lock_spec, vpr, platform)


@contextmanager
def _input_files(spec: EnvSpec, vpkgs: VirtualPackages) -> Iterator[tuple[Path, Path]]:
    """The spec and virtual-packages files conda-lock reads: the project's own, or for a variant that
    differs from the spec as written, the spec and machines it is locked from, written out as
    conda-lock would read them if they were files of the project."""
    if spec.variant is None or spec.variant.as_written:
        yield spec.path, vpkgs.path
        return
    import yaml

    pip = [{"pip": list(spec.pip)}] if spec.pip else []
    effective = {
        "name": spec.name,
        "channels": list(spec.channels),
        "platforms": list(spec.platforms),
        "dependencies": [*spec.conda, *pip],
    }
    machines = {
        "subdirs": {
            p: {"packages": {v.name: f"{v.version} {v.build}".strip() for v in vpkgs.for_platform(p)}}
            for p in spec.platforms
        }
    }
    with tempfile.TemporaryDirectory(prefix="bootstrap-variant-") as tmp:
        spec_path, vpkgs_path = Path(tmp, spec.path.name), Path(tmp, vpkgs.path.name)
        spec_path.write_text(yaml.safe_dump(effective, sort_keys=False), encoding="utf-8")
        vpkgs_path.write_text(yaml.safe_dump(machines, sort_keys=False), encoding="utf-8")
        yield spec_path, vpkgs_path


@contextmanager
def conda_lock_inputs(spec_path: Path, virtual_packages_path: Path) -> Iterator[tuple[Any, Any]]:
    """conda-lock's view of a spec file and a virtual-packages file, quietly: its warnings (e.g. on pip
    markers it cannot evaluate) are about its own solver, which bootstrap does not use."""
    import logging
    import warnings

    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import virtual_package_repo_from_specification

    logger = logging.getLogger("conda_lock")
    level, logger.level = logger.level, logging.ERROR
    try:
        with tempfile.TemporaryDirectory(prefix="bootstrap-mapping-") as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # conda-lock fetches a PyPI<->conda name map from the internet unless given
            # one; names in a pip: section are never mapped, so an empty map is exact.
            mapping = Path(tmp, "mapping.json")
            mapping.write_text("{}")
            lock_spec = make_lock_spec(src_files=[spec_path], mapping_url=mapping.as_uri())
            vpr = virtual_package_repo_from_specification(virtual_packages_path)
        try:
            yield lock_spec, vpr
        finally:
            # conda-lock removes its fake repodata at exit, which `python -m bootstrap` skips (os._exit).
            shutil.rmtree(vpr.base_path, ignore_errors=True)
    finally:
        logger.level = level
