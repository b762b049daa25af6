// SPDX-License-Identifier: Apache-2.0
/*
 * sim.c — the schedule simulator (see sim.h for the model).
 *
 * Layout: every rank's steps are flattened into one global step array (rank r's step i is
 * base[r] + i). Per global step we keep the number of unfinished dependencies, the time it
 * became ready, and for receives the arrival time of the matching message. Dependents are kept
 * as CSR (succ_begin/succ). Matching k-th SEND p→q with the k-th RECV of q from p uses, per
 * rank, the receive steps sorted by (peer, index): the k-th receive from p is at
 * lower_bound(p) + k. Sends get their sequence number the same way.
 *
 * Invariant: events pop in non-decreasing time; every completion time computed is >= the time
 * of the event that computed it, so the heap never goes back in time.
 */
#include "model/sim.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Events pop by time; at one instant a rank's local steps (COPY, REDUCE) before any transfer,
 * then by global step. The engine runs a small local step inline the moment it is ready
 * (engine.c step_start), before it starts a pull or serves one: an out-of-place allgather copies
 * its own block, then pulls. */
typedef struct sim_event {
  double time;
  uint32_t step;     /* global */
  uint32_t transfer; /* 1: a SEND or a receive, 0: a local step */
} sim_event;

static int ev_before(const sim_event *a, const sim_event *b) {
  if (a->time != b->time) return a->time < b->time;
  if (a->transfer != b->transfer) return a->transfer < b->transfer;
  return a->step <= b->step;
}

typedef struct sim_heap {
  sim_event *ev;
  size_t n, cap;
} sim_heap;

static int heap_add(sim_heap *h, sim_event e) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 1024;
    sim_event *ev = realloc(h->ev, cap * sizeof *ev);
    if (!ev) return -1;
    h->ev = ev;
    h->cap = cap;
  }
  size_t i = h->n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (ev_before(&h->ev[parent], &e)) break;
    h->ev[i] = h->ev[parent];
    i = parent;
  }
  h->ev[i] = e;
  return 0;
}

static sim_event heap_pop(sim_heap *h) {
  sim_event top = h->ev[0], last = h->ev[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && !ev_before(&h->ev[c], &h->ev[c + 1])) c++;
    if (ev_before(&last, &h->ev[c])) break;
    h->ev[i] = h->ev[c];
    i = c;
  }
  h->ev[i] = last;
  return top;
}

/* (peer, local step index) of one rank's sends or receives, sorted. */
typedef struct peer_entry {
  int32_t peer;
  uint32_t step;
} peer_entry;

static int peer_entry_cmp(const void *a, const void *b) {
  const peer_entry *x = a, *y = b;
  if (x->peer != y->peer) return x->peer < y->peer ? -1 : 1;
  return x->step < y->step ? -1 : x->step > y->step;
}

static size_t peer_lower_bound(const peer_entry *e, size_t n, int32_t peer) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (e[mid].peer < peer)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

typedef struct sim_state {
  const strata_sim_model *model;
  const strata_schedule *scheds;
  int nranks;
  uint32_t total;
  uint32_t *base;    /* nranks + 1 */
  uint32_t *pending; /* unfinished deps per step */
  double *ready;     /* max completion of deps */
  double *arrival;   /* receives: when the first bytes land, NAN until the send ran */
  double *last_byte; /* receives: when the last bytes land */
  uint8_t *waiting;  /* receives: ready but no data yet */
  uint8_t *posted;   /* receives: ready (the receiver has posted them) */
  uint32_t *held;    /* receives: 1 + the pull's send that waits for this receive to be posted */
  uint8_t *done;
  uint8_t *encoded;      /* sends: their bytes were encoded (encode_gbps > 0) */
  double *copy_out_gbps; /* receives: the receiver's core copies the bytes out at this rate
                            (one_core_per_rank, links that do not pull); 0 = none */
  uint32_t *match;       /* sends: global index of the matching receive */
  uint32_t *succ_begin;  /* total + 1 */
  uint32_t *succ;
  double *tx_free, *rx_free, *cpu_free, *shared_free;
  double *latent; /* per rank: until when a message to it is in flight (its α; core_share) */
  sim_heap heap;
  strata_sim_result result;
} sim_state;

static void sim_free(sim_state *s) {
  free(s->base);
  free(s->pending);
  free(s->ready);
  free(s->arrival);
  free(s->last_byte);
  free(s->waiting);
  free(s->posted);
  free(s->held);
  free(s->done);
  free(s->encoded);
  free(s->copy_out_gbps);
  free(s->match);
  free(s->succ_begin);
  free(s->succ);
  free(s->tx_free);
  free(s->rx_free);
  free(s->cpu_free);
  free(s->shared_free);
  free(s->latent);
  free(s->heap.ev);
}

static int sim_alloc(sim_state *s) {
  size_t t = s->total, p = (size_t)s->nranks;
  s->pending = calloc(t + 1, sizeof *s->pending);
  s->ready = calloc(t + 1, sizeof *s->ready);
  s->arrival = calloc(t + 1, sizeof *s->arrival);
  s->last_byte = calloc(t + 1, sizeof *s->last_byte);
  s->waiting = calloc(t + 1, 1);
  s->posted = calloc(t + 1, 1);
  s->held = calloc(t + 1, sizeof *s->held);
  s->done = calloc(t + 1, 1);
  s->encoded = calloc(t + 1, 1);
  s->copy_out_gbps = calloc(t + 1, sizeof *s->copy_out_gbps);
  s->match = calloc(t + 1, sizeof *s->match);
  s->succ_begin = calloc(t + 2, sizeof *s->succ_begin);
  s->tx_free = calloc(p, sizeof(double));
  s->rx_free = calloc(p, sizeof(double));
  s->cpu_free = calloc(p, sizeof(double));
  s->shared_free = calloc((size_t)s->model->nshared + 1, sizeof(double));
  s->latent = calloc(p, sizeof(double));
  if (!s->pending || !s->ready || !s->arrival || !s->last_byte || !s->waiting || !s->posted ||
      !s->held || !s->done || !s->encoded || !s->copy_out_gbps || !s->match || !s->succ_begin ||
      !s->tx_free || !s->rx_free || !s->cpu_free || !s->shared_free || !s->latent)
    return STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; i <= t; i++) s->arrival[i] = NAN;
  return STRATA_OK;
}

/* Dependents in CSR form, and the pending counts. */
static int sim_build_succ(sim_state *s) {
  for (int r = 0; r < s->nranks; r++) {
    const strata_schedule *sc = &s->scheds[r];
    for (uint32_t i = 0; i < sc->nsteps; i++) {
      const strata_step *st = &sc->steps[i];
      for (uint32_t d = 0; d < st->dep_count; d++) {
        uint32_t dep = sc->deps[st->dep_begin + d];
        if (dep >= i) return STRATA_ERR_PROTOCOL; /* must point backwards */
        s->succ_begin[s->base[r] + dep + 1]++;
      }
      s->pending[s->base[r] + i] = st->dep_count;
    }
  }
  for (uint32_t i = 0; i < s->total; i++) s->succ_begin[i + 1] += s->succ_begin[i];
  s->succ = malloc((size_t)s->succ_begin[s->total] * sizeof *s->succ + 1);
  uint32_t *fill = calloc((size_t)s->total + 1, sizeof *fill);
  if (!s->succ || !fill) {
    free(fill);
    return STRATA_ERR_NO_MEMORY;
  }
  for (int r = 0; r < s->nranks; r++) {
    const strata_schedule *sc = &s->scheds[r];
    for (uint32_t i = 0; i < sc->nsteps; i++) {
      const strata_step *st = &sc->steps[i];
      for (uint32_t d = 0; d < st->dep_count; d++) {
        uint32_t g = s->base[r] + sc->deps[st->dep_begin + d];
        s->succ[s->succ_begin[g] + fill[g]++] = s->base[r] + i;
      }
    }
  }
  free(fill);
  return STRATA_OK;
}

static int is_recv(uint8_t kind) {
  return kind == STRATA_STEP_RECV || kind == STRATA_STEP_RECV_REDUCE;
}

static int collect(const strata_schedule *sc, int want_recv, peer_entry **out, size_t *n) {
  size_t count = 0;
  for (uint32_t i = 0; i < sc->nsteps; i++) {
    uint8_t k = sc->steps[i].kind;
    if (want_recv ? is_recv(k) : k == STRATA_STEP_SEND) count++;
  }
  *out = malloc((count + 1) * sizeof **out);
  if (!*out) return STRATA_ERR_NO_MEMORY;
  *n = 0;
  for (uint32_t i = 0; i < sc->nsteps; i++) {
    uint8_t k = sc->steps[i].kind;
    if (want_recv ? is_recv(k) : k == STRATA_STEP_SEND) {
      (*out)[*n].peer = sc->steps[i].peer;
      (*out)[(*n)++].step = i;
    }
  }
  qsort(*out, *n, sizeof **out, peer_entry_cmp);
  return STRATA_OK;
}

/* For every SEND, the global index of its matching receive. */
static int sim_match(sim_state *s) {
  int rc = STRATA_OK;
  peer_entry **recvs = calloc((size_t)s->nranks, sizeof *recvs);
  size_t *nrecv = calloc((size_t)s->nranks, sizeof *nrecv);
  if (!recvs || !nrecv) rc = STRATA_ERR_NO_MEMORY;
  for (int r = 0; rc == STRATA_OK && r < s->nranks; r++)
    rc = collect(&s->scheds[r], 1, &recvs[r], &nrecv[r]);
  for (int r = 0; rc == STRATA_OK && r < s->nranks; r++) {
    peer_entry *sends = NULL;
    size_t nsend = 0;
    rc = collect(&s->scheds[r], 0, &sends, &nsend);
    for (size_t i = 0; rc == STRATA_OK && i < nsend; i++) {
      int q = sends[i].peer;
      size_t seq = i - peer_lower_bound(sends, nsend, q);
      if (q < 0 || q >= s->nranks) {
        rc = STRATA_ERR_MISMATCH;
        break;
      }
      size_t at = peer_lower_bound(recvs[q], nrecv[q], r) + seq;
      if (at >= nrecv[q] || recvs[q][at].peer != r ||
          s->scheds[q].steps[recvs[q][at].step].bytes != s->scheds[r].steps[sends[i].step].bytes) {
        rc = STRATA_ERR_MISMATCH;
        break;
      }
      s->match[s->base[r] + sends[i].step] = s->base[q] + recvs[q][at].step;
    }
    free(sends);
  }
  for (int r = 0; recvs && r < s->nranks; r++) free(recvs[r]);
  free(recvs);
  free(nrecv);
  return rc;
}

static int rank_of(const sim_state *s, uint32_t g) {
  int lo = 0, hi = s->nranks - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->base[mid] <= g)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static double dmax(double a, double b) {
  return a > b ? a : b;
}

/* Schedule global step g at `time` (sim_event: local steps first at one instant). */
static int heap_push(sim_state *s, double time, uint32_t g) {
  int r = rank_of(s, g);
  uint8_t kind = s->scheds[r].steps[g - s->base[r]].kind;
  sim_event e = {
      .time = time, .step = g, .transfer = kind != STRATA_STEP_COPY && kind != STRATA_STEP_REDUCE};
  return heap_add(&s->heap, e);
}

/* Ranks other than r whose core is busy at `at` (a local step or a transfer it moves: both
 * book cpu_free), plus r itself. flying: also a rank a message is flying to (its α not yet
 * over), for the sharing of cores (core_share). With more ranks than cores, calibration measures
 * α with every rank running, so most of a message's α is the receiver waiting for a core that
 * other ranks hold; counted as idle, those ranks would speed up into time α already charged them
 * for. */
static int busy_with(const sim_state *s, int r, double at, int flying) {
  int busy = 1;
  for (int j = 0; j < s->nranks; j++)
    busy += j != r && (s->cpu_free[j] > at || (flying && s->latent[j] > at));
  return busy;
}

/* sim.h, host_cores: more ranks than cores, so ranks take turns on them */
static int cores_shared(const sim_state *s) {
  return s->model->host_cores > 0 && s->model->host_cores < s->model->nranks;
}

/* Whether a TCP message from r to q starting at `at` streams (the receiver copies out while the
 * sender copies in): only when both ends have a core. With ranks sharing cores the engine sleeps
 * in poll() (no spinning, engine.c) and a receiver copies out once it is scheduled, which it is at
 * once only if the ranks busy then, sender and receiver among them, leave it a core. */
static int both_ends_have_cores(const sim_state *s, int r, int q, double at) {
  if (!cores_shared(s)) return 1;
  int busy = busy_with(s, r, at, 1);
  if (!(s->cpu_free[q] > at || s->latent[q] > at)) busy++; /* the receiver, if not yet counted */
  return busy <= s->model->host_cores;
}

/* sim.h, host_cores: how much faster than its calibrated rate a step of rank `r` starting at
 * `start` runs, given how many cores are busy then. 1 when every rank has a core. */
static double core_share(const sim_state *s, int r, double start) {
  int c = s->model->host_cores, p = s->model->nranks;
  if (!s->model->one_core_per_rank || !cores_shared(s)) return 1;
  int busy = busy_with(s, r, start, 1);
  return (double)p / (double)(busy > c ? busy : c);
}

static double cpu_cost_us(const sim_state *s, int r, double start, double bytes, double gbps) {
  if (gbps <= 0) return start;
  double begin = dmax(start, s->cpu_free[r]);
  double share = core_share(s, r, begin);
  s->cpu_free[r] = begin + bytes / (gbps * share * 1e3);
  return s->cpu_free[r];
}

static int sim_complete(sim_state *s, uint32_t g, double time) {
  s->done[g] = 1;
  if (time > s->result.time_us) s->result.time_us = time;
  for (uint32_t k = s->succ_begin[g]; k < s->succ_begin[g + 1]; k++) {
    uint32_t d = s->succ[k];
    s->ready[d] = dmax(s->ready[d], time);
    if (--s->pending[d] == 0 && heap_push(s, s->ready[d], d) != 0) return STRATA_ERR_NO_MEMORY;
  }
  return STRATA_OK;
}

static int sim_finish_recv(sim_state *s, uint32_t g, double ready_time) {
  int r = rank_of(s, g);
  const strata_step *st = &s->scheds[r].steps[g - s->base[r]];
  double t = dmax(ready_time, s->arrival[g]);
  if (s->copy_out_gbps[g] > 0) {
    t = cpu_cost_us(s, r, t, (double)st->bytes, s->copy_out_gbps[g]);
  }
  t = dmax(t, s->last_byte[g]);
  t = cpu_cost_us(s, r, t, (double)st->bytes, s->model->decode_gbps);
  if (st->kind == STRATA_STEP_RECV_REDUCE)
    t = cpu_cost_us(s, r, t, (double)st->bytes, s->model->reduce_gbps);
  return sim_complete(s, g, t);
}

/* The send has left (end) and arrives α later: complete it and wake a waiting receive, which can
 * take the bytes from α after `first` (a stream: TCP) and completes no earlier than α after end. */
static int sim_delivered(sim_state *s, const strata_step *st, uint32_t g, double first, double end,
                         double alpha_us) {
  uint32_t peer_step = s->match[g];
  s->arrival[peer_step] = first + alpha_us;
  s->last_byte[peer_step] = end + alpha_us;
  if (s->latent[st->peer] < end + alpha_us) s->latent[st->peer] = end + alpha_us;
  s->result.bytes_sent += (double)st->bytes;
  s->result.messages++;
  int rc = sim_complete(s, g, end);
  if (rc == STRATA_OK && s->waiting[peer_step]) {
    s->waiting[peer_step] = 0;
    /* one core per rank: the receiver's core takes the bytes when they are there, not now —
     * booking its future here would block every step it could run until then */
    if (s->model->one_core_per_rank && s->arrival[peer_step] > s->ready[peer_step])
      rc = heap_push(s, s->arrival[peer_step], peer_step) == 0 ? STRATA_OK : STRATA_ERR_NO_MEMORY;
    else
      rc = sim_finish_recv(s, peer_step, s->ready[peer_step]);
  }
  return rc;
}

/* one_core_per_rank. A pull holds the receiver's core for bytes / gbps; the sender's is free.
 * It starts once the receiver has posted the receive (the receiver's core runs it): until then
 * the send waits, held by the receive, which releases it when it becomes ready (sim_step). A
 * single call rarely has a send ready before its receive; back-to-back calls do, where the
 * sender's next call starts while the receiver still works on the last (host.c, calls).
 * Otherwise (TCP) the sender's core copies the bytes in for bytes / gbps, eagerly (the kernel
 * buffers them), and the receiver's core copies them out at the same rate when the receive
 * completes. A busy core defers the transfer, as a busy port does below. */
static int sim_send_core(sim_state *s, int r, const strata_step *st, uint32_t g, double t,
                         const strata_sim_link *link) {
  int q = st->peer;
  if (link->pull && !s->posted[s->match[g]]) {
    s->held[s->match[g]] = g + 1;
    return STRATA_OK;
  }
  double bw = link->gbps > 0 ? link->gbps : 1e-9;
  int mover = link->pull ? q : r;
  double start = dmax(t, s->cpu_free[mover]);
  if (start > t) return heap_push(s, start, g) == 0 ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  double end = start + (double)st->bytes / (bw * core_share(s, mover, start) * 1e3);
  s->cpu_free[mover] = end;
  s->copy_out_gbps[s->match[g]] = link->pull ? 0 : bw;
  int stream = !link->pull && both_ends_have_cores(s, r, q, start);
  return sim_delivered(s, st, g, stream ? start : end, end, link->alpha_us);
}

static int sim_send(sim_state *s, int r, const strata_step *st, uint32_t g, double t) {
  strata_sim_link link = {.alpha_us = 0, .gbps = 0, .shared = -1, .pull = 0};
  int q = st->peer;
  s->model->link(s->model->ctx, r, q, &link);
  if (s->model->one_core_per_rank) return sim_send_core(s, r, st, g, t, &link);
  double bw = link.gbps > 0 ? link.gbps : 1e-9;
  double start = dmax(t, dmax(s->tx_free[r], s->rx_free[q]));
  int shared = link.shared >= 0 && link.shared < s->model->nshared ? link.shared : -1;
  if (shared >= 0) {
    start = dmax(start, s->shared_free[shared]);
    if (s->model->shared_gbps[shared] > 0 && s->model->shared_gbps[shared] < bw)
      bw = s->model->shared_gbps[shared];
  }
  /* a busy port defers the send instead of booking the future: whoever is ready when the port
   * frees competes again, in step order, so no rank monopolizes a receiver */
  if (start > t) return heap_push(s, start, g) == 0 ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  double end = start + (double)st->bytes / (bw * 1e3);
  s->tx_free[r] = s->rx_free[q] = end;
  if (shared >= 0) s->shared_free[shared] = end;
  return sim_delivered(s, st, g, end, end, link.alpha_us);
}

static int sim_step(sim_state *s, uint32_t g, double t) {
  int r = rank_of(s, g);
  const strata_step *st = &s->scheds[r].steps[g - s->base[r]];
  s->ready[g] = t;
  switch (st->kind) {
    case STRATA_STEP_SEND:
      if (s->model->encode_gbps > 0 && !s->encoded[g]) {
        /* the codec runs once on the sender's core, then the send competes for its link */
        s->encoded[g] = 1;
        double coded = cpu_cost_us(s, r, t, (double)st->bytes, s->model->encode_gbps);
        if (s->model->decode_sent)
          coded = cpu_cost_us(s, r, coded, (double)st->bytes, s->model->decode_gbps);
        return heap_push(s, coded, g) == 0 ? STRATA_OK : STRATA_ERR_NO_MEMORY;
      }
      return sim_send(s, r, st, g, t);
    case STRATA_STEP_RECV:
    case STRATA_STEP_RECV_REDUCE:
      s->posted[g] = 1;
      if (s->held[g]) { /* a pull's send waited for this receive: it starts now */
        uint32_t send = s->held[g] - 1;
        s->held[g] = 0;
        if (heap_push(s, t, send) != 0) return STRATA_ERR_NO_MEMORY;
      }
      if (isnan(s->arrival[g])) {
        s->waiting[g] = 1;
        return STRATA_OK;
      }
      if (s->model->one_core_per_rank && s->arrival[g] > t) /* see sim_delivered */
        return heap_push(s, s->arrival[g], g) == 0 ? STRATA_OK : STRATA_ERR_NO_MEMORY;
      return sim_finish_recv(s, g, t);
    case STRATA_STEP_COPY:
    case STRATA_STEP_REDUCE: {
      double gbps = st->kind == STRATA_STEP_COPY ? s->model->copy_gbps : s->model->reduce_gbps;
      return sim_complete(s, g, cpu_cost_us(s, r, t, (double)st->bytes, gbps));
    }
    default:
      return STRATA_ERR_PROTOCOL;
  }
}

int strata_sim_run(const strata_sim_model *model, const strata_schedule *scheds,
                   strata_sim_result *out) {
  if (!model || !scheds || !out || model->nranks < 1 || !model->link ||
      (model->nshared > 0 && !model->shared_gbps))
    return STRATA_ERR_INVALID_ARG;
  sim_state s;
  memset(&s, 0, sizeof s);
  s.model = model;
  s.scheds = scheds;
  s.nranks = model->nranks;
  s.base = calloc((size_t)s.nranks + 1, sizeof *s.base);
  if (!s.base) return STRATA_ERR_NO_MEMORY;
  for (int r = 0; r < s.nranks; r++) {
    if ((uint64_t)s.base[r] + scheds[r].nsteps > UINT32_MAX - 2) {
      free(s.base);
      return STRATA_ERR_NO_MEMORY;
    }
    s.base[r + 1] = s.base[r] + scheds[r].nsteps;
  }
  s.total = s.base[s.nranks];
  int rc = sim_alloc(&s);
  if (rc == STRATA_OK) rc = sim_build_succ(&s);
  if (rc == STRATA_OK) rc = sim_match(&s);
  for (uint32_t g = 0; rc == STRATA_OK && g < s.total; g++)
    if (s.pending[g] == 0 && heap_push(&s, 0.0, g) != 0) rc = STRATA_ERR_NO_MEMORY;
  while (rc == STRATA_OK && s.heap.n > 0) {
    sim_event ev = heap_pop(&s.heap);
    rc = sim_step(&s, ev.step, ev.time);
  }
  for (uint32_t g = 0; rc == STRATA_OK && g < s.total; g++)
    if (!s.done[g]) rc = STRATA_ERR_PROTOCOL;
  if (rc == STRATA_OK) *out = s.result;
  sim_free(&s);
  return rc;
}

/* ---- the fabric as a link model ---- */

typedef struct fabric_ctx {
  const strata_fabric *f;
  double span[STRATA_FABRIC_MAX_LEVELS + 1]; /* ranks per group of each level */
  int shared_base[STRATA_FABRIC_MAX_LEVELS]; /* first shared resource of level l, or -1 */
} fabric_ctx;

static void fabric_link(void *ctx, int src, int dst, strata_sim_link *out) {
  const fabric_ctx *c = ctx;
  /* the innermost level whose groups hold both ends */
  int l = 0;
  while (l + 1 < c->f->nlevels && (long)(src / c->span[l + 1]) != (long)(dst / c->span[l + 1])) l++;
  const strata_level *lv = &c->f->level[l];
  out->alpha_us = lv->alpha_us;
  out->gbps = lv->per_rank_gbps;
  out->shared = -1;
  if (c->shared_base[l] >= 0) {
    /* level 0: the node's internal bus; outer levels: the sender's group boundary */
    double group_span = l == 0 ? c->span[1] : c->span[l];
    out->shared = c->shared_base[l] + (int)(src / group_span);
  }
}

int strata_sim_fabric(const strata_fabric *fabric, const strata_sched_params *params,
                      strata_sim_result *out) {
  if (!fabric || !params || !out || fabric->nlevels < 1 ||
      fabric->nlevels > STRATA_FABRIC_MAX_LEVELS)
    return STRATA_ERR_INVALID_ARG;
  int p = params->nranks;
  if (p < 1 || strata_fabric_nranks(fabric) != p) return STRATA_ERR_INVALID_ARG;
  fabric_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.f = fabric;
  ctx.span[0] = 1;
  for (int l = 0; l < fabric->nlevels; l++)
    ctx.span[l + 1] = ctx.span[l] * (fabric->level[l].fanout > 0 ? fabric->level[l].fanout : 1);
  int nshared = 0;
  double *shared_gbps = NULL;
  for (int l = 0; l < fabric->nlevels; l++) {
    ctx.shared_base[l] = -1;
    if (fabric->level[l].aggregate_gbps <= 0) continue;
    double group_span = l == 0 ? ctx.span[1] : ctx.span[l];
    int groups = (int)ceil(p / group_span);
    double *grown = realloc(shared_gbps, (size_t)(nshared + groups) * sizeof *grown);
    if (!grown) {
      free(shared_gbps);
      return STRATA_ERR_NO_MEMORY;
    }
    shared_gbps = grown;
    ctx.shared_base[l] = nshared;
    for (int i = 0; i < groups; i++) shared_gbps[nshared + i] = fabric->level[l].aggregate_gbps;
    nshared += groups;
  }
  strata_schedule *scheds = calloc((size_t)p, sizeof *scheds);
  int rc = scheds ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (int r = 0; rc == STRATA_OK && r < p; r++) {
    strata_sched_params rp = *params;
    rp.rank = r;
    rc = strata_schedule_build(&rp, &scheds[r]);
  }
  if (rc == STRATA_OK) {
    strata_sim_model m = {.nranks = p,
                          .link = fabric_link,
                          .ctx = &ctx,
                          .nshared = nshared,
                          .shared_gbps = shared_gbps,
                          .reduce_gbps = fabric->reduce_gbps};
    rc = strata_sim_run(&m, scheds, out);
  }
  for (int r = 0; scheds && r < p; r++) strata_schedule_free(&scheds[r]);
  free(scheds);
  free(shared_gbps);
  return rc;
}
