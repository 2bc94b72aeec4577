"""Where the non-Python parts of glensidec live: grammar/, templates/ and rtl/.

In the repository they sit at the top level; in a built wheel they are copied inside the
package (see `pyproject.toml`). Look inside the package first so an installed copy never
reads a stray checkout.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The directory `name` (grammar, templates or rtl), installed or from the source tree."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    missing = PACKAGE_DIR / name
    raise FileNotFoundError(f"glensidec resource directory '{name}' is missing: {missing}")
