"""`python -m bootstrap shell [ENV] [--variant auto|NAME] [--facts FILE] [--exec CMD ...]`: the activation
of the env's prefix this host picks, for `eval "$(python -m bootstrap shell py310)"`, or a command run
in it (`--exec`, for batch jobs). Exit 1, with one line, when nothing here fits. Docs: docs/cluster.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from bootstrap.commands import argtypes
from bootstrap.errors import EXIT_FAILED, EXIT_OK, BootstrapError, InputError
from bootstrap.project import Project, find_root

SHELL = "/bin/sh"


class NothingFits(BootstrapError):
    """No env this host can run: no locked variant runs here, or the one that does is not installed."""

    exit_code = EXIT_FAILED


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", nargs="?", default=None, help="env to activate (default: the project's default, py310)")
    parser.add_argument(
        "--variant",
        default="auto",
        metavar="auto|NAME",
        help="the variant's prefix to activate (default auto: the one `doctor` picks for this host; a NAME "
        "is taken as given, whether or not it runs here)",
    )
    parser.add_argument(
        "--facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="pick for facts recorded with `doctor --save-facts` instead of this host's",
    )
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )
    parser.add_argument(
        "--exec",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="CMD",
        help="run CMD (the rest of the line) in the activated env instead of printing the activation",
    )


def run(args: argparse.Namespace) -> int:
    if args.exec is not None and not args.exec:
        raise InputError("--exec", "names no command", "give the command after it: --exec python train.py")
    if args.facts is not None and args.variant != "auto":
        raise InputError("--facts", "does not apply to --variant NAME, which is taken as given", "drop one of them")
    project = Project(args.root or find_root(Path.cwd()))
    env = project.env_or_default(args.env)
    project.resolve_envs([env])
    prefix = resolve(project, env, args.variant, args.facts)
    script = activation(prefix)
    if args.exec is None:
        print(script, end="")
        return EXIT_OK
    sys.stdout.flush()
    # The activation and the command in one shell: the env's activate.d scripts set what they set, then
    # the shell replaces itself with the command, which gets the job's signals and its exit status.
    os.execv(SHELL, [SHELL, "-c", script + 'exec "$@"\n', "bootstrap-shell", *args.exec])
    return EXIT_FAILED  # not reached


def resolve(project: Project, env: str, variant: str, facts: Optional[Path]) -> Path:
    """The installed prefix of `env` for this host (or the host of `facts`): the variant `doctor`
    picks, or the one `variant` names; NothingFits when none runs here or it is not installed."""
    from bootstrap.install.variant import NoVariantFits, VariantRequest, check_variant_layout, choose_variant
    from bootstrap.platforms import conda_subdir, host_platform

    platform = host_platform()
    if facts is not None:
        from bootstrap.compat.probe import load_facts

        recorded = load_facts(facts).platform
        platform = conda_subdir(recorded) if recorded else platform
    request = VariantRequest(project, env, platform, variant, force=variant != "auto", facts_path=facts)
    try:
        choice = choose_variant(request)
    except NoVariantFits as exc:
        raise NothingFits(f"{env}: nothing here fits: {exc.problem} ({exc.fix})") from exc
    if choice.name:
        check_variant_layout(project, env)
    prefix = project.env_prefix(env, choice.name)
    if not (prefix / "conda-meta").is_dir():
        make = "make env" + ("" if env == project.default_env else f" ENV={env}")
        if not choice.name:
            raise NothingFits(f"{env}: not installed at {prefix} (`{make}` installs it)")
        make += "" if choice.how == "auto" else f" VARIANT={choice.name}"
        raise NothingFits(
            f"{env}: variant {choice.name} ({choice.how}: {choice.why}) is not installed at {prefix} "
            f"(`{make}` installs it; `make env VARIANT=all` every variant)"
        )
    return prefix


def activation(prefix: Path) -> str:
    """What `conda activate PREFIX` does for a plain prefix, in POSIX shell: its bin/ first on PATH,
    CONDA_PREFIX and CONDA_DEFAULT_ENV, the variables `conda env config vars` set in conda-meta/state,
    then the packages' activate.d scripts, in name order, as conda sources them."""
    quoted = shlex.quote(str(prefix))
    lines = [
        f'export PATH={shlex.quote(str(prefix / "bin"))}:"$PATH"',
        f"export CONDA_PREFIX={quoted}",
        f"export CONDA_DEFAULT_ENV={quoted}",
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in _state_vars(prefix)]
    scripts = prefix / "etc" / "conda" / "activate.d"
    if scripts.is_dir():
        lines += [f". {shlex.quote(str(p))}" for p in sorted(scripts.glob("*.sh"))]
    return "\n".join(lines) + "\n"


def _state_vars(prefix: Path) -> list[tuple[str, str]]:
    """`conda env config vars` of the env (conda-meta/state: {"env_vars": {NAME: VALUE}}), those whose
    name a shell can export."""
    try:
        state = json.loads((prefix / "conda-meta" / "state").read_text())
    except (OSError, ValueError):
        return []
    found = state.get("env_vars") if isinstance(state, dict) else None
    if not isinstance(found, dict):
        return []
    return [
        (name, value)
        for name, value in sorted(found.items())
        if isinstance(value, str) and name.isidentifier() and name.isascii()
    ]
