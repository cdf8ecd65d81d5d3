"""The synthetic workload: JPEG images in memory, in files or in one packed file (docs/benchmark.md, "Workloads").

Index structures are numpy arrays, never Python lists or dicts: forked workers would otherwise copy
them page by page as reference counts change (PyTorch #13246); the dataset is CPU-only, so forked
workers never touch CUDA (#40403).
"""

from __future__ import annotations

import io
import os
import random
import time
from pathlib import Path
from typing import Any, Optional, Tuple

from bootstrap.bench.config import WorkloadSpec

_DISTINCT_IMAGES = 32  # distinct pictures; the rest repeat them (decode cost is what matters)


def encode_images(spec: WorkloadSpec) -> Tuple[Any, Any]:
    """(blob uint8 array, offsets int64 array of len samples+1): `spec.samples` JPEGs back to back.

    Pictures are smooth random fields plus noise, so they compress and
    decode like photographs rather than like white noise.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(spec.seed)
    encoded = []
    for _ in range(min(_DISTINCT_IMAGES, spec.samples)):
        coarse = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize((spec.image_size, spec.image_size), Image.BICUBIC)
        pixels = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, size=(spec.image_size, spec.image_size, 3))
        buffer = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=spec.jpeg_quality)
        encoded.append(np.frombuffer(buffer.getvalue(), dtype=np.uint8))
    sizes = np.array([len(encoded[i % len(encoded)]) for i in range(spec.samples)], dtype=np.int64)
    offsets = np.zeros(spec.samples + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    blob = np.concatenate([encoded[i % len(encoded)] for i in range(spec.samples)])
    return blob, offsets


class MemoryStore:
    """W1: every encoded sample in one in-RAM buffer."""

    kind = "memory"

    def __init__(self, blob: Any, offsets: Any) -> None:
        self.blob = blob
        self.offsets = offsets
        self.count = len(offsets) - 1

    def read(self, index: int) -> bytes:
        return self.blob[self.offsets[index] : self.offsets[index + 1]].tobytes()

    def files(self) -> Tuple[Path, ...]:
        return ()


class FilesStore:
    """W2a: one file per sample, `DIR/000123.jpg` (the name is computed, no list of paths is kept)."""

    kind = "files"

    def __init__(self, directory: Path, count: int) -> None:
        self.directory = str(directory)
        self.count = count

    @classmethod
    def write(cls, directory: Path, blob: Any, offsets: Any) -> "FilesStore":
        directory.mkdir(parents=True, exist_ok=True)
        count = len(offsets) - 1
        for index in range(count):
            (directory / f"{index:06d}.jpg").write_bytes(blob[offsets[index] : offsets[index + 1]].tobytes())
        return cls(directory, count)

    def read(self, index: int) -> bytes:
        with open(os.path.join(self.directory, f"{index:06d}.jpg"), "rb") as handle:
            return handle.read()

    def files(self) -> Tuple[Path, ...]:
        return tuple(Path(self.directory) / f"{i:06d}.jpg" for i in range(self.count))


class PackedStore:
    """W2b: one packed file plus an offset index, opened as a numpy memmap in each process."""

    kind = "packed"

    def __init__(self, path: Path, offsets: Any) -> None:
        self.path = str(path)
        self.offsets = offsets
        self.count = len(offsets) - 1
        self._map: Any = None

    @classmethod
    def write(cls, path: Path, blob: Any, offsets: Any) -> "PackedStore":
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:  # not ndarray.tofile: its short write is an OSError without errno
            handle.write(memoryview(blob))
        return cls(path, offsets)

    def __getstate__(self) -> dict:
        # A memmap must not travel to workers: each process maps the file itself.
        state = dict(self.__dict__)
        state["_map"] = None
        return state

    def read(self, index: int) -> bytes:
        if self._map is None:
            import numpy as np

            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._map[self.offsets[index] : self.offsets[index + 1]].tobytes()

    def files(self) -> Tuple[Path, ...]:
        return (Path(self.path),)


def build_store(spec: WorkloadSpec, data_dir: Optional[Path]) -> Any:
    """Encode the samples and place them in the store `spec.storage` names (files under `data_dir`)."""
    blob, offsets = encode_images(spec)
    if spec.storage == "memory":
        return MemoryStore(blob, offsets)
    if data_dir is None:
        raise ValueError("files/packed storage needs a data directory")
    if spec.storage == "files":
        return FilesStore.write(data_dir / "samples", blob, offsets)
    return PackedStore.write(data_dir / "samples.bin", blob, offsets)


def drop_page_cache(store: Any) -> int:
    """Ask the kernel to evict our own files from the page cache (advisory, Linux; no root needed).

    Mirrors DS-Analyzer's cold-cache phase without `echo 3 > drop_caches`.
    Returns how many files were advised.
    """
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
    """A map-style torch Dataset: (uint8 CHW crop, int label); see the module docstring.

    Its length is `epoch_batches` batches, cycling over the stored samples:
    DataLoader does not prefetch across an epoch boundary, so a dataset of a
    few batches would measure the refill at every epoch end rather than the
    steady state a real (long) epoch has. Written without subclassing
    torch's Dataset so importing this module does not import torch;
    DataLoader only needs `__len__`/`__getitem__`.
    """

    def __init__(self, store: Any, spec: WorkloadSpec) -> None:
        self.store = store
        self.crop = spec.crop_size
        self.num_classes = spec.num_classes
        self.io_s = spec.io_ms / 1000.0
        self.cpu_s = spec.cpu_ms / 1000.0
        self.stored = store.count
        self.length = max(self.stored, spec.epoch_batches * spec.batch_size)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        import numpy as np
        import torch
        from PIL import Image

        data = self.store.read(index % self.stored)
        if self.io_s:
            time.sleep(self.io_s)
        image = Image.open(io.BytesIO(data))
        image.draft("RGB", (self.crop, self.crop))  # JPEG: decode at reduced scale when the crop allows
        image = image.convert("RGB")
        width, height = image.size
        left = random.randint(0, max(0, width - self.crop))
        top = random.randint(0, max(0, height - self.crop))
        image = image.crop((left, top, left + self.crop, top + self.crop))
        if random.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()
        spin_cpu(self.cpu_s)
        return tensor, index % self.num_classes
