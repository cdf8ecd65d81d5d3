"""Datasets named 'MODULE:FACTORY': they pickle as that name and are built again where they are unpickled,
so workers started by spawn never pickle the user's object."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from torch.utils.data import IterableDataset  # a stream must be one for DataLoader to read it as one


class _Named:
    def __init__(self, ref: str, paths: Sequence[str], dataset: Any) -> None:
        self.ref = ref
        self.paths = tuple(str(Path(p).absolute()) for p in paths)
        self.dataset = dataset

    def _built(self) -> Any:
        if self.dataset is not None:
            return self.dataset
        # Unpickled in a worker: the main process checked the reference already.
        for path in reversed(self.paths):
            if path not in sys.path:
                sys.path.insert(0, path)
        module_name, _, name = self.ref.partition(":")
        factory: Any = importlib.import_module(module_name)
        for attribute in name.split("."):
            factory = getattr(factory, attribute)
        self.dataset = factory()
        return self.dataset

    def __getstate__(self) -> dict[str, Any]:
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
