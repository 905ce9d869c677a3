"""Status and Code: upstream's codes and labels, constructors, predicates, no-copy paths."""

from __future__ import annotations

import dataclasses

import pytest

from gpusched.framework import SKIP, SUCCESS, Code, Status, StatusError


def test_codes_and_labels_are_upstreams() -> None:
    assert [(int(c), str(c)) for c in Code] == [
        (0, "Success"),
        (1, "Error"),
        (2, "Unschedulable"),
        (3, "UnschedulableAndUnresolvable"),
        (4, "Wait"),
        (5, "Skip"),
        (6, "Pending"),
    ]
    assert Code.UNSCHEDULABLE.label == "Unschedulable"
    assert not Code.SUCCESS  # `if status.code:` is the failure test
    assert all(c for c in Code if c is not Code.SUCCESS)


@pytest.mark.parametrize(
    ("status", "code", "reasons", "plugin"),
    [
        (Status.success(), Code.SUCCESS, (), ""),
        (Status.unschedulable("a", "b", plugin="P"), Code.UNSCHEDULABLE, ("a", "b"), "P"),
        (Status.unresolvable("x"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("x",), ""),
        (Status.error("boom", plugin="P"), Code.ERROR, ("boom",), "P"),
        (Status.wait(), Code.WAIT, (), ""),
        (Status.wait("gang", plugin="G"), Code.WAIT, ("gang",), "G"),
        (Status.skip(), Code.SKIP, (), ""),
        (Status.pending("later"), Code.PENDING, ("later",), ""),
    ],
)
def test_constructors(status: Status, code: Code, reasons: tuple[str, ...], plugin: str) -> None:
    assert (status.code, status.reasons, status.plugin) == (code, reasons, plugin)


def test_shared_singletons() -> None:
    assert Status.success() is SUCCESS
    assert Status.skip() is SKIP
    assert Status.wait() is Status.wait()


@pytest.mark.parametrize(
    ("code", "success", "rejected", "error", "wait", "skip"),
    [
        (Code.SUCCESS, True, False, False, False, False),
        (Code.ERROR, False, False, True, False, False),
        (Code.UNSCHEDULABLE, False, True, False, False, False),
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, False, True, False, False, False),
        (Code.WAIT, False, False, False, True, False),
        (Code.SKIP, False, False, False, False, True),
        (Code.PENDING, False, True, False, False, False),  # as upstream's IsRejected
    ],
)
def test_predicates(
    code: Code, success: bool, rejected: bool, error: bool, wait: bool, skip: bool
) -> None:
    s = Status(code)
    assert (s.is_success, s.is_rejected, s.is_error, s.is_wait, s.is_skip) == (
        success,
        rejected,
        error,
        wait,
        skip,
    )


def test_error_from_exception_keeps_it() -> None:
    exc = ValueError("bad quantity")
    s = Status.error(exc, plugin="GPUFit")
    assert s.exception is exc
    assert s.reasons == ("bad quantity",)
    assert s.as_error() is exc
    assert Status.error(RuntimeError()).reasons == ("RuntimeError",)


def test_as_error() -> None:
    assert SUCCESS.as_error() is None
    assert Status.wait().as_error() is None
    assert Status.skip().as_error() is None
    err = Status.unschedulable("0/8 GPUs free", plugin="GPUFit").as_error()
    assert isinstance(err, StatusError)
    assert str(err) == "0/8 GPUs free"
    assert err.status.plugin == "GPUFit"


def test_message_and_str() -> None:
    s = Status.unschedulable("too few GPUs", "taint", plugin="GPUFit")
    assert s.message() == "too few GPUs, taint"
    assert str(s) == "Unschedulable (GPUFit): too few GPUs, taint"
    assert str(SUCCESS) == "Success"


def test_with_plugin_copies_only_when_needed() -> None:
    prebuilt = Status.unschedulable("no", plugin="P")
    assert prebuilt.with_plugin("P") is prebuilt
    other = prebuilt.with_plugin("Q")
    assert other is not prebuilt
    assert (other.code, other.reasons, other.plugin) == (Code.UNSCHEDULABLE, ("no",), "Q")
    assert prebuilt.plugin == "P"


def test_frozen_and_slotted() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SUCCESS.code = Code.ERROR  # type: ignore[misc]
    assert not hasattr(SUCCESS, "__dict__")
    assert Status.unschedulable("x") == Status.unschedulable("x")
