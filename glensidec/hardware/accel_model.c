/* accel_model.c - ws_accel's control, cycle by cycle, in C (no data, only timing).
 *
 * A line-by-line port of glensidec.hardware.commands.AccelModel, which replays
 * rtl/ws_accel.v register by register and is the specification: the Python model is
 * checked against the RTL in sim/, and tests/test_accel_native.py checks that this port
 * gives the Python model's counts on every command program it runs. The Python model
 * runs about 35 k cycles/s, too slow to price a whole network at compile time; this one
 * runs tens of millions. glensidec.hardware.accel_native builds it with the system's C
 * compiler and calls it through ctypes.
 *
 * Each call of step() evaluates one clock cycle's combinational signals from the current
 * state, in the order they depend on each other, then applies the clock edge; names
 * follow the Python model (and so the RTL). Where the state repeats with the commands,
 * whole periods are taken at once (skip_periods, below): a field added to `model` must be
 * added to its normalize() and jump() as well.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OP_LOAD = 0, OP_COMPUTE = 1, OP_STORE = 2, OP_CONFIG = 3 };

/* One command, flattened by accel_native.pack_commands: every field is an int64. */
typedef struct {
  int64_t op, wait, signal;
  int64_t w_row, a_row, m_len, add; /* COMPUTE */
  int64_t emit; /* COMPUTE: send the rows to the store path; LOAD: the fence (start once
                   every STORE dispatched before it has written its last beat) */
  int64_t base, length, count1, stride1, count2, stride2, spad_row, bounds; /* LOAD/STORE */
  int64_t y0, y_step, height, x0, x_step, width, pad_value;
  int64_t wait_store; /* LOAD: take a store -> load token; COMPUTE, STORE: wait for
                         on-chip rows (wait_rows) */
  int64_t residual;   /* CONFIG: a residual add (STORE rows read residual rows);
                         COMPUTE, STORE: the rows it does not wait for (rows_ahead) */
  int64_t signal_store; /* LOAD: give a load -> store token (a pooling STORE's y0,
                           y_step and height columns hold its window, window stride and
                           1 for a sum pool); STORE: on chip, its rows into the
                           scratchpad (to_spad) */
  int64_t a_count1, a_stride1, a_stride2; /* COMPUTE: the activation rows' 2-D pattern */
  int64_t epilogue; /* CONFIG: 1 applies the lookup table; 2 is a chunk of it, 3 the
                       per-column scales (all timed as a CONFIG: each waits until the
                       epilogue is empty) */
  int64_t acc_row; /* COMPUTE: the accumulator row of its first row (no effect on timing) */
} gs_command;

/* Results, in the order of commands.AccelTiming's fields. */
typedef struct {
  int64_t cycles, compute_rows, load_bytes, store_bytes, array_stall_cycles;
  int64_t load_busy_cycles, store_busy_cycles; /* cycles with a load slot / a store beat */
  int64_t dispatched; /* commands dispatched when the run ended (a stopped run: how far) */
  int64_t skipped; /* commands taken in repeated periods (skip_periods), not stepped */
} gs_timing;

/* A FIFO of int64 that grows as needed (the Python model's deques). Its capacity is a
 * power of two (64, doubled when full), so positions wrap with a mask: a division per
 * push and pop was a large part of a cycle's cost. */
typedef struct {
  int64_t *items;
  int64_t head, count, capacity;
} fifo;

static int fifo_push(fifo *queue, int64_t value) {
  if (queue->count == queue->capacity) {
    int64_t capacity = queue->capacity ? 2 * queue->capacity : 64;
    int64_t *items = malloc((size_t)capacity * sizeof *items);
    if (items == NULL)
      return -1;
    for (int64_t i = 0; i < queue->count; ++i)
      items[i] = queue->items[(queue->head + i) & (queue->capacity - 1)];
    free(queue->items);
    queue->items = items;
    queue->head = 0;
    queue->capacity = capacity;
  }
  queue->items[(queue->head + queue->count) & (queue->capacity - 1)] = value;
  queue->count += 1;
  return 0;
}

static int64_t fifo_front(const fifo *queue) { return queue->items[queue->head]; }

static int64_t fifo_pop(fifo *queue) {
  int64_t value = queue->items[queue->head];
  queue->head = (queue->head + 1) & (queue->capacity - 1);
  queue->count -= 1;
  return value;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t row_beats(int64_t addr, int64_t length, int64_t bus) {
  return floor_div(addr + length - 1, bus) - floor_div(addr, bus) + 1;
}

typedef struct {
  /* configuration */
  int64_t rows, bus, latency, queue_depth, lat, track_depth, bank_shift, spad_mask;
  int64_t write_rows; /* rows one DMA write may carry (ws_dma_load's groups) */
  int64_t w_load, w_beats; /* weight rows a beat into the array; a tile's beats */
  int64_t out_depth; /* rows of the output FIFO (epilogue -> ws_dma_store) */
  int64_t epi_depth, epi_phases; /* the epilogue's row FIFO; cycles per row (COLS / LANES) */
  const gs_command *commands;
  int64_t n_commands, next_command;
  /* dispatcher queues (command indices) and the tokens */
  fifo lq, eq, sq, aq;
  int64_t tok_le, tok_el, tok_sl, tok_ls;
  /* the fence: per queued load, the STOREs dispatched before it; STOREs dispatched and
     STOREs whose last beat is written */
  fifo lq_sent;
  int64_t st_sent, st_written;
  /* on-chip rows: promised by the on-chip STOREs dispatched, written so far; the rows each
     queued COMPUTE (eq_need, then aq_need) and STORE (sq_need) needs; the on-chip writer
     (an on-chip STORE's rows -> scratchpad) */
  int64_t oc_sent, oc_made, oc_left;
  fifo eq_need, aq_need, sq_need;
  int oc_active, s_onchip;
  /* load unit: slots (the rows a slot that ends a group writes, else 0), due cycles and
     rows of the writes, loads in flight */
  fifo dma_slots, writes, write_rows_due, track_signal, track_rows, track_signal_store;
  int64_t track_written;
  /* execute unit */
  int w_active, w_q, a_active, q_valid, q_last, q_emit, q_signal;
  int64_t w_base, w_beat, a_addr, a_left, a_cmd, a_line, a_col;
  int64_t w_cmd, s_cmd; /* the COMPUTE w_base came from, the STORE res_addr and p_* came
                           from (-1: none yet; no effect on timing: the period skip's) */
  /* ws_ctrl */
  int64_t w_count, w_load_bank, a_bank, bank_full[2], drain[2];
  uint8_t *tag_valid, *tag_emit; /* a delay line of lat entries; the oldest at tag_pos */
  int64_t tag_pos, tags_valid;
  int64_t tags_emit; /* entries of the delay line that are valid and emit */
  /* store unit, epilogue, ws_dma_store */
  int64_t s_pending, s_left, epi_rows, st_beat, res_addr, out_rows;
  int64_t epi_fifo, epi_phase; /* rows in the epilogue's FIFO; the lanes' column group */
  int s1_valid, out_valid, s_signal, cfg_residual;
  /* a pooling store's reads (p_*) and the row read last cycle (q2_*) */
  int s_pool, q2_valid, q2_first, q2_last;
  int64_t p_window, p_wstride, p_t, p_pix, p_addr, p_reads;
  int64_t p_wcount1, p_wstride2, p_step, p_tx, p_line; /* a window in lines, pixels apart */
  fifo st_rows;
  int64_t last_write; /* the last cycle that wrote main memory (-1: none yet) */
} model;

static int idle(const model *m) {
  return !(m->next_command < m->n_commands || m->lq.count || m->eq.count || m->sq.count ||
           m->aq.count || m->dma_slots.count || m->writes.count || m->track_rows.count ||
           m->w_active || m->w_q || m->a_active || m->q_valid || m->tags_valid ||
           m->s_pending >= 0 || m->s_left || m->epi_rows || m->st_rows.count || m->q2_valid ||
           m->p_reads || m->out_rows || m->oc_active);
}

static fifo *queue_of(model *m, const gs_command *command) {
  if (command->op == OP_LOAD)
    return &m->lq;
  return command->op == OP_COMPUTE ? &m->eq : &m->sq;
}

/* A LOAD that ws_dma_load issues in groups (accel.grouped, accel.dma_groups): each line's
 * rows min(write_rows, rows left, rows left in the run of padding or inside rows) at a
 * time; a group inside priced as one row of its span ((n - 1)|stride1| + length bytes from
 * its lowest address), a group of padding rows one slot (slots into dma_slots, bytes
 * counted). */
static int expand_groups(model *m, const gs_command *c, gs_timing *timing) {
  int64_t step = c->stride1 > 0 ? c->stride1 : -c->stride1;
  for (int64_t i2 = 0; i2 < c->count2; ++i2) {
    int64_t y = c->y0 + i2 * c->y_step;
    int y_in = 0 <= y && y < c->height;
    for (int64_t i1 = 0; i1 < c->count1;) {
      int64_t left = c->count1 - i1, x = c->x0 + i1 * c->x_step, n = left;
      int padding = c->bounds && !(y_in && 0 <= x && x < c->width);
      if (c->bounds && c->x_step && y_in) /* a run ends where x enters or leaves [0, width) */
        n = x < 0 ? -x : x < c->width ? c->width - x : left;
      if (n > left)
        n = left;
      if (n > m->write_rows)
        n = m->write_rows;
      int64_t addr = c->base + i2 * c->stride2 + i1 * c->stride1;
      int64_t low = c->stride1 > 0 ? addr : addr - (n - 1) * step;
      int64_t beats = padding ? 1 : row_beats(low, (n - 1) * step + c->length, m->bus);
      if (!padding)
        timing->load_bytes += beats * m->bus;
      for (int64_t beat = 0; beat < beats; ++beat)
        if (fifo_push(&m->dma_slots, beat == beats - 1 ? n : 0))
          return -1;
      i1 += n;
    }
  }
  return 0;
}

/* The rows of a LOAD (slots into dma_slots, bytes counted) or a STORE (beats into st_rows). */
static int expand_rows(model *m, const gs_command *c, int load, gs_timing *timing) {
  if (load && m->write_rows > 1 && c->stride1 && c->stride1 <= c->length &&
      -c->stride1 <= c->length && (!c->bounds || c->x_step == 0 || c->x_step == 1))
    return expand_groups(m, c, timing);
  for (int64_t i2 = 0; i2 < c->count2; ++i2) {
    int64_t y = c->y0 + i2 * c->y_step;
    for (int64_t i1 = 0; i1 < c->count1; ++i1) {
      int64_t x = c->x0 + i1 * c->x_step;
      int padding = c->bounds && !(0 <= y && y < c->height && 0 <= x && x < c->width);
      int64_t addr = c->base + i2 * c->stride2 + i1 * c->stride1;
      int64_t beats = row_beats(addr, c->length, m->bus);
      if (!load) {
        if (fifo_push(&m->st_rows, beats))
          return -1;
        continue;
      }
      if (padding)
        beats = 1;
      else
        timing->load_bytes += beats * m->bus;
      for (int64_t beat = 0; beat < beats; ++beat)
        if (fifo_push(&m->dma_slots, beat == beats - 1))
          return -1;
    }
  }
  return 0;
}

/* The activation streamer's address after `k` more rows of its tile (the per-row update of
 * step(), k times: along a line by a_stride1, to the next line by a_stride2 after
 * a_count1 rows, every address wrapped by the mask). */
static void advance_rows(model *m, const gs_command *tile, int64_t k) {
  int64_t lines, col;
  if (!tile->a_count1) {
    m->a_addr = (m->a_addr + k * tile->a_stride1) & m->spad_mask;
    m->a_col += k;
    return;
  }
  lines = (m->a_col + k) / tile->a_count1;
  col = (m->a_col + k) % tile->a_count1;
  if (lines == 0) {
    m->a_addr = (m->a_addr + k * tile->a_stride1) & m->spad_mask;
  } else {
    m->a_line = (m->a_line + lines * tile->a_stride2) & m->spad_mask;
    m->a_addr = (m->a_line + col * tile->a_stride1) & m->spad_mask;
  }
  m->a_col = col;
}

/* How many of the next `k` cycles (at least 1: this one's reads were checked) the weight
 * streamer's beat and the activation streamer's row read different scratchpad banks,
 * each going on a row a cycle (the weights from w_base + w_beat, the activations along
 * their tile's pattern: step()'s per-row update). */
static int64_t apart_rows(const model *m, const gs_command *tile, int64_t k) {
  int64_t addr = m->a_addr, line = m->a_line, col = m->a_col;
  for (int64_t j = 1; j < k; ++j) {
    if (tile->a_count1 && col + 1 == tile->a_count1) {
      line = (line + tile->a_stride2) & m->spad_mask;
      addr = line;
      col = 0;
    } else {
      addr = (addr + tile->a_stride1) & m->spad_mask;
      col += 1;
    }
    int64_t w_row = m->w_base + (m->w_beat + j) * m->w_load; /* the beat's first row */
    if (w_row >> m->bank_shift == addr >> m->bank_shift ||
        ((w_row + m->w_load - 1) & m->spad_mask) >> m->bank_shift == addr >> m->bank_shift)
      return j;
  }
  return k;
}

/* Rows a plain stretch must have left before it is taken in one go (shorter ones are
 * stepped: checking costs about as much as a cycle). */
#define PLAIN_MIN_ROWS 8

/* The load unit through a stretch of up to `k` plain cycles from `cycle` (see step()):
 * it takes a slot a cycle and its row writes fall due, as stepping would, and the stretch
 * ends before a cycle in which a load's last row is written (its tokens move other
 * units) or a queued load is accepted (`l_valid`, which nothing in the stretch changes,
 * and one slot or none left). Returns the stretch's cycles (>= 1: its first cycle has
 * neither; the caller checked), or -1 when out of memory. The rest of a plain cycle does
 * not read the load unit, so the array's rows go on as if it were idle. */
static int64_t plain_loads(model *m, int64_t cycle, int64_t k, int l_valid,
                           gs_timing *timing) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t now = cycle + j;
    int wr_en = m->writes.count && fifo_front(&m->writes) == now;
    int64_t wr_rows = wr_en ? fifo_front(&m->write_rows_due) : 0; /* a group's rows */
    if (j > 0 && ((wr_en && m->track_written + wr_rows == fifo_front(&m->track_rows)) ||
                  (l_valid && m->dma_slots.count <= 1)))
      return j;
    if (wr_en) {
      fifo_pop(&m->writes);
      fifo_pop(&m->write_rows_due);
      m->track_written += wr_rows;
    }
    if (m->dma_slots.count) {
      int64_t ends = fifo_pop(&m->dma_slots); /* the rows of the group it ends, or 0 */
      timing->load_busy_cycles += 1;
      if (ends && (fifo_push(&m->writes, now + 1 + m->latency) ||
                   fifo_push(&m->write_rows_due, ends)))
        return -1;
    }
  }
  return k;
}

/* The store path through a stretch of up to `k` plain cycles from `cycle` with no row
 * admitted (see step()): the epilogue's lanes take their FIFO's rows a column group a
 * cycle into the output register and FIFO, and ws_dma_store writes that FIFO's rows a
 * beat a cycle, as stepping would. The stretch ends before a cycle in which a STORE
 * writes its last beat (the fence's count and the next STORE's acceptance read it) or the
 * epilogue's last row leaves it (a CONFIG waits for that). Returns the stretch's cycles;
 * the state is left as it was unless `apply` (then the writes are counted and the last
 * one's cycle kept). The rest of a plain cycle does not read the store path. */
static int64_t plain_store(model *m, int64_t cycle, int64_t k, int apply, gs_timing *timing) {
  int64_t epi_rows = m->epi_rows, out_rows = m->out_rows, epi_fifo = m->epi_fifo;
  int64_t epi_phase = m->epi_phase, st_beat = m->st_beat, written = 0; /* rows written */
  int64_t beats_written = 0, last = -1; /* beats written; the last one's cycle */
  int out_valid = m->out_valid;
  const fifo *beats = &m->st_rows; /* each row's beats */
  for (int64_t j = 0; j < k; ++j) {
    int64_t rows_left = beats->count - written;
    int st_active = rows_left > 0;
    int64_t row_beats_now =
        st_active ? beats->items[(beats->head + written) & (beats->capacity - 1)] : 0;
    int st_beat_last = st_active && st_beat == row_beats_now - 1;
    int st_in_valid = out_rows > 0;
    int write = st_active && st_in_valid;
    int out_pop = st_in_valid && st_beat_last;
    int out_full = out_rows == m->out_depth;
    int epi_out_fire = out_valid && !out_full;
    int lane_last = epi_phase == m->epi_phases - 1;
    int lane_step = epi_fifo > 0 && (!lane_last || !out_valid || !out_full);
    int lane_done = lane_step && lane_last;
    if (!write && !epi_out_fire && !lane_step)
      break; /* nothing moves: nor will it */
    if ((out_pop && rows_left == 1) || (epi_out_fire && epi_rows == 1))
      k = j;
    else {
      epi_rows -= epi_out_fire;
      out_rows += epi_out_fire - out_pop;
      epi_fifo -= lane_done;
      if (lane_step)
        epi_phase = lane_last ? 0 : epi_phase + 1;
      out_valid = lane_done || (out_valid && out_full);
      if (write) {
        if (st_beat_last) {
          written += 1;
          st_beat = 0;
        } else {
          st_beat += 1;
        }
        beats_written += 1;
        last = j;
      }
    }
  }
  if (apply) {
    m->epi_rows = epi_rows;
    m->out_rows = out_rows;
    m->epi_fifo = epi_fifo;
    m->epi_phase = epi_phase;
    m->out_valid = out_valid;
    m->st_beat = st_beat;
    timing->store_bytes += beats_written * m->bus;
    timing->store_busy_cycles += beats_written;
    if (last >= 0)
      m->last_write = cycle + last;
    for (int64_t i = 0; i < written; ++i)
      fifo_pop(&m->st_rows);
  }
  return k;
}

/* One cycle, or (a plain cycle: see below) a stretch of plain cycles at once; `*cycles`
 * is how many it took (a cycle that writes main memory is kept in m->last_write).
 * Returns 0, -1 when out of memory, -3 when the program reads a residual and a weight row
 * from one bank at once. */
static int step(model *m, int64_t cycle, int64_t limit, gs_timing *timing, int64_t *cycles) {
  const gs_command *cmd = m->commands;
  int64_t rows = m->rows;
  /* -- store path: ws_dma_store, epilogue, admission */
  int st_active = m->st_rows.count > 0;
  int st_beat_last = st_active && m->st_beat == fifo_front(&m->st_rows) - 1;
  int st_in_ready = st_active && st_beat_last;
  int st_in_valid = m->out_rows > 0; /* the output FIFO's oldest row */
  int st_cmd_last = st_in_ready && st_in_valid && m->st_rows.count == 1;
  int st_cmd_ready = !st_active || st_cmd_last;
  int write = st_active && st_in_valid;
  /* the on-chip writer, after the load DMA on the scratchpad's write port */
  int dma_wr_en = m->writes.count && fifo_front(&m->writes) == cycle;
  int oc_write = m->oc_active && st_in_valid && !dma_wr_en;
  int oc_free = !m->oc_active || (oc_write && m->oc_left == 1);
  int out_full = m->out_rows == m->out_depth;
  int epi_out_fire = m->out_valid && !out_full; /* into the output FIFO */
  /* the lanes take the FIFO's oldest row a column group per cycle; its last group
   * waits for the output register */
  int lane_last = m->epi_phase == m->epi_phases - 1;
  int lane_step = m->epi_fifo > 0 && (!lane_last || !m->out_valid || !out_full);
  int lane_done = lane_step && lane_last;
  int epi_en = m->epi_fifo + m->s1_valid < m->epi_depth; /* in_ready: room for a row */
  int out_pop = (st_in_valid && st_in_ready) || oc_write;
  int r_valid = m->tag_valid[m->tag_pos] && m->tag_emit[m->tag_pos];
  int q2_consume = m->q2_valid && (!m->q2_last || epi_en);
  int pool_issue = m->s_pool && m->p_reads > 0 && (!m->q2_valid || q2_consume);
  int pool_admit = m->q2_valid && m->q2_last && epi_en;
  int acc_admit = r_valid && epi_en && m->s_left > 0 && !m->s_pool;
  int admit = acc_admit || pool_admit;
  int admit_last = admit && m->s_left == 1;
  int r_ready = epi_en && m->s_left > 0 && !m->s_pool;
  int en = !(r_valid && !r_ready);
  int s_accept = m->s_pending >= 0 && st_cmd_ready && oc_free;
  int64_t head = m->sq.count ? fifo_front(&m->sq) : -1;
  int store_pop = head >= 0 && cmd[head].op == OP_STORE && (m->s_left == 0 || admit_last) &&
                  (m->s_pending < 0 || s_accept) && (!cmd[head].wait || m->tok_ls > 0) &&
                  (!cmd[head].wait_store || m->oc_made >= fifo_front(&m->sq_need));
  /* a CONFIG waits until every earlier row has left the epilogue (not the FIFO) */
  int config_pop = head >= 0 && cmd[head].op == OP_CONFIG && m->s_left == 0 && m->epi_rows == 0;
  int res_read = acc_admit && m->cfg_residual; /* scratchpad port 2 */
  int rd2 = res_read || pool_issue;
  int64_t rd2_addr = pool_issue ? m->p_addr : m->res_addr;
  int sl_give = admit_last && m->s_signal;
  /* -- ws_ctrl handshakes */
  int w_last_beat = m->w_count == m->w_beats - 1;
  int64_t bank = m->w_load_bank;
  int load_bank_free = !m->bank_full[bank] && m->drain[bank] == 0;
  int w_ready = en && (!w_last_beat || load_bank_free);
  int w_fire = m->w_q && w_ready;
  int w_commit = w_fire && w_last_beat;
  int a_ready = en && (m->bank_full[m->a_bank] || (w_commit && bank == m->a_bank));
  int a_fire = m->q_valid && a_ready;
  /* -- weight streamer */
  int w_issue = m->w_active && (!m->w_q || w_fire);
  int w_issue_last = w_issue && m->w_beat == m->w_beats - 1;
  int64_t e_head = m->eq.count ? fifo_front(&m->eq) : -1;
  int w_start = (!m->w_active || w_issue_last) && e_head >= 0 &&
                (!cmd[e_head].wait || m->tok_le > 0) && m->aq.count < 4;
  /* -- activation streamer */
  int a_try = m->a_active && (!m->q_valid || a_fire);
  /* a beat reads w_load rows: the banks of its first and last */
  int64_t w_row = m->w_base + m->w_beat * m->w_load;
  int64_t w_bank = w_row >> m->bank_shift; /* and its last row's (addresses wrap) */
  int64_t w_bank_end = ((w_row + m->w_load - 1) & m->spad_mask) >> m->bank_shift;
  int64_t rd2_bank = rd2_addr >> m->bank_shift, a_bank = m->a_addr >> m->bank_shift;
  int conflict = (w_issue && (w_bank == a_bank || w_bank_end == a_bank)) ||
                 (rd2 && rd2_bank == a_bank);
  int a_issued = a_try && !conflict;
  int a_issue_last = a_issued && m->a_left == 1;
  int a_start = (!m->a_active || a_issue_last) && m->aq.count > 0 &&
                (!cmd[fifo_front(&m->aq)].wait_store || m->oc_made >= fifo_front(&m->aq_need));
  int el_give = a_fire && m->q_last && m->q_signal;
  int a_last = m->q_last, a_emit = m->q_emit; /* the row offered to the array now */
  /* -- load unit */
  int64_t l_head = m->lq.count ? fifo_front(&m->lq) : -1;
  int dma_last = m->dma_slots.count == 1;
  int load_busy = m->dma_slots.count > 0;
  int l_valid = l_head >= 0 && (!cmd[l_head].wait || m->tok_el > 0) &&
                (!cmd[l_head].wait_store || m->tok_sl > 0) &&
                (!cmd[l_head].emit || m->st_written >= fifo_front(&m->lq_sent)) &&
                m->track_rows.count < m->track_depth;
  int l_accept = l_valid && (m->dma_slots.count == 0 || dma_last);
  int wr_en = m->writes.count && fifo_front(&m->writes) == cycle;
  int64_t wr_rows = wr_en ? fifo_front(&m->write_rows_due) : 0;
  int track_done = wr_en && m->track_written + wr_rows == fifo_front(&m->track_rows);
  int le_give = track_done && fifo_front(&m->track_signal);
  int ls_give = track_done && fifo_front(&m->track_signal_store);
  /* -- dispatcher */
  int64_t offered = m->next_command < m->n_commands ? m->next_command : -1;
  fifo *queue = offered >= 0 ? queue_of(m, &cmd[offered]) : NULL;
  int dispatch = offered >= 0 && queue->count < m->queue_depth;

  if (w_issue && rd2 && (w_bank == rd2_bank || w_bank_end == rd2_bank))
    return -3; /* a residual or pooled row and a weight row read from one bank */

  /* A plain cycle: nothing moves but the array's rows, the weight beats and the load
   * unit's slots and writes, each at its steady rate. The array takes a row of its tile
   * (not the tile's last, nor one that emits: `a_rows`) or its activation streamer is
   * still (`a_still`: idle with nothing queued, or a row offered that the array does not
   * take, its weights not in); the weight streamer issues a beat that ws_ctrl takes (not
   * a tile's last: `w_beats`) or is done or held (its last beat until its bank has
   * drained, at least); no load accepted nor a load's last row written (a load may be
   * issuing and its rows arriving: `plain_loads`), nothing dispatched, no row in the
   * delay line that emits, the store path and the epilogue idle or waiting for rows.
   * Nothing a plain cycle changes (the streamers' row counts and addresses, the beat
   * counts, the delay line, the row count, the load unit's slots and writes) is read by
   * these conditions, except the scratchpad banks of the two streamers' reads (checked
   * row by row), so the next cycles are plain too until the tile's last row, the weights'
   * last beat or the load unit's next event: they are taken at once, with the state they
   * leave (exactly what stepping would give). (Stretches with loads in flight halve the
   * steps of a layer whose bands and weights stream in while the array computes; with
   * weight beats, those of a tile loading while the array takes the last one's rows and
   * the dense layers of one activation row, whose cycles are nearly all weight beats.) */
  *cycles = 1;
  if (en && !l_accept && !track_done && !dispatch && !store_pop && !config_pop && !s_accept &&
      !admit && !pool_issue && !m->q2_valid && !m->s1_valid && !m->tags_emit &&
      /* (the on-chip writer takes the output FIFO's rows: only with no row on the way) */
      !(m->oc_active && (m->epi_fifo || m->out_valid || m->out_rows))) {
    int a_rows = a_issued && a_fire && m->a_left >= PLAIN_MIN_ROWS && !a_last && !m->q_emit &&
                 !cmd[m->a_cmd].emit;
    int a_still = !a_fire && !a_start && !(m->a_active && !m->q_valid);
    int w_beats = w_issue && w_fire && m->w_beat < m->w_beats - 1 && !w_last_beat;
    int w_quiet = !w_issue && !w_fire && !w_start;
    int64_t k = limit - cycle;
    if ((a_rows || a_still) && (w_beats || w_quiet)) {
      if (a_rows && m->a_left - 1 < k)
        k = m->a_left - 1; /* the stretch ends before the tile's last row */
      if (w_beats) { /* and before the weights' last beat */
        int64_t beats = m->w_beats - 1 - (m->w_beat > m->w_count ? m->w_beat : m->w_count);
        if (beats < k)
          k = beats;
      } else {
        int64_t held = m->w_q ? m->drain[m->w_load_bank] : 0;
        if (held > 0 && k > held)
          k = held; /* a held last weight beat goes once its bank has drained */
      }
      if (w_beats && a_rows) /* and before a row whose two reads share a bank */
        k = apart_rows(m, &cmd[m->a_cmd], k);
    } else {
      k = 0;
    }
    int loads = load_busy || m->writes.count;
    if (k > 0) /* the store path taken now unless the loads may end the stretch sooner */
      k = plain_store(m, cycle, k, !loads, timing);
    if (k > 0) {
      if (loads) { /* (the store path then taken for the k left) */
        k = plain_loads(m, cycle, k, l_valid, timing);
        if (k < 0)
          return -1;
        plain_store(m, cycle, k, 1, timing);
      }
      for (int b = 0; b < 2; ++b)
        m->drain[b] = m->drain[b] > k ? m->drain[b] - k : 0;
      if (w_beats) {
        m->w_beat += k;
        m->w_count += k;
      }
      if (a_rows) {
        m->q_valid = 1;
        m->q_last = m->q_emit = m->q_signal = 0;
        advance_rows(m, &cmd[m->a_cmd], k);
        m->a_left -= k;
        timing->compute_rows += k;
      }
      for (int64_t j = 0; j < k && j < m->lat; ++j) { /* k rows (or none) into the line */
        int64_t position = (m->tag_pos + j) % m->lat;
        m->tags_valid += a_rows - m->tag_valid[position];
        m->tag_valid[position] = (uint8_t)a_rows;
        m->tag_emit[position] = 0;
      }
      m->tag_pos = (m->tag_pos + k) % m->lat;
      *cycles = k;
      return 0;
    }
  }

  /* ==== clock edge */
  m->tok_le += le_give - (w_start && cmd[e_head].wait);
  m->tok_el += el_give - (l_accept && cmd[l_head].wait);
  m->tok_sl += sl_give - (l_accept && cmd[l_head].wait_store);
  m->tok_ls += ls_give - (store_pop && cmd[head].wait);
  /* load unit */
  if (wr_en) { /* its countdown reached 0 */
    fifo_pop(&m->writes);
    fifo_pop(&m->write_rows_due);
  }
  if (m->dma_slots.count) {
    int64_t ends = fifo_pop(&m->dma_slots); /* the rows of the group it ends, or 0 */
    if (ends && (fifo_push(&m->writes, cycle + 1 + m->latency) || /* LATENCY + 1 later */
                 fifo_push(&m->write_rows_due, ends)))
      return -1;
  }
  if (track_done) {
    fifo_pop(&m->track_rows);
    fifo_pop(&m->track_signal);
    fifo_pop(&m->track_signal_store);
    m->track_written = 0;
  } else if (wr_en) {
    m->track_written += wr_rows;
  }
  if (l_accept) {
    const gs_command *load = &cmd[fifo_pop(&m->lq)];
    fifo_pop(&m->lq_sent);
    if (fifo_push(&m->track_signal, load->signal) ||
        fifo_push(&m->track_signal_store, load->signal_store) ||
        fifo_push(&m->track_rows, load->count1 * load->count2) ||
        expand_rows(m, load, 1, timing))
      return -1;
  }
  /* execute unit */
  m->w_q = w_issue || (m->w_q && !w_fire);
  if (w_start) {
    fifo_pop(&m->eq);
    if (fifo_push(&m->aq, e_head) || fifo_push(&m->aq_need, fifo_pop(&m->eq_need)))
      return -1;
    m->w_active = 1;
    m->w_base = cmd[e_head].w_row;
    m->w_cmd = e_head;
    m->w_beat = 0;
  } else if (w_issue_last) {
    m->w_active = 0;
  } else if (w_issue) {
    m->w_beat += 1;
  }
  if (a_issued && m->a_cmd >= 0) {
    m->q_valid = 1;
    m->q_last = m->a_left == 1;
    m->q_emit = (int)cmd[m->a_cmd].emit;
    m->q_signal = cmd[m->a_cmd].signal && m->a_left == 1;
  } else if (a_fire) {
    m->q_valid = 0;
  }
  if (a_start) {
    m->a_cmd = fifo_pop(&m->aq);
    fifo_pop(&m->aq_need);
    m->a_active = 1;
    m->a_addr = cmd[m->a_cmd].a_row;
    m->a_left = cmd[m->a_cmd].m_len;
    m->a_line = m->a_addr;
    m->a_col = 0;
  } else if (a_issue_last) {
    m->a_active = 0;
  } else if (a_issued) {
    const gs_command *tile = &cmd[m->a_cmd];
    m->a_left -= 1;
    if (tile->a_count1 && m->a_col + 1 == tile->a_count1) { /* the next line */
      m->a_line = (m->a_line + tile->a_stride2) & m->spad_mask;
      m->a_addr = m->a_line;
      m->a_col = 0;
    } else {
      m->a_addr = (m->a_addr + tile->a_stride1) & m->spad_mask;
      m->a_col += 1;
    }
  }
  /* ws_ctrl, frozen with the array when a result waits */
  if (en) {
    for (int b = 0; b < 2; ++b)
      m->drain[b] = m->drain[b] > 0 ? m->drain[b] - 1 : 0;
    if (w_fire) {
      m->w_count = w_last_beat ? 0 : m->w_count + 1;
      if (w_last_beat) {
        m->bank_full[bank] = 1;
        m->w_load_bank ^= 1;
      }
    }
    if (a_fire && a_last) {
      m->bank_full[m->a_bank] = 0;
      m->drain[m->a_bank] = rows - 1;
      m->a_bank ^= 1;
    }
    m->tags_valid += a_fire - m->tag_valid[m->tag_pos];
    m->tags_emit += (a_fire && a_emit) - (m->tag_valid[m->tag_pos] && m->tag_emit[m->tag_pos]);
    m->tag_valid[m->tag_pos] = (uint8_t)a_fire;
    m->tag_emit[m->tag_pos] = (uint8_t)a_emit;
    m->tag_pos = m->tag_pos + 1 == m->lat ? 0 : m->tag_pos + 1; /* (no division) */
    timing->compute_rows += a_fire;
  } else {
    timing->array_stall_cycles += 1;
  }
  /* store unit, epilogue, ws_dma_store */
  m->epi_rows += admit - epi_out_fire;
  m->out_rows += epi_out_fire - out_pop;
  m->epi_fifo += m->s1_valid - lane_done;
  m->s1_valid = admit;
  if (lane_step)
    m->epi_phase = lane_last ? 0 : m->epi_phase + 1;
  m->out_valid = lane_done || (m->out_valid && out_full);
  m->st_written += st_cmd_last;
  if (write) {
    if (st_beat_last) {
      fifo_pop(&m->st_rows);
      m->st_beat = 0;
    } else {
      m->st_beat += 1;
    }
    timing->store_bytes += m->bus;
  }
  m->oc_made += oc_write;
  if (s_accept && m->s_onchip) { /* its rows go to the on-chip writer */
    m->oc_active = 1;
    m->oc_left = cmd[m->s_pending].count1 * cmd[m->s_pending].count2;
    m->s_pending = -1;
  } else {
    if (oc_write) {
      m->oc_left -= 1;
      m->oc_active = m->oc_left > 0;
    }
    if (s_accept) {
      m->st_rows.count = 0;
      if (expand_rows(m, &cmd[m->s_pending], 0, timing))
        return -1;
      m->st_beat = 0;
      m->s_pending = -1;
    }
  }
  if (pool_issue) {
    m->q2_valid = 1;
    m->q2_first = m->p_t == 0;
    m->q2_last = m->p_t == m->p_window - 1;
  } else if (q2_consume) {
    m->q2_valid = 0;
  }
  if (store_pop) {
    fifo_pop(&m->sq);
    fifo_pop(&m->sq_need);
    m->s_pending = head;
    m->s_cmd = head;
    m->s_onchip = (int)cmd[head].signal_store;
    m->s_left = cmd[head].count1 * cmd[head].count2;
    m->s_signal = (int)cmd[head].signal;
    m->res_addr = cmd[head].spad_row;
    m->s_pool = cmd[head].y0 > 0; /* a pooling store: y0 = window, y_step = stride */
    m->p_window = cmd[head].y0;
    m->p_wstride = cmd[head].y_step;
    m->p_pix = m->p_addr = m->p_line = cmd[head].spad_row;
    m->p_t = m->p_tx = 0;
    /* and x0 = taps per window line (0: one line), x_step = rows between window lines,
     * width = rows between pooled pixels (0: 1) */
    m->p_wcount1 = cmd[head].x0;
    m->p_wstride2 = cmd[head].x_step;
    m->p_step = cmd[head].width > 0 ? cmd[head].width : 1;
    m->p_reads = m->s_pool ? m->s_left * m->p_window : 0;
  } else {
    m->s_left -= admit;
    m->res_addr += res_read;
    if (pool_issue) {
      m->p_reads -= 1;
      if (m->p_t == m->p_window - 1) {
        m->p_t = m->p_tx = 0;
        m->p_pix += m->p_step;
        m->p_addr = m->p_line = m->p_pix;
      } else if (m->p_wcount1 > 0 && m->p_tx == m->p_wcount1 - 1) {
        m->p_t += 1;
        m->p_tx = 0;
        m->p_line += m->p_wstride2;
        m->p_addr = m->p_line;
      } else {
        m->p_t += 1;
        m->p_tx += 1;
        m->p_addr += m->p_wstride;
      }
    }
  }
  if (config_pop) {
    fifo_pop(&m->sq);
    fifo_pop(&m->sq_need);
    m->cfg_residual = (int)cmd[head].residual;
  }
  if (dispatch) {
    const gs_command *sent = &cmd[offered];
    if (sent->op == OP_LOAD && fifo_push(&m->lq_sent, m->st_sent))
      return -1;
    /* a COMPUTE's or STORE's on-chip rows: every row promised so far but rows_ahead */
    if (sent->op == OP_COMPUTE && fifo_push(&m->eq_need, m->oc_sent - sent->residual))
      return -1;
    if ((sent->op == OP_STORE || sent->op == OP_CONFIG) &&
        fifo_push(&m->sq_need, sent->op == OP_STORE ? m->oc_sent - sent->residual : 0))
      return -1;
    if (sent->op == OP_STORE && sent->signal_store)
      m->oc_sent += sent->count1 * sent->count2;
    m->st_sent += sent->op == OP_STORE && !sent->signal_store;
    if (fifo_push(queue, offered))
      return -1;
    m->next_command += 1;
  }
  timing->load_busy_cycles += load_busy;
  timing->store_busy_cycles += write;
  if (write)
    m->last_write = cycle;
  return 0;
}

static void release(model *m) {
  fifo *fifos[] = {&m->lq, &m->lq_sent, &m->eq, &m->sq, &m->aq, &m->dma_slots, &m->writes,
                   &m->eq_need, &m->aq_need, &m->sq_need,
                   &m->write_rows_due,
                   &m->track_signal, &m->track_rows, &m->track_signal_store, &m->st_rows};
  for (size_t i = 0; i < sizeof fifos / sizeof fifos[0]; ++i)
    free(fifos[i]->items);
  free(m->tag_valid);
  free(m->tag_emit);
}

/* ==== Periodic steady states (exact: a repetition found, not an estimate)
 *
 * A layer's program repeats one pattern of commands thousands of times (a fold's LOAD
 * and COMPUTE, a chunk's N blocks), and the machine settles into a state that repeats
 * with it. At each dispatch (a checkpoint: the first cycle with next_command = k) the
 * state can be written relative to the command stream and the cycle (`normalize`):
 * command indices as distances back from k, cycles as distances back from now, the
 * fence's and the on-chip rows' counts relative to their running totals, scratchpad
 * addresses relative to the command they came from. If that vector at checkpoint k
 * equals the one at an earlier checkpoint a (p = k - a commands before), the commands
 * the state still refers to and the next ones repeat those p earlier (`same_key`: every
 * field but main-memory bases, compared modulo the bus, and scratchpad rows), and no two
 * scratchpad reads can meet in one bank over the whole stretch (bank masks, below), then
 * every later period takes exactly the cycles and counts of the one from a to k: the
 * only place a scratchpad address acts on timing is a bank comparison, and step() reads
 * nothing else the normalization drops. Such periods are then taken at once (`jump`),
 * as many as the commands keep repeating and the limit allows.
 *
 * Any state field added to `model` must be added to normalize() (and, if it holds a
 * command index, a cycle, a running count or a scratchpad address, to jump()). */

#define KEY_FIELDS 31 /* gs_command's int64 fields */
enum { F_W_ROW = 3, F_A_ROW = 4, F_BASE = 8, F_SPAD_ROW = 14, F_ACC_ROW = 30 };

typedef struct {
  int64_t *items;
  int64_t count, capacity;
} vec;

static int vec_push(vec *v, int64_t value) {
  if (v->count == v->capacity) {
    int64_t capacity = v->capacity ? 2 * v->capacity : 256;
    int64_t *items = realloc(v->items, (size_t)capacity * sizeof *items);
    if (items == NULL)
      return -1;
    v->items = items;
    v->capacity = capacity;
  }
  v->items[v->count++] = value;
  return 0;
}

/* Two commands time alike: with their scratchpad rows (`rows`), or wherever their rows
 * cannot share a bank. */
static int same_key(const gs_command *x, const gs_command *y, int64_t bus, int rows) {
  const int64_t *a = (const int64_t *)x, *b = (const int64_t *)y;
  for (int i = 0; i < KEY_FIELDS; ++i) {
    if (i == F_ACC_ROW || (!rows && (i == F_W_ROW || i == F_A_ROW || i == F_SPAD_ROW)))
      continue;
    if (i == F_BASE ? (a[i] - floor_div(a[i], bus) * bus) != (b[i] - floor_div(b[i], bus) * bus)
                    : a[i] != b[i])
      return 0;
  }
  return 1;
}

/* The banks (bit b for bank b, bank 63 and beyond or below 0 in bit 63) of the rows lo..hi. */
static uint64_t bank_bits(int64_t lo, int64_t hi, int64_t shift) {
  int64_t first = lo >> shift, last = hi >> shift;
  uint64_t bits = 0;
  if (first < 0 || last > 62)
    bits |= (uint64_t)1 << 63;
  if (first < 0)
    first = 0;
  if (last > 62)
    last = 62;
  if (last - first >= 62)
    return ~(uint64_t)0;
  for (int64_t b = first; b <= last; ++b)
    bits |= (uint64_t)1 << b;
  return bits;
}

/* lo..hi of start + i * step for i < count (count >= 1). */
static void span(int64_t step, int64_t count, int64_t *lo, int64_t *hi) {
  int64_t reach = (count > 0 ? count - 1 : 0) * step;
  *lo += reach < 0 ? reach : 0;
  *hi += reach > 0 ? reach : 0;
}

typedef struct {
  uint64_t weights, activations, residual, pool;
  int residual_config; /* a CONFIG with a residual add among them */
} banks;

/* The banks of the rows lo..hi, each address wrapped around the scratchpad. */
static uint64_t wrapped_bank_bits(const model *m, int64_t lo, int64_t hi) {
  int64_t rows_all = m->spad_mask + 1, first = lo & m->spad_mask, last = hi & m->spad_mask;
  if (hi - lo + 1 >= rows_all)
    return bank_bits(0, rows_all - 1, m->bank_shift);
  if (first <= last)
    return bank_bits(first, last, m->bank_shift);
  return bank_bits(first, rows_all - 1, m->bank_shift) | bank_bits(0, last, m->bank_shift);
}

/* The banks a command's scratchpad reads may use (a superset). */
static void add_banks(const model *m, const gs_command *c, banks *into) {
  int64_t shift = m->bank_shift;
  if (c->op == OP_COMPUTE) {
    int64_t lo = c->a_row, hi = c->a_row, w_last = c->w_row + m->rows - 1;
    /* a beat's first row as it is, its last wrapped (step()'s w_bank, w_bank_end) */
    into->weights |= bank_bits(c->w_row, w_last, shift) |
                     wrapped_bank_bits(m, c->w_row, w_last);
    if (c->a_count1) {
      span(c->a_stride2, (c->m_len + c->a_count1 - 1) / c->a_count1, &lo, &hi);
      span(c->a_stride1, c->m_len < c->a_count1 ? c->m_len : c->a_count1, &lo, &hi);
    } else {
      span(c->a_stride1, c->m_len, &lo, &hi);
    }
    into->activations |= wrapped_bank_bits(m, lo, hi);
  } else if (c->op == OP_STORE && c->y0 > 0) { /* a pooling store's window reads */
    int64_t lo = c->spad_row, hi = c->spad_row, window = c->y0;
    span(c->width > 0 ? c->width : 1, c->count1 * c->count2, &lo, &hi);
    if (c->x0 > 0) {
      span(c->x_step, (window + c->x0 - 1) / c->x0, &lo, &hi);
      span(c->y_step, c->x0, &lo, &hi);
    } else {
      span(c->y_step, window, &lo, &hi);
    }
    into->pool |= bank_bits(lo, hi, shift);
  } else if (c->op == OP_STORE) { /* residual rows, if a CONFIG asks for them */
    int64_t rows = c->count1 * c->count2;
    into->residual |= bank_bits(c->spad_row, c->spad_row + (rows > 0 ? rows - 1 : 0), shift);
  } else if (c->op == OP_CONFIG && c->residual) {
    into->residual_config = 1;
  }
}

/* No weight, activation and residual or pooled read of these banks can share a bank. */
static int apart(const model *m, const banks *b) {
  uint64_t second = b->pool | (b->residual_config || m->cfg_residual ? b->residual : 0);
  return !(b->weights & b->activations) && !(second & b->activations) && !(b->weights & second);
}

static int64_t relative(int64_t index, int64_t now) { return index >= 0 ? now - index : -1; }

/* The state at a checkpoint (next_command = k, at `cycle`), relative to both; -1 when
 * out of memory. `*oldest` gets the earliest command the state refers to. */
static int normalize(const model *m, int64_t cycle, vec *v, int64_t *oldest,
                     const vec *against) {
  const gs_command *cmd = m->commands;
  int64_t k = m->next_command, low = k;
  int64_t a_row = m->a_cmd >= 0 ? cmd[m->a_cmd].a_row : 0;
  int64_t w_row = m->w_cmd >= 0 ? cmd[m->w_cmd].w_row : 0;
  int64_t s_row = m->s_cmd >= 0 ? cmd[m->s_cmd].spad_row : 0;
  int64_t scalars[] = {
      m->tok_le, m->tok_el, m->tok_sl, m->tok_ls, m->st_written - m->st_sent,
      m->oc_made - m->oc_sent, m->oc_left, m->oc_active, m->s_onchip, m->track_written,
      m->w_active, m->w_q, m->a_active, m->q_valid, m->q_last, m->q_emit, m->q_signal,
      m->w_beat, m->a_left, m->a_col, (m->a_addr - a_row) & m->spad_mask,
      (m->a_line - a_row) & m->spad_mask, relative(m->a_cmd, k), m->w_base - w_row,
      relative(m->w_cmd, k), m->w_count, m->w_load_bank, m->a_bank, m->bank_full[0],
      m->bank_full[1], m->drain[0], m->drain[1], m->tags_valid, m->tags_emit,
      relative(m->s_pending, k), relative(m->s_cmd, k), m->s_left, m->epi_rows, m->st_beat,
      m->res_addr - s_row, m->out_rows, m->epi_fifo, m->epi_phase, m->s1_valid,
      m->out_valid, m->s_signal, m->cfg_residual, m->s_pool, m->q2_valid, m->q2_first,
      m->q2_last, m->p_window, m->p_wstride, m->p_t, m->p_pix - s_row, m->p_addr - s_row,
      m->p_reads, m->p_wcount1, m->p_wstride2, m->p_step, m->p_tx, m->p_line - s_row,
      m->last_write >= 0 ? cycle - m->last_write : -1};
  const fifo *indices[] = {&m->lq, &m->eq, &m->sq, &m->aq};
  const fifo *plain[] = {&m->dma_slots, &m->write_rows_due, &m->track_signal,
                         &m->track_rows, &m->track_signal_store, &m->st_rows};
  const fifo *needs[] = {&m->eq_need, &m->aq_need, &m->sq_need};
  v->count = 0;
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; ++i)
    if (vec_push(v, scalars[i]))
      return -1;
  if (against && (against->count < v->count ||  /* (most checkpoints differ here) */
                  memcmp(against->items, v->items, (size_t)v->count * sizeof *v->items)))
    return 1;
  for (int64_t i = 0; i < m->lat; ++i) {
    int64_t at = (m->tag_pos + i) % m->lat;
    if (vec_push(v, m->tag_valid[at] | m->tag_emit[at] << 1))
      return -1;
  }
  for (size_t f = 0; f < 4; ++f) {
    if (vec_push(v, indices[f]->count))
      return -1;
    for (int64_t i = 0; i < indices[f]->count; ++i) {
      int64_t index = indices[f]->items[(indices[f]->head + i) & (indices[f]->capacity - 1)];
      low = index < low ? index : low;
      if (vec_push(v, k - index))
        return -1;
    }
  }
  for (size_t f = 0; f < 6; ++f) {
    if (vec_push(v, plain[f]->count))
      return -1;
    for (int64_t i = 0; i < plain[f]->count; ++i)
      if (vec_push(v, plain[f]->items[(plain[f]->head + i) & (plain[f]->capacity - 1)]))
        return -1;
  }
  if (vec_push(v, m->writes.count) || vec_push(v, m->lq_sent.count))
    return -1;
  for (int64_t i = 0; i < m->writes.count; ++i)
    if (vec_push(v, m->writes.items[(m->writes.head + i) & (m->writes.capacity - 1)] - cycle))
      return -1;
  for (int64_t i = 0; i < m->lq_sent.count; ++i)
    if (vec_push(v, m->lq_sent.items[(m->lq_sent.head + i) & (m->lq_sent.capacity - 1)] -
                        m->st_sent))
      return -1;
  for (size_t f = 0; f < 3; ++f) {
    if (vec_push(v, needs[f]->count))
      return -1;
    for (int64_t i = 0; i < needs[f]->count; ++i)
      if (vec_push(v, needs[f]->items[(needs[f]->head + i) & (needs[f]->capacity - 1)] -
                          m->oc_sent))
        return -1;
  }
  int64_t singles[] = {m->a_cmd, m->w_cmd, m->s_cmd, m->s_pending};
  for (size_t i = 0; i < 4; ++i)
    if (singles[i] >= 0 && singles[i] < low)
      low = singles[i];
  *oldest = low;
  return 0;
}

typedef struct {
  vec snapshot, current;
  int64_t at, cycle, st_sent, oc_sent, window; /* at: its checkpoint (-1: none) */
  gs_timing timing;
} periods;

#define FIRST_WINDOW 4
#define LAST_WINDOW ((int64_t)1 << 16)

static void shift_fifo(fifo *queue, int64_t by) {
  for (int64_t i = 0; i < queue->count; ++i)
    queue->items[(queue->head + i) & (queue->capacity - 1)] += by;
}

/* The state `times` periods of `commands` commands and `cycles` cycles later (see above). */
static void jump(model *m, const periods *p, int64_t times, int64_t commands, int64_t cycles,
                 int64_t *cycle, gs_timing *timing) {
  const gs_command *cmd = m->commands;
  int64_t by = times * commands, later = times * cycles;
  int64_t sent = times * (m->st_sent - p->st_sent), onchip = times * (m->oc_sent - p->oc_sent);
  int64_t a_row = m->a_cmd >= 0 ? cmd[m->a_cmd].a_row : 0;
  int64_t w_row = m->w_cmd >= 0 ? cmd[m->w_cmd].w_row : 0;
  int64_t s_row = m->s_cmd >= 0 ? cmd[m->s_cmd].spad_row : 0;
  int64_t a_offset = (m->a_addr - a_row) & m->spad_mask;
  int64_t line_offset = (m->a_line - a_row) & m->spad_mask;
  fifo *indices[] = {&m->lq, &m->eq, &m->sq, &m->aq};
  fifo *needs[] = {&m->eq_need, &m->aq_need, &m->sq_need};
  for (size_t f = 0; f < 4; ++f)
    shift_fifo(indices[f], by);
  for (size_t f = 0; f < 3; ++f)
    shift_fifo(needs[f], onchip);
  shift_fifo(&m->lq_sent, sent);
  shift_fifo(&m->writes, later);
  m->next_command += by;
  m->st_sent += sent;
  m->st_written += sent;
  m->oc_sent += onchip;
  m->oc_made += onchip;
  if (m->last_write >= 0)
    m->last_write += later;
  if (m->a_cmd >= 0) {
    m->a_cmd += by;
    m->a_addr = (cmd[m->a_cmd].a_row + a_offset) & m->spad_mask;
    m->a_line = (cmd[m->a_cmd].a_row + line_offset) & m->spad_mask;
  }
  if (m->w_cmd >= 0) {
    m->w_cmd += by;
    m->w_base += cmd[m->w_cmd].w_row - w_row;
  }
  if (m->s_cmd >= 0) {
    int64_t moved;
    m->s_cmd += by;
    moved = cmd[m->s_cmd].spad_row - s_row;
    m->res_addr += moved;
    m->p_pix += moved;
    m->p_addr += moved;
    m->p_line += moved;
  }
  if (m->s_pending >= 0)
    m->s_pending += by;
  timing->skipped += by;
  timing->compute_rows += times * (timing->compute_rows - p->timing.compute_rows);
  timing->load_bytes += times * (timing->load_bytes - p->timing.load_bytes);
  timing->store_bytes += times * (timing->store_bytes - p->timing.store_bytes);
  timing->array_stall_cycles += times * (timing->array_stall_cycles -
                                         p->timing.array_stall_cycles);
  timing->load_busy_cycles += times * (timing->load_busy_cycles - p->timing.load_busy_cycles);
  timing->store_busy_cycles += times * (timing->store_busy_cycles -
                                        p->timing.store_busy_cycles);
  *cycle += later;
}

static int take_snapshot(model *m, periods *p, int64_t cycle, const gs_timing *timing) {
  int64_t oldest;
  if (normalize(m, cycle, &p->snapshot, &oldest, NULL))
    return -1;
  p->at = m->next_command;
  p->cycle = cycle;
  p->st_sent = m->st_sent;
  p->oc_sent = m->oc_sent;
  p->timing = *timing;
  return 0;
}

/* At a checkpoint: the periods taken at once, if the state repeats the snapshot's (then a
 * new snapshot is taken at the next checkpoint); else a snapshot now and then, each
 * kept for twice as many commands as the last (a period up to LAST_WINDOW commands).
 * -1 when out of memory. */
static int skip_periods(model *m, periods *p, int64_t *cycle, int64_t limit,
                        gs_timing *timing) {
  const gs_command *cmd = m->commands;
  int64_t k = m->next_command, oldest, period, times = 0, cycles;
  int differs, rows;
  banks seen = {0, 0, 0, 0, 0};
  if (p->at < 0 || k - p->at > p->window) {
    if (p->at >= 0 && p->window < LAST_WINDOW)
      p->window *= 2;
    return take_snapshot(m, p, *cycle, timing);
  }
  period = k - p->at;
  if (!same_key(&cmd[k - 1], &cmd[p->at - 1], m->bus, 0))
    return 0;
  differs = normalize(m, *cycle, &p->current, &oldest, &p->snapshot);
  if (differs < 0)
    return -1;
  if (differs || p->current.count != p->snapshot.count ||
      memcmp(p->current.items, p->snapshot.items,
             (size_t)p->current.count * sizeof *p->current.items) != 0 ||
      oldest - period < 0)
    return 0;
  /* the commands still referred to, and the period before, repeat: with their rows when
     the reads of some may share a bank */
  for (int64_t i = oldest - period; i < k; ++i)
    add_banks(m, &cmd[i], &seen);
  rows = !apart(m, &seen);
  for (int64_t i = oldest; i < k; ++i)
    if (!same_key(&cmd[i], &cmd[i - period], m->bus, rows))
      return 0;
  cycles = *cycle - p->cycle;
  for (;;) { /* each further period: its commands repeat the last, their banks apart */
    int64_t start = k + times * period, end = start + period, i;
    if (end > m->n_commands || (times + 1) * cycles >= limit - *cycle)
      break;
    for (i = start; i < end && same_key(&cmd[i], &cmd[i - period], m->bus, rows); ++i)
      if (!rows)
        add_banks(m, &cmd[i], &seen);
    if (i < end || (!rows && !apart(m, &seen)))
      break;
    times += 1;
  }
  if (times == 0)
    return 0;
  jump(m, p, times, period, cycles, cycle, timing);
  p->at = -1;
  p->window = FIRST_WINDOW;
  return 0;
}

/* Runs `n` commands offered from cycle 0 until every result is in memory.
 * Returns 0, 1 when `limit` cycles pass first, 2 when memory runs out, 3 on a bank
 * conflict between the residual and the weight reads (the Python model's ValueError). */
int gs_accel_cycles(int64_t rows, int64_t cols, int64_t bus_bytes, int64_t write_rows,
                    int64_t w_load, int64_t latency,
                    int64_t bank_rows, int64_t scratchpad_rows, int64_t queue_depth,
                    int64_t out_depth, int64_t epi_depth, int64_t epi_phases,
                    const gs_command *commands,
                    int64_t n, int64_t limit, gs_timing *timing) {
  model m;
  periods search;
  int64_t cycle = 0;
  int status = 0;
  memset(&m, 0, sizeof m);
  memset(&search, 0, sizeof search);
  search.at = -1;
  search.window = FIRST_WINDOW;
  memset(timing, 0, sizeof *timing);
  m.rows = rows;
  m.bus = bus_bytes;
  m.write_rows = write_rows;
  m.w_load = w_load;
  m.w_beats = rows / w_load;
  m.latency = latency;
  m.queue_depth = queue_depth;
  m.out_depth = out_depth;
  m.epi_depth = epi_depth;
  m.epi_phases = epi_phases;
  m.spad_mask = scratchpad_rows - 1; /* row addresses wrap (SPAD_W bits) */
  m.lat = rows + cols - 1; /* injection -> accumulator (ws_ctrl) */
  m.track_depth = 1;
  while (m.track_depth <= latency + 2) /* 1 << (latency + 2).bit_length() */
    m.track_depth <<= 1;
  for (int64_t value = bank_rows; value > 1; value >>= 1)
    m.bank_shift += 1;
  m.commands = commands;
  m.n_commands = n;
  m.a_cmd = m.s_pending = m.last_write = m.w_cmd = m.s_cmd = -1;
  m.tag_valid = calloc((size_t)m.lat, 1);
  m.tag_emit = calloc((size_t)m.lat, 1);
  if (m.tag_valid == NULL || m.tag_emit == NULL)
    status = 2;
  while (status == 0 && !idle(&m)) {
    int result;
    int64_t cycles = 1, dispatched = m.next_command;
    if (cycle >= limit) {
      status = 1;
      break;
    }
    result = step(&m, cycle, limit, timing, &cycles);
    if (result == -3)
      status = 3;
    else if (result < 0)
      status = 2;
    cycle += cycles;
    if (status == 0 && m.next_command != dispatched &&
        skip_periods(&m, &search, &cycle, limit, timing))
      status = 2;
  }
  timing->cycles = m.last_write + 1;
  timing->dispatched = m.next_command;
  release(&m);
  free(search.snapshot.items);
  free(search.current.items);
  return status;
}
