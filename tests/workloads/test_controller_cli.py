"""``gpusched controller``'s arguments: a bad ``--profile`` is a usage error naming the fix."""

from __future__ import annotations

import pytest

from gpusched.cli import main


@pytest.mark.parametrize("profile", ["fastest=gpusched", "leastLoaded", "leastLoaded="])
def test_a_bad_profile_is_a_usage_error(profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "--profile", profile]) == 2
    err = capsys.readouterr().err
    assert f"--profile {profile!r}: write STRATEGY=SCHEDULERNAME" in err
    assert "leastLoaded, random, costOptimized" in err


@pytest.mark.parametrize(
    ("argv", "workers"),
    [([], 5), (["--workers", "1"], 1), (["--workers", "12"], 12)],
)
def test_workers_default_to_the_job_controllers_five(argv: list[str], workers: int) -> None:
    from gpusched.cli import _parser

    assert _parser().parse_args(["controller", *argv]).workers == workers


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_fewer_than_one_worker_is_a_usage_error(
    workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["controller", "--workers", workers]) == 2
    assert f"--workers {workers}: write a whole number of at least 1" in capsys.readouterr().err
