"""Which of the GPUs NVML lists a CUDA program gets: CUDA_VISIBLE_DEVICES read as CUDA reads it, in
CUDA_DEVICE_ORDER (CUDA Programming Guide, "CUDA Environment Variables").
Docs: docs/checks.md, "The job's GPUs".
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from bootstrap.compat.facts import GpuFacts
from bootstrap.report import result

PCI_BUS_ID = "PCI_BUS_ID"  # the CUDA_DEVICE_ORDER under which CUDA counts GPUs as nvidia-smi does
MIG_FROM_CC = (8, 0)  # MIG exists on compute capability 8.0 and newer (A100, A30, H100, ...)
ORDER_REMEDY = (
    "`export CUDA_DEVICE_ORDER=PCI_BUS_ID` so that CUDA numbers GPUs as nvidia-smi does, or name them "
    "by UUID in CUDA_VISIBLE_DEVICES (`nvidia-smi -L`)"
)


@result
class Visible:
    """What CUDA_VISIBLE_DEVICES leaves a CUDA program of the GPUs NVML lists (NVML ignores it)."""

    gpus: tuple[GpuFacts, ...]  # the whole GPUs it names, in its order (read in PCI bus order if `unordered`)
    devices: int  # the devices a CUDA program sees: those GPUs, or the one MIG instance it names
    note: str = ""  # "CUDA_VISIBLE_DEVICES='2,3'" (abridged); "" when the variable is unset
    mig: bool = False  # it names MIG instances: one device, a slice of one GPU (`parent`, if known)
    parent: Optional[GpuFacts] = None  # the GPU holding the MIG instance it names, where the facts tell
    # CUDA numbers this node's GPUs fastest first (CUDA_DEVICE_ORDER is not PCI_BUS_ID) and they are not
    # all one model: cuda:N is not nvidia-smi's GPU N, and which GPUs indices name is CUDA's guess.
    unordered: bool = False
    order: Optional[str] = None  # CUDA_DEVICE_ORDER as set (None: unset, CUDA's FASTEST_FIRST)

    def to_dict(self) -> dict[str, Any]:
        out = {"gpus": [gpu.index for gpu in self.gpus], "devices": self.devices, "note": self.note}
        return {**out, "unordered": True} if self.unordered else out

    @property
    def order_note(self) -> str:
        """ "CUDA_DEVICE_ORDER='FASTEST_FIRST'" (abridged), or "CUDA_DEVICE_ORDER unset"."""
        return "CUDA_DEVICE_ORDER unset" if self.order is None else f"CUDA_DEVICE_ORDER={_abridged(self.order)}"

    @property
    def uncertain(self) -> bool:
        """Indices name some of a mixed node's GPUs in CUDA's own order: which ones is not known here."""
        return self.unordered and bool(self.note) and not self.mig and 0 < self.devices

    def split(self, gpus: Sequence[GpuFacts]) -> tuple[tuple[GpuFacts, ...], tuple[GpuFacts, ...]]:
        """(the GPUs whose code the job may run, the others): a MIG instance runs its parent's compute
        capability; one whose parent the facts do not tell leaves every GPU that can hold MIG in the
        first; indices counted in CUDA's fastest-first order may name any GPU of the node."""
        if self.mig and self.devices:
            capable = tuple(g for g in gpus if g.compute_capability is None or g.compute_capability >= MIG_FROM_CC)
            shown = (self.parent,) if self.parent is not None else capable or tuple(gpus)
        elif self.uncertain:
            shown = tuple(gpus)
        else:
            shown = self.gpus
        return shown, tuple(g for g in gpus if g not in shown)


def mixed(gpus: Sequence[GpuFacts]) -> bool:
    """Whether the GPUs are of more than one model, the case where CUDA's fastest-first numbering and
    nvidia-smi's PCI bus order can differ."""
    return len({(g.name, g.compute_capability) for g in gpus}) > 1


def visible_gpus(gpus: Sequence[GpuFacts], value: Optional[str], order: Optional[str] = None) -> Visible:
    """Read CUDA_VISIBLE_DEVICES as CUDA does (PyTorch's `torch.cuda._parse_visible_devices`
    models the same rules). The first entry decides what the list holds: indices, `GPU-` UUIDs
    (a unique prefix is enough) or `MIG-` instances. An index is read as C's strtoul reads it
    (`1gpu2` is 1); the first entry that names no GPU ends the list, so "" and "-1" hide every
    GPU; a repeated one empties it. An index counts in CUDA's order: NVML's (PCI bus) under
    `order` (CUDA_DEVICE_ORDER) PCI_BUS_ID or on a node of one GPU model; otherwise the GPUs are
    read in NVML's order and the result is `unordered`. A process sees one MIG instance at most
    (CUDA enumerates only the first), and not as one of NVML's GPUs here; its parent is the GPU
    listing that UUID, or the `GPU-` UUID inside an R450-era `MIG-GPU-<uuid>/gi/ci`."""
    unordered = mixed(gpus) and order != PCI_BUS_ID  # a spelling the docs do not give is not trusted
    if value is None:
        return Visible(gpus=tuple(gpus), devices=len(gpus), unordered=unordered, order=order)
    note = f"CUDA_VISIBLE_DEVICES={_abridged(value)}"
    if value.startswith("MIG-"):
        first = value.split(",")[0]
        if len(first) <= len("MIG-"):
            return Visible(gpus=(), devices=0, note=note, mig=True)
        return Visible(gpus=(), devices=1, note=note, mig=True, parent=_mig_parent(gpus, first))
    by_uuid = value.startswith("GPU-")
    named: list[GpuFacts] = []
    for item in value.split(","):
        gpu = _by_uuid(gpus, item) if by_uuid else _by_index(gpus, item)
        if gpu is None:
            break
        if gpu in named:
            return Visible(gpus=(), devices=0, note=note)
        named.append(gpu)
    return Visible(gpus=tuple(named), devices=len(named), note=note, unordered=unordered and not by_uuid, order=order)


_STRTOUL = re.compile(r"\s*\+?([0-9]+)")  # C's strtoul: spaces, a sign, ASCII digits, then anything


def visible_note(visible: Visible) -> str:
    """', CUDA_VISIBLE_DEVICES=...' after a figure that counts the job's GPUs; '' when the variable is unset."""
    return f", {visible.note}" if visible.note else ""


def _by_index(gpus: Sequence[GpuFacts], item: str) -> Optional[GpuFacts]:
    number = _STRTOUL.match(item)
    return next((g for g in gpus if number and g.index == int(number.group(1))), None)


def _by_uuid(gpus: Sequence[GpuFacts], item: str) -> Optional[GpuFacts]:
    found = [g for g in gpus if item.startswith("GPU-") and g.uuid and g.uuid.startswith(item)]
    return found[0] if len(found) == 1 else None


def _mig_parent(gpus: Sequence[GpuFacts], item: str) -> Optional[GpuFacts]:
    if item.startswith("MIG-GPU-"):
        return _by_uuid(gpus, item[len("MIG-") :].split("/")[0])
    return next((g for g in gpus if item in g.mig_uuids), None)


def _abridged(value: str, keep: int = 100) -> str:
    return repr(value) if len(value) <= keep else f"{value[:keep]!r}... ({len(value)} characters)"
