"""The package's sub-packages are the pipeline's stages, and imports point one way down it.

A stage may import only from stages listed before it (and from the shared modules at the
package's top: errors, resources, outputs, progress, collector). A new import against the flow, or a
cycle, fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import glensidec

PACKAGE = Path(glensidec.__file__).resolve().parent
# Down the pipeline, base first. `hardware` is the target description that rewriting,
# extraction, code generation and simulation all read; it depends on nothing of ours.
# `nas` transforms whole programs and scores them by compiling them, so it comes last.
# `pipeline` (a module) strings parse … emit together, so it follows `backend`.
STAGES = ["lang", "frontends", "hardware", "opt", "backend", "pipeline", "cosim", "nas"]
MODULE_STAGES = {"pipeline"}
SHARED = {"errors", "resources", "outputs", "progress", "collector"}


def stage_of(module: str) -> str:
    """The stage a dotted `glensidec.…` module belongs to: a sub-package, a shared module or cli."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(path: Path) -> set[str]:
    """Every `glensidec…` module that one source file imports, at any depth in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("glensidec"):
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("glensidec"))
    return found


def test_no_relative_imports() -> None:
    """Absolute imports say which stage a name comes from; relative ones hide it."""
    relative = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                if any(isinstance(node, ast.ImportFrom) and node.level > 0
                       for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))]
    assert relative == []


def test_every_stage_imports_only_earlier_stages() -> None:
    against_the_flow = []
    for stage in STAGES:
        allowed = set(STAGES[: STAGES.index(stage) + 1]) | SHARED
        paths = ([PACKAGE / f"{stage}.py"] if stage in MODULE_STAGES
                 else sorted((PACKAGE / stage).rglob("*.py")))
        for path in paths:
            for module in imported_modules(path):
                target = stage_of(module)
                if target and target in STAGES + ["cli"] and target not in allowed:
                    against_the_flow.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert against_the_flow == []


def test_shared_modules_import_no_stage() -> None:
    for name in sorted(SHARED):
        modules = imported_modules(PACKAGE / f"{name}.py")
        assert {stage_of(m) for m in modules} <= SHARED, (name, modules)


def test_every_module_lives_in_a_stage() -> None:
    top_level = {path.stem for path in PACKAGE.glob("*.py")}
    assert top_level == SHARED | MODULE_STAGES | {"__init__", "__main__", "cli"}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(STAGES) - MODULE_STAGES
