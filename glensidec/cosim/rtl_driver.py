"""cocotb driver that runs a whole GEMM on the simulated array (rtl/tb/tb_ws_gemm.v).

One call moves whole tiles per transaction: the driver writes the operand memories of
the testbench wrapper, raises `start`, awaits `done` and reads the result rows and the
cycle each left the array. No Python runs per clock cycle, so simulation speed is the
simulator's. The tile order is exactly `glensidec.hardware.array.gemm_tiles`.

Usable from any cocotb test, including a co-simulation where C code calls into Python
(through cocotb's `bridge`/`resume`): build the testbench with
`glensidec.cosim.rtl_build.build_gemm_testbench`, then in the test::

    driver = GemmDriver(dut, config)
    await driver.reset()
    run = await driver.gemm(A, B, D)      # run.C (int32 MxN), run.cycles
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from cocotb.triggers import ClockCycles, RisingEdge

from glensidec.cosim.rtl_build import GemmBenchDepths
from glensidec.cosim.settings import settings_env, testbench_settings
from glensidec.hardware.array import (
    ArrayConfig,
    Tile,
    gemm_tiles,
    reference_gemm,
)

Matrix = npt.NDArray[np.integer]
#: Operands of a GEMM: integers, or float32 for the binary32 array.
Operand = npt.NDArray[np.integer] | npt.NDArray[np.floating]

def config_to_env(config: ArrayConfig) -> dict[str, str]:
    """Environment for a cocotb test process that should rebuild `config` (its RTL
    parameters as the `parameters` setting, glensidec.cosim.settings)."""
    return settings_env(parameters=config.rtl_parameters())


def config_from_env() -> ArrayConfig:
    """The ArrayConfig a test process was started with (see `config_to_env`)."""
    return ArrayConfig.from_rtl_parameters(testbench_settings()["parameters"])


@dataclass(frozen=True)
class StreamGaps:
    """Random gaps on the input streams and back-pressure on the result stream.

    Each value t in 0..255 makes a stream idle in a cycle with probability t/256 (drawn
    from the testbench's LFSRs, seeded by `seed`, so runs are deterministic).
    """

    weights: int = 0
    activations: int = 0
    d: int = 0
    result_stall: int = 0
    seed: int = 1


@dataclass
class GemmRun:
    """Outcome of one GEMM on the simulated array."""

    C: npt.NDArray[Any]  # int32, or float32 on the binary32 array
    cycles: int  # first stream cycle up to and including the last result beat
    result_cycles: list[int]  # cycle each result row left the array, in stream order
    stall_cycles: int  # cycles the result stream was back-pressured
    tiles: list[Tile] = field(default_factory=list)
    # Wall-clock seconds: writing the memories, simulating (start to done), reading back.
    load_seconds: float = 0.0
    simulate_seconds: float = 0.0
    read_seconds: float = 0.0

    @property
    def wall_seconds(self) -> float:
        return self.load_seconds + self.simulate_seconds + self.read_seconds


def pack_rows(values: Matrix, width: int) -> list[int]:
    """Each row of `values` as one integer, lane 0 in the least significant bits."""
    rows, lanes = values.shape
    unsigned = np.asarray(values, dtype=np.int64) & ((1 << width) - 1)
    if width in (8, 16, 32, 64):
        as_bytes = unsigned.astype(f"<u{width // 8}").tobytes()
        step = lanes * width // 8
        return [int.from_bytes(as_bytes[i * step : (i + 1) * step], "little") for i in range(rows)]
    words: list[int] = []
    for row in unsigned.tolist():
        word = 0
        for lane, value in enumerate(row):
            word |= int(value) << (lane * width)
        words.append(word)
    return words


def unpack_rows(words: list[int], lanes: int, width: int) -> npt.NDArray[np.int64]:
    """Inverse of `pack_rows` for signed lanes."""
    if width in (8, 16, 32, 64):
        size = lanes * width // 8
        joined = b"".join(word.to_bytes(size, "little") for word in words)
        lanes_le = np.frombuffer(joined, dtype=f"<i{width // 8}")
        return lanes_le.reshape(len(words), lanes).astype(np.int64)
    mask = (1 << width) - 1
    out = np.array(
        [[(word >> (lane * width)) & mask for lane in range(lanes)] for word in words],
        dtype=np.int64,
    ).reshape(len(words), lanes)
    return np.where(out >= (1 << (width - 1)), out - (1 << width), out)


@dataclass
class _Images:
    """Memory images of one GEMM: one row of lanes per memory word (lane 0 = low bits)."""

    weights: npt.NDArray[np.int64]  # (beats, COLS)
    activations: npt.NDArray[np.int64]  # (rows, ROWS)
    tiles: list[int]  # packed descriptors
    d_rows: npt.NDArray[np.int64]  # (rows, COLS), possibly empty
    result_slots: list[tuple[int, int, int]]  # (row m, column n0, n_len) per result beat


def hex_lines(values: Matrix, width: int) -> str:
    """`$readmemh` text: one word per row of `values`, most significant lane first."""
    rows, lanes = values.shape
    if rows == 0:
        return ""
    unsigned = np.asarray(values, dtype=np.int64) & ((1 << width) - 1)
    if width in (8, 16, 32, 64):
        big_endian = unsigned.astype(f">u{width // 8}")[:, ::-1]
        text = big_endian.tobytes().hex()
        step = lanes * width // 4
        return "\n".join(text[i : i + step] for i in range(0, len(text), step)) + "\n"
    digits = -(-lanes * width // 4)
    return "".join(f"{word:0{digits}x}\n" for word in pack_rows(values, width))


def parse_hex_lines(text: str) -> list[int]:
    """Words of a `$writememh` file (comments and address lines skipped)."""
    words = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("//", "@")):
            words.append(int(line, 16))
    return words


def _padded(block: Matrix, rows: int, cols: int) -> npt.NDArray[np.int64]:
    padded = np.zeros((rows, cols), dtype=np.int64)
    padded[: block.shape[0], : block.shape[1]] = block
    return padded


def _tile_word(tile: Tile, a_base: int) -> int:
    """Descriptor {use_d, emit, add, m_len[31:0], a_base[31:0]}."""
    flags = (int(tile.use_d) << 2) | (int(tile.emit) << 1) | int(tile.add)
    return (flags << 64) | (tile.m_len << 32) | a_base


def build_images(config: ArrayConfig, A: Matrix, B: Matrix, D: Matrix | None) -> _Images:
    """Lay out A, B and D for tb_ws_gemm following `gemm_tiles`."""
    R, C = config.rows, config.cols
    M, K = A.shape
    N = B.shape[1]
    tiles = gemm_tiles(config, M, K, N, has_d=D is not None)
    weight_blocks: list[npt.NDArray[np.int64]] = []
    a_blocks: list[npt.NDArray[np.int64]] = []
    a_base_of: dict[tuple[int, int], int] = {}
    d_blocks: list[npt.NDArray[np.int64]] = []
    tile_words: list[int] = []
    slots: list[tuple[int, int, int]] = []
    rows_stored = 0
    for tile in tiles:
        b_block = B[tile.k0 : tile.k0 + tile.k_len, tile.n0 : tile.n0 + tile.n_len]
        # The first beat of a tile ends in the bottom row of the array: send rows reversed.
        weight_blocks.append(_padded(b_block, R, C)[::-1])
        key = (tile.m0, tile.k0)
        if key not in a_base_of:
            a_base_of[key] = rows_stored
            a_block = A[tile.m0 : tile.m0 + tile.m_len, tile.k0 : tile.k0 + tile.k_len]
            a_blocks.append(_padded(a_block, tile.m_len, R))
            rows_stored += tile.m_len
        tile_words.append(_tile_word(tile, a_base_of[key]))
        if tile.use_d and D is not None:
            d_block = D[tile.m0 : tile.m0 + tile.m_len, tile.n0 : tile.n0 + tile.n_len]
            d_blocks.append(_padded(d_block, tile.m_len, C))
        if tile.emit:
            slots += [(m, tile.n0, tile.n_len) for m in range(tile.m0, tile.m0 + tile.m_len)]
    return _Images(
        weights=np.concatenate(weight_blocks),
        activations=np.concatenate(a_blocks),
        tiles=tile_words,
        d_rows=np.concatenate(d_blocks) if d_blocks else np.zeros((0, C), dtype=np.int64),
        result_slots=slots,
    )


#: Files tb_ws_gemm reads and writes with use_files=1, in the simulator's working directory.
HEX_FILES = {
    "weights": "glensidec_w.hex",
    "activations": "glensidec_a.hex",
    "tiles": "glensidec_t.hex",
    "d_rows": "glensidec_d.hex",
    "results": "glensidec_r.hex",
    "result_cycles": "glensidec_c.hex",
}
DESCRIPTOR_DIGITS = 17  # 67-bit tile descriptors


def _float_bits(values: Operand) -> npt.NDArray[np.int32]:
    """binary32 values as their bit patterns (what the binary32 array's lanes carry)."""
    return np.ascontiguousarray(values, dtype=np.float32).view(np.int32)


class GemmDriver:
    """Runs GEMMs on a tb_ws_gemm DUT built for `config` (and `depths`).

    `transfer="files"` (default) moves the memories through hex files and
    `$readmemh`/`$writememh`, several times faster than `"vpi"`, which writes and reads
    every word through VPI and needs no file system.
    """

    def __init__(
        self,
        dut: Any,
        config: ArrayConfig,
        depths: GemmBenchDepths | None = None,
        transfer: str = "files",
    ) -> None:
        if transfer not in ("files", "vpi"):
            raise ValueError(f"transfer must be 'files' or 'vpi', not {transfer!r}")
        self.dut = dut
        self.config = config
        self.depths = depths or GemmBenchDepths()
        self.transfer = transfer
        self.work_dir = Path.cwd()  # the simulator resolves the hex files' names here
        # Handles are looked up once: VPI lookups are slow.
        self._clk = dut.clk
        self._rst = dut.rst
        self._start = dut.start
        self._done = dut.done
        self._w_mem = dut.w_mem
        self._a_mem = dut.a_mem
        self._t_mem = dut.t_mem
        self._d_mem = dut.d_mem
        self._r_mem = dut.r_mem
        self._r_cycle = dut.r_cycle

    async def reset(self, cycles: int = 3) -> None:
        """Synchronous reset of the array and the wrapper."""
        self._start.value = 0
        self._rst.value = 1
        await ClockCycles(self._clk, cycles)
        self._rst.value = 0
        await RisingEdge(self._clk)

    def _check_fits(self, images: _Images) -> None:
        limits = {
            "weight beats": (len(images.weights), self.depths.weight_beats),
            "activation rows": (len(images.activations), self.depths.activation_rows),
            "tiles": (len(images.tiles), self.depths.tiles),
            "D rows": (len(images.d_rows), self.depths.d_rows),
            "result rows": (len(images.result_slots), self.depths.result_rows),
        }
        for name, (needed, depth) in limits.items():
            if needed > depth:
                raise ValueError(f"GEMM needs {needed} {name}, the testbench holds {depth}")

    def _write_vpi(self, images: _Images) -> None:
        config = self.config
        for memory, words in (
            (self._w_mem, pack_rows(images.weights, config.in_width)),
            (self._a_mem, pack_rows(images.activations, config.in_width)),
            (self._t_mem, images.tiles),
            (self._d_mem, pack_rows(images.d_rows, config.acc_width)),
        ):
            for address, word in enumerate(words):
                memory[address].value = word

    def _write_files(self, images: _Images) -> None:
        config = self.config
        texts = {
            "weights": hex_lines(images.weights, config.in_width),
            "activations": hex_lines(images.activations, config.in_width),
            "tiles": "".join(f"{word:0{DESCRIPTOR_DIGITS}x}\n" for word in images.tiles),
            "d_rows": hex_lines(images.d_rows, config.acc_width),
        }
        for name, text in texts.items():
            (self.work_dir / HEX_FILES[name]).write_text(text)

    def load(self, images: _Images, gaps: StreamGaps) -> None:
        """Write the memory images and stream settings into the testbench."""
        self._check_fits(images)
        if self.transfer == "files":
            self._write_files(images)
        else:
            self._write_vpi(images)
        dut = self.dut
        dut.use_files.value = int(self.transfer == "files")
        dut.n_w.value = len(images.weights)
        dut.n_a_rows.value = len(images.activations)
        dut.n_t.value = len(images.tiles)
        dut.n_d.value = len(images.d_rows)
        dut.n_r.value = len(images.result_slots)
        dut.gap_w.value = gaps.weights
        dut.gap_a.value = gaps.activations
        dut.gap_d.value = gaps.d
        dut.gap_r.value = gaps.result_stall
        dut.seed.value = gaps.seed & 0xFFFF or 1  # an all-zero LFSR would stick

    async def start(self) -> None:
        """Raise start; the run begins at the next clock edge."""
        if int(self._done.value):
            self._start.value = 0
            await RisingEdge(self._clk)
            await RisingEdge(self._clk)
        self._start.value = 1

    async def wait_done(self) -> None:
        if not int(self._done.value):
            await RisingEdge(self._done)
        self._start.value = 0

    def _read_words(self, count: int) -> tuple[list[int], list[int]]:
        """Result words and their cycle stamps, from the dump files or through VPI."""
        if self.transfer == "files":
            words = parse_hex_lines((self.work_dir / HEX_FILES["results"]).read_text())
            stamps = parse_hex_lines((self.work_dir / HEX_FILES["result_cycles"]).read_text())
            return words[:count], stamps[:count]
        words = [int(self._r_mem[i].value.to_unsigned()) for i in range(count)]
        stamps = [int(self._r_cycle[i].value.to_unsigned()) for i in range(count)]
        return words, stamps

    def read_results(self, images: _Images, tiles: list[Tile], M: int, N: int) -> GemmRun:
        """Collect the result rows into C and the cycle stamps."""
        words, stamps = self._read_words(len(images.result_slots))
        rows = unpack_rows(words, self.config.cols, self.config.acc_width)
        C = np.zeros((M, N), dtype=np.int32)
        for row, (m, n0, n_len) in zip(rows, images.result_slots, strict=True):
            C[m, n0 : n0 + n_len] = row[:n_len]
        return GemmRun(
            C=C.view(np.float32) if self.config.is_float else C,
            cycles=stamps[-1] + 1,
            result_cycles=stamps,
            stall_cycles=int(self.dut.stalls.value.to_unsigned()),
            tiles=tiles,
        )

    def _lanes(self, A: Operand, B: Operand,
               D: Operand | None) -> tuple[Matrix, Matrix, Matrix | None]:
        """The operands as the integers the array's lanes carry (binary32: bit patterns),
        checked before anything is simulated."""
        if self.config.is_float:
            a_bits, b_bits = _float_bits(A), _float_bits(B)
            if a_bits.ndim != 2 or b_bits.ndim != 2 or a_bits.shape[1] != b_bits.shape[0]:
                raise ValueError(f"shapes do not chain: A{a_bits.shape} B{b_bits.shape}")
            return a_bits, b_bits, None if D is None else _float_bits(D)
        a, b = cast(Matrix, A), cast(Matrix, B)
        d = None if D is None else cast(Matrix, D)
        # The reference checks shapes and operand ranges.
        reference_gemm(a, b, d, self.config.acc_width, self.config.in_width)
        return a, b, d

    async def gemm(
        self, A: Operand, B: Operand, D: Operand | None = None, gaps: StreamGaps | None = None
    ) -> GemmRun:
        """``A(MxK)·B(KxN) + D`` on the array: C (int32, wrapped; float32 on the binary32
        array) and simulated cycles."""
        A, B, D = self._lanes(A, B, D)
        M, K = A.shape
        N = B.shape[1]
        began = time.perf_counter()
        images = build_images(self.config, A, B, D)
        self.load(images, gaps or StreamGaps())
        loaded = time.perf_counter()
        await self.start()
        await self.wait_done()
        simulated = time.perf_counter()
        tiles = gemm_tiles(self.config, M, K, N, has_d=D is not None)
        run = self.read_results(images, tiles, M, N)
        run.load_seconds = loaded - began
        run.simulate_seconds = simulated - loaded
        run.read_seconds = time.perf_counter() - simulated
        return run
