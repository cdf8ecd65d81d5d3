"""What `tune_training` returns: the recommended training recipe (micro-batch, accumulation, precision,
memory format, DataLoader arguments), the grid it was chosen from, its checks, its JSON
(`bootstrap.training`) and the training loop a PyTorch user writes from it (docs/benchmark.md, "Tune the
training step"). Stdlib only: the records are read and written without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from bootstrap.report import Check, envelope, summary

FORMAT = "bootstrap.training"
PRECISIONS = ("fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # torch's names; fp32 runs without autocast


@dataclass(frozen=True)
class GridRow:
    """One measured configuration of the step: its rate on batches already on the device, its peak
    memory, and whether it fit (`samples_per_s` None: it did not, or was not timed)."""

    micro: int
    precision: str
    channels_last: bool
    samples_per_s: Optional[float]
    peak_bytes: Optional[int]
    fits: bool
    timings: int = 1  # windows' medians the rate is the median of: more for the contenders re-timed

    @property
    def key(self) -> tuple[int, str, bool]:
        return self.micro, self.precision, self.channels_last

    @property
    def label(self) -> str:
        return f"{self.micro} {self.precision}{' channels_last' if self.channels_last else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro": self.micro,
            "precision": self.precision,
            "channels_last": self.channels_last,
            "samples_per_s": self.samples_per_s,
            "peak_bytes": self.peak_bytes,
            "fits": self.fits,
            "timings": self.timings,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GridRow:
        rate, peak = data.get("samples_per_s"), data.get("peak_bytes")
        return cls(
            micro=int(data["micro"]),
            precision=str(data["precision"]),
            channels_last=bool(data["channels_last"]),
            samples_per_s=None if rate is None else float(rate),
            peak_bytes=None if peak is None else int(peak),
            fits=bool(data["fits"]),
            timings=int(data.get("timings", 1)),
        )


@dataclass(frozen=True)
class TrainingAdvice:
    """The recipe for an effective batch of `micro_batch x accumulation_steps` samples (docs/benchmark.md,
    "Tune the training step"). `precision_by_step`: the step ignored autocast, so `precision` is what bootstrap
    adds (none) and the step keeps its own. `gains`: the recommended step's rate over the user's current one
    (`over_current`), and end to end, loader included, over the fixed advice num_workers=4, pin_memory=True,
    prefetch_factor=2 (`over_fixed_advice`; None when not measured). `collate_fn`: the name of the collate
    function the batches were made with, which the snippet's DataLoader passes too."""

    micro_batch: int
    accumulation_steps: int
    precision: str
    channels_last: bool
    dataloader_kwargs: dict[str, Any]
    grid: tuple[GridRow, ...]
    max_micro_batch: int
    effective_batch: int
    device: str
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()
    gains: dict[str, Optional[float]] = field(default_factory=dict)
    precision_by_step: bool = False
    collate_fn: Optional[str] = None

    @property
    def rate(self) -> Optional[float]:
        """The recommended configuration's measured samples/s, on batches already on the device."""
        for row in self.grid:
            if row.key == (self.micro_batch, self.precision, self.channels_last) and row.samples_per_s:
                return row.samples_per_s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batch": self.micro_batch,
            "accumulation_steps": self.accumulation_steps,
            "precision": self.precision,
            "precision_by_step": self.precision_by_step,
            "channels_last": self.channels_last,
            "dataloader_kwargs": dict(self.dataloader_kwargs),
            "collate_fn": self.collate_fn,
            "grid": [row.to_dict() for row in self.grid],
            "max_micro_batch": self.max_micro_batch,
            "effective_batch": self.effective_batch,
            "device": self.device,
            "checks": [check.to_dict() for check in self.checks],
            "summary": summary(self.checks),
            "notes": list(self.notes),
            "gains": dict(self.gains),
        }

    def to_json(self) -> dict[str, Any]:
        """The versioned envelope (`bootstrap.training`), plain JSON types only."""
        return envelope(FORMAT, self.to_dict())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainingAdvice:
        """The advice `to_json` wrote (the same format version)."""
        return cls(
            micro_batch=int(data["micro_batch"]),
            accumulation_steps=int(data["accumulation_steps"]),
            precision=str(data["precision"]),
            precision_by_step=bool(data.get("precision_by_step", False)),
            channels_last=bool(data["channels_last"]),
            dataloader_kwargs=dict(data["dataloader_kwargs"]),
            collate_fn=None if data.get("collate_fn") is None else str(data["collate_fn"]),
            grid=tuple(GridRow.from_dict(row) for row in data["grid"]),
            max_micro_batch=int(data["max_micro_batch"]),
            effective_batch=int(data["effective_batch"]),
            device=str(data["device"]),
            checks=tuple(Check.from_dict(check) for check in data["checks"]),
            notes=tuple(str(note) for note in data["notes"]),
            gains={str(k): (None if v is None else float(v)) for k, v in data["gains"].items()},
        )

    def __repr__(self) -> str:
        precision = "the step's own precision" if self.precision_by_step else self.precision
        layout = ", channels_last" if self.channels_last else ""
        rate = f", {self.rate:.0f} samples/s" if self.rate else ""
        gain = self.gains.get("over_current")
        yours = f" ({gain:.2f}x yours)" if gain else ""
        counts = summary(self.checks)
        verdict = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.dataloader_kwargs.items())
        return (
            f"TrainingAdvice(micro_batch={self.micro_batch} x {self.accumulation_steps} steps = "
            f"{self.micro_batch * self.accumulation_steps}, {precision}{layout}{rate}{yours}; "
            f"DataLoader({kwargs}); checks: {verdict or 'none'})"
        )

    def snippet(self) -> str:
        """The training loop that applies the advice: paste it where `dataset`, `model`, `optimizer` and
        `loss_fn` are defined (a step of your own replaces the two lines that compute the loss)."""
        return "\n".join(_loop_lines(self)) + "\n"


def _loop_lines(advice: TrainingAdvice) -> list[str]:
    steps, device = advice.accumulation_steps, advice.device
    pinned = bool(advice.dataloader_kwargs.get("pin_memory"))
    copy = ", non_blocking=True" if pinned else ""
    dtype = None if advice.precision_by_step else AUTOCAST_DTYPES.get(advice.precision)
    scaler = dtype == "float16"
    kwargs = "".join(f", {k}={v!r}" for k, v in advice.dataloader_kwargs.items())
    if advice.collate_fn is not None:  # a lambda's "<lambda>" is no name to paste
        kwargs += f", collate_fn={advice.collate_fn if advice.collate_fn.isidentifier() else 'collate_fn'}"
    lines = [
        "import torch",
        "from torch.utils.data import DataLoader",
        "",
        f"# bootstrap tune_training: effective batch {advice.micro_batch * steps} = micro-batch {advice.micro_batch}"
        f" x {steps} accumulation steps on {device}.",
        f'device = torch.device("{device}")',
        f"loader = DataLoader(dataset, batch_size={advice.micro_batch}, shuffle=True{kwargs})",
        "model = model.to(device)"
        + (".to(memory_format=torch.channels_last)" if advice.channels_last else "")
        + ".train()",
    ]
    if scaler:
        lines.append(f'scaler = torch.amp.GradScaler("{device}")  # fp16 gradients underflow without loss scaling')
    lines += [
        f"steps = {steps}  # micro-batches per optimizer step",
        "optimizer.zero_grad(set_to_none=True)",
        "for i, (inputs, targets) in enumerate(loader):",
        f"    inputs, targets = inputs.to(device{copy}), targets.to(device{copy})",
    ]
    if advice.channels_last:
        lines.append("    inputs = inputs.contiguous(memory_format=torch.channels_last)")
    if dtype is not None:
        lines.append(f'    with torch.autocast(device_type="{device}", dtype=torch.{dtype}):')
        lines.append("        loss = loss_fn(model(inputs), targets)")
    else:
        lines.append("    loss = loss_fn(model(inputs), targets)")
    lines.append("    loss = loss / steps  # the mean over the effective batch, not over each micro-batch")
    lines.append("    scaler.scale(loss).backward()" if scaler else "    loss.backward()")
    lines.append("    if (i + 1) % steps == 0:")
    lines += ["        scaler.step(optimizer)", "        scaler.update()"] if scaler else ["        optimizer.step()"]
    lines.append("        optimizer.zero_grad(set_to_none=True)")
    return lines
