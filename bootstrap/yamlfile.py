"""YAML input files (specs, locks, virtual-packages.yml, bench configs) read with bounds on size,
aliases, nodes, nesting and scalars, counted on libyaml's events before the file is loaded.
Docs: docs/lock.md, "Reference: what a spec may not contain".
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from bootstrap.errors import InputError, MissingModuleError, excerpt
from bootstrap.fsutil import read_input_text

if TYPE_CHECKING:
    import yaml

MAX_ALIASES = 100
MAX_NODES = 200_000
MAX_DEPTH = 100
MAX_SCALAR_CHARS = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # all but tab and line ends


def load_yaml(path: Path, text: Optional[str] = None) -> Any:
    """`yaml.safe_load` of `path` (or of `text`, read from it) naming the file and line in errors."""
    _need_yaml(path)
    import yaml

    if text is None:
        text = read_text(path)
    if text.startswith("\ufeff"):  # the byte-order mark Windows editors write: no part of the YAML
        text = text[1:]
    loader = _unique_keys_loader()
    try:
        _check_bounds(path, text, loader)
        return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    except RecursionError:
        raise InputError(path, "nested too deeply to be a spec or a lock", "check what wrote this file") from None
    except (ValueError, OverflowError) as exc:  # `2020-13-45` read as a date, an integer of 5,000 digits
        raise InputError(path, f"a value YAML cannot read: {str(exc)[:80]}", "quote it if it is a string") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(where, f"malformed YAML: {problem}", "fix the syntax") from None


def _need_yaml(path: Path) -> None:
    """One line on the interpreter that lacks PyYAML: `verify` and `bench` run inside the created
    env, which has it only because the lock lists it."""
    try:
        importlib.import_module("yaml")
    except ImportError:
        raise MissingModuleError(f"reading {path} needs PyYAML, which {sys.executable} cannot import", "yaml") from None


def _check_bounds(path: Path, text: str, loader: type) -> None:
    """Refuse, before anything is built, what breaks the limits of the module docstring. Stopping
    at the first event past a limit matters: libyaml takes minutes over 200,000 nested `[`, and its
    composer recurses in C and crashes the process on them."""
    import yaml  # load_yaml checked that it is there

    tally = _Tally()
    for event in yaml.parse(text, Loader=loader):
        problem = tally.add(event)
        if not problem and isinstance(event, yaml.ScalarEvent) and _CONTROL.search(event.value):
            raise InputError(
                _at(path, event),
                f"the value {excerpt(event.value)} holds a control character",
                "remove it",
            )
        if tally.nodes > MAX_NODES and not problem:
            problem = f"more than {MAX_NODES} values, aliases expanded"
        if problem:
            raise InputError(
                _at(path, event),
                f"{problem}: too large to be a spec or a lock",
                "check what wrote this file",
            )


def _at(path: Path, event: yaml.Event) -> str:
    mark = event.start_mark
    return f"{path}:{mark.line + 1}" if mark is not None else str(path)


class _Tally:
    """The aliases and nodes of the events read so far, each alias counting the nodes it repeats."""

    def __init__(self) -> None:
        self.aliases = self.nodes = 0
        self.sizes: dict[Optional[str], int] = {}  # anchor -> the nodes an alias to it repeats
        self.opened: list[tuple[Optional[str], int]] = []  # (anchor, nodes before it) of each collection being read

    def add(self, event: yaml.Event) -> str:
        """The limit `event` breaks, or ""."""
        import yaml

        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            self.nodes += self.sizes.get(event.anchor, 1)
            return f"more than {MAX_ALIASES} aliases (*name)" if self.aliases > MAX_ALIASES else ""
        if isinstance(event, yaml.ScalarEvent):
            self.nodes += 1
            self.sizes[event.anchor] = 1
            too_long = len(event.value) > MAX_SCALAR_CHARS
            return f"a value of {len(event.value)} characters (at most {MAX_SCALAR_CHARS})" if too_long else ""
        if isinstance(event, yaml.CollectionStartEvent):
            self.opened.append((event.anchor, self.nodes))
            self.nodes += 1
            return f"nested more than {MAX_DEPTH} levels deep" if len(self.opened) > MAX_DEPTH else ""
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, before = self.opened.pop()
            self.sizes[anchor] = self.nodes - before
        return ""


@functools.lru_cache(maxsize=None)
def _unique_keys_loader() -> type:
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML forbids it; PyYAML
    keeps the last one silently, so a second `dependencies:` would replace the first). The C
    loader when PyYAML was built with libyaml (several times faster on a lock of a few hundred
    entries, same safe semantics)."""
    import yaml  # load_yaml checked that it is there

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[Hashable] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {excerpt(key)} is given twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
            mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
            return mapping

    return UniqueKeyLoader


def read_text(path: Path) -> str:
    """The file's text, bounded (`fsutil.read_input_text`), or an InputError naming it."""
    return read_input_text(path)
