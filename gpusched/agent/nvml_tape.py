"""NVML tapes: every answer a node's NVML gave, recorded, and replayed without a GPU.

``gpusched agent --record-nvml FILE`` runs discovery and one telemetry reading through
:class:`RecordingNVML`, a proxy of :mod:`pynvml` that keeps each ``nvml*`` call's arguments
and its result (or its ``NVMLError`` code), and saves them as a JSON *tape*.
:class:`ReplayNVML` answers the same calls from a tape, so the agent's code runs on a
laptop or in CI exactly as it ran on the machine that was recorded: the tests keep tapes of
real hardware under ``tests/data/nvml/``, and a user's tape attached to a bug report
reproduces what the agent saw on their node (``gpusched agent --nvml-tape FILE``).

Encoding: NVML handles (ctypes pointers: a device, a MIG device, a GPU instance, an event
set) become ``{"handle": "<type>@<address>"}``, stable within one recording; structures become
``{"struct": {field: value}}``; ``bytes`` become ``str``. A replayed handle is an opaque
:class:`Handle`; a replayed structure is a :class:`types.SimpleNamespace` with the same
fields. A call recorded more than once with the same arguments (telemetry read twice)
replays its answers in order and then repeats the last. A call the tape does not hold raises
:class:`TapeMiss`, naming it: the code under test asked NVML something the recorded machine
was never asked, so record again.

Constants and error classes come from :mod:`pynvml` itself, which imports without a driver.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

import pynvml

__all__ = ["TAPE_KIND", "Handle", "RecordingNVML", "ReplayNVML", "TapeMiss"]

TAPE_KIND: Final = "gpusched.io/nvml-tape"
TAPE_VERSION: Final = 1


class TapeMiss(LookupError):
    """A replayed call that the tape does not hold."""


@dataclass(frozen=True, slots=True)
class Handle:
    """A replayed NVML handle: only its recorded name."""

    key: str


_HANDLE_FUNCTIONS: Final = frozenset(
    {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlEventSetCreate",
    }
)
"""The functions whose result is a handle (ctypes gives a pointer; a fake its own object)."""


def _identity(value: Any) -> Any:
    """What makes two handle objects the same handle: a pointer's address, or the object."""
    if isinstance(value, ctypes._Pointer):
        return ("pointer", ctypes.cast(value, ctypes.c_void_p).value or 0)
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return value


def _encode(value: Any, handles: dict[Any, str]) -> Any:
    if isinstance(value, Handle):
        return {"handle": value.key}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple | ctypes.Array):
        return [_encode(v, handles) for v in value]
    name = handles.get(_identity(value))
    if name is not None:
        return {"handle": name}
    if isinstance(value, ctypes._Pointer):  # a handle inside a structure, seen first there
        name = handles[_identity(value)] = f"h{len(handles)}"
        return {"handle": name}
    if isinstance(value, ctypes.Structure | ctypes.Union):
        fields = [f[0] for f in value._fields_]
    elif dataclasses.is_dataclass(value):
        fields = [f.name for f in dataclasses.fields(value)]
    elif isinstance(value, SimpleNamespace):
        fields = list(vars(value))
    else:
        return {"unencodable": repr(value)}
    return {"struct": {f: _encode(getattr(value, f), handles) for f in fields}}


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "handle" in value:
            return Handle(str(value["handle"]))
        if "struct" in value:
            return SimpleNamespace(**{k: _decode(v) for k, v in value["struct"].items()})
        return {k: _decode(v) for k, v in value.items()}
    return value


def _key(name: str, args: Any) -> str:
    return json.dumps([name, args], sort_keys=True)


@dataclass
class RecordingNVML:
    """:mod:`pynvml` (or an object with its functions), with every ``nvml*`` call recorded."""

    nvml: Any = pynvml
    calls: list[dict[str, Any]] = field(default_factory=list)
    _handles: dict[Any, str] = field(default_factory=dict, repr=False)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.nvml, name)
        if not (name.startswith("nvml") and callable(target)):
            return target  # constants, NVMLError classes

        def call(*args: Any) -> Any:
            entry: dict[str, Any] = {"call": name, "args": _encode(args, self._handles)}
            self.calls.append(entry)
            try:
                result = target(*args)
            except pynvml.NVMLError as exc:
                entry["error"] = int(exc.value)
                raise
            if name in _HANDLE_FUNCTIONS and _identity(result) not in self._handles:
                self._handles[_identity(result)] = f"h{len(self._handles)}"
            entry["result"] = _encode(result, self._handles)
            return result

        return call

    def tape(self, node_name: str) -> dict[str, Any]:
        """The recording as a JSON-ready tape."""
        return {
            "kind": TAPE_KIND,
            "version": TAPE_VERSION,
            "nodeName": node_name,
            "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "host": {"machine": platform.machine(), "python": platform.python_version()},
            "calls": self.calls,
        }

    def save(self, path: Path, node_name: str) -> None:
        path.write_text(json.dumps(self.tape(node_name), indent=1) + "\n")


class ReplayNVML:
    """NVML's functions answered from a tape (module docstring)."""

    def __init__(self, tape: dict[str, Any]) -> None:
        if tape.get("kind") != TAPE_KIND or tape.get("version") != TAPE_VERSION:
            raise ValueError(
                f"not an NVML tape of version {TAPE_VERSION} (kind {TAPE_KIND!r}); record one "
                "with `gpusched agent --record-nvml FILE`"
            )
        self.node_name: str = str(tape.get("nodeName", ""))
        self._answers: dict[str, list[dict[str, Any]]] = {}
        self._served: dict[str, int] = {}
        for entry in tape["calls"]:
            key = _key(entry["call"], entry["args"])
            self._answers.setdefault(key, []).append(entry)

    @classmethod
    def load(cls, path: Path) -> ReplayNVML:
        """The tape at ``path``; ``ValueError`` saying what is wrong with the file."""
        try:
            tape = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the NVML tape {path}: {exc}") from None
        if not isinstance(tape, dict) or not isinstance(tape.get("calls"), list):
            raise ValueError(f"{path} is not an NVML tape (no 'calls' list)")
        return cls(tape)

    def __getattr__(self, name: str) -> Any:
        target = getattr(pynvml, name)
        if not (name.startswith("nvml") and callable(target)):
            return target
        return self._replayer(name)

    def _replayer(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            encoded = _encode(args, {})
            key = _key(name, encoded)
            answers = self._answers.get(key)
            if not answers:
                raise TapeMiss(f"the NVML tape holds no call {name}({json.dumps(encoded)[1:-1]})")
            served = self._served.get(key, 0)
            self._served[key] = served + 1
            entry = answers[min(served, len(answers) - 1)]
            if "error" in entry:
                raise pynvml.NVMLError(int(entry["error"]))
            return _decode(entry.get("result"))

        return call
