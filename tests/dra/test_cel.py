"""CEL device selectors (gpusched.dra.cel): upstream's environment and its failure modes."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.dra.cel import (
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    compile_selector,
    device_activation,
)

DRIVER = "gpu.nvidia.com"
H100: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "index": {"int": 0},
        "type": {"string": "gpu"},
        "driverVersion": {"version": "550.54.15"},
        "gpu.nvidia.com/mig": {"bool": False},
        "example.com/rack": {"string": "r1"},
    },
    "capacity": {"memory": {"value": "80Gi"}},
}
D = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'

# (expression, matched, error substring or None)
CASES: list[tuple[str, bool, str | None]] = [
    # valid
    (f'device.driver == "{DRIVER}"', True, None),
    (f'{D}.productName.startsWith("NVIDIA H100")', True, None),
    (f"{D}.index == 0 && {D}.type == 'gpu'", True, None),
    (f"{D}.mig", False, None),  # the qualified name lands in the driver's domain
    ('device.attributes["example.com"].rack == "r1"', True, None),
    (f"{D}.driverVersion.isGreaterThan(semver('550.0.0'))", True, None),
    (f"{D}.driverVersion.isLessThan(semver('550.54.15-rc1'))", False, None),
    (f"{D}.driverVersion.major() == 550 && {D}.driverVersion.minor() == 54", True, None),
    # quantities compare by method, exactly
    (f"{C}.memory.compareTo(quantity('40Gi')) >= 0", True, None),
    (f"{C}.memory.compareTo(quantity('80Gi')) == 0", True, None),
    (f"{C}.memory.isGreaterThan(quantity('85899345921'))", False, None),
    (f"{C}.memory.isLessThan(quantity('81Gi'))", True, None),
    (f"{C}.memory == quantity('81920Mi')", True, None),
    (f"{C}.memory.asInteger() == 85899345920", True, None),
    (f"{C}.memory < quantity('100Gi')", False, "no matching overload"),
    # missing attributes, as upstream: unknown domain = empty map, unknown id = error
    ('has(device.attributes["other.com"].x)', False, None),
    (f"has({D}.uuid)", False, None),
    (f"has({D}.uuid) && {D}.uuid == 'x'", False, None),
    ('device.attributes["other.com"].x == 1', False, "no such member"),
    (f"{D}.uuid == 'GPU-1'", False, "no such member"),
    # type errors, wrong result type
    (f"{D}.index + 'a' == 'a'", False, "no matching overload"),
    # cel-go's heterogeneous equality makes this false; cel-python errors (module docstring)
    (f"{D}.index == 'zero'", False, "no matching overload"),
    ("1", False, "must be a bool"),
    (f"{D}.productName", False, "must be a bool"),
    # invalid
    ("device.driver ==", False, "compilation failed: syntax error at line 1"),
    ("device.(", False, "compilation failed"),
    ("x" * (MAX_EXPRESSION_LENGTH + 1), False, "more than 10240"),
    # comprehensions, and cost
    ("[1, 2, 3].all(x, x > 0)", True, None),
    (
        "[{l}].all(a, [{l}].all(b, [{l}].all(c, a == b)))".format(l=",".join(["1"] * 100)),
        False,
        f"exceeds the limit {MAX_COST}",
    ),
]


@pytest.mark.parametrize(("expression", "matched", "error"), CASES, ids=[c[0][:60] for c in CASES])
def test_selector(expression: str, matched: bool, error: str | None) -> None:
    activation = device_activation(DRIVER, H100)
    assert isinstance(activation, dict)
    found = compile_selector(expression).matches(activation)
    assert found.matched is matched
    if error is None:
        assert found.error is None
    else:
        assert found.error is not None
        assert error in found.error


def test_compiled_once_per_expression() -> None:
    assert compile_selector("device.driver == 'a'") is compile_selector("device.driver == 'a'")


@pytest.mark.parametrize(
    ("expression", "bounded"),
    [
        ("device.driver == 'a'", 5),
        ("[1, 2, 3].exists(x, x == 2)", 20),
        # a device map: at most 32 entries each level
        (f"{D}.all(k, {D}.all(j, k == j))", 32 * 32 * 10),
    ],
)
def test_cost_estimate_bounds(expression: str, bounded: int) -> None:
    selector = compile_selector(expression)
    assert selector.error is None
    assert 0 < selector.cost <= bounded


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ({"attributes": {"v": {"version": "1.2"}}}, "attribute v: invalid semantic version"),
        ({"attributes": {"v": {}}}, "attribute v: unsupported attribute value"),
        ({"capacity": {"memory": {"value": "lots"}}}, "capacity memory:"),
    ],
)
def test_bad_device_data_is_a_message(device: dict[str, Any], message: str) -> None:
    found = device_activation(DRIVER, device)
    assert isinstance(found, str)
    assert found.startswith(message)


def test_v1beta1_basic_is_unwrapped() -> None:
    activation = device_activation(DRIVER, {"name": "d", "basic": H100})
    assert isinstance(activation, dict)
    assert compile_selector(f"{D}.index == 0").matches(activation).matched


def test_package_exports() -> None:
    import gpusched.dra as dra
    from gpusched.dra import allocator, cel

    for module in (dra, allocator, cel):
        assert sorted(module.__all__) == sorted(set(module.__all__))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


@pytest.mark.parametrize(
    "expression",
    [
        f'{D}.productName.split(" ") == []',  # a function cel-python lacks
        f"{D}.missing == 1",
        f"{D}.index / 0 == 1",
    ],
)
def test_a_runtime_error_is_one_short_line(expression: str) -> None:
    """It goes on the claim and the pod's Event: never the device dump cel-python appends."""
    activation = device_activation(DRIVER, H100)
    assert isinstance(activation, dict)
    found = compile_selector(expression).matches(activation)
    assert not found.matched
    assert found.error is not None
    assert "\n" not in found.error
    assert len(found.error) <= 250
