"""Every test in sim/ builds or runs the RTL: all carry the `rtl` and `slow` markers."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "sim":
            item.add_marker(pytest.mark.rtl)
            item.add_marker(pytest.mark.slow)
