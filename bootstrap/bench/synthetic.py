"""The synthetic workload: JPEG images in memory, in files or in one packed file.

Why its indexes are numpy arrays and its dataset is CPU-only: docs/benchmark.md,
"The built-in workload's samples".
"""

from __future__ import annotations

import io
import os
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from bootstrap.bench.config import WorkloadSpec

if TYPE_CHECKING:  # numpy is imported where it is used: importing this module imports neither it nor torch
    import numpy as np
    from numpy.typing import NDArray

    Bytes = NDArray[np.uint8]
    Offsets = NDArray[np.int64]  # where each sample starts in the buffer, and the end

_DISTINCT_IMAGES = 32  # distinct pictures; the rest repeat them (decode cost is what matters)


def encode_images(spec: WorkloadSpec) -> tuple[Bytes, Offsets]:
    """(blob, offsets of len samples+1): `spec.samples` JPEGs back to back.

    Pictures are smooth random fields plus noise, so they compress and decode like photographs.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(spec.seed)
    size = spec.image_size
    encoded = []
    for _ in range(min(_DISTINCT_IMAGES, spec.samples)):
        coarse = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        smooth = Image.fromarray(coarse).resize((size, size), Image.Resampling.BICUBIC)
        pixels = np.asarray(smooth, dtype=np.int16) + rng.integers(-12, 13, size=(size, size, 3))
        buffer = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=spec.jpeg_quality)
        encoded.append(np.frombuffer(buffer.getvalue(), dtype=np.uint8))
    samples = [encoded[i % len(encoded)] for i in range(spec.samples)]
    offsets = np.zeros(spec.samples + 1, dtype=np.int64)
    np.cumsum(np.array([len(sample) for sample in samples], dtype=np.int64), out=offsets[1:])
    return np.concatenate(samples), offsets


def _cut(buffer: Bytes, offsets: Offsets, index: int) -> bytes:
    """Sample `index` of a buffer laid out by `offsets`."""
    return buffer[offsets[index] : offsets[index + 1]].tobytes()


def _file_name(index: int) -> str:
    return f"{index:06d}.jpg"


class MemoryStore:
    """W1: every encoded sample in one in-RAM buffer."""

    def __init__(self, blob: Bytes, offsets: Offsets) -> None:
        self.blob = blob
        self.offsets = offsets
        self.count = len(offsets) - 1

    def read(self, index: int) -> bytes:
        return _cut(self.blob, self.offsets, index)

    def files(self) -> tuple[Path, ...]:
        return ()


class FilesStore:
    """W2a: one file per sample, `DIR/000123.jpg` (the name is computed, no list of paths is kept)."""

    def __init__(self, directory: Path, count: int) -> None:
        self.directory = str(directory)
        self.count = count

    @classmethod
    def write(cls, directory: Path, blob: Bytes, offsets: Offsets) -> FilesStore:
        directory.mkdir(parents=True, exist_ok=True)
        count = len(offsets) - 1
        for index in range(count):
            (directory / _file_name(index)).write_bytes(_cut(blob, offsets, index))
        return cls(directory, count)

    def read(self, index: int) -> bytes:
        with open(os.path.join(self.directory, _file_name(index)), "rb") as handle:
            return handle.read()

    def files(self) -> tuple[Path, ...]:
        return tuple(Path(self.directory) / _file_name(i) for i in range(self.count))


class PackedStore:
    """W2b: one packed file plus an offset index, opened as a numpy memmap in each process."""

    def __init__(self, path: Path, offsets: Offsets) -> None:
        self.path = str(path)
        self.offsets = offsets
        self.count = len(offsets) - 1
        self._map: Optional[Bytes] = None

    @classmethod
    def write(cls, path: Path, blob: Bytes, offsets: Offsets) -> PackedStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:  # not ndarray.tofile: its short write is an OSError without errno
            handle.write(blob.data)
        return cls(path, offsets)

    def __getstate__(self) -> dict[str, Any]:
        # A memmap must not travel to workers: each process maps the file itself.
        return {**self.__dict__, "_map": None}

    def read(self, index: int) -> bytes:
        if self._map is None:
            import numpy as np

            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return _cut(self._map, self.offsets, index)

    def files(self) -> tuple[Path, ...]:
        return (Path(self.path),)


Store = Union[MemoryStore, FilesStore, PackedStore]


def build_store(spec: WorkloadSpec, data_dir: Optional[Path]) -> Store:
    """Encode the samples and place them in the store `spec.storage` names (files under `data_dir`)."""
    blob, offsets = encode_images(spec)
    if spec.storage == "memory":
        return MemoryStore(blob, offsets)
    if data_dir is None:
        raise ValueError("files/packed storage needs a data directory")
    if spec.storage == "files":
        return FilesStore.write(data_dir / "samples", blob, offsets)
    return PackedStore.write(data_dir / "samples.bin", blob, offsets)


def drop_page_cache(store: Store) -> int:
    """Advise the kernel to evict the store's files from the page cache (Linux; no root needed);
    how many files were advised."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return 0
    count = 0
    for path in store.files():
        fd = os.open(str(path), os.O_RDONLY)
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


def spin_cpu(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU time (not wall time), so the cost holds on a busy host."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class SyntheticImages:
    """A map-style dataset of (uint8 CHW crop, int label), at least `epoch_batches` batches long; not a
    torch Dataset subclass, so that importing this module does not import torch."""

    def __init__(self, store: Store, spec: WorkloadSpec) -> None:
        self.store = store
        self.crop = spec.crop_size
        self.num_classes = spec.num_classes
        self.io_s = spec.io_ms / 1000.0
        self.cpu_s = spec.cpu_ms / 1000.0
        self.stored = store.count
        self.length = max(self.stored, spec.epoch_batches * spec.batch_size)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np
        import torch
        from PIL import Image

        data = self.store.read(index % self.stored)
        if self.io_s:
            time.sleep(self.io_s)
        image: Any = Image.open(io.BytesIO(data))
        image.draft("RGB", (self.crop, self.crop))  # JPEG: decode at reduced scale when the crop allows
        image = image.convert("RGB")
        width, height = image.size
        left = random.randint(0, max(0, width - self.crop))
        top = random.randint(0, max(0, height - self.crop))
        image = image.crop((left, top, left + self.crop, top + self.crop))
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()
        spin_cpu(self.cpu_s)
        return tensor, index % self.num_classes
