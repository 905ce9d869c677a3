"""Imported first by the preemption tests, which build pods, nodes and caches with the plugin
tests' builders (``tests/plugins/builders.py``) and run the scheduler with
``tests/scheduler/scheduler_bed.py``: puts both folders on ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in ("plugins", "scheduler"):
    path = str(Path(__file__).resolve().parents[1] / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
