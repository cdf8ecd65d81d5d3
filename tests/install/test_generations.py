"""Generations as directories and a symlink: which one a change starts from, which ones survive.

Plain directories stand in for environments here; tests/env/test_env.py runs the
same paths with real rattler links and uv installs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bootstrap.install import generations as gens


def layout_with(tmp_path: Path, numbers: list[int], current: int) -> gens.Layout:
    layout = gens.Layout(tmp_path / ".envs" / "py310")
    for number in numbers:
        (layout.path(number) / "conda-meta").mkdir(parents=True)
        (layout.path(number) / "conda-meta" / "marker").write_text(str(number))
    gens.switch(layout, current)
    return layout


def marker(path: Path) -> str:
    return (path / "conda-meta" / "marker").read_text()


def test_first_change_starts_from_a_hard_linked_clone(tmp_path: Path) -> None:
    layout = layout_with(tmp_path, [1], current=1)
    first = layout.path(1)
    (first / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    (first / "lib" / "python3.10" / "site-packages" / "m.py").write_text("x = 1\n")
    (first / "bin").mkdir(mode=0o700)
    (first / "share" / "ro").mkdir(parents=True)
    (first / "share" / "ro" / "data").write_text("read-only directory\n")
    (first / "share" / "ro").chmod(0o555)  # filled before its mode is set, or a non-root clone fails
    os.symlink("marker", first / "conda-meta" / "link")
    os.symlink("python3.10", first / "lib" / "python3")  # to a directory: recreated, not walked
    os.symlink("gone", first / "bin" / "dangling")
    new = gens.start(layout)
    assert (new.number, new.base, new.made) == (2, 1, "clone")
    assert marker(new.partial) == "1" and marker(layout.path(1)) == "1"
    for relative in ("conda-meta/marker", "lib/python3.10/site-packages/m.py"):
        assert os.stat(new.partial / relative).st_ino == os.stat(first / relative).st_ino
    links = {p: os.readlink(new.partial / p) for p in ("conda-meta/link", "lib/python3", "bin/dangling")}
    assert links == {"conda-meta/link": "marker", "lib/python3": "python3.10", "bin/dangling": "gone"}
    assert (new.partial / "bin").stat().st_mode & 0o777 == 0o700
    assert (new.partial / "share" / "ro").stat().st_mode & 0o777 == 0o555
    assert (new.partial / "share" / "ro" / "data").read_text() == "read-only directory\n"
    assert sorted(str(p.relative_to(new.partial)) for p in new.partial.rglob("*")) == sorted(
        str(p.relative_to(first)) for p in first.rglob("*")
    )


def test_clone_copies_where_hard_links_fail(tmp_path: Path, monkeypatch) -> None:
    layout = layout_with(tmp_path, [1], current=1)

    def no_links(source, target, **_):
        raise PermissionError(1, "Operation not permitted")  # e.g. fs.protected_hardlinks on a file of another user

    monkeypatch.setattr(os, "link", no_links)
    new = gens.start(layout)
    assert marker(new.partial) == "1"
    assert (
        os.stat(new.partial / "conda-meta" / "marker").st_ino
        != os.stat(layout.path(1) / "conda-meta" / "marker").st_ino
    )


def test_copy_over_never_writes_through_a_shared_inode(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("generation 1\n")
    os.link(tmp_path / "a", tmp_path / "b")  # b: the same file in a clone
    (tmp_path / "new").write_text("carried\n")
    gens.copy_over(tmp_path / "new", tmp_path / "b")
    assert (tmp_path / "b").read_text() == "carried\n" and (tmp_path / "a").read_text() == "generation 1\n"
    os.unlink(tmp_path / "b")
    os.link(tmp_path / "a", tmp_path / "b")
    gens.copy_over(tmp_path / "a", tmp_path / "b")  # from the very inode it replaces: no SameFileError
    assert (tmp_path / "b").read_text() == "generation 1\n" and os.stat(tmp_path / "b").st_nlink == 1


def test_a_later_change_takes_the_retired_generation_and_never_the_current_one(tmp_path: Path) -> None:
    layout = layout_with(tmp_path, [1, 2], current=2)
    new = gens.start(layout)
    assert (new.number, new.base, new.recycled) == (3, 1, True)
    assert marker(new.partial) == "1" and layout.generations() == [2]
    gens.commit(layout, new.number, new.partial)
    assert gens.collect_garbage(layout, keep=(3, 2)) == [] and layout.generations() == [2, 3]


def test_after_a_rollback_the_generation_rolled_away_from_is_the_retired_one(tmp_path: Path) -> None:
    layout = layout_with(tmp_path, [1, 2], current=2)
    assert gens.rollback(layout) == 1
    new = gens.start(layout)
    assert (new.base, new.recycled) == (2, True)
    gens.commit(layout, new.number, new.partial)
    gens.collect_garbage(layout, keep=(new.number, 1))
    assert layout.generations() == [1, 3] and gens.rollback(layout) == 1


def test_rollback_with_one_generation_says_what_to_do_instead(tmp_path: Path) -> None:
    from bootstrap.errors import InputError

    layout = layout_with(tmp_path, [2], current=2)
    with pytest.raises(InputError, match="no earlier generation") as caught:
        gens.rollback(layout)
    assert "make env" in str(caught.value) and os.readlink(layout.stable).endswith("2")


def test_empty_layout_starts_from_nothing(tmp_path: Path) -> None:
    layout = gens.Layout(tmp_path / ".envs" / "py310")
    new = gens.start(layout)
    assert (new.number, new.base, new.made) == (1, None, "empty") and list(new.partial.iterdir()) == []


def test_a_generation_killed_while_being_deleted_is_never_recycled(tmp_path: Path, monkeypatch) -> None:
    layout = layout_with(tmp_path, [1, 2, 3], current=3)
    real_rmtree = shutil.rmtree

    def killed_halfway(path, ignore_errors=False, **hooks):
        if str(path).endswith(gens.GARBAGE) and Path(path).exists():
            real_rmtree(Path(path) / "conda-meta")  # some of it gone, then the process dies
            raise KeyboardInterrupt
        real_rmtree(path, ignore_errors=ignore_errors, **hooks)

    monkeypatch.setattr(gens.shutil, "rmtree", killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        gens.collect_garbage(layout, keep=(3, 2))
    monkeypatch.undo()
    assert layout.generations() == [2, 3]  # generation 1 no longer looks complete
    assert [p.name for p in gens.remove_leftovers(layout)] == ["1.garbage"]
    new = gens.start(layout)
    assert (new.base, new.recycled) == (2, True) and marker(new.partial) == "2"


def test_a_symlink_to_its_own_generation_is_managed_however_it_is_spelled(tmp_path: Path) -> None:
    layout = layout_with(tmp_path, [1], current=1)
    layout.check_managed()
    layout.stable.unlink()
    layout.stable.symlink_to(layout.path(1))  # absolute, as by hand
    layout.check_managed()
    assert layout.current() == 1


@pytest.mark.parametrize("kind", ["other-dir", "empty-dir", "dangling", "bootstrap-env"])
def test_a_symlink_bootstrap_did_not_make_is_refused(tmp_path: Path, kind: str) -> None:
    from bootstrap.errors import InputError

    other = layout_with(tmp_path / "scratch", [1], current=1).stable if kind == "bootstrap-env" else tmp_path / "target"
    if kind in ("other-dir", "empty-dir"):
        other.mkdir()
    if kind == "other-dir":
        (other / "conda-meta").mkdir()
    layout = gens.Layout(tmp_path / ".envs" / "py310")
    layout.stable.parent.mkdir()
    layout.stable.symlink_to(other)
    with pytest.raises(InputError, match=f"py310: is a symlink to {other}, not to one of its generations") as caught:
        layout.check_managed()
    fix = f"pass --prefix {other} to use that env" if kind == "bootstrap-env" else "remove the link"
    assert fix in str(caught.value)


def test_a_stable_link_repointed_by_hand_names_the_generation_to_point_back_at(tmp_path: Path) -> None:
    from bootstrap.errors import InputError

    layout = layout_with(tmp_path, [1, 2], current=2)
    layout.stable.unlink()
    layout.stable.symlink_to("/mnt/not-mounted/py310")
    with pytest.raises(InputError, match="ln -sfn .py310.gens/2 ") as caught:
        layout.check_managed()
    assert "/mnt/not-mounted/py310" in str(caught.value) and layout.generations() == [1, 2]
    assert "remove the link" not in str(caught.value)  # the next change would then recycle generation 2


@pytest.mark.parametrize("inside", ["py310/inner", "py310/envs/inner", ".py310.gens/1/inner"])
def test_an_env_inside_a_generation_of_another_is_refused(tmp_path: Path, inside: str) -> None:
    """It would live in that generation alone: gone from py310 after its next change, deleted with it."""
    from bootstrap.errors import InputError

    outer = layout_with(tmp_path, [1], current=1)
    inner = gens.Layout(outer.stable.parent / inside)
    with pytest.raises(
        InputError, match=f"is inside {outer.path(1)}, a generation of the env {outer.stable},"
    ) as caught:
        inner.check_managed()
    assert f"choose a --prefix outside {outer.stable}" in str(caught.value)
    gens.Layout(outer.stable.parent / "sibling").check_managed()  # beside it is fine


def test_a_second_rollback_says_it_was_rolled_back_already(tmp_path: Path) -> None:
    from bootstrap.errors import InputError

    layout = layout_with(tmp_path, [1, 2], current=2)
    assert gens.rollback(layout) == 1
    with pytest.raises(InputError, match="it points at generation 1, rolled back from 2 already") as caught:
        gens.rollback(layout)
    assert "`make env` goes forward to the lock again" in str(caught.value)
    assert layout.current() == 1


def test_a_run_that_changes_nothing_removes_a_killed_changes_leftovers_unless_one_is_at_work(tmp_path: Path) -> None:
    """Killed mid-change, then the lock put back: the no-op run removes the half-built generation
    (GBs, kept until the next change before), but not while another run holds the env."""
    import fcntl

    layout = layout_with(tmp_path, [1], current=1)
    (layout.gens_dir / "2.partial" / "lib").mkdir(parents=True)
    with open(layout.lock_file, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert gens.tidy_if_idle(layout) == []
        assert sorted(p.name for p in layout.gens_dir.iterdir()) == ["1", "2.partial"]
    assert gens.tidy_if_idle(layout) == [layout.gens_dir / "2.partial"]
    assert layout.generations() == [1] and sorted(p.name for p in layout.gens_dir.iterdir()) == ["1"]
    assert gens.tidy_if_idle(layout) == []  # nothing to do: nothing made


def test_an_older_bootstraps_ready_made_clone_is_removed_and_never_started_from(tmp_path: Path) -> None:
    """Earlier versions cloned the current generation ahead of a change as `<n>.spare`; none is
    made now, and one left behind (maybe of another generation than the current) is a leftover."""
    layout = layout_with(tmp_path, [2], current=2)
    shutil.copytree(layout.path(2), layout.gens_dir / "1.spare")
    (layout.gens_dir / "1.spare" / "conda-meta" / "marker").write_text("1")
    assert gens.tidy_if_idle(layout) == [layout.gens_dir / "1.spare"]
    new = gens.start(layout)
    assert (new.base, new.made, marker(new.partial)) == (2, "clone", "2")


def test_where_the_next_change_starts_is_decided_without_touching_anything(tmp_path: Path) -> None:
    """`next_start` is what `start` then makes: the plan is made against that base before it exists."""
    for numbers, current, expected in (
        ([], None, (1, None, "empty")),
        ([1], 1, (2, 1, "clone")),
        ([1, 2], 2, (3, 1, "recycled")),
        ([1, 2], 1, (3, 2, "recycled")),
    ):
        layout = (
            layout_with(tmp_path / f"case{len(numbers)}{current}", numbers, current=current)
            if numbers
            else gens.Layout(tmp_path / "none" / "py310")
        )
        before = sorted(p.name for p in layout.gens_dir.iterdir()) if layout.gens_dir.is_dir() else None
        chosen = gens.next_start(layout)
        assert (chosen.number, chosen.base, chosen.made) == expected
        after = sorted(p.name for p in layout.gens_dir.iterdir()) if layout.gens_dir.is_dir() else None
        assert before == after  # nothing made, renamed or cloned
        made = gens.start(layout, chosen)
        assert made == chosen and made.partial.is_dir()
        if chosen.base is not None:
            assert marker(made.partial) == str(chosen.base)


def test_a_prefix_under_a_file_is_refused(tmp_path: Path) -> None:
    from bootstrap.errors import InputError

    (tmp_path / "afile").write_text("x\n")
    with pytest.raises(InputError, match=f"env: {tmp_path / 'afile'} is not a directory"):
        gens.Layout(tmp_path / "afile" / "sub" / "env").check_writable()


HOUR = 3600.0


def test_a_generation_retired_within_the_grace_period_is_neither_recycled_nor_deleted(tmp_path: Path) -> None:
    """A job started from generation 1 (here or on another node) may read it for as long as the grace
    period: the changes within it start from clones of the current one and leave 1 as it was."""
    layout = layout_with(tmp_path, [1], current=1)
    t0 = layout.path(1).stat().st_mtime
    for number in (2, 3):  # two changes within the grace period
        chosen = gens.next_start(layout, grace_s=HOUR, now=t0 + 60)
        assert (chosen.number, chosen.made, chosen.base) == (number, "clone", number - 1)
        gens.commit(layout, number, gens.start(layout, chosen).partial)
        assert gens.collect_garbage(layout, keep=(number, number - 1), grace_s=HOUR, now=t0 + 60) == []
    assert layout.generations() == [1, 2, 3] and marker(layout.path(1)) == "1"
    assert layout.retired_at(1) is not None and layout.retired_at(2) is not None and layout.retired_at(3) is None
    # Once retired longer than the grace period, the newest such generation is recycled, older ones deleted.
    later = max(layout.retired_at(1), layout.retired_at(2)) + HOUR  # type: ignore[type-var]
    chosen = gens.next_start(layout, grace_s=HOUR, now=later)
    assert (chosen.made, chosen.base) == ("recycled", 2)
    gens.commit(layout, chosen.number, gens.start(layout, chosen).partial)
    assert gens.collect_garbage(layout, keep=(4, 3), grace_s=HOUR, now=later) == [1]
    assert layout.generations() == [3, 4]
    assert sorted(p.name for p in layout.gens_dir.iterdir()) == ["3", "3.retired", "4"]


def test_a_retired_generation_with_no_record_is_kept_a_grace_period_from_now(tmp_path: Path) -> None:
    """An older bootstrap recorded no retirement: the first run that meets one records it, and waits."""
    layout = layout_with(tmp_path, [1, 2, 3], current=3)
    for number in (1, 2):
        layout.clear_retired(number)
    assert gens.next_start(layout, grace_s=HOUR).made == "clone"
    assert gens.collect_garbage(layout, keep=(3, 2), grace_s=HOUR, now=1000.0) == []
    assert layout.retired_at(1) == 1000.0 and layout.generations() == [1, 2, 3]
    assert gens.collect_garbage(layout, keep=(3, 2), grace_s=HOUR, now=1000.0 + HOUR) == [1]


def test_a_rollback_records_the_generation_it_leaves_as_retired(tmp_path: Path) -> None:
    layout = layout_with(tmp_path, [1, 2], current=2)
    layout.mark_retired(1, now=0.0)
    gens.rollback(layout)
    assert layout.retired_at(1) is None and layout.retired_at(2) is not None
    assert gens.next_start(layout, grace_s=HOUR).made == "clone"  # 2 was just left: not recycled
