"""Progress bars for long work (whole-network co-simulation, compiling many layers).

Shown on stderr only when a person is watching: stderr is a terminal and not in CI (the
`CI` environment variable). Piped, redirected or in CI, nothing is printed.
`GLENSIDEC_PROGRESS=1` forces the bars on and `=0` off, whatever the terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

Item = TypeVar("Item")

FORCE = "GLENSIDEC_PROGRESS"


def shown() -> bool:
    """Whether progress bars are drawn (see the module docstring)."""
    forced = os.environ.get(FORCE)
    if forced in ("0", "1"):
        return forced == "1"
    if os.environ.get("CI"):
        return False
    return sys.stderr.isatty()


def bar(total: int, description: str, unit: str = "it") -> Any:
    """A tqdm bar on stderr, disabled unless `shown()`; close it (or use `with`)."""
    return tqdm(total=total, desc=description, unit=unit, file=sys.stderr,
                disable=not shown(), leave=False, dynamic_ncols=True)


def iterate(items: Iterable[Item], total: int, description: str,
            unit: str = "it") -> Iterator[Item]:
    """`items`, advancing a bar as each one is taken. Each item is long work (a layer), so
    the bar is redrawn after every one instead of at tqdm's rate limit, which would skip
    the last counts of a short run."""
    with bar(total, description, unit) as progress:
        for item in items:
            yield item
            progress.update(1)
            progress.refresh()
