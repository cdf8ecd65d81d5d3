"""Edit a spec's text one requirement at a time (`bootstrap add`, `remove`): a line inserted, replaced
or deleted, every other byte of the file kept (comments, blank lines, order, quoting, `variants:`).

The YAML is composed (not loaded) with PyYAML to find where each requirement sits; the edit is made
on the text itself, so nothing is re-dumped. Docs: docs/add.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from bootstrap.errors import InputError

if TYPE_CHECKING:
    import yaml

CONDA, PIP = "conda", "pip"
_DASH = re.compile(r"[ \t]*-[ \t]+")  # what precedes a block list item's value on its line
_CONDA_NAME = re.compile(r"[\s=<>!~\[]")


@dataclass(frozen=True)
class Entry:
    """One requirement as the spec writes it: which list, its text, and where it sits."""

    manager: str  # CONDA or PIP
    text: str  # the value, unquoted
    name: str  # `requirement_name` of it
    first_line: int  # 0-based lines of the file it spans
    last_line: int
    start: int  # its characters in the text (quotes included)
    end: int
    style: Optional[str]  # None (plain), "'" or '"'


def requirement_name(manager: str, text: str) -> str:
    """The package a requirement names, folded as its manager compares names: a conda name
    lower-cased (`conda-forge::numpy >=1` -> `numpy`), a pip name PEP 503-normalised (`PyYAML` ->
    `pyyaml`, `typing_extensions` -> `typing-extensions`)."""
    if manager == CONDA:
        return _CONDA_NAME.split(text.strip(), maxsplit=1)[0].rsplit("::", 1)[-1].lower()
    head = re.split(r"[\s\[=<>!~;@(]", text.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", head).lower()


def same_package(a: str, b: str) -> bool:
    """Whether two folded names name one package for a reader: `typing_extensions` and
    `typing-extensions` do, as pip would say; a spec listing both is what `add` must not make."""
    return re.sub(r"[-_.]+", "-", a) == re.sub(r"[-_.]+", "-", b)


class SpecText:
    """A spec's text and the requirements in it; each edit returns the new text."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self._bom = 1 if text.startswith("\ufeff") else 0
        root = _compose(path, text[self._bom :])
        self.deps = _block_list(path, _value_of(root, "dependencies"), "dependencies")
        self.pip_item: Optional[yaml.MappingNode] = None
        self.pip: Optional[yaml.SequenceNode] = None
        for item in self.deps.value:
            if _is_mapping(item) and _keys(item) == ["pip"]:
                self.pip_item = item
                self.pip = _block_list(path, item.value[0][1], "dependencies.pip")
        self.entries = [self._entry(CONDA, n) for n in self.deps.value if _is_scalar(n)]
        self.entries += [self._entry(PIP, n) for n in (self.pip.value if self.pip else []) if _is_scalar(n)]

    def named(self, name: str) -> list[Entry]:
        return [e for e in self.entries if same_package(e.name, name)]

    def insert(self, manager: str, requirement: str) -> str:
        """The text with `requirement` as the last item of the conda dependencies or of `pip:`
        (`pip:`, and `- pip` among the conda dependencies, added where the spec has none)."""
        conda = [n for n in self.deps.value if _is_scalar(n)]
        if manager == CONDA:
            return self._after(conda[-1], [requirement])
        if self.pip is not None and self.pip.value:
            return self._after(self.pip.value[-1], [requirement])
        # read_spec refuses a pip: section without `- pip` and an empty `dependencies:`, so the spec has
        # a conda item to copy the indentation of.
        prefix = self._prefix(conda[-1])
        if not any(e.name == "pip" for e in self.entries if e.manager == CONDA):
            return SpecText(self.path, self._after(conda[-1], ["pip"])).insert(PIP, requirement)
        nested = " " * len(prefix) + "  "
        return self._after_raw(_last_line(self.deps.value[-1]), [f"{prefix}pip:", f"{nested}- {_scalar(requirement)}"])

    def replace(self, entry: Entry, requirement: str) -> str:
        """The text with `entry`'s value replaced in place (its quoting kept where it can be)."""
        start, end = entry.start + self._bom, entry.end + self._bom
        return self.text[:start] + _scalar(requirement, entry.style) + self.text[end:]

    def remove(self, entry: Entry) -> str:
        """The text without `entry`'s lines; without the `pip:` item too when it was its last."""
        self._check_own_lines(entry)
        if entry.manager == PIP and self.pip is not None and self.pip_item is not None and len(self.pip.value) == 1:
            first = self.pip_item.start_mark.line
            if not _DASH.fullmatch(self.lines[first][: self.pip_item.start_mark.column]):
                raise InputError(self.path, f"line {first + 1}: `pip:` does not start its own list item", "")
            return "".join(self.lines[:first] + self.lines[entry.last_line + 1 :])
        return "".join(self.lines[: entry.first_line] + self.lines[entry.last_line + 1 :])

    def _entry(self, manager: str, node: yaml.ScalarNode) -> Entry:
        return Entry(
            manager=manager,
            text=str(node.value),
            name=requirement_name(manager, str(node.value)),
            first_line=node.start_mark.line,
            last_line=_last_line(node),
            start=node.start_mark.index,
            end=node.end_mark.index,
            style=node.style,
        )

    def _check_own_lines(self, entry: Entry) -> None:
        """`remove` deletes whole lines: the entry must be the only thing on them (a comment aside)."""
        before = self.lines[entry.first_line][: self._column(entry)]
        after = self.text[entry.end + self._bom :].split("\n", 1)[0].strip()
        if not _DASH.fullmatch(before) or (after and not after.startswith("#")):
            raise InputError(
                self.path,
                f"line {entry.first_line + 1}: {entry.text!r} shares its line with other YAML",
                "write one `- item` per line, then remove it",
            )

    def _column(self, entry: Entry) -> int:
        line_start = sum(len(line) for line in self.lines[: entry.first_line])
        return entry.start + self._bom - line_start

    def _prefix(self, node: yaml.Node) -> str:
        """`  - ` of the item `node`: the indentation and dash to copy for a new item after it."""
        line = self.lines[node.start_mark.line]
        prefix = line[: node.start_mark.column + (self._bom if node.start_mark.line == 0 else 0)]
        if not _DASH.fullmatch(prefix):
            raise InputError(
                self.path,
                f"line {node.start_mark.line + 1}: the list item does not start its own line",
                "write one `- item` per line, then add again",
            )
        return prefix

    def _eol(self, line: int) -> str:
        text = self.lines[line] if line < len(self.lines) else "\n"
        return "\r\n" if text.endswith("\r\n") else "\n"

    def _after(self, node: yaml.Node, values: Sequence[str]) -> str:
        prefix = self._prefix(node)
        return self._after_raw(_last_line(node), [prefix + _scalar(v) for v in values])

    def _after_raw(self, line: int, new: Sequence[str]) -> str:
        eol = self._eol(line)
        return self._insert_lines(line, [text + eol for text in new])

    def _insert_lines(self, line: int, new: Sequence[str]) -> str:
        lines = list(self.lines)
        if not lines[line].endswith(("\n", "\r")):  # the file's last line, without its line end
            lines[line] += self._eol(line)
        return "".join(lines[: line + 1] + list(new) + lines[line + 1 :])


def _compose(path: Path, text: str) -> yaml.MappingNode:
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise InputError(path, f"malformed YAML: {str(exc).splitlines()[0]}", "fix the syntax") from None
    if not isinstance(root, yaml.MappingNode):
        raise InputError(path, "expected a mapping with name, channels, platforms, dependencies")
    return root


def _value_of(root: yaml.MappingNode, key: str) -> yaml.Node:
    for key_node, value in root.value:
        if getattr(key_node, "value", None) == key:
            node: yaml.Node = value
            return node
    raise InputError(root.start_mark.name, f"{key}: missing")


def _block_list(path: Path, node: yaml.Node, where: str) -> yaml.SequenceNode:
    import yaml

    if not isinstance(node, yaml.SequenceNode):
        raise InputError(path, f"{where}: must be a list")
    if node.flow_style:
        raise InputError(
            path,
            f"line {node.start_mark.line + 1}: {where} is a flow list ([a, b])",
            "write it as a block list, one `- item` per line, to add or remove with bootstrap",
        )
    return node


def _keys(node: yaml.MappingNode) -> list[object]:
    return [getattr(k, "value", None) for k, _ in node.value]


def _is_scalar(node: yaml.Node) -> bool:
    import yaml

    return isinstance(node, yaml.ScalarNode)


def _is_mapping(node: yaml.Node) -> bool:
    import yaml

    return isinstance(node, yaml.MappingNode)


def _last_line(node: yaml.Node) -> int:
    """The last line `node` takes: a block node's end mark is at the start of the line after it."""
    end = node.end_mark
    return max(node.start_mark.line, end.line if end.column > 0 else end.line - 1)


def _scalar(text: str, style: Optional[str] = None) -> str:
    """`text` as a YAML list item's value: as it was quoted (`style`) where that reads it back,
    plain where YAML reads it back as the same string, else double-quoted."""

    if style == "'" and "'" not in text and "\n" not in text:
        return f"'{text}'"
    if style != '"' and _reads_back(f"- {text}", text):
        return text
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _reads_back(document: str, text: str) -> bool:
    import yaml

    try:
        return bool(yaml.safe_load(document) == [text])
    except yaml.YAMLError:
        return False
