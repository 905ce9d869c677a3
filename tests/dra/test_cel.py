"""CEL device selectors (gpusched.dra.cel): upstream's environment and its failure modes."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.dra.cel import (
    COST_EXCEEDED,
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    Match,
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
    # versions (semver library, version 1)
    (f"{D}.driverVersion.isGreaterThan(semver('550.0.0'))", True, None),
    (f"{D}.driverVersion.isLessThan(semver('550.54.15-rc1'))", False, None),
    (f"{D}.driverVersion.major() == 550 && {D}.driverVersion.minor() == 54", True, None),
    (f"{D}.driverVersion.compareTo(semver('550.54.15')) == 0", True, None),
    (f"{D}.driverVersion == semver('550.54.15')", True, None),
    (f"{D}.driverVersion.isGreaterThan(semver('v550.1', true))", True, None),
    ("isSemver('1.2.3') && !isSemver('1.2') && isSemver('v1.2', true)", True, None),
    ("semver('01.01.01', true) == semver('1.1.1') && !isSemver('1.0-rc1', true)", True, None),
    (f"{D}.driverVersion.isGreaterThan(semver('1.2'))", False, "invalid semantic version"),
    (f"{D}.driverVersion < semver('600.0.0')", False, "no matching overload"),
    # quantities compare by method, exactly
    (f"{C}.memory.compareTo(quantity('40Gi')) >= 0", True, None),
    (f"{C}.memory.compareTo(quantity('80Gi')) == 0", True, None),
    (f"{C}.memory.isGreaterThan(quantity('85899345921'))", False, None),
    (f"{C}.memory.isLessThan(quantity('81Gi'))", True, None),
    (f"{C}.memory == quantity('81920Mi')", True, None),
    (f"{C}.memory.asInteger() == 85899345920", True, None),
    (f"{C}.memory.sub(quantity('40Gi')).add(1).isGreaterThan(quantity('40Gi'))", True, None),
    (f"{C}.memory.sign() == 1 && {C}.memory.isInteger()", True, None),
    ("quantity('1500m').isInteger() || quantity('1500m').asApproximateFloat() == 1.5", True, None),
    ("isQuantity('1Gi') && !isQuantity('lots')", True, None),
    ("quantity('1500m').asInteger() == 1", False, "cannot convert value to integer"),
    ("quantity('lots').sign() == 1", False, "quantities must match the regular expression"),
    (f"{C}.memory < quantity('100Gi')", False, "no matching overload"),
    # numbers compare across types; == across other types is false (heterogeneous equality)
    (f"{D}.index == 0.0 && {D}.index < 0.5 && {D}.index >= 0u", True, None),
    (f"{D}.index == 'zero'", False, None),
    (f"{D}.index != 'zero' && {D}.mig != 0", True, None),
    (f"{D}.index < 'one'", False, "no matching overload"),
    (f"{D}.index in [0.0, 1.0] && !('a' in [0])", True, None),
    # missing attributes, as upstream: unknown domain = empty map, unknown id = error
    ('has(device.attributes["other.com"].x)', False, None),
    (f"has({D}.uuid)", False, None),
    (f"has({D}.uuid) && {D}.uuid == 'x'", False, None),
    ('device.attributes["other.com"].x == 1', False, "no such member"),
    (f"{D}.uuid == 'GPU-1'", False, "no such member"),
    # optional types
    (f"{D}.?uuid.orValue('none') == 'none'", True, None),
    (f"{D}.?productName.orValue('') == 'NVIDIA H100 80GB HBM3'", True, None),
    (f"!{D}.?uuid.hasValue() && {D}.?index.value() == 0", True, None),
    ('device.attributes["other.com"].?x.orValue(7) == 7', True, None),
    (f"{C}[?'memory'].orValue(quantity('0')).isGreaterThan(quantity('40Gi'))", True, None),
    (f"{D}.?uuid.or(optional.of('GPU-0')).value() == 'GPU-0'", True, None),
    (
        "optional.none().orValue(1) == 1 && optional.ofNonZeroValue('').hasValue() == false",
        True,
        None,
    ),
    (f"{D}.?uuid.value() == 'x'", False, "optional.none() dereference"),
    # ext.Strings version 2
    (f"{D}.productName.split(' ')[1] == 'H100'", True, None),
    (f"{D}.productName.lowerAscii().contains('h100')", True, None),
    (f"{D}.productName.upperAscii().indexOf('HBM') == 17", True, None),
    (f"{D}.productName.lastIndexOf('0') == 13 && {D}.productName.charAt(0) == 'N'", True, None),
    (f"{D}.productName.substring(7, 11) == 'H100'", True, None),
    (f"{D}.productName.replace(' ', '-') == 'NVIDIA-H100-80GB-HBM3'", True, None),
    ("'  a '.trim() == 'a' && ['a', 'b'].join('/') == 'a/b'", True, None),
    (f"strings.quote({D}.type) == '\"gpu\"'", True, None),
    (f"{D}.productName.substring(7, 99) == ''", False, "index out of range"),
    # Lists, Regex, sets libraries, cel.bind
    ("[3, 1, 2].max() == 3 && [1, 2].sum() == 3 && [1, 2, 2].isSorted()", True, None),
    ("[1.5, 2.5].sum() == 4.0 && [].sum() == 0 && ![2, 1].isSorted()", True, None),
    ("[].max() == 1", False, "max called on empty list"),
    ("[1, 2, 3].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2", True, None),
    (f"{D}.productName.find('[0-9]+GB') == '80GB'", True, None),
    (f"{D}.productName.findAll('[0-9]+').size() == 3", True, None),
    ("sets.contains([1, 2, 3], [2]) && sets.intersects([1], [1, 4])", True, None),
    (f"cel.bind(d, {D}, d.index == 0 && d.type == 'gpu')", True, None),
    # type errors, wrong result type
    (f"{D}.index + 'a' == 'a'", False, "no matching overload"),
    (f"{D}.productName", False, "must be a bool"),
    # invalid: syntax, undeclared names, a literal result
    ("device.driver ==", False, "compilation failed: syntax error at line 1"),
    ("device.(", False, "compilation failed"),
    ("x" * (MAX_EXPRESSION_LENGTH + 1), False, "more than 10240"),
    ("devices.driver == 'a'", False, "undeclared reference to 'devices' (in container '')"),
    ("device.driver.startWith('a')", False, "undeclared reference to 'startWith'"),
    ("lookup(device.driver)", False, "undeclared reference to 'lookup'"),
    ("1", False, "must evaluate to bool or the unknown type, not int"),
    ("'gpu'", False, "must evaluate to bool or the unknown type, not string"),
    # upstream functions cel-python has nothing for: valid, and a message when they run
    ("isIP(device.driver)", False, "isIP() is not supported"),
    # comprehensions, and cost
    ("[1, 2, 3].all(x, x > 0)", True, None),
    (f"{D}.exists(k, k == 'index')", True, None),
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
        f"{D}.productName.charAt(99) == 'x'",
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


LONG: dict[str, Any] = {"name": "d", "attributes": {"serial": {"string": "x" * 64}}}
"""A device whose attribute is as long as upstream allows (64 characters)."""


@pytest.mark.parametrize(
    ("expression", "device", "limit", "error"),
    [
        # a string splits into more elements than the estimate assumes (32): evaluating
        # costs more than estimated (here against a lower limit: 1,000,000 operations take
        # cel-python about 10 s)
        (
            f"{D}.serial.split('').all(a, {D}.serial.split('').all(b, a == b || b != a))",
            LONG,
            10_000,
            COST_EXCEEDED,
        ),
        # the caller's limit (upstream's Options.CostLimit), inside a short-circuiting macro
        ("[1, 2, 3, 4, 5, 6, 7, 8].exists(a, [1, 2, 3, 4].all(b, a < 0))", H100, 40, COST_EXCEEDED),
        ("[1, 2, 3, 4, 5, 6, 7, 8].exists(a, [1, 2, 3, 4].all(b, a < 0))", H100, MAX_COST, None),
    ],
    ids=["more-than-estimated", "in-a-macro", "within-limit"],
)
def test_runtime_cost_limit(
    expression: str, device: dict[str, Any], limit: int, error: str | None
) -> None:
    selector = compile_selector(expression)
    assert selector.error is None
    assert not selector.too_expensive
    activation = device_activation(DRIVER, device)
    assert isinstance(activation, dict)
    found = selector.matches(activation, cost_limit=limit)
    assert found.error == (None if error is None else f"CEL runtime error: {error}")


def test_over_cost_estimate_is_flagged() -> None:
    selector = compile_selector(
        "[{l}].all(a, [{l}].all(b, [{l}].all(c, a == b)))".format(l=",".join(["1"] * 100))
    )
    assert selector.too_expensive
    assert selector.cost > MAX_COST
    assert not compile_selector("device.driver == 'a'").too_expensive


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        # cel-go's ext/strings.go examples, each as `example == result`
        ("'hello mellow'.indexOf('') == 0", None),
        ("'hello mellow'.indexOf('', 2) == 2", None),
        ("'hello mellow'.indexOf('ello', 2) == 7", None),
        ("'hello mellow'.indexOf('ello', 20) == -1", "index out of range: 20"),
        ("'hello mellow'.lastIndexOf('') == 12", None),
        ("'hello mellow'.lastIndexOf('ello', 6) == 1", None),
        ("'hello mellow'.lastIndexOf('ello', -1) == -1", "index out of range: -1"),
        ("'hello'.charAt(4) == 'o' && 'hello'.charAt(5) == ''", None),
        ("'hello'.charAt(-1) == ''", "index out of range: -1"),
        ("'hello hello'.replace('he', 'we', 0) == 'hello hello'", None),
        ("'hello hello hello'.split(' ', 0) == []", None),
        ("'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']", None),
        ("'tacocat'.substring(4) == 'cat' && 'tacocat'.substring(0, 4) == 'taco'", None),
        ("'tacocat'.substring(2, 1) == ''", "invalid substring range. start: 2, end: 1"),
        ("'  \\ttrim\\n    '.trim() == 'trim'", None),
        ("'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'", None),
        ("'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'", None),
        ("['hello', 'mellow'].join() == 'hellomellow' && [].join('/') == ''", None),
        (
            "strings.quote('single-quote with \"double quote\"') == "
            '\'"single-quote with \\\\"double quote\\\\""\'',
            None,
        ),
    ],
)
def test_ext_strings_as_cel_go_documents(expression: str, error: str | None) -> None:
    activation = device_activation(DRIVER, H100)
    assert isinstance(activation, dict)
    found = compile_selector(expression).matches(activation)
    if error is None:
        assert found == Match(True)
    else:
        assert found.error == f"CEL runtime error: {error}"
