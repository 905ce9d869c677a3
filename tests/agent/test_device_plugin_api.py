"""The generated gRPC modules are what grpcio-tools makes of the vendored api.proto."""

from __future__ import annotations

import ast
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched.agent.deviceplugin import api_pb2

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("gpusched/agent/deviceplugin")
GENERATED = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi", "api_pb2_grpc.pyi")
MADE_BY = {"grpcio-tools": "1.85.1", "mypy-protobuf": "5.1.0"}
"""The versions that generated the checked-in modules (pinned in pyproject's test extra)."""


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _regenerate(out: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed")
    (out / PACKAGE).mkdir(parents=True)
    shutil.copy(ROOT / PACKAGE / "api.proto", out / PACKAGE / "api.proto")
    plugins = Path(sys.executable).parent  # protoc-gen-mypy and protoc-gen-mypy_grpc
    args = ["-I.", "--python_out=.", "--grpc_python_out=."]
    if (plugins / "protoc-gen-mypy").exists():
        args += [
            f"--plugin=protoc-gen-mypy={plugins / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={plugins / 'protoc-gen-mypy_grpc'}",
            "--mypy_out=.",
            "--mypy_grpc_out=.",
        ]
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args, str(PACKAGE / "api.proto")],
        cwd=out,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_descriptor_is_the_vendored_proto(tmp_path: Path) -> None:
    """Whatever the tool versions: the same messages, fields and services."""
    _regenerate(tmp_path)
    fresh = (tmp_path / PACKAGE / "api_pb2.py").read_text()
    start = fresh.index("AddSerializedFile(") + len("AddSerializedFile(")
    serialized = ast.literal_eval(fresh[start : fresh.index(")\n", start)])
    assert serialized == api_pb2.DESCRIPTOR.serialized_pb


@pytest.mark.parametrize("name", GENERATED)
def test_generated_module_is_up_to_date(tmp_path: Path, name: str) -> None:
    """Byte for byte, with the pinned tools (the test extra installs them)."""
    installed = {tool: _version(tool) for tool in MADE_BY}
    if installed != MADE_BY:
        pytest.skip(f"generated with {MADE_BY}, installed {installed}")
    _regenerate(tmp_path)
    fresh = (tmp_path / PACKAGE / name).read_text()
    assert fresh == (ROOT / PACKAGE / name).read_text(), (
        f"{PACKAGE / name} is stale: regenerate it (command in {PACKAGE / 'api.proto'})"
    )


def test_services_speak_the_kubelets_method_names() -> None:
    services = {
        s.name: [m.name for m in s.methods] for s in api_pb2.DESCRIPTOR.services_by_name.values()
    }
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert services == {
        "Registration": ["Register"],
        "DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
    }
