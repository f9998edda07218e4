"""docs/operations.md documents every broker setting with its real default
(issue: "every setting with its default"): this keeps the page true."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from brokergroup_broker.core.config import BrokerConfig, camel

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_broker_setting_is_documented_with_its_default() -> None:
    text = OPERATIONS.read_text()
    for spec in dataclasses.fields(BrokerConfig):
        default = spec.default
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        assert f"| `{camel(spec.name)}` | `{shown}` |" in text, camel(spec.name)
