"""CycleState: typed keys, a clear message for a missing key, clone semantics."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpusched.framework import CycleState, StateKey, StateNotFoundError

REQUEST = StateKey[int]("GPUFit")
GANG = StateKey["Gang"]("Coscheduling")


@dataclass
class Gang:
    members: list[str] = field(default_factory=list)

    def clone(self) -> Gang:
        return Gang(list(self.members))


def test_write_read_get_delete() -> None:
    state = CycleState()
    state.write(REQUEST, 4)
    assert state.read(REQUEST) == 4
    assert REQUEST in state
    assert state.get(GANG) is None
    state.delete(REQUEST)
    state.delete(REQUEST)  # idempotent
    assert REQUEST not in state


def test_keys_compare_by_identity() -> None:
    state = CycleState()
    state.write(StateKey[int]("same"), 1)
    assert StateKey[int]("same") not in state


def test_missing_key_says_what_to_check() -> None:
    state = CycleState()
    state.write(REQUEST, 1)
    with pytest.raises(KeyError) as info:
        state.read(GANG)
    assert isinstance(info.value, StateNotFoundError)
    message = str(info.value)
    assert message.startswith("CycleState has no 'Coscheduling'")
    assert "PreFilter" in message
    assert "keys written: 'GPUFit'" in message


def test_clone_copies_state_data_and_shares_the_rest() -> None:
    shared = (1, 2)
    pair = StateKey[tuple[int, int]]("t")
    state = CycleState(record_plugin_metrics=True)
    state.write(GANG, Gang(["a"]))
    state.write(pair, shared)
    state.skip_filter_plugins.add("X")
    copy = state.clone()
    copy.read(GANG).members.append("b")
    copy.skip_filter_plugins.add("Y")
    assert state.read(GANG).members == ["a"]
    assert copy.read(GANG).members == ["a", "b"]
    assert copy.read(pair) is shared
    assert state.skip_filter_plugins == {"X"}
    assert copy.record_plugin_metrics
    assert repr(state) == "<CycleState keys=[Coscheduling, t]>"
