"""The accelerator's cycle model in C (accel_model.c), built on first use and called via ctypes.

`commands.AccelModel` is the specification (checked against the RTL); it steps about 35 k
cycles a second, so pricing ResNet-50 (about 20 M cycles) would take ten minutes. The C
port steps the same registers tens of millions of times faster. It is compiled once per
source version with the system C compiler (``$CC``, else ``cc``/``gcc``) into the user's
cache directory; where no compiler works, `native_model()` returns None and callers use
the Python model, which gives the same numbers slowly. ``GLENSIDEC_ACCEL_MODEL=python``
forces that (the tests use it to compare the two).
"""

from __future__ import annotations

import ctypes
import hashlib
import operator
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from glensidec.hardware.accel import EpilogueConfig, ResidualConfig
    from glensidec.hardware.commands import (
        AccelConfig,
        AccelTiming,
        Command,
        FlatCompute,
        FlatLoad,
    )

SOURCE = Path(__file__).with_name("accel_model.c")

#: Columns of one packed command (gs_command in accel_model.c), in order.
FIELDS = ("op", "wait", "signal", "w_row", "a_row", "m_len", "add", "emit", "base", "length",
          "count1", "stride1", "count2", "stride2", "spad_row", "bounds", "y0", "y_step",
          "height", "x0", "x_step", "width", "pad_value", "wait_store", "residual",
          "signal_store", "a_count1", "a_stride1", "a_stride2", "epilogue",
          "acc_row")
_DMA_FIELDS = FIELDS[8:-8]
_WINDOW, _WINDOW_STRIDE = _DMA_FIELDS.index("y0"), _DMA_FIELDS.index("y_step")
_SUM = _DMA_FIELDS.index("height")  # a pooling store's: 1 for a sum pool
#: a pooling store's window lines and pixel step, where a load has x0, x_step and width
_WINDOW_COUNT1, _WINDOW_STRIDE2, _PIXEL_STEP = (_DMA_FIELDS.index(name)
                                                for name in ("x0", "x_step", "width"))
_dma_fields = operator.attrgetter(*_DMA_FIELDS)  # a DmaCommand's fields, in order
#: A LOAD's fence (commands.Load.fence) sits in the `emit` column, which loads do not use
#: otherwise: tables without fenced loads are unchanged.
FENCE = FIELDS.index("emit")
#: On-chip rows (docs/hardware.md) sit in columns a COMPUTE or a STORE does not use
#: otherwise, so tables without them are unchanged: a COMPUTE's or STORE's wait_rows in
#: `wait_store` (a LOAD's), its rows_ahead in `residual` (a CONFIG's), a STORE's to_spad in
#: `signal_store` (a LOAD's).
WAIT_ROWS, ROWS_AHEAD, TO_SPAD = (FIELDS.index(name)
                                  for name in ("wait_store", "residual", "signal_store"))
#: The `epilogue` column of a CONFIG row: a Config whose epilogue applies the lookup table
#: (EPILOGUE_LOOKUP), a chunk of the table (EPILOGUE_TABLE: `length` entries from entry
#: `base` of the layer's table), or the scales (EPILOGUE_SCALE: the layer's scale vector
#: from column `base` on).
EPILOGUE_LOOKUP, EPILOGUE_TABLE, EPILOGUE_SCALE = 1, 2, 3
#: gs_timing's fields, in order (the last two are not AccelTiming's: how many commands
#: were dispatched, which `native_cycles_within` reads, and how many of them the model
#: took in repeated periods rather than stepped, which the tests read).
TIMING_FIELDS = ("cycles", "compute_rows", "load_bytes", "store_bytes", "array_stall_cycles",
                 "load_busy_cycles", "store_busy_cycles", "dispatched", "skipped")


class _Timing(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in TIMING_FIELDS]


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "glensidec"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


#: How accel_model.c is compiled (part of the built library's name: a library built with
#: other flags is not taken for this one).
CFLAGS = ("-O2", "-std=c99", "-shared", "-fPIC")


def _library_name(compiler: str) -> str:
    """The built library's file name: a digest of the source, the compiler and CFLAGS."""
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update("\0".join((compiler, *CFLAGS)).encode())
    return f"accel_model-{key.hexdigest()[:16]}.so"


def _build(library: Path, compiler: str) -> bool:
    """Compiles accel_model.c into `library` (atomically: a finished file or none)."""
    library.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(handle)
    try:
        result = subprocess.run(
            [compiler, *CFLAGS, "-o", temporary, str(SOURCE)],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return False
        os.replace(temporary, library)
        return True
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@cache
def _load() -> ctypes.CDLL | None:
    compiler = _compiler()
    if compiler is None:
        return None
    library = _cache_dir() / _library_name(compiler)
    try:
        if not library.exists() and not _build(library, compiler):
            return None
        native = ctypes.CDLL(str(library))
    except OSError:  # an unwritable cache, a library from another machine
        return None
    function = native.gs_accel_cycles
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int64] * 12 + [ctypes.c_void_p, ctypes.c_int64,
                                                ctypes.c_int64, ctypes.POINTER(_Timing)]
    return native


def native_model() -> ctypes.CDLL | None:
    """The built C model, or None (no compiler, or GLENSIDEC_ACCEL_MODEL=python)."""
    if os.environ.get("GLENSIDEC_ACCEL_MODEL", "").lower() == "python":
        return None
    return _load()


#: The columns a COMPUTE sets (from its attributes of the same names) and a LOAD's
#: besides its DMA fields; every other column of theirs is 0.
_COMPUTE_FIELDS = ("wait", "signal", "w_row", "a_row", "m_len", "add", "emit", "a_count1",
                   "a_stride1", "a_stride2", "acc_row")
_compute_fields = operator.attrgetter(*_COMPUTE_FIELDS)
COMPUTE_COLUMNS = [FIELDS.index(name) for name in _COMPUTE_FIELDS]
LOAD_COLUMNS = [FIELDS.index(name) for name in
                 ("wait", "signal", *_DMA_FIELDS, "wait_store", "signal_store")]


class PackBuffer:
    """Rows pack_commands may write a table into instead of new memory: the search prices
    a layer's candidates one after another, each a table of up to hundreds of megabytes
    read only while it is priced, and memory fresh from the system costs the kernel more
    to hand out (its pages zeroed on first touch) than packing costs. Holds the largest
    table so far; a table packed into it lasts until the next one."""

    def __init__(self) -> None:
        self.rows = np.zeros((0, len(FIELDS)), dtype=np.int64)

    def table(self, count: int) -> np.ndarray:
        """`count` rows of zeros (those of the previous table, overwritten)."""
        if count > len(self.rows):
            self.rows = np.zeros((count + count // 4, len(FIELDS)), dtype=np.int64)
            return self.rows[:count]
        table = self.rows[:count]
        table.fill(0)
        return table


def pack_commands(commands: Sequence[Command | FlatCompute | FlatLoad],
                  buffer: PackBuffer | None = None) -> np.ndarray:
    """The commands as rows of int64 (gs_command, FIELDS in order); a COMPUTE or a LOAD
    may come flat (commands.FlatCompute, FlatLoad: its _COMPUTE_FIELDS or LOAD_COLUMNS'
    fields in order). Into `buffer`'s rows when given (valid until its next table)."""
    from glensidec.hardware.commands import (
        FLAT_COMPUTE_WIDTH,
        FLAT_LOAD_WIDTH,
        Compute,
        Config,
        Load,
        Scale,
        Store,
        Table,
    )

    # A layer's program is hundreds of thousands of COMPUTEs and LOADs (the compile prices
    # several per layer shape): each kind's columns are gathered into one flat array and
    # scattered into the table at once, not a row of 29 Python ints apiece; flat ones
    # (told apart by their widths) are picked out by comprehensions, not one by one.
    widths = np.array([len(command) if type(command) is tuple else 0
                       for command in commands], dtype=np.int64)
    if np.isin(widths, (0, FLAT_COMPUTE_WIDTH, FLAT_LOAD_WIDTH), invert=True).any():
        raise ValueError("a flat command is a FlatCompute or a FlatLoad")
    computes: list[int] = []
    compute_values: list[int] = []
    loads: list[int] = []
    load_values: list[int] = []
    fenced: list[int] = []  # fenced LOADs: 1 in their `emit` column (FENCE)
    waiting: list[tuple[int, int]] = []  # rows-waiting COMPUTEs and STOREs, rows_ahead
    onchip: list[int] = []  # on-chip STOREs
    others: list[Config | Store | Table | Scale] = []
    other_positions: list[int] = []
    for position in np.flatnonzero(widths == 0).tolist():
        command = commands[position]
        if isinstance(command, Compute):
            if command.wait_rows:
                waiting.append((position, command.rows_ahead))
            computes.append(position)
            compute_values.extend(_compute_fields(command))
        elif isinstance(command, Load):
            if command.fence:
                fenced.append(position)
            loads.append(position)
            load_values.extend((command.wait, command.signal, *_dma_fields(command.dma),
                                command.wait_store, command.signal_store))
        else:
            assert not isinstance(command, tuple)
            if isinstance(command, Store) and command.wait_rows:
                waiting.append((position, command.rows_ahead))
            if isinstance(command, Store) and command.to_spad:
                onchip.append(position)
            others.append(command)
            other_positions.append(position)
    table = np.zeros((len(commands), len(FIELDS)), dtype=np.int64) if buffer is None else \
        buffer.table(len(commands))
    for positions, values, columns, op in ((computes, compute_values, COMPUTE_COLUMNS, 1),
                                           (loads, load_values, LOAD_COLUMNS, 0)):
        if positions:
            rows = np.array(positions)
            table[rows[:, None], columns] = np.array(values, dtype=np.int64).reshape(
                len(positions), len(columns))
            table[rows, 0] = op
    for width, columns, op in ((FLAT_COMPUTE_WIDTH, COMPUTE_COLUMNS, 1),
                               (FLAT_LOAD_WIDTH, LOAD_COLUMNS, 0)):
        rows = np.flatnonzero(widths == width)
        if rows.size:
            flat = [commands[position] for position in rows.tolist()]
            table[rows[:, None], columns] = np.fromiter(
                chain.from_iterable(flat), dtype=np.int64,  # type: ignore[arg-type]
                count=rows.size * width).reshape(rows.size, width)
            table[rows, 0] = op
    table[fenced, FENCE] = 1
    padding = [0] * len(_DMA_FIELDS)
    for position, command in zip(other_positions, others, strict=True):
        if isinstance(command, Config):  # its vectors stay in the layer; where they start
            table[position] = [3, 0, 0, 0, 0, 0, 0, 0, command.first_column, *padding[1:], 0,
                               command.residual is not None, 0, 0, 0, 0,
                               EPILOGUE_LOOKUP if command.epilogue.table is not None else 0, 0]
        elif isinstance(command, Table):  # its entries stay in the layer's table
            table[position] = [3, 0, 0, 0, 0, 0, 0, 0, command.first, len(command.entries),
                               *padding[2:], 0, 0, 0, 0, 0, 0, EPILOGUE_TABLE, 0]
        elif isinstance(command, Scale):  # its values are the layer's, at run time
            table[position] = [3, 0, 0, 0, 0, 0, 0, 0, command.first_column, *padding[1:],
                               0, 0, 0, 0, 0, 0, EPILOGUE_SCALE, 0]
        else:  # a store: its pooling window where a load has y0 and y_step, and a sum
            # pool's flag where it has height (stores have no bounds)
            dma = list(_dma_fields(command.dma))
            if command.window:
                dma[_WINDOW], dma[_WINDOW_STRIDE] = command.window, command.window_stride
                dma[_SUM] = int(command.sum)
                dma[_WINDOW_COUNT1] = command.window_count1
                dma[_WINDOW_STRIDE2] = command.window_stride2
                dma[_PIXEL_STEP] = command.pixel_step
            table[position] = [2, command.wait, command.signal, 0, 0, 0, 0, 0, *dma, 0, 0, 0,
                               0, 0, 0, 0, 0]
    for position, ahead in waiting:
        table[position, WAIT_ROWS], table[position, ROWS_AHEAD] = 1, ahead
    table[onchip, TO_SPAD] = 1
    return table


def native_cycles(native: ctypes.CDLL, config: AccelConfig,
                  commands: Sequence[Command] | np.ndarray, limit: int) -> AccelTiming:
    """`commands` (or their pack_commands table) on the C model: the Python model's
    AccelTiming (without a trace)."""
    table = commands if isinstance(commands, np.ndarray) else pack_commands(commands)
    status, timing = _run(native, config, table, limit)
    if status == 1:
        raise RuntimeError(f"the command sequence did not finish in {limit} cycles")
    return _accel_timing(timing)


def native_cycles_within(native: ctypes.CDLL, config: AccelConfig, table: np.ndarray,
                         bound: int) -> AccelTiming | None:
    """native_cycles of a packed table, or None when it takes more than `bound` cycles:
    the run stops at `bound` cycles, and if the last STORE that writes has not been
    dispatched by then, the last write comes later (None, known without running on).
    A run stopped with that store dispatched is run again to the end (rare: a STORE is
    the last command a schedule's computes wait for)."""
    stores = np.flatnonzero((table[:, 0] == 2) & (table[:, FIELDS.index("count1")] *
                                                  table[:, FIELDS.index("count2")] > 0))
    status, timing = _run(native, config, table, bound)
    if status == 1 and stores.size and timing.dispatched <= stores[-1]:
        return None
    # (a run that ends before `bound` cycles may still write in its last one, cycle bound)
    result = _accel_timing(timing) if status == 0 else \
        native_cycles(native, config, table, 10**12)
    return result if result.cycles <= bound else None


def _run(native: ctypes.CDLL, config: AccelConfig, table: np.ndarray, limit: int
         ) -> tuple[int, _Timing]:
    """gs_accel_cycles' status (0, or 1: `limit` cycles passed first) and its timing;
    the errors it reports raised."""
    packed = np.ascontiguousarray(table, dtype=np.int64)
    timing = _Timing()
    memory = config.memory
    status = native.gs_accel_cycles(
        config.rows, config.cols, memory.bus_bytes, memory.write_rows,
        config.weight_load_rows, memory.latency, memory.bank_rows,
        memory.scratchpad_rows,
        config.queue_depth, config.out_depth, config.epilogue_depth,
        config.epilogue_cycles, packed.ctypes.data, len(packed), limit,
        ctypes.byref(timing))
    if status == 3:
        raise ValueError("a residual row and a weight row read from one scratchpad bank")
    if status not in (0, 1):
        raise MemoryError("the accelerator's C cycle model ran out of memory")
    return status, timing


def _accel_timing(timing: _Timing) -> AccelTiming:
    from glensidec.hardware.commands import AccelTiming

    return AccelTiming(cycles=timing.cycles, compute_rows=timing.compute_rows,
                       load_bytes=timing.load_bytes, store_bytes=timing.store_bytes,
                       array_stall_cycles=timing.array_stall_cycles,
                       load_busy_cycles=timing.load_busy_cycles,
                       store_busy_cycles=timing.store_busy_cycles)


def unpack_commands(table: np.ndarray, cols: int, epilogue: EpilogueConfig,
                    bias: Sequence[int], multiplier: Sequence[int],
                    residual: ResidualConfig | None = None,
                    scale: Sequence[int] | None = None) -> list[Command]:
    """The commands of a packed table (pack_commands' rows), whole again: a CONFIG row
    names its first column; its settings, vectors and residual add come from the layer
    (a table chunk's entries from `epilogue.table`, the scales from `scale`)."""
    from dataclasses import replace

    from glensidec.hardware.accel import DmaCommand
    from glensidec.hardware.commands import Compute, Config, Load, Scale, Store, Table

    plain = replace(epilogue, table=None)

    commands: list[Command] = []
    for row in np.asarray(table, dtype=np.int64):
        field = {name: int(row[index]) for index, name in enumerate(FIELDS)}
        op = field["op"]
        if op == 1:
            commands.append(Compute(field["w_row"], field["a_row"], field["m_len"],
                                    bool(field["add"]), bool(field["emit"]),
                                    bool(field["wait"]), bool(field["signal"]),
                                    field["a_count1"], field["a_stride1"],
                                    field["a_stride2"], field["acc_row"],
                                    bool(field["wait_store"]), field["residual"]))
        elif op == 3 and field["epilogue"] == EPILOGUE_SCALE:
            assert scale is not None, "scales in a layer without a scale vector"
            first = field["base"]
            scales = tuple(scale[first:first + cols])
            commands.append(Scale(first, scales + (1,) * (cols - len(scales))))
        elif op == 3 and field["epilogue"] == EPILOGUE_TABLE:
            assert epilogue.table is not None, "a table chunk in a layer without a table"
            first = field["base"]
            commands.append(Table(first, tuple(epilogue.table[first:first + field["length"]])))
        elif op == 3:
            first = field["base"]
            width = min(cols, len(bias) - first)
            padding = (0,) * (cols - width)
            commands.append(Config(epilogue if field["epilogue"] == EPILOGUE_LOOKUP else plain,
                                   tuple(bias[first:first + width]) + padding,
                                   tuple(multiplier[first:first + width]) + padding,
                                   first_column=first,
                                   residual=residual if field["residual"] else None))
        else:
            values: dict[str, Any] = {name: field[name] for name in _DMA_FIELDS}
            if op == 0:
                dma = DmaCommand(**{**values, "bounds": bool(values["bounds"])})
                commands.append(Load(dma, bool(field["wait"]), bool(field["signal"]),
                                     bool(field["wait_store"]), bool(field["signal_store"]),
                                     bool(field["emit"])))
            else:
                pooling = field["y0"] > 0  # its window, stride and sum flag, lines, step
                pattern = {"x0": DmaCommand.x0, "x_step": DmaCommand.x_step,
                           "width": DmaCommand.width} if pooling else {}
                dma = DmaCommand(**{**values, "bounds": bool(values["bounds"]), "y0": 0,
                                    "y_step": 0, **pattern,
                                    "height": DmaCommand.height if pooling else values["height"]})
                commands.append(Store(dma, bool(field["signal"]), bool(field["wait"]),
                                      field["y0"], field["y_step"],
                                      pooling and bool(field["height"]),
                                      field["x0"] if pooling else 0,
                                      field["x_step"] if pooling else 0,
                                      field["width"] if pooling else 0,
                                      bool(field["signal_store"]),
                                      bool(field["wait_store"]), field["residual"]))
    return commands
