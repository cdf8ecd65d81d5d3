"""Credentials in URLs never reach a message, a lock or an export."""

from __future__ import annotations

import pytest

from bootstrap.lock.mirrors import Mirror, lock_record, parse_mirrors
from bootstrap.urls import has_credentials, scrub_credentials


def test_user_password_and_anaconda_tokens_are_scrubbed() -> None:
    text = (
        "cannot fetch https://alice:hunter2@mirror.example/cf/linux-64/x.conda and "
        "https://conda.anaconda.org/t/tk-SECRET/conda-forge/noarch/y.conda"
    )
    assert scrub_credentials(text) == (
        "cannot fetch https://mirror.example/cf/linux-64/x.conda and "
        "https://conda.anaconda.org/t/<TOKEN>/conda-forge/noarch/y.conda"
    )
    assert has_credentials("https://repo.example/t/abc/conda-forge")
    assert not has_credentials("https://conda.anaconda.org/conda-forge") and not has_credentials("conda-forge")


def test_a_mirror_is_recorded_without_its_credentials() -> None:
    mirror = Mirror.parse("conda-forge=https://bob:pw@mirror.internal/t/tk-SECRET/conda-forge")
    assert mirror.target == "https://bob:pw@mirror.internal/t/tk-SECRET/conda-forge"  # used as given
    assert mirror.public() == "https://conda.anaconda.org/conda-forge=https://mirror.internal/t/<TOKEN>/conda-forge"
    assert lock_record([mirror]) == "https://conda.anaconda.org/conda-forge"  # a lock names no host at all


def test_a_mirror_directory_may_start_with_a_tilde(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    mirror = Mirror.parse("conda-forge=~/mirrors/conda-forge/")
    assert mirror.local_dir == tmp_path / "mirrors" / "conda-forge"
    assert mirror.public() == "https://conda.anaconda.org/conda-forge=~/mirrors/conda-forge/"  # as written
    assert lock_record([mirror]) == "https://conda.anaconda.org/conda-forge"  # and no path in a lock


def test_a_lock_records_the_channels_its_mirrors_served_and_never_where_they_were(tmp_path) -> None:
    (tmp_path / "cf").mkdir()
    (tmp_path / "bio").mkdir()
    mirrors = parse_mirrors(
        [
            f"conda-forge=file://{tmp_path}/cf",
            "bioconda=bio",
            "https://repo.example/nvidia=https://bob:pw@m.internal/nv",
        ],
        base=tmp_path,
    )
    assert lock_record(mirrors) == (
        "https://conda.anaconda.org/conda-forge https://conda.anaconda.org/bioconda https://repo.example/nvidia"
    )
    assert lock_record(()) == ""


def test_a_mirror_url_with_a_query_string_is_refused_without_showing_its_token() -> None:
    """Package paths are appended to the mirror's: `...conda-forge?token=x/linux-64/pkg.conda` is no package URL."""
    import pytest

    from bootstrap.errors import InputError

    for target in ("https://mirror.internal/conda-forge?token=SECRET", "https://mirror.internal/cf#x", "http://m/cf?"):
        with pytest.raises(InputError) as refused:
            Mirror.parse(f"conda-forge={target}")
        assert "query string" in str(refused.value) and "/t/TOKEN/" in str(refused.value)
        assert "SECRET" not in str(refused.value) and str(refused.value).startswith("--mirror conda-forge=http")
    with pytest.raises(InputError) as refused:
        Mirror.parse("conda-forge=https://bob:SECRET@mirror.internal/cf?x=1")
    assert "SECRET" not in str(refused.value)
    assert (
        Mirror.parse("conda-forge=https://mirror.internal/conda-forge").target == "https://mirror.internal/conda-forge"
    )


def test_a_mirror_password_with_a_hash_or_question_mark_is_never_shown() -> None:
    """Unencoded, `#` or `?` in a password ends the URL's authority: the refusal must not print the
    part before it (`https://bob:hunter` of `bob:hunter#2@`), which scrubbing the whole URL hid."""
    import pytest

    from bootstrap.errors import InputError

    for password in ("hunter#2", "hunter?2"):
        with pytest.raises(InputError) as refused:
            Mirror.parse(f"conda-forge=https://bob:{password}@mirror.internal/cf")
        assert "hunter" not in str(refused.value) and "bob" not in str(refused.value), str(refused.value)
        assert "%23" in str(refused.value)  # says how to write it


@pytest.mark.parametrize(
    "text",
    [
        "x" * 200_000,
        "a://" + "x" * 200_000,
        "x@" * 100_000,
        "/t/" + "x" * 200_000,
        "https://" + "u" * 200_000,
        "bob:" + "p" * 200_000 + "@host",
    ],
)
def test_scrubbing_a_long_value_takes_linear_time(text: str) -> None:
    """A spec or lock value of 64 KB (the reader's limit) is scrubbed before any message: a pattern that
    rescans the rest of the text from every position would take minutes on it."""
    import time

    from bootstrap.urls import scrub_argument

    started = time.perf_counter()
    for _ in range(5):
        scrub_credentials(text)
        scrub_argument(text)
    assert time.perf_counter() - started < 1.0
