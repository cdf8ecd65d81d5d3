"""Which CUDA the kernel driver itself runs: the one NVML reports, unless cuda-compat raised it.

Generated from the packaged tables: every toolkit's Linux driver, a beta of
its branch just before it and drivers of branches newer than every row, each
reporting its CUDA, beside every GPU the SASS table dates. A GPU the
reported CUDA targets is never "newer than the driver"; a driver of an older
branch that reports a newer CUDA (cuda-compat) is still judged by its own.
"""

from __future__ import annotations

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.forward import compat_in_use, newer_than_driver, own_cuda
from bootstrap.compat.rules import check_gpu_arch
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.compat.versions import cuda_to_int, driver_tuple, first_cuda_for
from bootstrap.report import Status

CCS = sorted({(int(row["sm"][3:-1]), int(row["sm"][-1])) for row in data.SASS_INTRODUCED})
ROWS = [
    (row["linux"], cuda_to_int(row["cuda"]) // 10 * 10) for row in data.TOOLKIT_DRIVERS if driver_tuple(row["linux"])
]
NEWEST = max(cuda for _, cuda in ROWS)
BEYOND = [("615.12.01", NEWEST + 10), ("620.1", NEWEST + 20), ("1000.1", 14000)]


def beta(driver: str) -> str:
    """A driver of the same branch just before `driver`: '575.51.03' -> '575.51.02'."""
    *head, last = driver.split(".")
    return ".".join(head + [str(max(int(last) - 1, 0)).zfill(len(last))])


def host(driver: str, cuda: int, cc) -> DriverFacts:
    return DriverFacts(
        driver_version=driver,
        cuda_driver_version=cuda,
        source="test",
        gpus=(GpuFacts(index=0, name=f"GPU CC {cc}", compute_capability=cc),),
    )


def test_a_gpu_the_reported_cuda_targets_is_never_newer_than_the_driver() -> None:
    target = torch_target_from_lock_entry(f"{data.TORCH_RELEASES[-1]['versions'][-1]}")
    drivers = ROWS + [(beta(driver), cuda) for driver, cuda in ROWS] + BEYOND
    judged = 0
    for driver, cuda in drivers:
        for cc in CCS:
            facts = host(driver, cuda, cc)
            assert compat_in_use(facts) is None and own_cuda(facts) == cuda, (driver, cuda)
            check = check_gpu_arch(facts.gpus[0], facts, target)
            if first_cuda_for(cc) <= cuda:
                judged += 1
                assert newer_than_driver(cc, facts) is None, (driver, cuda, cc)
                assert "newer than the driver" not in check.observed, (driver, cuda, cc, check.observed)
            else:
                assert check.status is Status.FAIL and "newer than the driver" in check.observed
    assert judged > 300


def test_the_b300_beside_a_beta_driver_that_reports_cuda_12_9_runs() -> None:
    facts = host("575.51.02", 12090, (10, 3))
    check = check_gpu_arch(facts.gpus[0], facts, torch_target_from_lock_entry("2.10.0+cu128"))
    assert check.status is Status.OK, check


def test_cuda_compat_does_not_make_an_older_branch_know_a_newer_gpu() -> None:
    for driver, cuda in ROWS:
        for compat in sorted({c for _, c in ROWS if c // 1000 > cuda // 1000}):
            facts = host(driver, compat, (10, 3))
            if compat_in_use(facts) is None:
                continue
            assert own_cuda(facts) <= cuda, (driver, compat)
            assert (newer_than_driver((10, 3), facts) is not None) == (own_cuda(facts) < 12090)
