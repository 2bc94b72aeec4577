"""Cycle model and bit-exact reference of the weight-stationary systolic array in rtl/.

Pure Python and numpy (no simulator), so the compiler's cost model can import it.

The array (`rtl/ws_top.v`) computes one *tile* at a time: up to ROWS reduction indices
by up to COLS output columns, for a run of activation rows. A GEMM ``A(MxK)·B(KxN) + D``
is cut into tiles by `gemm_tiles` (folds over K and N, and over M when a K reduction
needs more accumulator rows than the array has); `tile_sequence_cycles` gives the exact
number of clock cycles the RTL takes for a tile sequence streamed without gaps, checked
against simulation in `sim/test_ws_top.py` and `bench/bench_array.py`.

Timing rules (derived from the RTL, see docs/hardware.md), for tile j with M_j rows,
in cycles counted from the first cycle the weight stream is offered:

* the weights of a tile are ROWS beats; its last beat commits them to a weight bank,
  at cycle ``c_j = max(c_{j-1} + ROWS, e_{j-2} + ROWS)`` (beats are sequential, and the
  bank's previous tile must have finished injecting ROWS cycles earlier);
* its activation rows are injected in cycles ``s_j .. e_j = s_j + M_j - 1`` with
  ``s_j = max(c_j, e_{j-1} + 1)`` (the commit bypasses to the multipliers, so a tile may
  start in its commit cycle);
* the result of the row injected at cycle t leaves at cycle ``t + ROWS + COLS - 1``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from glensidec.lang.dtypes import wrap_signed
from glensidec.lang.interp import array_matmul_f32

IntArray = npt.NDArray[np.int64]

#: Element types of the array: two's-complement integers (IN_W in, ACC_W accumulated),
#: or IEEE-754 binary32 in and out (ws_top's FP = 1).
ELEMENTS = ("int", "f32")

# The largest array side accepted: well past any built systolic array (a TPU's is 256),
# and small enough that every cycle count stays a modest integer.
MAX_SIDE = 4096

# ArrayConfig's fields and the `rtl/ws_top.v` parameters they set, in this order.
RTL_PARAMETERS = {"rows": "ROWS", "cols": "COLS", "in_width": "IN_W", "acc_width": "ACC_W",
                  "acc_depth": "ACC_DEPTH"}


@dataclass(frozen=True)
class ArrayConfig:
    """Parameters of one systolic-array instance (the RTL parameters of ws_top).

    `element` "f32" is the binary32 array: in_width and acc_width are then both 32.
    """

    rows: int
    cols: int
    in_width: int = 8
    acc_width: int = 32
    acc_depth: int = 1024  # accumulator rows: the longest M chunk a K reduction may use
    element: str = "int"

    @staticmethod
    def f32(rows: int, cols: int, acc_depth: int = 1024) -> ArrayConfig:
        """The binary32 array of `rows` x `cols`."""
        return ArrayConfig(rows, cols, 32, 32, acc_depth, "f32")

    @property
    def is_float(self) -> bool:
        return self.element == "f32"

    #: Cycles one PE takes from its inputs to its registered partial sum. Both PEs (the
    #: integer MAC and the binary32 multiply-then-add) are combinational between the same
    #: registers, so it is 1 for both and the timing below holds for either element.
    pe_latency = 1

    def __post_init__(self) -> None:
        if self.element not in ELEMENTS:
            raise ValueError(f"the array's element is one of {', '.join(ELEMENTS)}, "
                             f"got {self.element!r}")
        if self.element == "f32" and (self.in_width, self.acc_width) != (32, 32):
            raise ValueError("the f32 array has in_width = acc_width = 32")
        if self.rows < 2 or self.cols < 1:
            raise ValueError(f"the array needs rows >= 2 and cols >= 1, got "
                             f"{self.rows}x{self.cols}")
        if max(self.rows, self.cols) > MAX_SIDE:
            raise ValueError(f"the array is at most {MAX_SIDE}x{MAX_SIDE}, got "
                             f"{self.rows}x{self.cols}")
        if self.element == "int" and self.acc_width < 2 * self.in_width:
            raise ValueError("acc_width must hold a full product (>= 2 * in_width)")
        if self.acc_depth < 2:
            raise ValueError("acc_depth must be at least 2")

    @property
    def latency(self) -> int:
        """Cycles from injecting an activation row to its result row leaving the array:
        ROWS PEs down (pe_latency each) and COLS - 1 columns of skew."""
        return self.rows * self.pe_latency + self.cols - 1

    def rtl_parameters(self) -> dict[str, int]:
        """The Verilog parameters of `rtl/ws_top.v` for this configuration (the one place
        that maps the fields to RTL names; testbenches and Verilator builds read it).
        `FP` = 1 only for the binary32 array (the integer array's builds keep their
        parameters, hence their cache keys)."""
        parameters = {rtl: getattr(self, name) for name, rtl in RTL_PARAMETERS.items()}
        if self.is_float:
            parameters["FP"] = 1
        return parameters

    @classmethod
    def from_rtl_parameters(cls, parameters: dict[str, int]) -> ArrayConfig:
        """The configuration `rtl_parameters` describes (extra parameters are ignored)."""
        fields = {name: parameters[rtl] for name, rtl in RTL_PARAMETERS.items()}
        return cls(**fields, element="f32" if parameters.get("FP", 0) else "int")


@dataclass(frozen=True)
class Tile:
    """One tile as the driver issues it: a weight block and the activation rows through it.

    Weights ``B[k0:k0+k_len, n0:n0+n_len]`` (zero-padded to ROWS x COLS) are multiplied with
    activation rows ``A[m0:m0+m_len, k0:k0+k_len]``; ``use_d`` adds ``D`` rows at the top
    of the columns, ``add`` adds the accumulator rows of the previous K fold, ``emit``
    sends the rows to the result stream instead of storing them in the accumulator.
    """

    m0: int
    m_len: int
    k0: int
    k_len: int
    n0: int
    n_len: int
    use_d: bool
    add: bool
    emit: bool


@dataclass(frozen=True)
class TileTiming:
    """Cycle of a tile's weight commit and of its first and last activation row."""

    commit: int
    first_row: int
    last_row: int


def array_for(rows: int, cols: int, arrays: Sequence[ArrayConfig]) -> ArrayConfig:
    """The array of `arrays` (the program's, the main one first) that is rows x cols. The
    main one for a call no systolic-array construct sized (rows = 0), and for a size none
    of them has: the compiler's extraction refuses such a size with a located error, but a
    program lowered directly (the Python API, the tests) runs it on the main array."""
    found = [config for config in arrays if (config.rows, config.cols) == (rows, cols)]
    return found[0] if found else arrays[0]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_shape(M: int, K: int, N: int) -> None:
    if min(M, K, N) < 1:
        raise ValueError(f"GEMM dimensions must be positive, got M={M} K={K} N={N}")


def m_chunks(config: ArrayConfig, M: int, K: int) -> list[tuple[int, int]]:
    """(start, length) of the M chunks: one chunk unless a K reduction overflows acc_depth.

    Chunks are balanced so none is much shorter than the others (a short chunk would
    waste weight-load time when it is shorter than ROWS).
    """
    if _ceil_div(K, config.rows) == 1 or config.acc_depth >= M:
        return [(0, M)]
    count = _ceil_div(M, config.acc_depth)
    base, extra = divmod(M, count)
    chunks: list[tuple[int, int]] = []
    start = 0
    for index in range(count):
        length = base + (1 if index < extra else 0)
        chunks.append((start, length))
        start += length
    return chunks


def gemm_tiles(config: ArrayConfig, M: int, K: int, N: int, has_d: bool = False) -> list[Tile]:
    """The tile schedule of ``A(MxK)·B(KxN) (+ D)``: M chunks, then N blocks, then K folds.

    K folds are innermost so one accumulator row block holds the partial sums of one
    (M chunk, N block) pair at a time; D enters with the first K fold.
    """
    _check_shape(M, K, N)
    tiles: list[Tile] = []
    k_folds = _ceil_div(K, config.rows)
    for m0, m_len in m_chunks(config, M, K):
        for n0 in range(0, N, config.cols):
            for fold in range(k_folds):
                k0 = fold * config.rows
                tiles.append(
                    Tile(
                        m0=m0,
                        m_len=m_len,
                        k0=k0,
                        k_len=min(config.rows, K - k0),
                        n0=n0,
                        n_len=min(config.cols, N - n0),
                        use_d=has_d and fold == 0,
                        add=fold > 0,
                        emit=fold == k_folds - 1,
                    )
                )
    return tiles


def tile_timings(config: ArrayConfig, tiles: Sequence[Tile]) -> list[TileTiming]:
    """Commit and injection cycles of every tile, streamed without gaps (module rules)."""
    timings: list[TileTiming] = []
    for index, tile in enumerate(tiles):
        previous_commit = timings[-1].commit if timings else -1
        commit = previous_commit + config.rows
        if index >= 2:
            commit = max(commit, timings[index - 2].last_row + config.rows)
        first_row = commit if index == 0 else max(commit, timings[-1].last_row + 1)
        timings.append(TileTiming(commit, first_row, first_row + tile.m_len - 1))
    return timings


def result_cycles(config: ArrayConfig, tiles: Sequence[Tile]) -> list[int]:
    """The cycle each result row leaves the array, in stream order."""
    cycles: list[int] = []
    for tile, timing in zip(tiles, tile_timings(config, tiles), strict=True):
        if tile.emit:
            cycles.extend(
                range(timing.first_row + config.latency, timing.last_row + config.latency + 1)
            )
    return cycles


def tile_sequence_cycles(config: ArrayConfig, tiles: Sequence[Tile]) -> int:
    """Exact RTL cycles for the tile sequence: up to and including the last result beat."""
    cycles = result_cycles(config, tiles)
    if not cycles:
        raise ValueError("the tile sequence emits no result")
    return cycles[-1] + 1


@dataclass
class _Stream:
    """The `tile_timings` recurrence's state after some tiles: the last commit, the last
    rows of the previous two tiles, and how many tiles have been streamed."""

    commit: int = -1
    last_row: int = -1
    last_row_before: int = -1
    index: int = 0

    def relative(self) -> tuple[int, int, bool]:
        """The state up to a shift in time: what decides every later step's increments."""
        return (self.commit - self.last_row, self.last_row_before - self.last_row,
                self.index >= 2)

    def shift(self, cycles: int, tiles: int) -> None:
        self.commit += cycles
        self.last_row += cycles
        self.last_row_before += cycles
        self.index += tiles


def _stream_tile(stream: _Stream, rows: int, m_len: int) -> None:
    commit = stream.commit + rows
    if stream.index >= 2:
        commit = max(commit, stream.last_row_before + rows)
    first = commit if stream.index == 0 else max(commit, stream.last_row + 1)
    stream.commit = commit
    stream.last_row_before, stream.last_row = stream.last_row, first + m_len - 1
    stream.index += 1


def _stream_repeated(stream: _Stream, count: int, step: Callable[[_Stream], None],
                     tiles_per_step: int) -> None:
    """Apply `step` `count` times; once the relative state repeats, the rest is periodic
    (every period adds the same cycles), so it is skipped in one shift: closed form in
    effect, cost independent of `count`."""
    seen: dict[tuple[int, int, bool], tuple[int, int]] = {}
    done = 0
    while done < count:
        key = stream.relative()
        if key in seen:
            then, then_last = seen[key]
            period, gained = done - then, stream.last_row - then_last
            periods = (count - done) // period
            stream.shift(periods * gained, periods * period * tiles_per_step)
            done += periods * period
            seen.clear()
            if done >= count:
                break
        seen[key] = (done, stream.last_row)
        step(stream)
        done += 1


@functools.lru_cache(maxsize=4096)
def gemm_cycles(config: ArrayConfig, M: int, K: int, N: int) -> int:
    """Exact RTL cycles for ``A(MxK)·B(KxN) (+ D)`` in the `gemm_tiles` schedule.

    The same recurrence as `tile_timings` and `result_cycles`, on plain integers instead of
    Tile objects, memoised per shape. The recurrence becomes periodic after a few tiles
    (and after a few M chunks), so the periods are skipped arithmetically: the cost does
    not grow with the number of tiles (a huge GEMM is predicted as fast as a small one).
    The result leaves with the last tile (always a last K fold). Tests check it against
    ``tile_sequence_cycles(config, gemm_tiles(...))``.
    """
    _check_shape(M, K, N)
    rows = config.rows
    tiles_per_chunk = _ceil_div(K, rows) * _ceil_div(N, config.cols)
    chunks = m_chunks_counts(config, M, K)
    stream = _Stream()
    for m_len, count in chunks:
        def chunk(s: _Stream, m_len: int = m_len) -> None:
            _stream_repeated(s, tiles_per_chunk, lambda t: _stream_tile(t, rows, m_len), 1)

        _stream_repeated(stream, count, chunk, tiles_per_chunk)
    return stream.last_row + config.latency + 1


def m_chunks_counts(config: ArrayConfig, M: int, K: int) -> list[tuple[int, int]]:
    """`m_chunks` as (length, how many in a row): the longer chunks come first."""
    if _ceil_div(K, config.rows) == 1 or config.acc_depth >= M:
        return [(M, 1)]
    count = _ceil_div(M, config.acc_depth)
    base, extra = divmod(M, count)
    return [(length, n) for length, n in ((base + 1, extra), (base, count - extra)) if n]


def folds(config: ArrayConfig, K: int, N: int) -> int:
    """F = ceil(K/R) * ceil(N/C): weight tiles per M block."""
    return _ceil_div(K, config.rows) * _ceil_div(N, config.cols)


def t_min(config: ArrayConfig, M: int, K: int, N: int) -> int:
    """Bound with double-buffered weights: ``R + F * max(M, R) + (R + C - 2)``."""
    _check_shape(M, K, N)
    R, C = config.rows, config.cols
    return R + folds(config, K, N) * max(M, R) + (R + C - 2)


def scalesim_ws_cycles(config: ArrayConfig, M: int, K: int, N: int) -> int:
    """SCALE-Sim's weight-stationary count: ``ceil(K/R) * ceil(N/C) * (2R + C + M - 2)``."""
    _check_shape(M, K, N)
    R, C = config.rows, config.cols
    return folds(config, K, N) * (2 * R + C + M - 2)


def utilization(config: ArrayConfig, M: int, K: int, N: int, cycles: int) -> float:
    """Overall utilization ``MACs / (R * C * cycles)``."""
    return (M * K * N) / (config.rows * config.cols * cycles)


def ideal_cycles(config: ArrayConfig, M: int, K: int, N: int) -> int:
    """Schedule-free bound ``ceil(M*K*N / (R*C))``."""
    return math.ceil(M * K * N / (config.rows * config.cols))


def _check_range(name: str, values: npt.NDArray[np.integer], width: int) -> None:
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if values.size and (int(values.min()) < low or int(values.max()) > high):
        raise ValueError(f"{name} has values outside the signed {width}-bit range")


def reference_gemm(
    A: npt.NDArray[np.integer],
    B: npt.NDArray[np.integer],
    D: npt.NDArray[np.integer] | None = None,
    acc_width: int = 32,
    in_width: int = 8,
) -> npt.NDArray[np.int32]:
    """Bit-exact ``A·B + D`` as the array computes it, wrapped at `acc_width` bits.

    The hardware adds modulo 2^acc_width at every step; modular addition is associative,
    so one exact int64 product followed by one wrap gives the same bits (for K below
    2^(63 - 2*in_width), far beyond any real layer).
    """
    if acc_width > 32:
        raise ValueError("reference_gemm returns int32: acc_width must be <= 32")
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes do not chain: A{A.shape} B{B.shape}")
    _check_range("A", A, in_width)
    _check_range("B", B, in_width)
    exact = A.astype(np.int64) @ B.astype(np.int64)
    if D is not None:
        if D.shape != exact.shape:
            raise ValueError(f"D{D.shape} does not match the product's {exact.shape}")
        exact = exact + wrap_signed(D.astype(np.int64), acc_width)
    return wrap_signed(exact, acc_width).astype(np.int32)


def reference_gemm_f32(
    A: npt.NDArray[np.float32],
    B: npt.NDArray[np.float32],
    D: npt.NDArray[np.float32] | None,
    rows: int,
) -> npt.NDArray[np.float32]:
    """Bit-exact ``A·B + D`` as the binary32 array of `rows` rows computes it.

    Every multiply and every add is one IEEE binary32 operation rounded to nearest even
    (numpy's float32 arithmetic), in the array's order: per K fold of `rows` reduction
    indices, a column starts from D (first fold) or +0, adds the products k0, k0+1, ...
    one by one, then a +0 for every padding row of a partial fold (it turns a -0 sum into
    +0, as the hardware's zero-padded PEs do); the first fold is stored, every later
    fold's sum is added to the stored one (fold + stored). The same order is what the
    generated C (`gs_array_gemm_model`, -ffp-contract=off) and the interpreter compute.
    NaN results may differ from the RTL's in payload only (it makes 0x7FC00000).
    """
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes do not chain: A{A.shape} B{B.shape}")
    if D is not None and D.shape != (A.shape[0], B.shape[1]):
        raise ValueError(f"D{D.shape} does not match the product's {(A.shape[0], B.shape[1])}")
    return array_matmul_f32(A, B, rows, D)


@dataclass(frozen=True)
class ResourceCount:
    """Storage and arithmetic of one ws_top instance, counted from the RTL structure."""

    pe_register_bits: int  # per PE: activation, bank select, partial sum, chain, 2 banks
    skew_register_bits: int  # activation/weight/D skew and result de-skew triangles
    control_register_bits: int  # ws_ctrl counters, bank state and the row tag line
    accumulator_bits: int  # ws_accum memory (SRAM in a real implementation)
    multipliers: int  # in_width x in_width signed
    adders: int  # acc_width wide

    @property
    def register_bits(self) -> int:
        return self.pe_register_bits + self.skew_register_bits + self.control_register_bits


def resource_count(config: ArrayConfig) -> ResourceCount:
    """Register bits, multipliers and adders of ws_top for `config` (see docs/hardware.md)."""
    R, C, w, acc = config.rows, config.cols, config.in_width, config.acc_width
    per_pe = 4 * w + acc + 1  # a_out, w_chain, w_bank0, w_bank1 + psum_out + sel_out
    triangle_r, triangle_c = R * (R - 1) // 2, C * (C - 1) // 2
    skew = (w + 1) * triangle_r + (w + 3) * triangle_c + 2 * acc * triangle_c
    count_bits = max(1, math.ceil(math.log2(R)))
    row_bits = max(1, math.ceil(math.log2(config.acc_depth)))
    # w_count, 2 drain counters, load bank, 2 full flags, activation bank, row, tag line
    control = 3 * count_bits + 4 + row_bits + config.latency * (row_bits + 3)
    return ResourceCount(
        pe_register_bits=R * C * per_pe,
        skew_register_bits=skew,
        control_register_bits=control,
        accumulator_bits=config.acc_depth * C * acc,
        multipliers=R * C,
        adders=R * C + C,
    )
