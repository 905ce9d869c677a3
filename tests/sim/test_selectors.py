"""Label and field selectors against the behaviour of apimachinery's labels/fields packages.

Expected messages are the ones kube-apiserver returns in a 400 BadRequest Status for a bad
``labelSelector``/``fieldSelector`` query parameter (labels/selector.go, fields/selector.go,
util/validation v1.32 wording).
"""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.sim import selectors
from gpusched.sim.selectors import (
    FieldRequirement,
    FieldSelector,
    LabelRequirement,
    LabelSelector,
    SelectorError,
    default_field_label_conversion,
    escape_field_value,
    field_label_conversion,
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)

NAME_REGEX_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_REGEX_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
BINARY_OPS = "in, notin, =, ==, !=, gt, lt"


def test_all_is_complete() -> None:
    assert sorted(selectors.__all__) == [
        "FieldRequirement",
        "FieldSelector",
        "LabelRequirement",
        "LabelSelector",
        "SelectorError",
        "default_field_label_conversion",
        "escape_field_value",
        "field_label_conversion",
        "label_selector_from_object",
        "parse_field_selector",
        "parse_label_selector",
    ]
    assert all(hasattr(selectors, name) for name in selectors.__all__)


# ------------------------------------------------------------------------------ label: parsing


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   \t\n", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("a = b", "a=b"),
        ("a", "a"),
        ("!a", "!a"),
        (" ! a ", "!a"),
        ("a>5", "a>5"),
        ("a<5", "a<5"),
        ("a=", "a="),
        ("a=,b", "a=,b"),
        ("x in (b,a)", "x in (a,b)"),
        ("x in(b , a,b)", "x in (a,b)"),
        ("x notin (a)", "x notin (a)"),
        ("x in ()", "x in ()"),
        ("x in (,)", "x in ()"),
        ("x in (a,)", "x in (,a)"),
        ("x in (,a)", "x in (,a)"),
        ("x in (a,,b)", "x in (,a,b)"),
        ("in in (in, notin)", "in in (in,notin)"),
        ("notin", "notin"),
        ("a=in", "a=in"),
        ("z,y=1,!x,w in (q)", "w in (q),!x,y=1,z"),
        ("example.com/a-b_c.d=V-1_2.3", "example.com/a-b_c.d=V-1_2.3"),
        ("a=b\x00", "a=b"),
        ("\x00a=b", ""),
    ],
)
def test_parse_label_selector_valid(text: str, canonical: str) -> None:
    assert str(parse_label_selector(text)) == canonical


def test_parse_keeps_requirement_structure() -> None:
    sel = parse_label_selector("b in (y, x, y), a")
    assert sel.requirements == (
        LabelRequirement("a", "exists"),
        LabelRequirement("b", "in", ("x", "y")),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a=b,", "found '', expected: identifier after ','"),
        ("a=b,,c", "found ',', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a=b\x00c", "found 'c', expected: ',' or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("a b", f"unable to parse requirement: found 'b', expected: {BINARY_OPS}"),
        ("a!b", f"unable to parse requirement: found '!', expected: {BINARY_OPS}"),
        ("a (", f"unable to parse requirement: found '(', expected: {BINARY_OPS}"),
        ("a\x00b", f"unable to parse requirement: found 'b', expected: {BINARY_OPS}"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in", "unable to parse requirement: found '' expected: '('"),
        ("a in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a in (b=)", "unable to parse requirement: found '=', expected: ',' or ')'"),
        ("a in (,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("a=>b", "unable to parse requirement: found '>', expected: identifier"),
        ("a<=b", "unable to parse requirement: found '=', expected: identifier"),
        (
            "a>x",
            'unable to parse requirement: values[0]: Invalid value: "x": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a>",
            'unable to parse requirement: values[0]: Invalid value: "": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a>99999999999999999999",
            'unable to parse requirement: values[0]: Invalid value: "99999999999999999999": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a>-5",
            f'unable to parse requirement: values[0][a]: Invalid value: "-5": {VALUE_REGEX_MSG}',
        ),
        (
            "a>x@",
            "unable to parse requirement: [values[0]: Invalid value: \"x@\": for 'Gt', 'Lt' "
            "operators, the value must be an integer, "
            f'values[0][a]: Invalid value: "x@": {VALUE_REGEX_MSG}]',
        ),
        (
            "a in (b@, a@)",
            f'unable to parse requirement: [values[0][a]: Invalid value: "a@": {VALUE_REGEX_MSG}, '
            f'values[1][a]: Invalid value: "b@": {VALUE_REGEX_MSG}]',
        ),
        (
            "a=" + "v" * 64,
            f'unable to parse requirement: values[0][a]: Invalid value: "{"v" * 64}": '
            "must be no more than 63 characters",
        ),
        (
            "a=-x-",
            f'unable to parse requirement: values[0][a]: Invalid value: "-x-": {VALUE_REGEX_MSG}',
        ),
        (
            "a@=b",
            f'unable to parse requirement: <nil>: Invalid value: "a@": name part {NAME_REGEX_MSG}',
        ),
        (
            "!a@",
            f'unable to parse requirement: <nil>: Invalid value: "a@": name part {NAME_REGEX_MSG}',
        ),
        (
            "k" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"k" * 64}": '
            "name part must be no more than 63 characters",
        ),
        (
            "/a",
            'unable to parse requirement: <nil>: Invalid value: "/a": '
            "prefix part must be non-empty",
        ),
        (
            "a/",
            'unable to parse requirement: <nil>: Invalid value: "a/": name part must be non-empty; '
            f"name part {NAME_REGEX_MSG}",
        ),
        (
            "Foo.com/bar",
            f'unable to parse requirement: <nil>: Invalid value: "Foo.com/bar": {SUBDOMAIN_MSG}',
        ),
        (
            "a/b/c",
            'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name '
            f"{NAME_REGEX_MSG} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')",
        ),
        (
            "k\u00e9=v",
            'unable to parse requirement: <nil>: Invalid value: "k\u00e9": name part '
            f"{NAME_REGEX_MSG}",
        ),
        (
            "k\x01=v",
            'unable to parse requirement: <nil>: Invalid value: "k\\x01": '
            f"name part {NAME_REGEX_MSG}",
        ),
    ],
)
def test_parse_label_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(text)
    assert str(info.value) == message


def test_selector_error_is_value_error() -> None:
    with pytest.raises(ValueError, match=re.escape("found '='")):
        parse_label_selector("=")


# ----------------------------------------------------------------------------- label: matching


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("", {"a": "b"}, True),
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a==b", {"a": "b"}, True),
        ("a=", {"a": ""}, True),
        ("a=", {}, False),
        ("a!=b", {}, True),
        ("a!=b", {"a": "c"}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (x,y)", {"a": "y"}, True),
        ("a in (x,y)", {"a": "z"}, False),
        ("a in (x,y)", {}, False),
        ("a in ()", {"a": ""}, True),
        ("a notin (x,y)", {}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("a notin (x,y)", {"a": "z"}, True),
        ("a", {"a": ""}, True),
        ("a", {"b": "a"}, False),
        ("!a", {}, True),
        ("!a", {"a": "x"}, False),
        ("a>5", {"a": "6"}, True),
        ("a>5", {"a": "5"}, False),
        ("a>5", {"a": "+6"}, True),
        ("a>5", {"a": "x"}, False),
        ("a>5", {"a": "99999999999999999999"}, False),
        ("a>5", {}, False),
        ("a<5", {"a": "-3"}, True),
        ("a<5", {"a": "5"}, False),
        ("a<10,a>2", {"a": "7"}, True),
        ("a=b,c=d", {"a": "b", "c": "d"}, True),
        ("a=b,c=d", {"a": "b", "c": "x"}, False),
    ],
)
def test_label_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


def test_empty_and_nothing() -> None:
    assert parse_label_selector("").empty()
    assert not parse_label_selector("a").empty()
    nothing = LabelSelector.nothing()
    assert not nothing.empty()
    assert not nothing.matches({})
    assert str(nothing) == ""


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("a=b", "a", "b"),
        ("a==b", "a", "b"),
        ("a in (b)", "a", "b"),
        ("a in (b,c)", "a", None),
        ("a!=b", "a", None),
        ("a=b", "c", None),
        ("a", "a", None),
    ],
)
def test_label_requires_exact_match(text: str, key: str, expected: str | None) -> None:
    assert parse_label_selector(text).requires_exact_match(key) == expected


# --------------------------------------------------------------------- label: metav1 selectors


def test_label_selector_from_object_none_and_empty() -> None:
    assert not label_selector_from_object(None).matches({"a": "b"})
    assert label_selector_from_object({}).matches({"a": "b"})
    assert label_selector_from_object({"matchLabels": {}, "matchExpressions": []}).empty()


def test_label_selector_from_object_matches() -> None:
    sel = label_selector_from_object(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ],
        }
    )
    assert str(sel) == "app=web,env notin (prod),gpu,!legacy,tier in (a,b)"
    assert sel.matches({"app": "web", "tier": "b", "gpu": ""})
    assert not sel.matches({"app": "web", "tier": "b", "gpu": "", "legacy": "1"})
    assert not sel.matches({"app": "web", "tier": "b", "gpu": "", "env": "prod"})
    assert not sel.matches({"app": "web", "tier": "c", "gpu": ""})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: []string(nil): "
            "for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn"}]},
            "values: Invalid value: []string(nil): "
            "for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x", "y"]}]},
            'values: Invalid value: []string{"x", "y"}: '
            "values set must be empty for exists and does not exist",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a"}]},
            '"" is not a valid label selector operator',
        ),
        (
            {"matchLabels": {"a@": "b"}},
            f'key: Invalid value: "a@": name part {NAME_REGEX_MSG}',
        ),
        (
            {"matchLabels": {"a": "b@"}},
            f'values[0][a]: Invalid value: "b@": {VALUE_REGEX_MSG}',
        ),
    ],
)
def test_label_selector_from_object_errors(obj: dict[str, object], message: str) -> None:
    with pytest.raises(SelectorError) as info:
        label_selector_from_object(obj)
    assert str(info.value) == message


# --------------------------------------------------------------------------- label: properties

label_name = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)
label_prefix = st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}", fullmatch=True)
label_key = st.one_of(label_name, st.builds(lambda p, n: f"{p}/{n}", label_prefix, label_name))
label_value = st.one_of(st.just(""), label_name)
integer_value = st.integers(min_value=0, max_value=10**6).map(str)


@st.composite
def label_requirements(draw: st.DrawFn) -> LabelRequirement:
    op = draw(st.sampled_from(["in", "notin", "=", "==", "!=", "exists", "!", "gt", "lt"]))
    key = draw(label_key)
    if op in ("in", "notin"):
        values = tuple(sorted(set(draw(st.lists(label_value, min_size=1, max_size=4)))))
    elif op in ("gt", "lt"):
        values = (draw(integer_value),)
    elif op in ("exists", "!"):
        values = ()
    else:
        values = (draw(label_value),)
    return LabelRequirement(key, op, values)


def reference_match(req: LabelRequirement, labels: dict[str, str]) -> bool:
    """Requirement.Matches, written out independently of the compiled matcher."""
    present = req.key in labels
    value = labels.get(req.key, "")
    if req.operator in ("in", "=", "=="):
        return present and value in req.values
    if req.operator in ("notin", "!="):
        return not present or value not in req.values
    if req.operator == "exists":
        return present
    if req.operator == "!":
        return not present
    if not present or not re.fullmatch(r"[+-]?[0-9]+", value):
        return False
    number, bound = int(value), int(req.values[0])
    return number > bound if req.operator == "gt" else number < bound


@settings(max_examples=200, deadline=None)
@given(reqs=st.lists(label_requirements(), max_size=5))
def test_rendered_selectors_parse_back(reqs: list[LabelRequirement]) -> None:
    text = ",".join(str(r) for r in reqs)
    parsed = parse_label_selector(text)
    assert sorted(parsed.requirements, key=str) == sorted(reqs, key=str)
    assert str(parse_label_selector(str(parsed))) == str(parsed)


@settings(max_examples=200, deadline=None)
@given(
    reqs=st.lists(label_requirements(), max_size=4),
    labels=st.dictionaries(
        st.sampled_from(["a", "b", "x.io/c"]), st.one_of(label_value, integer_value), max_size=3
    ),
)
def test_matches_agrees_with_reference(
    reqs: list[LabelRequirement], labels: dict[str, str]
) -> None:
    reqs = [LabelRequirement(k, r.operator, r.values) for k, r in zip("abc", reqs, strict=False)]
    sel = LabelSelector(tuple(reqs))
    assert sel.matches(labels) == all(reference_match(r, labels) for r in reqs)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab=!(),<> \tinotx0-", max_size=20))
def test_parser_never_crashes(text: str) -> None:
    with contextlib.suppress(SelectorError):
        parse_label_selector(text)


# ------------------------------------------------------------------------------ field selectors


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("", ()),
        (",", ()),
        ("a=b", (FieldRequirement("a", "=", "b"),)),
        ("a==b", (FieldRequirement("a", "=", "b"),)),
        ("a!=b", (FieldRequirement("a", "!=", "b"),)),
        ("a=", (FieldRequirement("a", "=", ""),)),
        ("=b", (FieldRequirement("", "=", "b"),)),
        (" a = b ", (FieldRequirement(" a ", "=", " b "),)),
        (
            "spec.nodeName=n1,metadata.name!=p,,status.phase==Running",
            (
                FieldRequirement("metadata.name", "!=", "p"),
                FieldRequirement("spec.nodeName", "=", "n1"),
                FieldRequirement("status.phase", "=", "Running"),
            ),
        ),
        ("a=b\\,c", (FieldRequirement("a", "=", "b,c"),)),
        ("a=b\\=c", (FieldRequirement("a", "=", "b=c"),)),
        ("a=b\\\\", (FieldRequirement("a", "=", "b\\"),)),
        ("a!=\\=b", (FieldRequirement("a", "!=", "=b"),)),
        ("a==\\=b", (FieldRequirement("a", "=", "=b"),)),
        ("x.y!z=1", (FieldRequirement("x.y!z", "=", "1"),)),
    ],
)
def test_parse_field_selector_valid(text: str, requirements: tuple[FieldRequirement, ...]) -> None:
    assert parse_field_selector(text).requirements == requirements


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("a=b=c", "invalid field selector: unescaped character in value: 61"),
        ("a!==b", "invalid field selector: unescaped character in value: 61"),
        ("a\\=b=c", "invalid field selector: unescaped character in value: 61"),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
        ("a=b\\x", "invalid field selector: invalid escape sequence: \\x"),
        ("a=\\n", "invalid field selector: invalid escape sequence: \\n"),
    ],
)
def test_parse_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_field_selector(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "fields", "expected"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=", {}, True),
        ("a!=", {}, False),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a=b,c!=d", {"a": "b", "c": "e"}, True),
        ("a=b,c!=d", {"a": "b", "c": "d"}, False),
    ],
)
def test_field_selector_matches(text: str, fields: dict[str, str], expected: bool) -> None:
    assert parse_field_selector(text).matches(fields) is expected


def test_field_selector_introspection() -> None:
    sel = parse_field_selector("spec.nodeName=n1,metadata.name!=x,status.phase=Running")
    assert sel.fields() == {"spec.nodeName", "metadata.name", "status.phase"}
    assert sel.requires_exact_match("spec.nodeName") == "n1"
    assert sel.requires_exact_match("metadata.name") is None
    assert not sel.empty()
    assert FieldSelector().empty()
    assert str(parse_field_selector("b==x\\,y,a!=1")) == "a!=1,b=x\\,y"


def test_field_label_conversion() -> None:
    pods = field_label_conversion(
        ["metadata.name", "spec.nodeName"], renames={"spec.host": "spec.nodeName"}
    )
    sel = parse_field_selector("spec.host=n1,metadata.name!=p")
    assert sel.transform(pods).requirements == (
        FieldRequirement("metadata.name", "!=", "p"),
        FieldRequirement("spec.nodeName", "=", "n1"),
    )
    with pytest.raises(SelectorError, match=r"^field label not supported: spec\.foo$"):
        parse_field_selector("spec.zzz=1,spec.foo=2").transform(pods)


def test_default_field_label_conversion() -> None:
    sel = parse_field_selector("metadata.namespace=ns,metadata.name=n")
    assert sel.transform(default_field_label_conversion) == sel
    with pytest.raises(SelectorError) as info:
        parse_field_selector("spec.holderIdentity=x").transform(default_field_label_conversion)
    assert str(info.value) == (
        '"spec.holderIdentity" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )


def test_transform_drops_terms_mapped_to_empty() -> None:
    sel = parse_field_selector("a=1,b=2").transform(lambda f, v: ("", "") if f == "a" else (f, v))
    assert sel.requirements == (FieldRequirement("b", "=", "2"),)


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=12), name=st.from_regex(r"f[a-z.]{0,10}", fullmatch=True))
def test_escaped_field_values_round_trip(value: str, name: str) -> None:
    sel = parse_field_selector(f"{name}={escape_field_value(value)},zz!=1")
    assert sel.requires_exact_match(name) == value
    assert sel.matches({name: value})
    assert parse_field_selector(str(sel)) == sel
