"""The training step a run times: the model, its optimizer, one forward/backward/update per batch.

The built-in step trains a small CNN or a torchvision ResNet; `--model` and `--step` replace either
(docs/benchmark.md, "Your model and training step").
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional, Protocol

from bootstrap.bench.device import Device
from bootstrap.bench.results import LoaderConfig
from bootstrap.errors import InputError


class UserCode(Protocol):
    """The user's model factory and step, as `user.UserParts` holds them."""

    model_factory: Optional[Callable[[], Any]]
    step_fn: Optional[Callable[..., Any]]


class StepFailed(Exception):
    """The training step raised `error`: raised in its place, so that no phase takes it for the loader's."""

    def __init__(self, error: Exception, batch: Any = None) -> None:
        super().__init__()
        self.error = error
        self.batch = batch  # what the step was given: its fix may depend on what the batch holds

    def __str__(self) -> str:
        return f"the training step raised {type(self.error).__name__}"


class NotALoss(TypeError):
    """The user's step returned something other than a loss tensor, to call `backward()` on."""


class NoParameters(ValueError):
    """The model has no parameters for the step's update to train."""


# What torch's backward() says of a graph whose saved tensors an earlier backward() freed.
_BACKWARD_TWICE = "Trying to backward through the graph a second time"


class GraphFreed(RuntimeError):
    """bench's backward() on the loss the user's step returned found its graph already backpropagated:
    on the trainer's first update (`first`), by the step itself; later, a graph that reaches into an
    earlier batch's (a hidden state kept without detach())."""

    def __init__(self, first: bool) -> None:
        if first:
            problem = "returned a loss it had already called backward() on; bench calls backward() on the loss itself"
            self.fix = "return the loss and let bench call backward() and step, or do both yourself and return None"
        else:
            problem = "returned a loss whose graph reaches into an earlier batch's, already backpropagated"
            self.fix = "detach() what the step or model keeps from one batch to the next, such as a hidden state"
        super().__init__(problem)


def resolve_model_name(name: str, device_type: str) -> tuple[str, str]:
    """(model name, why): `auto` is ResNet-50 on a GPU (CUDA or MPS) with torchvision, else the small CNN."""
    if name != "auto":
        return name, "asked for"
    if device_type not in ("cuda", "mps"):
        return "tiny", "auto: CPU run, small CNN"
    try:
        import torchvision  # noqa: F401  (probe only)
    except ImportError:
        return "tiny", "auto: torchvision is not installed"
    return "resnet50", "auto: GPU run, torchvision installed"


def build_model(name: str, num_classes: int) -> Any:
    """The model the built-in step trains: a small CNN, or torchvision's ResNet-18/50."""
    import torch.nn as nn

    if name in ("resnet18", "resnet50"):
        try:
            import torchvision
        except ImportError:
            fix = "install torchvision or use --model tiny"
            raise InputError("--model", f"{name} needs torchvision, which is not installed", fix) from None
        return getattr(torchvision.models, name)(num_classes=num_classes)
    # A patchify stem (4x4, stride 4) keeps the small CNN cheap at 224 px, so a CPU run still measures the loader.
    return nn.Sequential(
        nn.Conv2d(3, 16, 4, stride=4),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


class Trainer:
    """One model and its SGD optimizer; `step` is a full forward/backward/update on one batch.

    `step_s` adds a known sleep per step (a stand-in for a slower device). With `user_code` (the step,
    model or batches are the user's) what the step raises comes as `StepFailed`.
    """

    def __init__(
        self,
        model_name: str,
        num_classes: int,
        device: Device,
        config: LoaderConfig,
        *,
        step_s: float = 0.0,
        user: Optional[UserCode] = None,
    ) -> None:
        import torch

        self.device = device
        self.config = config
        self.step_s = step_s
        self.step_fn = user.step_fn if user is not None else None
        self.user_code = user is not None
        factory = user.model_factory if user is not None else None
        model = factory() if factory is not None else build_model(model_name, num_classes)
        model = model.to(device.torch_device)
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model.train()
        parameters = list(self.model.parameters())
        # A step that returns None updates the model itself: it may train one without parameters.
        self.optimizer = torch.optim.SGD(parameters, lr=0.01, momentum=0.9) if parameters else None
        self.amp_dtype = getattr(torch, config.amp_dtype) if config.amp_dtype else None
        self.updates = 0  # backward passes and steps bench took

    def to_device(self, images: Any, labels: Any, non_blocking: bool) -> tuple[Any, Any]:
        """Images and labels on the device; uint8 images scaled there (a quarter of the bytes to copy)."""
        import torch

        images = images.to(self.device.torch_device, non_blocking=non_blocking)
        labels = labels.to(self.device.torch_device, non_blocking=non_blocking)
        if self.config.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return (images.float().div_(255) if images.dtype == torch.uint8 else images.float()), labels

    def prepare(self, batch: Any, non_blocking: bool) -> Any:
        """`batch` on the device as the step takes it: for a user's step, every tensor in it moved."""
        if self.step_fn is None:
            return self.to_device(batch[0], batch[1], non_blocking)
        from bootstrap.bench.batch import map_tensors

        return map_tensors(lambda t: t.to(self.device.torch_device, non_blocking=non_blocking), batch)

    def run(self, prepared: Any) -> None:
        """One step on a batch `prepare` returned."""
        self._guarded(self._run, prepared)

    def step(self, batch: Any) -> None:
        self._guarded(lambda b: self._run(self.prepare(b, self.config.non_blocking)), batch)

    def _guarded(self, call: Callable[[Any], None], batch: Any) -> None:
        # The step runs in this process, between two `next(loader)` calls: its error must stay apart
        # from the loader's, whose RuntimeErrors mean workers that died.
        try:
            call(batch)
        except Exception as exc:  # noqa: BLE001 (the user's step or model may raise anything)
            if not self.user_code or isinstance(exc, StepFailed) or raised_by_worker_watch(exc):
                raise
            raise StepFailed(exc, batch) from exc

    def _run(self, prepared: Any) -> None:
        import torch

        if self.step_fn is None:
            self.step_on_device(*prepared)
            return
        loss = self.step_fn(self.model, prepared, self.device.torch_device)
        if loss is not None:  # None: the step updated the model itself
            if not isinstance(loss, torch.Tensor):
                raise NotALoss(f"returned a {type(loss).__name__}, not a loss tensor")
            self._update(loss, returned=True)
        if self.step_s:
            time.sleep(self.step_s)

    def step_on_device(self, images: Any, labels: Any) -> None:
        import torch
        import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)

        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            loss = F.cross_entropy(self.model(images), labels)
        self._update(loss)
        if self.step_s:
            time.sleep(self.step_s)

    def _update(self, loss: Any, returned: bool = False) -> None:
        """zero_grad, backward and an SGD step on `loss` (`returned`: by the user's step)."""
        if self.optimizer is None:
            raise NoParameters("the model has no parameters to train")
        self.optimizer.zero_grad(set_to_none=True)
        try:
            loss.backward()
        except RuntimeError as exc:
            if returned and _BACKWARD_TWICE in str(exc):
                raise GraphFreed(first=self.updates == 0) from exc
            raise
        self.optimizer.step()
        self.updates += 1


def raised_by_worker_watch(exc: BaseException) -> bool:
    """Whether `exc` is torch's news of a DataLoader worker that died, raised by its SIGCHLD handler
    in whatever this process was running (often a step)."""
    from torch.utils.data._utils import signal_handling

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    handler_file: str = signal_handling.__file__
    return os.path.normcase(tb.tb_frame.f_code.co_filename) == os.path.normcase(handler_file)
