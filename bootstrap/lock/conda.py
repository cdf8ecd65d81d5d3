"""The conda part of a lock: one py-rattler solve per platform.

Equivalent of `pixi`/`conda-lock` solving with explicit virtual packages and
strict channel priority; the records keep canonical channel URLs even when a
`--mirror` served the data.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, Union
from urllib.parse import unquote, urlsplit, urlunsplit

from bootstrap import aio
from bootstrap.errors import FetchError, InputError, SolveError, excerpt, one_line
from bootstrap.lock.lockfile import LockedPackage
from bootstrap.lock.mirrors import Mirror, mirror_for
from bootstrap.lock.spec import EnvSpec, VirtualPackage
from bootstrap.urls import scrub_credentials

if TYPE_CHECKING:
    from rattler import Channel, Client, Gateway, GenericVirtualPackage, MatchSpec, RepoDataRecord, SparseRepoData

    Source = Union[Channel, SparseRepoData]


def match_specs(spec: EnvSpec) -> list[MatchSpec]:
    """The spec's conda dependencies as rattler MatchSpecs; bad syntax names the entry."""
    from rattler import MatchSpec

    out = []
    for text in spec.conda:
        if text.endswith((".conda", ".tar.bz2")) or ("://" in text and "::" not in text):
            # rattler parses a package URL as a match spec, and the solve then fetches it as repodata;
            # `https://host/channel::name` is a match spec with its channel, and stays one
            raise InputError(
                spec.path,
                f"dependencies: {excerpt(scrub_credentials(text))} is a package file, not a match spec",
                "name the package, e.g. `tzdata=2024a`, and list its channel under channels:",
            )
        try:
            out.append(MatchSpec(text))
        except Exception as exc:  # noqa: BLE001 - rattler raises InvalidMatchSpecError and friends
            # rattler appends its error's chain ("\nCaused by: ...") which repeats the first line's reason
            reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(
                spec.path,
                f"dependencies: '{text}' is not a valid conda match spec: {reason}",
                "write e.g. `python=3.10.*` or `numpy >=1.26`",
            ) from None
    return out


def solve_conda(
    spec: EnvSpec,
    platform: str,
    virtual_packages: Sequence[VirtualPackage],
    mirrors: Sequence[Mirror] = (),
    cache_dir: Optional[Path] = None,
    prefer: Sequence[LockedPackage] = (),
) -> list[RepoDataRecord]:
    """Solve the spec's conda dependencies for one platform; returns rattler RepoDataRecords.

    `prefer`: locked entries the solver keeps where the spec still allows them (rattler's
    `locked_packages`; pixi's and `conda-lock --update`'s way of moving only what must move)."""
    import rattler
    from rattler.exceptions import SolverError

    specs = match_specs(spec)
    sources, http_mirrors = _sources(spec.channel_urls, platform, mirrors)
    client = _mirror_client(http_mirrors) if http_mirrors else None
    gateway = rattler.Gateway(cache_dir=cache_dir, client=client)
    vpkgs = [
        rattler.GenericVirtualPackage(
            rattler.PackageName(v.name), rattler.Version(v.version), rattler.BuildString(v.build or "0")
        )
        for v in virtual_packages
    ]
    try:
        return aio.run(_solve(sources, specs, gateway, platform, vpkgs, prefer))
    except SolverError as exc:
        raise SolveError(
            f"{spec.path}: dependencies: cannot be solved for {platform}: {one_line(exc)} "
            "(relax or fix the spec, or check that the channels have the packages)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - every rattler fetch/IO/gateway failure
        raise FetchError(scrub_credentials(_fetch_failure(spec, platform, mirrors, exc))) from None


def channel_names(
    spec: EnvSpec, platforms: Sequence[str], mirrors: Sequence[Mirror] = (), cache_dir: Optional[Path] = None
) -> set[str]:
    """The names of every package the spec's channels hold for `platforms` and noarch, read from the
    repodata the solve reads (the same mirrors and cache): `add` asks it where a package comes from."""
    import rattler

    names: set[str] = set()
    for platform in platforms:
        sources, http_mirrors = _sources(spec.channel_urls, platform, mirrors)
        channels = [s for s in sources if isinstance(s, rattler.Channel)]
        for source in sources:
            if isinstance(source, rattler.SparseRepoData):
                names.update(str(name) for name in source.package_names())
        if not channels:
            continue
        gateway = rattler.Gateway(cache_dir=cache_dir, client=_mirror_client(http_mirrors) if http_mirrors else None)
        subdirs = [rattler.Subdir(platform), rattler.Subdir("noarch")]
        try:
            found = aio.run(gateway.names(channels, subdirs))
        except Exception as exc:  # noqa: BLE001 - every rattler fetch/IO/gateway failure
            raise FetchError(scrub_credentials(_fetch_failure(spec, platform, mirrors, exc))) from None
        names.update(name.normalized for name in found)
    return names


async def _solve(
    sources: list[Source],
    specs: list[MatchSpec],
    gateway: Gateway,
    platform: str,
    vpkgs: list[GenericVirtualPackage],
    prefer: Sequence[LockedPackage],
) -> list[RepoDataRecord]:
    import rattler

    return await rattler.solve(
        sources=sources,
        specs=specs,
        gateway=gateway,
        platforms=[rattler.Subdir(platform), rattler.Subdir("noarch")],
        locked_packages=await _channel_records(sources, gateway, platform, prefer) if prefer else None,
        virtual_packages=vpkgs,
        channel_priority=rattler.ChannelPriority.Strict,
    )


async def _channel_records(
    sources: list[Source], gateway: Gateway, platform: str, entries: Sequence[LockedPackage]
) -> list[RepoDataRecord]:
    """The channels' records of the locked `entries`, matched by sha256 (the bytes the lock vouches
    for: the URL differs when a mirror or another spelling of the channel served them); an entry
    the channels no longer have is left out.

    Taken from the repodata, not rebuilt from the lock: rattler adds a preferred record to the
    candidates as it is given, so one rebuilt from the lock would be chosen even once the channel
    has dropped it, and without what the lock does not keep (`constrains`, the build part of a
    dependency), so the solve would no longer check them."""
    import rattler

    names = sorted({entry.name for entry in entries})
    channels = [s for s in sources if isinstance(s, rattler.Channel)]
    found = (
        [
            r
            for rs in await gateway.query(
                channels, [rattler.Subdir(platform), rattler.Subdir("noarch")], names, recursive=False
            )
            for r in rs
        ]
        if channels
        else []
    )
    found += [r for s in sources if isinstance(s, rattler.SparseRepoData) for n in names for r in s.load_records(n)]
    wanted = {entry.sha256 for entry in entries}
    return [r for r in found if r.sha256 is not None and r.sha256.hex() in wanted]


def _sources(
    channel_urls: Sequence[str], platform: str, mirrors: Sequence[Mirror]
) -> tuple[list[Source], dict[str, list[str]]]:
    import rattler

    sources: list[Source] = []
    http_mirrors: dict[str, list[str]] = {}
    for url in channel_urls:
        mirror = mirror_for(url, mirrors)
        if mirror is not None and mirror.local_dir is not None:
            sources.extend(_local_repodata(url, mirror.local_dir, mirror, subdir) for subdir in (platform, "noarch"))
            continue
        if mirror is not None:
            # The middleware rewrites by URL prefix: keep the trailing slash so
            # `.../conda-forge` does not also capture `.../conda-forge-extra`.
            http_mirrors[url + "/"] = [mirror.target + "/"]
        sources.append(rattler.Channel(url))
    return sources, http_mirrors


def _mirror_client(http_mirrors: dict[str, list[str]]) -> Client:
    """A rattler client that fetches from the mirrors, sending each one's `user:password@` as Basic auth.

    rattler drops the userinfo of a mirror URL (the request goes out without it: 401), so it is taken
    out here and sent as a header, only to requests for that mirror's host and path. A `/t/TOKEN/`
    path segment needs nothing: the rewritten URL keeps it."""
    import rattler

    rewrites: dict[str, list[str]] = {}
    logins: list[tuple[str, str, dict[str, str]]] = []
    for canonical, (target,) in http_mirrors.items():
        parts = urlsplit(target)
        if parts.username is None:
            rewrites[canonical] = [target]
            continue
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        header = {"Authorization": "Basic " + base64.b64encode(login).decode("ascii")}
        logins.append((parts.hostname or "", parts.path, header))
        rewrites[canonical] = [urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))]

    def headers(host: str, path: str) -> Optional[dict[str, str]]:
        # rattler passes the host without its port: the path prefix narrows it to that mirror.
        return next(
            (header for login_host, prefix, header in logins if host.lower() == login_host and path.startswith(prefix)),
            None,
        )

    # Order matters: the header callback must see the mirror's URL, i.e. run after the rewrite.
    mirror = rattler.networking.MirrorMiddleware(rewrites)
    auth = [rattler.networking.AddHeadersMiddleware(headers)] if logins else []
    return rattler.Client([mirror, *auth])


def _local_repodata(url: str, local_dir: Path, mirror: Mirror, subdir: str) -> SparseRepoData:
    import rattler

    path = local_dir / subdir / "repodata.json"
    if not path.is_file():
        raise FetchError(
            f"{path}: not found; a directory mirror of {url} needs <dir>/{subdir}/repodata.json "
            f"(check --mirror {url}={mirror.target})"
        )
    return rattler.SparseRepoData(rattler.Channel(url), subdir, path)


def _fetch_failure(spec: EnvSpec, platform: str, mirrors: Sequence[Mirror], exc: BaseException) -> str:
    used = [m for m in (mirror_for(url, mirrors) for url in spec.channel_urls) if m is not None]
    if used:
        served = ", ".join(f"{m.target} (mirror of {m.canonical})" for m in used)
        return (
            f"cannot fetch repodata for {platform} from {served}: {_first_line(exc)} "
            f"(is the mirror up? check --mirror {used[0].canonical}=URL_OR_DIR)"
        )
    return (
        f"cannot fetch repodata for {platform} from {', '.join(spec.channel_urls)}: {_first_line(exc)} "
        "(offline or behind a firewall? serve the channel from a mirror: "
        f"--mirror {spec.channel_urls[0]}=URL_OR_DIR)"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def to_locked(record: RepoDataRecord, platform: str) -> LockedPackage:
    """A solved RepoDataRecord as a lock entry: conda-lock's fields, and every dependency as conda-lock
    writes it, those on virtual packages (`__glibc >=2.17,<3.0.a0`) included."""
    if record.sha256 is None or record.md5 is None:
        raise SolveError(
            f"{scrub_credentials(record.url)}: the channel's repodata gives no sha256 or md5 for it, and a lock "
            "records both to check the download (pin another build of it, or use a channel that has them)"
        )
    return LockedPackage(
        name=record.name.source,
        version=str(record.version),
        manager="conda",
        platform=platform,
        url=record.url,
        sha256=record.sha256.hex(),
        md5=record.md5.hex(),
        build=str(record.build),
        dependencies=_dependencies(record.depends),
    )


def _dependencies(depends: Iterable[str]) -> dict[str, str]:
    """name -> version constraint, by conda-lock's own rule (its conda solver's): the version part
    of each match spec (`python_abi 3.10.* *_cp310` -> `3.10.*`, `libgcc 15.2.0 h0_1` -> `15.2.0`),
    `''` for none, the specs of one name merged. conda's MatchSpec, which conda-lock vendors, spells
    an exact version as written where rattler's would write `==15.2.0`."""
    from conda_lock.interfaces.vendored_conda import MatchSpec

    specs: dict[str, list[Any]] = {}  # conda's vendored MatchSpecs
    for depend in depends:
        spec = MatchSpec(depend)
        specs.setdefault(spec.name, []).append(spec)
    merged = {name: same[0] if len(same) == 1 else MatchSpec.merge(same)[0] for name, same in specs.items()}
    return {name: spec.version.spec_str if spec.version is not None else "" for name, spec in merged.items()}
