// SPDX-License-Identifier: Apache-2.0
/*
 * sched_sim.c — see sched_sim.h. The walker is pure bookkeeping over step indices; the executor
 * layers memory, the value algebra and the hazard check on top.
 */
#include "helpers/sched_sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static const char *kind_name(int kind) {
  static const char *names[] = {"SEND", "RECV", "RECV_REDUCE", "COPY", "REDUCE"};
  return kind >= 0 && kind < STRATA_STEP_KIND_COUNT ? names[kind] : "?";
}

static int is_transfer_kind(int kind) {
  return kind == STRATA_STEP_SEND || kind == STRATA_STEP_RECV || kind == STRATA_STEP_RECV_REDUCE;
}

/* ---- walker: static checks ----------------------------------------------------------------- */

static int walk_check_rank(const strata_schedule *s, int r, int n, char *err, size_t errlen) {
  if (s->nsteps && (s->rank != r || s->nranks != n)) {
    fail(err, errlen, "rank %d: schedule says rank %d of %d, expected %d of %d", r, s->rank,
         s->nranks, r, n);
    return -1;
  }
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *st = &s->steps[i];
    if (st->kind >= STRATA_STEP_KIND_COUNT) {
      fail(err, errlen, "rank %d step %u: bad kind %u", r, i, st->kind);
      return -1;
    }
    if (is_transfer_kind(st->kind) && (st->peer < 0 || st->peer >= n || st->peer == r)) {
      fail(err, errlen, "rank %d step %u (%s): bad peer %d", r, i, kind_name(st->kind), st->peer);
      return -1;
    }
    if ((uint64_t)st->dep_begin + st->dep_count > s->ndeps) {
      fail(err, errlen, "rank %d step %u: dependency range outside the list", r, i);
      return -1;
    }
    for (uint32_t k = 0; k < st->dep_count; k++) {
      if (s->deps[st->dep_begin + k] >= i) {
        fail(err, errlen, "rank %d step %u: depends on later step %u", r, i,
             s->deps[st->dep_begin + k]);
        return -1;
      }
    }
  }
  return 0;
}

static int walk_build_links(sched_walk *w, char *err, size_t errlen) {
  const int n = w->nranks;
  for (int r = 0; r < n; r++) {
    const strata_schedule *s = w->ranks[r].sched;
    for (uint32_t i = 0; i < s->nsteps; i++) {
      const strata_step *st = &s->steps[i];
      if (!is_transfer_kind(st->kind)) continue;
      int send = st->kind == STRATA_STEP_SEND;
      sched_walk_link *l = &w->links[send ? r * n + st->peer : st->peer * n + r];
      uint32_t **list = send ? &l->send_steps : &l->recv_steps;
      uint32_t *count = send ? &l->nsend : &l->nrecv;
      uint32_t *grown = realloc(*list, (*count + 1) * sizeof **list);
      if (!grown) {
        fail(err, errlen, "out of memory");
        return -1;
      }
      *list = grown;
      (*list)[(*count)++] = i;
    }
  }
  for (int p = 0; p < n; p++) {
    for (int q = 0; q < n; q++) {
      const sched_walk_link *l = &w->links[p * n + q];
      if (l->nsend != l->nrecv) {
        fail(err, errlen, "unmatched messages: rank %d sends %u to rank %d, which receives %u", p,
             l->nsend, q, l->nrecv);
        return -1;
      }
      for (uint32_t k = 0; k < l->nsend; k++) {
        uint64_t sb = w->ranks[p].sched->steps[l->send_steps[k]].bytes;
        uint64_t rb = w->ranks[q].sched->steps[l->recv_steps[k]].bytes;
        if (sb != rb) {
          fail(err, errlen,
               "message %u from rank %d to %d: send (step %u) has %llu bytes, receive (step %u) "
               "%llu",
               k, p, q, l->send_steps[k], (unsigned long long)sb, l->recv_steps[k],
               (unsigned long long)rb);
          return -1;
        }
      }
    }
  }
  return 0;
}

static int walk_build_children(sched_walk_rank *wr) {
  const strata_schedule *s = wr->sched;
  wr->child_begin = calloc(s->nsteps + 1, sizeof *wr->child_begin);
  wr->children = malloc((s->ndeps ? s->ndeps : 1) * sizeof *wr->children);
  wr->pending = calloc(s->nsteps ? s->nsteps : 1, sizeof *wr->pending);
  wr->state = calloc(s->nsteps ? s->nsteps : 1, 1);
  if (!wr->child_begin || !wr->children || !wr->pending || !wr->state) return -1;
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *st = &s->steps[i];
    wr->pending[i] = st->dep_count;
    for (uint32_t k = 0; k < st->dep_count; k++) wr->child_begin[s->deps[st->dep_begin + k] + 1]++;
  }
  for (uint32_t i = 0; i < s->nsteps; i++) wr->child_begin[i + 1] += wr->child_begin[i];
  uint32_t *fill = calloc(s->nsteps ? s->nsteps : 1, sizeof *fill);
  if (!fill) return -1;
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *st = &s->steps[i];
    for (uint32_t k = 0; k < st->dep_count; k++) {
      uint32_t parent = s->deps[st->dep_begin + k];
      wr->children[wr->child_begin[parent] + fill[parent]++] = i;
    }
  }
  free(fill);
  return 0;
}

/* ---- walker: running ------------------------------------------------------------------------ */

static void walk_push(sched_walk *w, sched_event e) {
  if (w->nready == w->ready_cap) {
    uint32_t cap = w->ready_cap ? w->ready_cap * 2 : 64;
    sched_event *grown = realloc(w->ready, cap * sizeof *grown);
    if (!grown) {
      w->failed = 1;
      return;
    }
    w->ready = grown;
    w->ready_cap = cap;
  }
  w->ready[w->nready++] = e;
}

static void walk_try_link(sched_walk *w, int p, int q) {
  sched_walk_link *l = &w->links[p * w->nranks + q];
  if (l->busy || l->next >= l->nsend) return;
  uint32_t s = l->send_steps[l->next], r = l->recv_steps[l->next];
  if (w->ranks[p].state[s] != SCHED_STEP_READY || w->ranks[q].state[r] != SCHED_STEP_READY) return;
  l->busy = 1;
  sched_event e = {SCHED_EVENT_TRANSFER, p, s, q, r};
  walk_push(w, e);
}

static void walk_became_ready(sched_walk *w, int r, uint32_t i) {
  const strata_step *st = &w->ranks[r].sched->steps[i];
  w->ranks[r].state[i] = SCHED_STEP_READY;
  if (st->kind == STRATA_STEP_SEND) {
    walk_try_link(w, r, st->peer);
  } else if (is_transfer_kind(st->kind)) {
    walk_try_link(w, st->peer, r);
  } else {
    sched_event e = {SCHED_EVENT_LOCAL, r, i, -1, 0};
    walk_push(w, e);
  }
}

static void walk_complete_step(sched_walk *w, int r, uint32_t i) {
  sched_walk_rank *wr = &w->ranks[r];
  wr->state[i] = SCHED_STEP_DONE;
  w->steps_done++;
  for (uint32_t k = wr->child_begin[i]; k < wr->child_begin[i + 1]; k++)
    if (--wr->pending[wr->children[k]] == 0) walk_became_ready(w, r, wr->children[k]);
}

int sched_walk_init(sched_walk *w, const strata_schedule *scheds, int nranks, char *err,
                    size_t errlen) {
  memset(w, 0, sizeof *w);
  w->nranks = nranks;
  w->ranks = calloc((size_t)nranks, sizeof *w->ranks);
  w->links = calloc((size_t)nranks * (size_t)nranks, sizeof *w->links);
  if (!w->ranks || !w->links) {
    fail(err, errlen, "out of memory");
    sched_walk_free(w);
    return -1;
  }
  for (int r = 0; r < nranks; r++) {
    w->ranks[r].sched = &scheds[r];
    w->steps_total += scheds[r].nsteps;
    if (walk_check_rank(&scheds[r], r, nranks, err, errlen) || walk_build_children(&w->ranks[r])) {
      if (err && !err[0]) fail(err, errlen, "out of memory");
      sched_walk_free(w);
      return -1;
    }
  }
  if (walk_build_links(w, err, errlen)) {
    sched_walk_free(w);
    return -1;
  }
  for (int r = 0; r < nranks; r++)
    for (uint32_t i = 0; i < scheds[r].nsteps; i++)
      if (w->ranks[r].pending[i] == 0) walk_became_ready(w, r, i);
  return 0;
}

sched_event sched_walk_take(sched_walk *w, uint32_t index) {
  sched_event e = w->ready[index];
  w->ready[index] = w->ready[--w->nready];
  return e;
}

void sched_walk_finish(sched_walk *w, const sched_event *e) {
  if (e->kind == SCHED_EVENT_LOCAL) {
    walk_complete_step(w, e->rank, e->step);
    return;
  }
  sched_walk_link *l = &w->links[e->rank * w->nranks + e->peer];
  l->busy = 0;
  l->next++;
  walk_complete_step(w, e->rank, e->step);
  walk_complete_step(w, e->peer, e->peer_step);
  walk_try_link(w, e->rank, e->peer);
}

int sched_walk_complete(const sched_walk *w) {
  return w->steps_done == w->steps_total;
}

void sched_walk_describe_stuck(const sched_walk *w, char *err, size_t errlen) {
  size_t used = 0;
  if (!err || !errlen) return;
  err[0] = 0;
  used += (size_t)snprintf(err, errlen, "deadlock: %llu of %llu steps done;",
                           (unsigned long long)w->steps_done, (unsigned long long)w->steps_total);
  int shown = 0;
  for (int r = 0; r < w->nranks && shown < 4; r++) {
    const sched_walk_rank *wr = &w->ranks[r];
    for (uint32_t i = 0; i < wr->sched->nsteps && shown < 4; i++) {
      if (wr->state[i] != SCHED_STEP_READY || used >= errlen) continue;
      const strata_step *st = &wr->sched->steps[i];
      used += (size_t)snprintf(err + used, errlen - used, " rank %d step %u %s peer %d waits;", r,
                               i, kind_name(st->kind), st->peer);
      shown++;
    }
  }
}

void sched_walk_free(sched_walk *w) {
  if (w->ranks) {
    for (int r = 0; r < w->nranks; r++) {
      free(w->ranks[r].pending);
      free(w->ranks[r].state);
      free(w->ranks[r].child_begin);
      free(w->ranks[r].children);
    }
  }
  if (w->links) {
    for (int i = 0; i < w->nranks * w->nranks; i++) {
      free(w->links[i].send_steps);
      free(w->links[i].recv_steps);
    }
  }
  free(w->ranks);
  free(w->links);
  free(w->ready);
  memset(w, 0, sizeof *w);
}

/* ---- executor: memory --------------------------------------------------------------------- */

typedef struct sim_rank_mem {
  uint8_t *base[3];
  uint64_t bytes[3];
} sim_rank_mem;

static const char *buf_name(int buf) {
  return buf == STRATA_BUF_SEND ? "SEND" : buf == STRATA_BUF_RECV ? "RECV" : "SCRATCH";
}

/* Resolve (ref, bytes) of rank r; NULL with an error if outside its buffer. */
static uint8_t *sim_resolve(const sim_rank_mem *m, strata_bufref ref, uint64_t bytes, int r,
                            uint32_t step, const char *what, char *err, size_t errlen, int *bad) {
  if (ref.buf > STRATA_BUF_SCRATCH) {
    fail(err, errlen, "rank %d step %u: %s names buffer %u", r, step, what, ref.buf);
    *bad = 1;
    return NULL;
  }
  uint64_t size = m->bytes[ref.buf];
  if (ref.offset > size || bytes > size - ref.offset) {
    fail(err, errlen, "rank %d step %u: %s %s+%llu..+%llu is outside the buffer (%llu bytes)", r,
         step, what, buf_name(ref.buf), (unsigned long long)ref.offset, (unsigned long long)bytes,
         (unsigned long long)size);
    *bad = 1;
    return NULL;
  }
  return m->base[ref.buf] ? m->base[ref.buf] + ref.offset : NULL;
}

/* Static checks of one step's references (bounds, no writes to SEND, staging in scratch, whole
 * elements for reductions). */
static int sim_check_step(const sim_rank_mem *m, const strata_step *st, int r, uint32_t i,
                          uint32_t elem, char *err, size_t errlen) {
  int bad = 0;
  int reads_src = st->kind != STRATA_STEP_RECV;
  int writes_dst = st->kind != STRATA_STEP_SEND;
  if (reads_src) sim_resolve(m, st->src, st->bytes, r, i, "src", err, errlen, &bad);
  if (!bad && st->kind == STRATA_STEP_REDUCE)
    sim_resolve(m, st->src2, st->bytes, r, i, "src2", err, errlen, &bad);
  if (!bad && writes_dst) sim_resolve(m, st->dst, st->bytes, r, i, "dst", err, errlen, &bad);
  if (!bad && st->kind == STRATA_STEP_RECV_REDUCE)
    sim_resolve(m, st->staging, st->bytes, r, i, "staging", err, errlen, &bad);
  if (bad) return -1;
  if (writes_dst && st->dst.buf == STRATA_BUF_SEND) {
    fail(err, errlen, "rank %d step %u (%s) writes the SEND buffer", r, i, kind_name(st->kind));
    return -1;
  }
  if (st->kind == STRATA_STEP_RECV_REDUCE && st->bytes && st->staging.buf != STRATA_BUF_SCRATCH) {
    fail(err, errlen, "rank %d step %u: staging outside scratch", r, i);
    return -1;
  }
  int reduces = st->kind == STRATA_STEP_RECV_REDUCE || st->kind == STRATA_STEP_REDUCE;
  if (reduces && st->bytes % elem) {
    fail(err, errlen, "rank %d step %u: reduces %llu bytes, not whole %u-byte elements", r, i,
         (unsigned long long)st->bytes, elem);
    return -1;
  }
  return 0;
}

/* ---- executor: hazard check ------------------------------------------------------------------ */

typedef struct sim_access {
  uintptr_t lo, hi;
  uint32_t step;
  int write;
} sim_access;

static int access_cmp(const void *a, const void *b) {
  const sim_access *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void access_add(sim_access *list, uint32_t *n, const sim_rank_mem *m, strata_bufref ref,
                       uint64_t bytes, uint32_t step, int write) {
  if (!bytes || !m->base[ref.buf]) return;
  uintptr_t lo = (uintptr_t)(m->base[ref.buf] + ref.offset);
  sim_access a = {lo, lo + (uintptr_t)bytes, step, write};
  list[(*n)++] = a;
}

/* Any two steps whose byte ranges overlap, one of them writing, must be ordered by (transitive)
 * dependencies: otherwise an engine may run them in either order or at once. */
static int sim_check_hazards(const strata_schedule *s, const sim_rank_mem *m, int r, char *err,
                             size_t errlen) {
  const uint32_t n = s->nsteps, words = (n + 63) / 64;
  if (!n) return 0;
  if (n > SCHED_SIM_HAZARD_MAX_STEPS) {
    fail(err, errlen, "rank %d: %u steps is too many for the hazard check (max %u)", r, n,
         SCHED_SIM_HAZARD_MAX_STEPS);
    return -1;
  }
  uint64_t *anc = calloc((size_t)n * words, sizeof *anc);
  sim_access *acc = malloc((size_t)n * 4 * sizeof *acc);
  if (!anc || !acc) {
    free(anc), free(acc);
    fail(err, errlen, "out of memory");
    return -1;
  }
  uint32_t nacc = 0;
  for (uint32_t i = 0; i < n; i++) {
    const strata_step *st = &s->steps[i];
    uint64_t *mine = &anc[(size_t)i * words];
    for (uint32_t k = 0; k < st->dep_count; k++) {
      uint32_t d = s->deps[st->dep_begin + k];
      const uint64_t *theirs = &anc[(size_t)d * words];
      for (uint32_t wd = 0; wd < words; wd++) mine[wd] |= theirs[wd];
      mine[d / 64] |= 1ull << (d % 64);
    }
    if (st->kind != STRATA_STEP_RECV) access_add(acc, &nacc, m, st->src, st->bytes, i, 0);
    if (st->kind == STRATA_STEP_REDUCE) access_add(acc, &nacc, m, st->src2, st->bytes, i, 0);
    if (st->kind != STRATA_STEP_SEND) access_add(acc, &nacc, m, st->dst, st->bytes, i, 1);
    if (st->kind == STRATA_STEP_RECV_REDUCE)
      access_add(acc, &nacc, m, st->staging, st->bytes, i, 1);
  }
  qsort(acc, nacc, sizeof *acc, access_cmp);
  int status = 0;
  for (uint32_t a = 0; a < nacc && !status; a++) {
    for (uint32_t b = a + 1; b < nacc && acc[b].lo < acc[a].hi; b++) {
      if (acc[a].step == acc[b].step || !(acc[a].write || acc[b].write)) continue;
      uint32_t early = acc[a].step < acc[b].step ? acc[a].step : acc[b].step;
      uint32_t late = acc[a].step ^ acc[b].step ^ early;
      if (anc[(size_t)late * words + early / 64] & (1ull << (early % 64))) continue;
      fail(err, errlen,
           "rank %d: steps %u (%s) and %u (%s) touch the same bytes, one writing, without a "
           "dependency",
           r, early, kind_name(s->steps[early].kind), late, kind_name(s->steps[late].kind));
      status = -1;
      break;
    }
  }
  free(anc), free(acc);
  return status;
}

/* ---- executor: running ------------------------------------------------------------------------
 */

typedef struct sim_run {
  const strata_schedule *scheds;
  sim_rank_mem *mem;
  const sched_sim_algebra *alg;
  char *err;
  size_t errlen;
} sim_run;

static void move_bytes(uint8_t *dst, const uint8_t *src, uint64_t bytes) {
  if (bytes && dst != src) memmove(dst, src, bytes);
}

static int sim_reduce(sim_run *run, uint8_t *dst, const uint8_t *a, const uint8_t *b,
                      uint64_t bytes, int r, uint32_t step) {
  if (!bytes) return 0;
  char why[256] = "";
  if (run->alg->reduce(run->alg->ctx, dst, a, b, bytes / run->alg->elem_size, why, sizeof why)) {
    fail(run->err, run->errlen, "rank %d step %u: %s", r, step, why);
    return -1;
  }
  return 0;
}

static int sim_execute(sim_run *run, const sched_event *e) {
  int bad = 0, r = e->rank;
  const strata_step *st = &run->scheds[r].steps[e->step];
  const sim_rank_mem *m = &run->mem[r];
  uint8_t *src = sim_resolve(m, st->src, st->bytes, r, e->step, "src", run->err, run->errlen, &bad);
  if (e->kind == SCHED_EVENT_LOCAL) {
    uint8_t *dst = sim_resolve(m, st->dst, st->bytes, r, e->step, "dst", NULL, 0, &bad);
    if (st->kind == STRATA_STEP_COPY) {
      move_bytes(dst, src, st->bytes);
      return 0;
    }
    uint8_t *src2 = sim_resolve(m, st->src2, st->bytes, r, e->step, "src2", NULL, 0, &bad);
    return sim_reduce(run, dst, src, src2, st->bytes, r, e->step);
  }
  const int q = e->peer;
  const strata_step *rs = &run->scheds[q].steps[e->peer_step];
  const sim_rank_mem *mq = &run->mem[q];
  uint8_t *dst = sim_resolve(mq, rs->dst, rs->bytes, q, e->peer_step, "dst", NULL, 0, &bad);
  if (rs->kind == STRATA_STEP_RECV) {
    move_bytes(dst, src, st->bytes);
    return 0;
  }
  uint8_t *staging =
      sim_resolve(mq, rs->staging, rs->bytes, q, e->peer_step, "staging", NULL, 0, &bad);
  uint8_t *local = sim_resolve(mq, rs->src, rs->bytes, q, e->peer_step, "src", NULL, 0, &bad);
  move_bytes(staging, src, st->bytes);
  return sim_reduce(run, dst, local, staging, rs->bytes, q, e->peer_step);
}

static uint64_t xorshift(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

static int sim_prepare(const strata_schedule *scheds, int nranks, const sched_sim_buffers *bufs,
                       const sched_sim_algebra *alg, const sched_sim_options *opt,
                       sim_rank_mem *mem, char *err, size_t errlen) {
  for (int r = 0; r < nranks; r++) {
    const strata_schedule *s = &scheds[r];
    mem[r].base[STRATA_BUF_SEND] = bufs[r].send;
    mem[r].bytes[STRATA_BUF_SEND] = bufs[r].send_bytes;
    mem[r].base[STRATA_BUF_RECV] = bufs[r].recv;
    mem[r].bytes[STRATA_BUF_RECV] = bufs[r].recv_bytes;
    mem[r].bytes[STRATA_BUF_SCRATCH] = s->scratch_bytes;
    if (s->scratch_bytes) {
      mem[r].base[STRATA_BUF_SCRATCH] = malloc(s->scratch_bytes);
      if (!mem[r].base[STRATA_BUF_SCRATCH]) {
        fail(err, errlen, "rank %d: cannot allocate %llu scratch bytes", r,
             (unsigned long long)s->scratch_bytes);
        return -1;
      }
      memset(mem[r].base[STRATA_BUF_SCRATCH], 0xff, s->scratch_bytes);
    }
    for (uint32_t i = 0; i < s->nsteps; i++)
      if (sim_check_step(&mem[r], &s->steps[i], r, i, alg->elem_size, err, errlen)) return -1;
    if (opt && opt->check_hazards && sim_check_hazards(s, &mem[r], r, err, errlen)) return -1;
  }
  return 0;
}

int sched_sim_run(const strata_schedule *scheds, int nranks, const sched_sim_buffers *bufs,
                  const sched_sim_algebra *algebra, const sched_sim_options *options, char *err,
                  size_t errlen) {
  if (err && errlen) err[0] = 0;
  sched_walk walk;
  if (sched_walk_init(&walk, scheds, nranks, err, errlen)) return -1;
  sim_rank_mem *mem = calloc((size_t)nranks, sizeof *mem);
  int status = mem ? 0 : -1;
  if (!mem) fail(err, errlen, "out of memory");
  if (!status) status = sim_prepare(scheds, nranks, bufs, algebra, options, mem, err, errlen);
  sim_run run = {scheds, mem, algebra, err, errlen};
  uint64_t rng = options && options->seed ? options->seed * 0x9E3779B97F4A7C15ull | 1 : 0;
  while (!status && walk.nready > 0) {
    uint32_t pick = rng ? (uint32_t)(xorshift(&rng) % walk.nready) : 0;
    sched_event e = sched_walk_take(&walk, pick);
    status = sim_execute(&run, &e);
    sched_walk_finish(&walk, &e);
    if (walk.failed) {
      fail(err, errlen, "out of memory");
      status = -1;
    }
  }
  if (!status && !sched_walk_complete(&walk)) {
    sched_walk_describe_stuck(&walk, err, errlen);
    status = -1;
  }
  for (int r = 0; mem && r < nranks; r++) free(mem[r].base[STRATA_BUF_SCRATCH]);
  free(mem);
  sched_walk_free(&walk);
  return status;
}
