"""egglog's compiled core, `egglog.bindings`, loaded without egglog's Python front end.

`from egglog import bindings` first runs `egglog/__init__.py`, which imports egglog's
high-level API — its builtins, conversions and `black` (for pretty-printing) — about half a
second of CPU in every `glensidec compile`, a quarter of ResNet-18's compile budget, for
nothing glensidec uses. The extension module does not need the front end: it is loaded here
from its file and registered as `egglog.bindings`, so a later `import egglog` (a notebook's)
reuses this one. Where the file cannot be found, the ordinary import is the fallback.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

NAME = "egglog.bindings"


def _load() -> ModuleType:
    if NAME in sys.modules:
        return sys.modules[NAME]
    package = importlib.util.find_spec("egglog")  # finds the package without running it
    for location in (package.submodule_search_locations or []) if package else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(location) / f"bindings{suffix}"
            if not path.is_file():
                continue
            loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
            spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
            if spec is None:
                continue
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            sys.modules[NAME] = module
            return module
    import egglog.bindings as fallback
    return fallback


if TYPE_CHECKING:
    from egglog import bindings
else:
    bindings = _load()

__all__ = ["bindings"]
