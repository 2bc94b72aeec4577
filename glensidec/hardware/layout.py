"""A program's NCHW input as the NHWC map a layer reads, made by ws_accel itself.

A convolution layer reads its input as an NHWC map (the DMA's im2col rows: one pixel's
channels are contiguous). A program's input is NCHW, so the host used to transpose it and,
for a layer whose packed kernel taps straddle the border (an RGB stem), pad it: three
copies of the image for ResNet's stem, about 460 k host cycles under the host model.

`layout_program` makes that map with the accelerator's existing commands. In NCHW one
channel's pixels are contiguous, so a DMA row can read `group` consecutive pixels of one
channel (g = the most pixels whose C channels fit the array's columns, COLS // C, that
divide the padded map's pixels). There is one K fold per channel: fold c's rows are
channel c's pixel groups, and its weight tile puts row byte j (pixel j of the group)
into column j·C + c, so the accumulator sums each group's channels into the NHWC bytes of
its g pixels, and the identity epilogue stores them as one row (g·C bytes). A padded
map's border comes from the DMA's bounds: each padded row is cut into segments that lie
wholly inside the map or wholly in its border (left border, full groups, a last shorter
group, right border); a border row is `pad_value` in every byte, and the same weights
give it in every channel. The stores write each segment's rows at their place in the
padded map. A small map whose padded line fits a row (`whole_lines`: W pixels within the
rows, (W + 2p)·C bytes within the columns, e.g. the digits' 8×8 image) is one row per
padded line instead: the DMA reads the line's W pixels, the weights put pixel j into
columns (j + p)·C + c, and the epilogue's bias writes the pad value into the border
columns no weight reaches (the digits' image: 10 array rows and 135 cycles at 16×16
instead of 30 rows, a row per border and interior segment, and 224 cycles).

It costs the array C·(rows of g pixels) cycles: ResNet's 230×230×3 stem input takes about
32 k cycles instead of the host's 460 k, and nothing is left on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from glensidec.hardware.accel import CapacityError, DmaCommand, EpilogueConfig
from glensidec.hardware.commands import (
    AccelConfig,
    Command,
    Compute,
    Config,
    LayerProgram,
    Load,
    Store,
    _align,
    _software_pipeline,
    _Step,
    _weight_rows,
)


@dataclass(frozen=True)
class NhwcLayout:
    """A (C, H, W) int8 map stored NCHW, made into the (H + 2p, W + 2p, C) NHWC map padded
    by p with `pad_value` (p = 0: the map's NHWC rows)."""

    channels: int
    height: int
    width: int
    padding: int = 0
    pad_value: int = 0

    @property
    def padded(self) -> tuple[int, int]:
        return self.height + 2 * self.padding, self.width + 2 * self.padding

    @property
    def elements(self) -> int:
        """Bytes of the NHWC map it writes."""
        height, width = self.padded
        return height * width * self.channels


@dataclass(frozen=True)
class _Segment:
    """Rows of one padded line: `count` groups of `pixels` pixels from padded x `x`, all
    inside the map or all in its border."""

    x: int
    count: int
    pixels: int


def whole_lines(layout: NhwcLayout, config: AccelConfig) -> bool:
    """Does a row hold a whole padded line (the map's W pixels a reduction index each, the
    padded line's channels within the columns)? Then each line is one array row: the
    weights put pixel j into columns (j + p)·C + c and the epilogue's bias writes the
    border columns, instead of a row per border and interior segment."""
    return layout.padding > 0 and layout.width <= config.rows and \
        layout.padded[1] * layout.channels <= config.cols


def layout_group(layout: NhwcLayout, config: AccelConfig) -> int:
    """Pixels per row: a whole padded line (`whole_lines`), else the most whose channels
    fit the columns (and the rows, each pixel a reduction index), among those that divide
    the padded map's pixels (so the layer's output is whole rows of g·C bytes); 0 when
    one pixel's channels do not fit."""
    if whole_lines(layout, config):
        return layout.padded[1]
    most = min(config.cols // layout.channels, config.rows)
    height, width = layout.padded
    return max((g for g in range(1, most + 1) if height * width % g == 0), default=0)


def _segments(layout: NhwcLayout, group: int) -> list[_Segment]:
    pad, width = layout.padding, layout.width
    if group == layout.padded[1] and pad:  # whole lines: one row each
        return [_Segment(0, 1, group)]
    segments = []
    for start, stop in ((0, pad), (pad, pad + width), (pad + width, 2 * pad + width)):
        full, rest = divmod(stop - start, group)
        if full:
            segments.append(_Segment(start, full, group))
        if rest:
            segments.append(_Segment(start + full * group, 1, rest))
    return segments


def layout_weights(layout: NhwcLayout, config: AccelConfig) -> npt.NDArray[np.int64]:
    """(C·ROWS, g·C): fold c's tile, row j (pixel j of a group) → column j·C + c."""
    group, channels = layout_group(layout, config), layout.channels
    weights = np.zeros((channels * config.rows, group * channels), np.int64)
    lines = whole_lines(layout, config)
    shift = layout.padding if lines else 0  # whole lines: pixel j is padded pixel j + p
    for channel in range(channels):
        for pixel in range(layout.width if lines else group):
            weights[channel * config.rows + pixel, (pixel + shift) * channels + channel] = 1
    return weights


def layout_bias(layout: NhwcLayout, config: AccelConfig) -> npt.NDArray[np.int64]:
    """(g·C,): the epilogue's bias, the pad value in the border columns of a whole line
    (no weight reaches them), else 0."""
    group, channels = layout_group(layout, config), layout.channels
    bias = np.zeros(group * channels, np.int64)
    if whole_lines(layout, config):
        border = layout.padding * channels
        bias[:border] = bias[len(bias) - border:] = layout.pad_value
    return bias


def layout_lines(layout: NhwcLayout, config: AccelConfig) -> int:
    """Padded lines per chunk: as many as the accumulator and an activation buffer (every
    channel's rows) hold, a quarter of the map at most; CapacityError naming the sizes
    when not even one fits."""
    group = layout_group(layout, config)
    if group < 1:
        raise CapacityError(
            f"an NCHW map of {layout.channels} channels has more channels per pixel than "
            f"the array's {config.cols} columns")
    rows = sum(segment.count for segment in _segments(layout, group))
    quarter = config.memory.scratchpad_rows // 4
    # at least four chunks where the map has the lines: one chunk's loads overlap
    # another's computes
    lines = min(layout.padded[0] if whole_lines(layout, config) else -(-layout.padded[0] // 4),
                config.acc_depth // rows,
                quarter // (rows * layout.channels))
    if lines < 1 or layout.channels * config.rows > quarter:
        raise CapacityError(
            f"one line of the {layout.padded[1]}-pixel NHWC map is {rows} rows per channel; "
            f"{layout.channels} channels need {rows * layout.channels} rows of an activation "
            f"buffer ({quarter}) and {rows} accumulator rows ({config.acc_depth})")
    return lines


def layout_program(config: AccelConfig, layout: NhwcLayout) -> LayerProgram:
    """The commands that write `layout`'s NHWC map (at output_base) from the NCHW map (at
    input_base), double-buffered per chunk of padded lines like conv_program's steps."""
    R, C = config.rows, layout.channels
    group = layout_group(layout, config)
    segments = _segments(layout, group)
    per_line = sum(segment.count for segment in segments)
    lines = layout_lines(layout, config)
    height, width = layout.padded
    quarter = config.memory.scratchpad_rows // 4
    input_base = 0
    weight_base = _align(layout.channels * layout.height * layout.width)
    output_base = weight_base + _align(C * R * group * C)
    memory_bytes = output_base + _align(layout.elements) + 2 * config.memory.bus_bytes
    used = group * C
    lines_mode = whole_lines(layout, config)
    identity = Config(EpilogueConfig(),
                      tuple(int(b) for b in layout_bias(layout, config))
                      + (0,) * (config.cols - used),
                      (1,) * used + (0,) * (config.cols - used))
    steps: list[_Step[Compute]] = []
    for line0 in range(0, height, lines):
        lines_here = min(lines, height - line0)
        m_len = lines_here * per_line
        a_buffer, w_buffer = len(steps) % 2 * quarter, (2 + len(steps) % 2) * quarter
        dmas: list[DmaCommand] = []
        for channel in range(C):
            first = a_buffer + channel * m_len
            if lines_mode:  # the map's W pixels of each line, border lines by the bounds
                y = line0 - layout.padding
                dmas.append(DmaCommand(
                    base=input_base + (channel * layout.height + y) * layout.width,
                    length=layout.width, count2=lines_here, stride2=layout.width,
                    spad_row=first, bounds=True, y0=y, y_step=1, height=layout.height,
                    x0=0, x_step=0, width=1, pad_value=layout.pad_value))
                continue
            for segment in segments:
                y, x = line0 - layout.padding, segment.x - layout.padding
                dmas.append(DmaCommand(
                    base=input_base + (channel * layout.height + y) * layout.width + x,
                    length=segment.pixels, count1=segment.count, stride1=group,
                    count2=lines_here, stride2=layout.width, spad_row=first, bounds=True,
                    y0=y, y_step=1, height=layout.height, x0=x, x_step=group,
                    width=layout.width, pad_value=layout.pad_value))
                first += lines_here * segment.count
        if len(steps) < 2:  # each weight buffer's tiles stay for every later chunk
            # (whole lines: the rows past the map's W pixels are zero, padding rows)
            dmas += [_weight_rows(R, channel * R, layout.width if lines_mode else R,
                                  weight_base, used, used, w_buffer + channel * R)
                     for channel in range(C)]
        loads = [Load(dma, wait=len(steps) >= 2 and index == 0, signal=index == len(dmas) - 1)
                 for index, dma in enumerate(dmas)]
        computes = [Compute(w_row=w_buffer + channel * R, a_row=a_buffer + channel * m_len,
                            m_len=m_len, add=channel > 0, emit=channel == C - 1,
                            wait=channel == 0, signal=channel == C - 1)
                    for channel in range(C)]
        stores: list[Command] = [
            Store(DmaCommand(base=output_base + (line0 * width + segment.x) * C,
                             length=segment.pixels * C, count1=segment.count,
                             stride1=group * C, count2=lines_here, stride2=width * C))
            for segment in segments]
        steps.append(_Step(loads, computes, stores))
    return LayerProgram([identity, *_software_pipeline(steps)], input_base, weight_base,
                        output_base, memory_bytes, lines * per_line, C, C)


def layout_reference(layout: NhwcLayout, nchw: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """The (H + 2p, W + 2p, C) map the layer writes, from the (C, H, W) map."""
    pad = layout.padding
    image = np.asarray(nchw, np.int64).reshape(layout.channels, layout.height, layout.width)
    padded = np.pad(image, ((0, 0), (pad, pad), (pad, pad)), constant_values=layout.pad_value)
    result: npt.NDArray[np.int64] = padded.transpose(1, 2, 0)
    return result


@dataclass(frozen=True)
class NchwLayout:
    """A layer's (P, C) int8 rows (P pixels of C channels, NHWC) as the (C, P) NCHW map:
    the program's result in the layout it declares."""

    pixels: int
    channels: int


def nchw_group(layout: NchwLayout, config: AccelConfig) -> int:
    """Pixels per output row (one channel's, contiguous in NCHW): the most that fit the
    columns among those that divide P (so the result is whole rows)."""
    return max(g for g in range(1, config.cols + 1) if layout.pixels % g == 0)


def nchw_weights(layout: NchwLayout, config: AccelConfig) -> npt.NDArray[np.int64]:
    """(g·ROWS, g): fold j's tile, row 0 (the byte its rows read) → column j."""
    group = nchw_group(layout, config)
    weights = np.zeros((group * config.rows, group), np.int64)
    for pixel in range(group):
        weights[pixel * config.rows, pixel] = 1
    return weights


def nchw_channels(layout: NchwLayout, config: AccelConfig) -> int:
    """Channels per chunk (their rows in the accumulator, every fold's in an activation
    buffer; a quarter of them at most, so chunks overlap); CapacityError naming the sizes
    when not even one channel's rows fit."""
    group = nchw_group(layout, config)
    rows = layout.pixels // group
    quarter = config.memory.scratchpad_rows // 4
    channels = min(-(-layout.channels // 4), config.acc_depth // rows, quarter // (rows * group))
    if channels < 1 or group * config.rows > quarter:
        raise CapacityError(
            f"one channel of {layout.pixels} pixels is {rows} rows of {group}; it needs "
            f"{rows * group} rows of an activation buffer ({quarter}) and {rows} accumulator "
            f"rows ({config.acc_depth})")
    return channels


def nchw_program(config: AccelConfig, layout: NchwLayout) -> LayerProgram:
    """The commands that write `layout`'s NCHW map (at output_base) from the rows (at
    input_base). An output row is g consecutive pixels of one channel; fold j (one per
    pixel of a group) reads for each such row the one byte of its j-th pixel (a DMA row
    of length 1: channel c of pixel b·g + j), and its weight tile puts it into column j;
    so the array takes one row per element, as a copy would."""
    R, C, P = config.rows, layout.channels, layout.pixels
    group = nchw_group(layout, config)
    blocks = P // group
    chunk = nchw_channels(layout, config)
    quarter = config.memory.scratchpad_rows // 4
    input_base = 0
    weight_base = _align(P * C)
    output_base = weight_base + _align(group * R * group)
    memory_bytes = output_base + _align(P * C) + 2 * config.memory.bus_bytes
    identity = Config(EpilogueConfig(), (0,) * config.cols,
                      (1,) * group + (0,) * (config.cols - group))
    steps: list[_Step[Compute]] = []
    for channel0 in range(0, C, chunk):
        channels = min(chunk, C - channel0)
        m_len = channels * blocks
        a_buffer, w_buffer = len(steps) % 2 * quarter, (2 + len(steps) % 2) * quarter
        dmas = [DmaCommand(base=input_base + pixel * C + channel0, length=1, count1=blocks,
                           stride1=group * C, count2=channels, stride2=1,
                           spad_row=a_buffer + pixel * m_len) for pixel in range(group)]
        if len(steps) < 2:  # each weight buffer's tiles stay for every later chunk
            dmas += [_weight_rows(R, pixel * R, R, weight_base, group, group,
                                  w_buffer + pixel * R) for pixel in range(group)]
        loads = [Load(dma, wait=len(steps) >= 2 and index == 0, signal=index == len(dmas) - 1)
                 for index, dma in enumerate(dmas)]
        computes = [Compute(w_row=w_buffer + pixel * R, a_row=a_buffer + pixel * m_len,
                            m_len=m_len, add=pixel > 0, emit=pixel == group - 1,
                            wait=pixel == 0, signal=pixel == group - 1)
                    for pixel in range(group)]
        store: list[Command] = [Store(DmaCommand(
            base=output_base + channel0 * P, length=group, count1=blocks, stride1=group,
            count2=channels, stride2=P))]
        steps.append(_Step(loads, computes, store))
    return LayerProgram([identity, *_software_pipeline(steps)], input_base, weight_base,
                        output_base, memory_bytes, chunk * blocks, group, group)


def nchw_reference(layout: NchwLayout, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """The (C, P) map the layer writes, from the (P, C) rows."""
    result: npt.NDArray[np.int64] = np.asarray(rows, np.int64).reshape(
        layout.pixels, layout.channels).T
    return result
