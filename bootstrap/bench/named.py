"""Datasets named by reference ('MODULE:FACTORY'): they pickle as that name and are rebuilt where they
are unpickled, so workers started by spawn never pickle the user's object. A stream must be an
`IterableDataset` for DataLoader to read it as one, which makes this module import torch."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Sequence

from torch.utils.data import IterableDataset


class _Named:
    def __init__(self, ref: str, paths: Sequence[str], dataset: Any) -> None:
        self.ref, self.paths, self.dataset = ref, tuple(str(Path(p).absolute()) for p in paths), dataset

    def _built(self) -> Any:
        if self.dataset is None:  # unpickled in a worker: the main process checked the reference already
            for path in reversed(self.paths):
                if path not in sys.path:
                    sys.path.insert(0, path)
            module, _, name = self.ref.partition(":")
            self.dataset = functools.reduce(getattr, name.split("."), importlib.import_module(module))()
        return self.dataset

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "dataset": None}


class NamedDataset(_Named):
    """A map-style dataset built by a factory named 'MODULE:FACTORY' (plus the --path directories)."""

    def __init__(self, ref: str, paths: Sequence[str], dataset: Any) -> None:
        super().__init__(ref, paths, dataset)
        self.length = len(dataset)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        return self._built()[index]


class NamedStream(_Named, IterableDataset):  # type: ignore[misc]
    """A stream (IterableDataset) built by a named factory; each worker iterates its own copy."""

    def __iter__(self) -> Iterator[Any]:
        return iter(self._built())
