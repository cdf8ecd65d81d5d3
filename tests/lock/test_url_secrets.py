"""No error path of `--mirror` / `--index` shows a password or an anaconda.org token, wherever in
the URL they stand and whatever characters the password holds."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.commands.lock import parse_indexes
from bootstrap.errors import InputError
from bootstrap.lock.mirrors import parse_mirrors
from bootstrap.urls import has_credentials, scrub_credentials
from tests.fixtures.project import make_project

SECRETS = ("PW-SECRET", "TK-SECRET")
PASSWORDS = ("PW-SECRET", "p@PW-SECRET", "PW-SECRET#1", "PW-SECRET?x", "a:PW-SECRET")
# The userinfo and the /t/TOKEN/ segment in every place a mirror URL can hold them.
URLS = tuple(
    dict.fromkeys(
        template.format(login=f"bob:{password}@")
        for template, password in itertools.product(
            (
                "https://{login}mirror.internal/conda-forge",
                "https://{login}mirror.internal/t/TK-SECRET/conda-forge",
                "http://{login}127.0.0.1:8080/api/conda/t/TK-SECRET/conda-forge",
                "https://mirror.internal/t/TK-SECRET/conda-forge",
                "https://mirror.internal/prefix/t/TK-SECRET/conda-forge/",
            ),
            PASSWORDS,
        )
    )
)


def _mirror_arguments(url: str) -> list[list[str]]:
    """One argument list per `--mirror` error path."""
    return [
        [url],  # no CANONICAL=
        [f"={url}"],  # an empty canonical
        [f"{url}="],  # an empty target, the URL as the canonical
        [f"conda-forge={url}?x=1"],  # a query string
        [f"conda-forge={url}#frag"],  # a fragment
        [f"{url}=/mirror/a", f"{url}=/mirror/b"],  # mirrored twice
        [f"conda-forge={url.split('://', 1)[1]}"],  # no scheme: no directory either
        [f"conda-forge=ftp://{url.split('://', 1)[1]}"],  # a scheme rattler does not fetch
    ]


def _index_arguments(url: str) -> list[list[str]]:
    return [[url], [f"={url}"], [f"cu126={url.replace('://', ':')}"], [f"cu126={url}", f"cu126={url}"]]


def _shown(message: str) -> list[str]:
    return [secret for secret in (*SECRETS, "bob") if secret in message]


@pytest.mark.parametrize("url", URLS)
def test_no_mirror_or_index_refusal_shows_a_secret(url: str) -> None:
    for texts in _mirror_arguments(url):
        with pytest.raises(InputError) as refused:
            parse_mirrors(texts)
        assert not _shown(str(refused.value)), (texts, str(refused.value))
    for texts in _index_arguments(url):
        with pytest.raises(InputError) as refused:
            parse_indexes(texts)
        assert not _shown(str(refused.value)), (texts, str(refused.value))


@pytest.mark.parametrize("url", URLS[::4])
def test_no_cli_refusal_shows_a_secret(tmp_path: Path, capfd, url: str) -> None:
    project = make_project(tmp_path / "proj")
    cases = [*(("--mirror", t) for t in _mirror_arguments(url)), *(("--index", t) for t in _index_arguments(url))]
    for verb, texts in cases:
        argv = ["lock", "--root", str(project.root), "--json"] + [a for text in texts for a in (verb, text)]
        assert main(argv) == 2
        out, err = capfd.readouterr()
        assert not _shown(out + err) and verb in err, (argv, err)


@pytest.mark.parametrize("url", URLS)
def test_every_credential_is_seen_and_scrubbed(url: str) -> None:
    assert has_credentials(url) and not _shown(scrub_credentials(f"cannot fetch '{url}/linux-64/x.conda': 401"))


def test_scrubbing_keeps_what_is_no_credential() -> None:
    for text in ("git+https://github.com/o/r@v1.0", "https://host/cf/noarch/x.conda", "https://host/at/t"):
        assert scrub_credentials(text) == text and not has_credentials(text)
    assert scrub_credentials("'https://h/t/TK'.") == "'https://h/t/<TOKEN>'."


def test_lock_check_does_not_show_a_login_a_lock_s_torch_index_carries(tmp_path: Path, capsys) -> None:
    """A hand-edited lock naming its torch index with a login: `lock --check` says it is stale without it."""
    import shutil

    from tests.fixtures import REPO

    root = tmp_path / "proj"
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root)
    lock = root / "envs" / "py310.cu130.conda-lock.yml"
    lock.write_text(
        lock.read_text().replace(
            "    bootstrap.variant: cu130\n",
            "    bootstrap.variant: cu130\n    bootstrap.torch-index: https://u:PW-SECRET@x.example/t/TK-SECRET/whl\n",
            1,
        )
    )
    capsys.readouterr()
    code = main(["lock", "--check", "--root", str(root)])
    out, err = capsys.readouterr()
    assert code in (1, 2) and "torch index" in out + err, (out, err)
    assert not any(secret in out + err for secret in SECRETS), (out, err)
