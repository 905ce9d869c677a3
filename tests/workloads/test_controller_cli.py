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
