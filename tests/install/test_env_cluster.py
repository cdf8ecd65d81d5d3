"""One shared tree, two kinds of node: each variant in its own prefix, each host activating its own pick,
and a job's generation left intact by every update, the other host's and its own variant's.

The hosts are recorded facts (`--facts`): a V100 node (no kernel for CC 7.0 in a CUDA 13 torch, so it
runs cu128) and an H200 node (both run; it picks cu130, the newer torch). The torch wheels are pure
Python stand-ins told apart by their version, as in test_env_variants.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.project import Project
from tests.fixtures import DATA, REPO
from tests.fixtures.env_project import CONDA, PIP, env_args, relock
from tests.fixtures.project import make_project
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

V100 = DATA / "verify" / "constructed-v100-a100-cvd1-580.95.05.facts.json"
H200 = DATA / "verify" / "h200x8-580.95.05.facts.json"
VARIANTS = [{"name": "cu128", "torch": "==2.10.0+cu128"}, {"name": "cu130", "torch": "==2.11.0+cu130"}]
# The default grace period: a generation a job may run from is neither recycled nor deleted.
SHARED = ("--recycle-after", "72")


@pytest.fixture
def tree(tmp_path: Path, channel: Path) -> tuple[Project, Path]:
    wheels = build_wheelhouse(
        tmp_path / "wheels",
        [*standard_wheels(), WheelSpec("torch", "2.10.0+cu128"), WheelSpec("torch", "2.11.0+cu130")],
    )
    project = make_project(tmp_path / "proj", platforms=("linux-64",), conda=CONDA, pip=(*PIP, "torch"))
    set_pip(project, (*PIP, "torch"), channel, wheels)
    return project, wheels


def set_pip(project: Project, pip: tuple[str, ...], channel: Path, wheels: Path) -> None:
    """The spec with `pip` and both variants, relocked: a change of every variant's lock."""
    path = project.spec_path("py310")
    spec = yaml.safe_load(path.read_text())
    spec["variants"] = VARIANTS
    spec["dependencies"] = [d if not isinstance(d, dict) else {"pip": list(pip)} for d in spec["dependencies"]]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    relock(project, channel, wheels)


def install(project: Project, channel: Path, host: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json", "--facts", str(host), *SHARED)) == 0
    return json.loads(capsys.readouterr().out)


def snapshot(project: Project, variant: str) -> dict[str, str]:
    """Every file, symlink and directory of a variant (its stable link and its generations): content hashes."""
    top = project.env_prefix("py310")
    found = {variant: "-> " + os.readlink(top / variant)}
    for path in sorted((top / f".{variant}.gens").rglob("*")):
        name = str(path.relative_to(top))
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "dir"
    return found


def shell(project: Project, host: Optional[Path], capsys, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    facts = ("--facts", str(host)) if host is not None else ()
    code = main(["shell", "--root", str(project.root), *facts, *extra])
    out, err = capsys.readouterr()
    return code, out, err


# A job: started from the stable path of its variant, it opens every file of the generation it runs from
# and hashes them; told to go on, it hashes them again through the handles it holds and by path.
JOB = r"""
import hashlib, os, sys
top = os.path.realpath(sys.argv[1])
names = sorted(os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs)
handles = [open(n, "rb") for n in names if os.path.isfile(n) and not os.path.islink(n)]
def digest(read):
    h = hashlib.sha256()
    for f in handles:
        h.update(f.name.encode()); h.update(read(f))
    return h.hexdigest()
def by_handle(f):
    f.seek(0); return f.read()
def by_path(f):
    with open(f.name, "rb") as again:
        return again.read()
import torch
print(top, torch.__version__, len(handles), digest(by_handle), flush=True)
sys.stdin.readline()
print(digest(by_handle), digest(by_path), flush=True)
"""


def test_two_hosts_share_a_tree_each_with_its_variant_and_no_update_touches_a_running_job(
    tree: tuple[Project, Path], channel: Path, capsys
) -> None:
    project, wheels = tree
    top = project.env_prefix("py310")
    first = install(project, channel, V100, capsys)
    assert (first["variant"]["name"], first["prefix"], first["generation"]) == ("cu128", str(top / "cu128"), 1)
    v100_tree = snapshot(project, "cu128")
    second = install(project, channel, H200, capsys)
    assert (second["variant"]["name"], second["prefix"], second["generation"]) == ("cu130", str(top / "cu130"), 1)
    assert snapshot(project, "cu128") == v100_tree  # the H200 host's install changed no file of the V100's

    # Each host's activation resolves to its own variant, and a command run through it gets that torch.
    for host, variant, torch in ((V100, "cu128", "2.10.0+cu128"), (H200, "cu130", "2.11.0+cu130")):
        code, out, err = shell(project, host, capsys)
        assert (code, err) == (0, "")
        assert f"export CONDA_PREFIX={top / variant}\n" in out and f"export PATH={top / variant / 'bin'}:" in out
        ran = subprocess.run(
            ["/bin/sh", "-c", out + 'python -c "import torch; print(torch.__version__)"'],
            capture_output=True,
            text=True,
            check=True,
        )
        assert ran.stdout.strip() == torch
        launched = subprocess.run(
            [sys.executable, "-m", "bootstrap", "shell", "--root", str(project.root), "--facts", str(host), "--exec",
             "python", "-c", "import os, sys, torch; print(torch.__version__, os.environ['CONDA_PREFIX'])"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )  # fmt: skip
        assert launched.stdout.split() == [torch, str(top / variant)]

    # A job on the V100 node holds every file of its generation open through the updates that follow.
    job = subprocess.Popen(
        [str(top / "cu128" / "bin" / "python"), "-c", JOB, str(top / "cu128")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        generation, torch, opened, before = job.stdout.readline().split()  # type: ignore[union-attr]
        assert (generation, torch) == (str(top / ".cu128.gens" / "1"), "2.10.0+cu128") and int(opened) > 10
        set_pip(project, ("alpha", "torch"), channel, wheels)  # gamma leaves both variants' locks
        assert install(project, channel, H200, capsys)["generation"] == 2
        assert snapshot(project, "cu128") == v100_tree  # still: the other host updates only its variant
        changes = [install(project, channel, V100, capsys)]
        set_pip(project, (*PIP, "torch"), channel, wheels)  # and comes back: a second update of cu128
        changes.append(install(project, channel, V100, capsys))
        # Within the grace period each change starts from a clone of the current generation: 1 is intact.
        assert [(c["generation"], c["made"], c["base"]) for c in changes] == [(2, "clone", 1), (3, "clone", 2)]
        assert sorted(p.name for p in (top / ".cu128.gens").iterdir() if p.is_dir()) == ["1", "2", "3"]
        job.stdin.write("go\n")  # type: ignore[union-attr]
        job.stdin.flush()  # type: ignore[union-attr]
        assert job.stdout.readline().split() == [before, before]  # type: ignore[union-attr]
        assert job.wait(timeout=60) == 0
    finally:
        job.kill()
        job.wait()
    assert {k: v for k, v in v100_tree.items() if k.startswith(".cu128.gens/1/")} == {
        k: v for k, v in snapshot(project, "cu128").items() if k.startswith(".cu128.gens/1/")
    }


def test_shell_says_in_one_line_why_nothing_here_fits(tree: tuple[Project, Path], channel: Path, capsys) -> None:
    project, _ = tree
    top = project.env_prefix("py310")
    code, out, err = shell(project, V100, capsys)  # nothing installed yet
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert (
        err.startswith("error: py310: variant cu128 (auto: cu128: ") and f"is not installed at {top / 'cu128'}" in err
    )
    jetson = DATA / "verify" / "constructed-jetson-orin-r36.facts.json"
    code, out, err = shell(project, jetson, capsys)
    assert (code, out) == (1, "") and err.startswith("error: py310: nothing here fits: ") and err.count("\n") == 1
    for host, extra, words in (
        (V100, ("--exec",), "error: --exec: names no command"),
        (None, ("--variant", "rocm"), "error: --variant: py310 has no variant 'rocm'"),
        (V100, ("--variant", "cu130"), "error: --facts: does not apply to --variant NAME"),
    ):
        code, out, err = shell(project, host, capsys, *extra)
        assert (code, out) == (2, "") and err.startswith(words) and err.count("\n") == 1, err
    install(project, channel, V100, capsys)
    code, out, _ = shell(project, None, capsys, "--variant", "cu128")  # a name is taken as given
    assert code == 0 and f"export CONDA_PREFIX={top / 'cu128'}\n" in out


def test_verify_doctor_and_export_find_a_variant_in_its_own_prefix(
    tree: tuple[Project, Path], channel: Path, capsys, monkeypatch, tmp_path: Path
) -> None:
    from bootstrap.checks.doctor import _installed_variant
    from bootstrap.checks.envstate import resolve_prefix
    from bootstrap.compat import probe
    from bootstrap.compat.facts import DriverFacts
    from bootstrap.lock.spec import read_spec

    project, _ = tree
    top = project.env_prefix("py310")
    spec = read_spec(project.spec_path("py310"))
    install(project, channel, H200, capsys)
    assert _installed_variant(project, "py310", spec) == "cu130"  # the only one installed: doctor judges it
    install(project, channel, V100, capsys)
    assert _installed_variant(project, "py310", spec) == ""  # several: each host's pick
    # verify from outside an env: the prefix of this host's pick (no GPU here: the default, cu128)
    monkeypatch.setattr(probe, "probe_gpus", lambda nvml, runner: DriverFacts(reason="no NVIDIA driver"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert resolve_prefix(None, project.root) == top / "cu128"
    out = tmp_path / "environment.yml"
    capsys.readouterr()
    assert main(["export", "--from-prefix", str(top / "cu130"), "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["name"] == "py310"


def test_an_env_without_variants_activates_its_one_prefix(tmp_path: Path, channel: Path, wheels: Path, capsys) -> None:
    project = make_project(tmp_path / "plain", platforms=("linux-64",), conda=CONDA, pip=PIP)
    relock(project, channel, wheels)
    code, out, err = shell(project, None, capsys)
    prefix = project.env_prefix("py310")
    assert (code, out, err) == (1, "", f"error: py310: not installed at {prefix} (`make env` installs it)\n")
    assert main(env_args(project, str(channel))) == 0
    code, out, _ = shell(project, None, capsys)
    assert code == 0 and out.splitlines()[:3] == [
        f'export PATH={prefix / "bin"}:"$PATH"',
        f"export CONDA_PREFIX={prefix}",
        f"export CONDA_DEFAULT_ENV={prefix}",
    ]


def test_the_activation_sets_the_env_vars_and_sources_the_activate_scripts(tmp_path: Path) -> None:
    """What `conda activate` adds for a plain prefix: `conda env config vars` and activate.d, in name order."""
    from bootstrap.commands.shell import activation

    prefix = tmp_path / "it's here"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "state").write_text(json.dumps({"env_vars": {"OMP_NUM_THREADS": "4", "A B": "x"}}))
    scripts = prefix / "etc" / "conda" / "activate.d"
    scripts.mkdir(parents=True)
    for name in ("b.sh", "a.sh", "c.csh"):
        (scripts / name).write_text(f'export FROM_{name[0].upper()}="$CONDA_PREFIX"\n')
    text = activation(prefix)
    assert "export OMP_NUM_THREADS=4\n" in text and "A B" not in text and "c.csh" not in text
    assert text.index("a.sh") < text.index("b.sh")
    ran = subprocess.run(
        ["/bin/sh", "-c", text + 'echo "$FROM_A|$FROM_B|$OMP_NUM_THREADS"'], capture_output=True, text=True, check=True
    )
    assert ran.stdout == f"{prefix}|{prefix}|4\n"
