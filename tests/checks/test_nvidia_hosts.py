"""Unusual hosts: a driver without GPUs, a container without --gpus, WSL2, Jetson (generated cases)."""

from __future__ import annotations

import itertools

import pytest

from bootstrap.checks.model import Status
from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.compat.facts import DriverFacts, HostFacts

DRIVERS = ("470.82.01", "535.183.01", "570.124.06", "580.95.05", "590.44.01")
WHY_NONE = ("", "NVML: GPU 0: GPU is lost (fell off the bus; see `dmesg`)", "NVML: GPU 0: not found")


@pytest.mark.parametrize(("driver", "source", "reason"),
                         list(itertools.product(DRIVERS, ("nvml", "nvidia-smi"), WHY_NONE)))
def test_a_driver_that_lists_no_gpu_is_a_warning_with_the_way_to_find_out_why(driver, source, reason) -> None:
    facts = DriverFacts(driver_version=driver, cuda_driver_version=None, source=source, reason=reason)
    for host in (None, HostFacts(), HostFacts(cuda_visible_devices="0")):
        (check,) = nvidia_checks(facts, host)
        assert check.id == "nvidia.driver" and check.status is Status.WARN
        assert "0 GPU(s)" in check.observed and reason in check.detail
        assert all(word in check.remedy for word in ("nvidia-smi", "dmesg | grep -i nvrm", "newer driver"))
