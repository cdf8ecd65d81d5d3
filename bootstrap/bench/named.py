"""`NamedDataset` for an IterableDataset: DataLoader tells a stream by its class, so this one is one,
which makes this module import torch (`user` imports it only for a stream named by `--dataset`, and
hands it the function that imports the factory)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Sequence

from torch.utils.data import IterableDataset


class NamedStream(IterableDataset):
    """A stream built by a factory named 'MODULE:FACTORY': it pickles as that name (plus the --path
    directories) and is rebuilt in each spawned worker, whose `__iter__` then reads its own copy."""

    def __init__(self, ref: str, paths: Sequence[str], dataset: Any, load: Callable[..., Any]) -> None:
        self.ref = ref
        self.paths = tuple(paths)
        self.dataset = dataset
        self.load = load  # user.import_ref: pickled by its name

    def __iter__(self) -> Iterator[Any]:
        if self.dataset is None:
            self.dataset = self.load(self.ref, "--dataset", self.paths)()
        return iter(self.dataset)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["dataset"] = None
        return state
