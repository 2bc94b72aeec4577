"""Every file glensidec writes goes through here: whole or not at all, and never over
something the user did not ask us to write.

Two kinds of output:

* a single file (`write_file`): written to a hidden temporary sibling, then renamed over
  the target. The target may be new or an existing regular file the user can write; a
  directory, a device or a FIFO is refused.
* an output directory (`write_directory`, for `compile -o` and `import -o`): allowed only
  if it is new, empty, or holds nothing but this tool's own earlier output, which a
  manifest (MANIFEST) in it lists by name and content hash. Anything else is refused;
  with `force`, only the files the manifest lists (and the ones we write) are replaced
  and everything else in the directory is left alone. `.`, `''`, the working directory
  and its ancestors are never accepted.

Failures are GlensideErrors naming the path (one line, no traceback). An interruption
(SIGINT, or SIGTERM once `raise_on_sigterm` is installed) removes the staging files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType

from glensidec.errors import GlensideError

MANIFEST = "glensidec-manifest.json"


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every cleanup handler runs."""


def raise_on_sigterm() -> None:
    """Turn SIGTERM into a Terminated exception (the CLI installs this)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def interrupts_held_while_loading() -> Iterator[None]:
    """Note Ctrl-C while the CLI's modules load, and end then as any interrupted command
    ends ("interrupted", exit 130), not with an import's traceback.

    Python's own handler raises KeyboardInterrupt wherever the signal lands; during an
    import that is a traceback, or inside one of importlib's weakref callbacks, where it is
    printed and dropped and the command runs on. Only a default SIGINT in the main thread
    is held: an ignored one (a background job) and other handlers are left alone.
    """
    noted: list[int] = []
    hold = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if hold:
        signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        if hold:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _file_mode() -> int:
    """The mode a plain `open(path, "w")` would give a new file (0666 less the umask)."""
    return 0o666 & ~_umask()


def _make_parent(path: Path, given: str | Path | None = None) -> None:
    """Create `path`'s missing parents; an error names `given`, the path as the user wrote
    it (`path` may be resolved: /proc/self/x is /proc/1234/x)."""
    shown = Path(path if given is None else given)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GlensideError(f"cannot write {shown}: {shown.parent} is not a directory"
                            ) from None
    except OSError as error:
        raise GlensideError(f"cannot write {shown}: cannot create {shown.parent}: "
                            f"{_reason(error)}") from None


def check_writable_file(path: Path) -> None:
    """Refuse a target that is not a new or existing, writable regular file."""
    if str(path) in ("", "."):
        raise GlensideError(f"'{path}' is not a file name")
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    except OSError as error:
        raise GlensideError(f"cannot write {path}: {_reason(error)}") from None
    if stat.S_ISDIR(info.st_mode):
        raise GlensideError(f"cannot write {path}: it is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise GlensideError(f"cannot write {path}: it is not a regular file")
    if not os.access(path, os.W_OK):
        raise GlensideError(f"cannot write {path}: permission denied")


def check_can_create(path: Path) -> None:
    """Refuse `path` by its own name when its directory cannot be made or written in: a
    command that writes siblings of it first (quantize's PATH.json, transform's OUT.npz)
    would otherwise name the sibling, a file the user never gave. Creates missing parent
    directories (call it once the files' contents are ready)."""
    _make_parent(path)
    try:  # a file made and removed: what writing one needs (root passes access checks)
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial",
                                        dir=path.parent)
    except OSError as error:
        raise GlensideError(f"cannot write {path}: {_reason(error)}") from None
    os.close(handle)
    os.unlink(name)


def write_file(path: str | Path, content: bytes | str) -> None:
    """Write `content` to `path` atomically (a temporary sibling renamed over it).

    Creates missing parent directories. An existing file keeps its permission bits.
    """
    path = Path(path)
    data = content.encode() if isinstance(content, str) else content
    check_writable_file(path)
    _make_parent(path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else _file_mode()
    temporary: Path | None = None
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial",
                                        dir=path.parent)
        temporary = Path(name)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
        temporary = None
    except OSError as error:
        raise GlensideError(f"cannot write {path}: {_reason(error)}") from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_text(files: dict[str, bytes], products: Iterable[str]) -> bytes:
    manifest = {"written_by": "glensidec",
                "files": {name: _digest(data) for name, data in sorted(files.items())},
                "products": sorted(products)}
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


def _read_manifest(outdir: Path) -> tuple[dict[str, str], set[str]] | None:
    """The files (name -> sha256) and build products an earlier run recorded, if any."""
    try:
        raw = json.loads((outdir / MANIFEST).read_text(encoding="utf-8"))
        files = {str(name): str(digest) for name, digest in raw["files"].items()}
        return files, {str(name) for name in raw.get("products", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _is_working_directory_or_above(path: Path) -> bool:
    here = Path.cwd().resolve()
    return path == here or path in here.parents


def _file_digest(path: Path) -> str | None:
    try:
        return _digest(path.read_bytes()) if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def check_output_directory(outdir: str | Path, names: Iterable[str] = (),
                           force: bool = False) -> None:
    """Refuse an OUTDIR we may not write (see the module docstring) before any work is done.

    `names` are the files about to be written (known early for import; compile checks again
    with the real list when it writes).
    """
    text = str(outdir)
    if text in ("", "."):
        raise GlensideError(f"-o '{text}': give a new or empty directory for the output, "
                            "not the working directory")
    path = Path(outdir).resolve()
    if _is_working_directory_or_above(path):
        raise GlensideError(f"-o {outdir}: is the working directory or one above it; "
                            "give a new or empty directory for the output")
    if not path.exists():
        if Path(outdir).is_symlink():
            raise GlensideError(f"-o {outdir}: is a dangling symbolic link")
        return
    if not path.is_dir():
        raise GlensideError(f"-o {outdir}: exists and is not a directory")
    try:
        present = sorted(entry.name for entry in path.iterdir())
    except OSError as error:
        raise GlensideError(f"cannot read {outdir}: {_reason(error)}") from None
    if not present:
        return
    recorded = _read_manifest(path)
    if recorded is None:
        if force:
            clashes = [n for n in names if n in present]
            if clashes:
                raise GlensideError(f"-o {outdir}: {clashes[0]} was not written by glensidec; "
                                    "not replacing it even with --force")
            return
        raise GlensideError(f"-o {outdir}: is not empty and was not written by glensidec "
                            f"(holds {present[0]}); give a new or empty directory")
    files, products = recorded
    ours = set(files) | products | {MANIFEST}
    foreign = [name for name in present if name not in ours]
    changed = [name for name, digest in sorted(files.items())
               if (path / name).exists() and _file_digest(path / name) != digest]
    if force:
        clashes = [n for n in names if n in foreign]
        if clashes:
            raise GlensideError(f"-o {outdir}: {clashes[0]} was not written by glensidec; "
                                "not replacing it even with --force")
        return
    if foreign:
        raise GlensideError(f"-o {outdir}: holds {foreign[0]}, which glensidec did not write; "
                            "move it away or pass --force (replaces only glensidec's files)")
    if changed:
        raise GlensideError(f"-o {outdir}: {changed[0]} changed since glensidec wrote it; "
                            "pass --force to replace it")


def write_directory(outdir: str | Path, files: dict[str, bytes], *, force: bool = False,
                    products: Iterable[str] = ()) -> None:
    """Write `files` (name -> bytes) as the directory `outdir`, with a manifest.

    `products` names what later builds in the directory create (make's outputs, logs):
    they count as ours, so a rebuilt directory can be compiled into again.
    """
    check_output_directory(outdir, files, force)
    path = Path(outdir).resolve()
    content = {**files, MANIFEST: _manifest_text(files, products)}
    if force and path.is_dir() and any(path.iterdir()):
        _replace_own_files(path, content)
        return
    _make_parent(path, outdir)
    try:
        _swap_in(path, content)
    except OSError as error:
        raise GlensideError(f"cannot write {outdir}: {_reason(error)}") from None


def _swap_in(outdir: Path, content: dict[str, bytes]) -> None:
    """Fill a hidden sibling, then rename it over `outdir` (new, empty or all ours)."""
    staging: Path | None = None
    retired: Path | None = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", suffix=".partial",
                                        dir=outdir.parent))
        for name, data in sorted(content.items()):
            (staging / name).write_bytes(data)
        os.chmod(staging, 0o777 & ~_umask())
        if outdir.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", suffix=".old",
                                            dir=outdir.parent))
            os.replace(outdir, retired / outdir.name)
        os.replace(staging, outdir)
        staging = None
    except BaseException:
        if retired is not None and (retired / outdir.name).exists() and not outdir.exists():
            os.replace(retired / outdir.name, outdir)
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _replace_own_files(outdir: Path, content: dict[str, bytes]) -> None:
    """--force into a directory holding other files: replace ours one by one (each whole),
    remove ours that this run no longer writes, leave everything else alone. The manifest
    goes last, so an interrupted run still leaves a manifest covering every file of ours."""
    recorded = _read_manifest(outdir)
    earlier = set(recorded[0]) if recorded else set()
    for name in sorted(set(content) - {MANIFEST}):
        write_file(outdir / name, content[name])
    for name in sorted(earlier - set(content)):
        (outdir / name).unlink(missing_ok=True)
    write_file(outdir / MANIFEST, content[MANIFEST])


def file_digests(files: dict[str, bytes]) -> dict[str, str]:
    """name -> sha256, for a record file that later runs check with `check_sibling_files`."""
    return {name: _digest(data) for name, data in sorted(files.items())}


def check_sibling_files(paths: Iterable[Path], record: Path, force: bool = False) -> None:
    """Refuse to replace existing files among `paths` that an earlier run did not write.

    `record` is a JSON file an earlier run wrote beside them; its "files" maps each of that
    run's files (by name) to its sha256. A file counts as ours only if it still has that
    content; `force` replaces the files anyway (the user named them).
    """
    for path in paths:
        check_writable_file(path)
    if force:
        return
    try:
        raw = json.loads(record.read_text(encoding="utf-8"))
        recorded = {str(k): str(v) for k, v in raw["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        recorded = {}
    for path in paths:
        if path == record or not path.exists():
            continue
        if recorded.get(path.name) != _file_digest(path):
            raise GlensideError(f"{path} exists and was not written by an earlier run of "
                                "this command (or was changed since); pass --force to "
                                "replace it")
    if record.exists() and not recorded:
        raise GlensideError(f"{record} exists and was not written by glensidec; pass --force "
                            "to replace it")


def update_own_file(outdir: Path, name: str, content: bytes) -> bool:
    """Rewrite `name`, a file glensidec wrote into `outdir` (its manifest lists it), and
    record the new content in the manifest, so the directory stays ours (`make sim` adds a
    section to report.html this way). A file the user changed or that the manifest does not
    list is left alone: returns False."""
    manifest_path = outdir / MANIFEST
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = raw["files"]
        recorded = files[name]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if _file_digest(outdir / name) != recorded:
        return False
    write_file(outdir / name, content)
    files[name] = _digest(content)
    write_file(manifest_path, (json.dumps(raw, indent=1, sort_keys=True) + "\n").encode())
    return True
