// SPDX-License-Identifier: Apache-2.0
/*
 * diloco.c — DiLoCo and Streaming DiLoCo's outer loop over the caller's parameter buffers
 * (include/strata.h, "DiLoCo"; docs/diloco.md).
 *
 * State. theta_global and the outer momentum are f32 arrays over every parameter element, laid
 * out buffer after buffer; the outer gradient of a fragment is computed into its own region of a
 * third f32 array (`wire`) and averaged there in place. A fragment is a contiguous range of whole
 * parameter buffers, so its three regions are contiguous too.
 *
 * Invariants:
 *  - theta_global and the momentum change only when an exchange succeeded, and then on every
 *    rank with the same averaged bytes (an allreduce leaves the same bytes everywhere, compressed
 *    or not), so they stay identical on every rank without ever being compared;
 *  - a failed exchange touches nothing but `wire`, which the next start overwrites: a failure
 *    leaves the fragment as it was before its start, and strata_diloco_step can be repeated;
 *  - every rank starts the exchanges in the same order (the schedule depends only on the inner
 *    step count and the options, which create checks are the same everywhere), as the
 *    communicator requires of its collectives.
 *
 * The outer optimizer is torch.optim.SGD's (dampening 0, weight decay 0) in f32 with its order of
 * roundings: buf = momentum*buf + g; step = g + momentum*buf (Nesterov) or buf; p -= lr*step.
 * A first step from a zero buffer gives buf = g, as torch's clone of the first gradient does.
 *
 * Not thread-safe: one thread drives a state (as one thread drives a training loop).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/abi.h"
#include "core/core.h"

typedef struct diloco_fragment {
  size_t first_param, nparams; /* the buffers it covers */
  size_t begin, count;         /* its elements in the flat f32 arrays */
  strata_request *req;         /* the exchange in flight, else NULL */
  int waited;                  /* the exchange completed (save waited for it), not yet applied */
  int wait_status;             /* its status when `waited` */
  /* strata_diloco_step's bookkeeping: an exchange it owes (started, or due to be restarted after
   * a failure or set_comm) and the inner step at which to apply it; the inner step of its last
   * start, so a repeated call does not start the same exchange twice. */
  int owed;
  uint64_t due_step;
  uint64_t started_step;
} diloco_fragment;

struct strata_diloco {
  strata_comm *comm;
  strata_diloco_options opt;
  size_t nparams;
  strata_diloco_param *params;
  size_t *param_begin; /* element offset of each buffer in the flat arrays */
  size_t total;        /* elements over all buffers */
  float *theta_global, *momentum, *wire;
  int nfragments;
  diloco_fragment *fragments;
  uint64_t inner_steps, outer_steps;
  int joining; /* created without a communicator: its state comes from strata_diloco_sync */
};

static int log_rank(const strata_diloco *d) {
  return d && d->comm ? strata_comm_rank(d->comm) : -1;
}

static void options_defaults(strata_diloco_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->sync_every = 100;
  opt->outer_lr = 0.7;
  opt->outer_momentum = 0.9;
  opt->nesterov = 1;
  opt->fragments = 1;
  opt->delay = 0;
  opt->alpha = 0.5;
  opt->compress = STRATA_COMPRESS_DEFAULT;
}

void strata_diloco_options_init_sized(strata_diloco_options *opt, size_t struct_size,
                                      int header_version) {
  strata_diloco_options defaults;
  options_defaults(&defaults);
  strata_struct_init(opt, &defaults, sizeof defaults, struct_size, header_version);
}

/* NULL when the options are usable, else what is wrong with them. */
static const char *options_problem(const strata_diloco_options *o, size_t nparams) {
  if (o->sync_every < 1) return "sync_every (H) must be at least 1";
  if (o->fragments < 1 || o->fragments > o->sync_every)
    return "fragments (P) must lie in 1..sync_every";
  if ((size_t)o->fragments > nparams)
    return "fragments (P) must not exceed the number of parameter buffers";
  if (o->delay < 0 || o->delay > o->sync_every / o->fragments - 1)
    return "delay must lie in 0..sync_every/fragments - 1";
  if (!isfinite(o->outer_lr) || o->outer_lr < 0) return "outer_lr must be finite and >= 0";
  if (!isfinite(o->outer_momentum) || o->outer_momentum < 0 || o->outer_momentum > 1)
    return "outer_momentum must lie in [0, 1]";
  if (!(o->alpha >= 0 && o->alpha <= 1)) return "alpha must lie in [0, 1]";
  if ((unsigned)o->compress >= STRATA_COMPRESS_COUNT) return "unknown compress";
  return NULL;
}

/* ---- the outer step of one fragment ---- */

static float local_value(const strata_diloco_param *p, size_t i) {
  if (p->dtype == STRATA_BF16) return strata_bf16_to_f32(((const uint16_t *)p->data)[i]);
  return ((const float *)p->data)[i];
}

static void set_local_value(const strata_diloco_param *p, size_t i, float v) {
  if (p->dtype == STRATA_BF16)
    ((uint16_t *)p->data)[i] = strata_f32_to_bf16(v);
  else
    ((float *)p->data)[i] = v;
}

static int fragment_in_flight(const diloco_fragment *f) {
  return f->req != NULL || f->waited;
}

static int power_of_two(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

/* Sites of equal size, their count and their size both powers of two: the layouts whose
 * hierarchical allreduce is made of phases (rings, halving-doubling over a power of two) that leave
 * every rank with the same bytes under every encoding (docs/compression.md). */
static int sites_regular(const strata_comm *comm) {
  int nranks = strata_comm_size(comm);
  int *members = calloc((size_t)nranks, sizeof *members);
  if (!members) return 0;
  for (int r = 0; r < nranks; r++) members[strata_comm_site(comm, r)]++;
  int nsites = 0, size = 0, equal = 1;
  for (int t = 0; t < nranks; t++) {
    if (!members[t]) continue;
    nsites++;
    equal = equal && (size == 0 || members[t] == size);
    size = members[t];
  }
  free(members);
  return equal && power_of_two(nsites) && power_of_two(size);
}

/* Across sites the hierarchical allreduce crosses each WAN link once per site; inside one site
 * the communicator's own choice is the best. A compressed exchange must also leave every rank
 * with the same bytes, or theta_global would drift apart between the ranks: it runs the ring
 * (which does under every encoding) unless the sites are regular (above). */
static strata_algo exchange_algo(const strata_comm *comm, strata_compress codec) {
  int compressed = codec != STRATA_COMPRESS_NONE && codec != STRATA_COMPRESS_DEFAULT;
  if (strata_comm_sites(comm) >= 2 && (!compressed || sites_regular(comm))) return STRATA_ALGO_HIER;
  return compressed ? STRATA_ALGO_RING : STRATA_ALGO_AUTO;
}

/* delta = theta_global - theta_local into the fragment's wire region, and its average started. */
static int exchange_start(strata_diloco *d, diloco_fragment *f) {
  for (size_t b = f->first_param; b < f->first_param + f->nparams; b++) {
    const strata_diloco_param *p = &d->params[b];
    const float *global = d->theta_global + d->param_begin[b];
    float *delta = d->wire + d->param_begin[b];
    for (size_t i = 0; i < p->count; i++) delta[i] = global[i] - local_value(p, i);
  }
  strata_compress codec = d->opt.compress == STRATA_COMPRESS_DEFAULT
                              ? strata_comm_config(d->comm)->compress
                              : d->opt.compress;
  strata_coll_args args = {.coll = STRATA_COLL_ALLREDUCE,
                           .sendbuf = d->wire + f->begin,
                           .recvbuf = d->wire + f->begin,
                           .count = f->count,
                           .dtype = STRATA_F32,
                           .op = STRATA_AVG,
                           .algo = exchange_algo(d->comm, codec),
                           .compress = codec};
  f->waited = 0;
  int status = strata_collective(d->comm, &args, &f->req);
  if (status != STRATA_OK) {
    f->req = NULL;
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d), "diloco: starting an outer exchange failed: %s",
               strata_strerror(status));
  }
  return status;
}

/* Waits for the fragment's exchange without applying it; it stays in flight for finish. */
static void exchange_wait(diloco_fragment *f) {
  if (!f->req) return;
  f->wait_status = strata_request_wait(f->req);
  f->req = NULL;
  f->waited = 1;
}

/* Waits and forgets the fragment's exchange (its result is not applied). */
static void exchange_abandon(diloco_fragment *f) {
  if (f->req) (void)strata_request_wait(f->req);
  f->req = NULL;
  f->waited = 0;
}

/* The outer optimizer over the averaged delta, then the merge into theta_local. */
static void fragment_apply(strata_diloco *d, const diloco_fragment *f) {
  const float lr = (float)d->opt.outer_lr, mu = (float)d->opt.outer_momentum;
  const float alpha = (float)d->opt.alpha;
  const int merge = d->opt.delay > 0, nesterov = d->opt.nesterov != 0;
  float *global = d->theta_global + f->begin, *buf = d->momentum + f->begin;
  const float *g = d->wire + f->begin;
  for (size_t i = 0; i < f->count; i++) {
    float scaled = mu * buf[i];
    buf[i] = scaled + g[i];
    float step = buf[i];
    if (nesterov) {
      float ahead = mu * buf[i];
      step = g[i] + ahead;
    }
    float move = -lr * step;
    global[i] = global[i] + move;
  }
  for (size_t b = f->first_param; b < f->first_param + f->nparams; b++) {
    const strata_diloco_param *p = &d->params[b];
    const float *pg = d->theta_global + d->param_begin[b];
    for (size_t i = 0; i < p->count; i++) {
      float v = pg[i];
      if (merge) {
        float kept = alpha * local_value(p, i), taken = (1.0f - alpha) * pg[i];
        v = kept + taken;
      }
      set_local_value(p, i, v);
    }
  }
}

static int exchange_finish(strata_diloco *d, diloco_fragment *f) {
  int status = f->waited ? f->wait_status : strata_request_wait(f->req);
  f->req = NULL;
  f->waited = 0;
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d), "diloco: an outer exchange failed: %s",
               strata_strerror(status));
    return status;
  }
  fragment_apply(d, f);
  d->outer_steps++;
  return STRATA_OK;
}

static diloco_fragment *fragment_arg(strata_diloco *d, int fragment, const char *what) {
  if (!d) return NULL;
  if (!d->comm) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "%s: the state has no communicator yet (strata_diloco_sync)",
               what);
    return NULL;
  }
  if (fragment < 0 || fragment >= d->nfragments) {
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d), "%s: fragment %d is not in 0..%d", what, fragment,
               d->nfragments - 1);
    return NULL;
  }
  return &d->fragments[fragment];
}

int strata_diloco_outer_start(strata_diloco *d, int fragment) {
  diloco_fragment *f = fragment_arg(d, fragment, "strata_diloco_outer_start");
  if (!f) return STRATA_ERR_INVALID_ARG;
  if (fragment_in_flight(f)) {
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d),
               "strata_diloco_outer_start: fragment %d's exchange is already in flight", fragment);
    return STRATA_ERR_INVALID_ARG;
  }
  return exchange_start(d, f);
}

int strata_diloco_outer_finish(strata_diloco *d, int fragment) {
  diloco_fragment *f = fragment_arg(d, fragment, "strata_diloco_outer_finish");
  if (!f) return STRATA_ERR_INVALID_ARG;
  if (!fragment_in_flight(f)) {
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d),
               "strata_diloco_outer_finish: fragment %d has no exchange in flight", fragment);
    return STRATA_ERR_INVALID_ARG;
  }
  return exchange_finish(d, f);
}

/* ---- the schedule ---- */

/* Is inner step s (from 1) the one after which fragment p starts its exchange? */
static int starts_after(const strata_diloco *d, int p, uint64_t s) {
  uint64_t h = (uint64_t)d->opt.sync_every;
  uint64_t offset = (uint64_t)p * h / (uint64_t)d->nfragments;
  return s % h == offset;
}

/* Three passes, each safe to repeat after a failure: restart what a failure or set_comm left
 * owed, start what step s is due to start (unless this step already did), then apply what is
 * due. The step count advances only when all of it succeeded. */
int strata_diloco_step(strata_diloco *d, int *applied) {
  if (applied) *applied = 0;
  if (!d) return STRATA_ERR_INVALID_ARG;
  if (!d->comm) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "strata_diloco_step: the state has no communicator yet (strata_diloco_sync)");
    return STRATA_ERR_INVALID_ARG;
  }
  const uint64_t s = d->inner_steps + 1;
  int status;
  for (int p = 0; p < d->nfragments; p++) {
    diloco_fragment *f = &d->fragments[p];
    if (f->owed && !fragment_in_flight(f) && (status = exchange_start(d, f)) != STRATA_OK)
      return status;
  }
  for (int p = 0; p < d->nfragments; p++) {
    diloco_fragment *f = &d->fragments[p];
    if (!starts_after(d, p, s) || f->started_step == s) continue;
    if (fragment_in_flight(f)) continue; /* started by hand (outer_start): its caller's */
    if ((status = exchange_start(d, f)) != STRATA_OK) return status;
    f->owed = 1;
    f->due_step = s + (uint64_t)d->opt.delay;
    f->started_step = s;
  }
  for (int p = 0; p < d->nfragments; p++) {
    diloco_fragment *f = &d->fragments[p];
    if (!f->owed || f->due_step > s) continue;
    if ((status = exchange_finish(d, f)) != STRATA_OK) return status;
    f->owed = 0;
    if (applied) (*applied)++;
  }
  d->inner_steps = s;
  return STRATA_OK;
}

uint64_t strata_diloco_inner_steps(const strata_diloco *d) {
  return d ? d->inner_steps : 0;
}

uint64_t strata_diloco_outer_steps(const strata_diloco *d) {
  return d ? d->outer_steps : 0;
}

int strata_diloco_fragment(const strata_diloco *d, int fragment, size_t *first, size_t *n) {
  if (!d || fragment < 0 || fragment >= d->nfragments) return STRATA_ERR_INVALID_ARG;
  if (first) *first = d->fragments[fragment].first_param;
  if (n) *n = d->fragments[fragment].nparams;
  return d->nfragments;
}

/* ---- create, set_comm, destroy ---- */

/* Contiguous ranges of whole buffers, each boundary at the buffer edge closest to an equal share
 * of the elements (the f32 bytes each exchange moves), every range at least one buffer. */
static void split_fragments(strata_diloco *d) {
  const size_t np = d->nparams, nf = (size_t)d->nfragments;
  size_t edge = 0; /* first buffer of the current fragment */
  for (size_t p = 0; p < nf; p++) {
    size_t end = np;
    if (p + 1 < nf) {
      long double target = (long double)d->total * (long double)(p + 1) / (long double)nf;
      end = edge + 1;
      while (end < np - (nf - p - 1)) {
        long double here = (long double)d->param_begin[end];
        long double next = (long double)(d->param_begin[end] + d->params[end].count);
        if (fabsl(next - target) >= fabsl(here - target)) break;
        end++;
      }
    }
    diloco_fragment *f = &d->fragments[p];
    f->first_param = edge;
    f->nparams = end - edge;
    f->begin = d->param_begin[edge];
    f->count = (end < np ? d->param_begin[end] : d->total) - f->begin;
    edge = end;
  }
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* What every rank must agree on: the buffers' counts and dtypes and the options. */
static uint64_t shape_hash(const strata_diloco_param *params, size_t nparams,
                           const strata_diloco_options *o) {
  uint64_t h = fnv1a(14695981039346656037ull, &nparams, sizeof nparams);
  for (size_t i = 0; i < nparams; i++) {
    uint64_t v[2] = {params[i].count, (uint64_t)params[i].dtype};
    h = fnv1a(h, v, sizeof v);
  }
  int64_t ints[5] = {o->sync_every, o->nesterov != 0, o->fragments, o->delay, o->compress};
  double reals[3] = {o->outer_lr, o->outer_momentum, o->alpha};
  h = fnv1a(h, ints, sizeof ints);
  return fnv1a(h, reals, sizeof reals);
}

static void diloco_free(strata_diloco *d) {
  if (!d) return;
  free(d->params);
  free(d->param_begin);
  free(d->theta_global);
  free(d->momentum);
  free(d->wire);
  free(d->fragments);
  free(d);
}

/* Checks the caller's arguments on this rank; fills *d (allocated) when they are good. */
static int create_local(strata_comm *comm, const strata_diloco_param *params, size_t nparams,
                        const strata_diloco_options *opt, strata_diloco **out) {
  const int rank = comm ? strata_comm_rank(comm) : -1;
  if (!params || nparams == 0 || !opt) {
    STRATA_LOG(STRATA_LOG_ERROR, rank, "strata_diloco_create: %s",
               !params || nparams == 0 ? "no parameter buffers" : "options are NULL");
    return STRATA_ERR_INVALID_ARG;
  }
  size_t total = 0;
  for (size_t i = 0; i < nparams; i++) {
    const strata_diloco_param *p = &params[i];
    if (p->dtype != STRATA_F32 && p->dtype != STRATA_BF16) {
      STRATA_LOG(STRATA_LOG_ERROR, rank, "strata_diloco_create: buffer %zu is %s, not f32 or bf16",
                 i, strata_dtype_name(p->dtype));
      return STRATA_ERR_UNSUPPORTED;
    }
    if (!p->data || p->count == 0 || __builtin_add_overflow(total, p->count, &total) ||
        total > SIZE_MAX / sizeof(float)) {
      STRATA_LOG(STRATA_LOG_ERROR, rank, "strata_diloco_create: buffer %zu is %s", i,
                 !p->data        ? "NULL"
                 : p->count == 0 ? "empty"
                                 : "too large");
      return STRATA_ERR_INVALID_ARG;
    }
  }
  const char *problem = options_problem(opt, nparams);
  if (problem) {
    STRATA_LOG(STRATA_LOG_ERROR, rank, "strata_diloco_create: %s", problem);
    return STRATA_ERR_INVALID_ARG;
  }
  strata_diloco *d = calloc(1, sizeof *d);
  if (!d) return STRATA_ERR_NO_MEMORY;
  d->comm = comm;
  d->opt = *opt;
  d->nparams = nparams;
  d->total = total;
  d->nfragments = opt->fragments;
  d->params = malloc(nparams * sizeof *d->params);
  d->param_begin = malloc(nparams * sizeof *d->param_begin);
  d->theta_global = malloc(total * sizeof(float));
  d->momentum = calloc(total, sizeof(float));
  d->wire = malloc(total * sizeof(float));
  d->fragments = calloc((size_t)d->nfragments, sizeof *d->fragments);
  if (!d->params || !d->param_begin || !d->theta_global || !d->momentum || !d->wire ||
      !d->fragments) {
    diloco_free(d);
    STRATA_LOG(STRATA_LOG_ERROR, rank, "strata_diloco_create: out of memory for %zu parameters",
               total);
    return STRATA_ERR_NO_MEMORY;
  }
  memcpy(d->params, params, nparams * sizeof *params);
  for (size_t i = 0, begin = 0; i < nparams; begin += params[i].count, i++)
    d->param_begin[i] = begin;
  split_fragments(d);
  *out = d;
  return STRATA_OK;
}

/* Every rank takes part in the agreement even when its own arguments are bad, so no peer waits
 * for it until the timeout: each learns that something is wrong and fails at once. */
int strata_diloco_create(strata_comm *comm, const strata_diloco_param *params, size_t nparams,
                         const strata_diloco_options *user_opt, strata_diloco **out) {
  if (out) *out = NULL;
  if (!out) {
    STRATA_LOG(STRATA_LOG_ERROR, comm ? strata_comm_rank(comm) : -1,
               "strata_diloco_create: out is NULL");
    return STRATA_ERR_INVALID_ARG;
  }
  strata_diloco *d = NULL;
  /* the caller's options at this library's size (core/abi.h); a bad struct is a bad argument
   * that every rank still learns of in the agreement below */
  strata_diloco_options full;
  options_defaults(&full);
  int imported = user_opt
                     ? strata_struct_import(user_opt, &full, sizeof full, "strata_diloco_options",
                                            "strata_diloco_options_init", NULL, 0)
                     : STRATA_ERR_INVALID_ARG;
  int local = imported == STRATA_OK ? create_local(comm, params, nparams, &full, &d)
              : user_opt            ? imported
                                    : create_local(comm, params, nparams, NULL, &d);
  const strata_diloco_options *opt = &full;
  if (!comm) { /* a joining worker's: no exchange until strata_diloco_sync */
    if (local != STRATA_OK) return local;
    for (size_t b = 0; b < nparams; b++) {
      float *global = d->theta_global + d->param_begin[b];
      for (size_t i = 0; i < params[b].count; i++) global[i] = local_value(&params[b], i);
    }
    d->joining = 1;
    *out = d;
    return STRATA_OK;
  }
  uint64_t hash = local == STRATA_OK ? shape_hash(params, nparams, opt) : 0;
  uint64_t mine[3] = {hash, ~hash, local != STRATA_OK}, all[3];
  int status = strata_allreduce(comm, mine, all, 3, STRATA_U64, STRATA_MAX);
  if (status == STRATA_OK && local != STRATA_OK) status = local;
  if (status == STRATA_OK && (all[2] || all[0] != hash || all[1] != ~hash)) {
    STRATA_LOG(STRATA_LOG_ERROR, strata_comm_rank(comm), "strata_diloco_create: %s",
               all[2] ? "another rank's arguments are invalid"
                      : "the ranks passed different buffer counts, dtypes or options");
    status = STRATA_ERR_MISMATCH;
  }
  /* exact whatever the communicator's default wire encoding: these are the starting weights */
  for (size_t i = 0; status == STRATA_OK && i < nparams; i++) {
    strata_coll_args args = {.coll = STRATA_COLL_BROADCAST,
                             .sendbuf = params[i].data,
                             .recvbuf = params[i].data,
                             .count = params[i].count,
                             .dtype = params[i].dtype,
                             .compress = STRATA_COMPRESS_NONE};
    status = strata_collective(comm, &args, NULL);
  }
  if (status != STRATA_OK) {
    diloco_free(d);
    return status;
  }
  for (size_t b = 0; b < nparams; b++) {
    float *global = d->theta_global + d->param_begin[b];
    for (size_t i = 0; i < params[b].count; i++) global[i] = local_value(&params[b], i);
  }
  *out = d;
  return STRATA_OK;
}

int strata_diloco_set_comm(strata_diloco *d, strata_comm *comm) {
  if (!d || !comm) {
    STRATA_LOG(STRATA_LOG_ERROR, log_rank(d), "strata_diloco_set_comm: %s is NULL",
               d ? "comm" : "the state");
    return STRATA_ERR_INVALID_ARG;
  }
  /* The requests belong to the old communicator: wait for them there (a broken one fails them
   * at once; a working one completes them when its peers do), then forget their results. What
   * strata_diloco_step owed stays owed and restarts on the new communicator. */
  for (int p = 0; p < d->nfragments; p++) exchange_abandon(&d->fragments[p]);
  d->comm = comm;
  return STRATA_OK;
}

int strata_diloco_sync(strata_diloco *d, strata_comm *comm, int *pulled) {
  if (pulled) *pulled = 0;
  if (!d || !comm) return STRATA_ERR_INVALID_ARG;
  int status = strata_diloco_set_comm(d, comm);
  size_t bytes = 0;
  if (status == STRATA_OK) status = strata_diloco_state_bytes(d, &bytes);
  uint8_t *blob = status == STRATA_OK ? malloc(bytes) : NULL;
  if (status == STRATA_OK && !blob) status = STRATA_ERR_NO_MEMORY;
  if (status == STRATA_OK) status = strata_diloco_save(d, blob, bytes);
  strata_shared_entry entry = {"diloco", blob, bytes};
  /* a member's state outranks a joiner's (revision 0) even before the first outer step */
  strata_shared_state state = {d->joining ? 0 : d->outer_steps + 1, 1, &entry};
  strata_shared_sync_info info = {0};
  if (status == STRATA_OK) status = strata_shared_sync(comm, &state, &info);
  if (status == STRATA_OK && info.pulled) {
    status = strata_diloco_load(d, blob, bytes);
    /* theta_local starts over from the global parameters, as after an outer step */
    for (size_t b = 0; status == STRATA_OK && b < d->nparams; b++) {
      const float *global = d->theta_global + d->param_begin[b];
      for (size_t i = 0; i < d->params[b].count; i++) set_local_value(&d->params[b], i, global[i]);
    }
  }
  if (status == STRATA_OK) {
    d->joining = 0;
    if (pulled) *pulled = info.pulled;
  }
  free(blob);
  return status;
}

void strata_diloco_destroy(strata_diloco *d) {
  if (!d) return;
  for (int p = 0; p < d->nfragments; p++) exchange_abandon(&d->fragments[p]);
  diloco_free(d);
}

/* ---- checkpoints ----
 *
 * The blob, in the host's byte order:
 *   u64 magic, u32 version, u32 fragments (P), u64 total bytes of the blob, u64 nparams,
 *   u32 sync_every (H), u32 delay, per buffer { u64 count, u64 dtype },
 *   u64 inner_steps, u64 outer_steps, per fragment { u64 owed, u64 due_step, u64 started_step },
 *   f32 theta_global[total], f32 momentum[total], 32 bytes BLAKE2b of everything before.
 */
#define DILOCO_MAGIC 0x31434f4c49445453ull /* "STDILOC1" */
#define DILOCO_VERSION 1u
#define DILOCO_DIGEST_BYTES 32

typedef struct blob_head {
  uint64_t magic;
  uint32_t version, fragments;
  uint64_t total_bytes, nparams;
  uint32_t sync_every, delay;
} blob_head;

static size_t blob_bytes(const strata_diloco *d) {
  return sizeof(blob_head) + d->nparams * 2 * sizeof(uint64_t) + 2 * sizeof(uint64_t) +
         (size_t)d->nfragments * 3 * sizeof(uint64_t) + 2 * d->total * sizeof(float) +
         DILOCO_DIGEST_BYTES;
}

static void digest(const uint8_t *data, size_t n, uint8_t out[DILOCO_DIGEST_BYTES]) {
  crypto_generichash(out, DILOCO_DIGEST_BYTES, data, n, NULL, 0);
}

static uint8_t *put(uint8_t *at, const void *v, size_t n) {
  memcpy(at, v, n);
  return at + n;
}

static const uint8_t *get(const uint8_t *at, void *v, size_t n) {
  memcpy(v, at, n);
  return at + n;
}

int strata_diloco_state_bytes(strata_diloco *d, size_t *bytes) {
  if (!d || !bytes) return STRATA_ERR_INVALID_ARG;
  for (int p = 0; p < d->nfragments; p++) exchange_wait(&d->fragments[p]);
  *bytes = blob_bytes(d);
  return STRATA_OK;
}

int strata_diloco_save(strata_diloco *d, void *buf, size_t bytes) {
  if (!d || !buf || bytes < blob_bytes(d)) {
    STRATA_LOG(
        STRATA_LOG_ERROR, log_rank(d), "strata_diloco_save: %s",
        !d || !buf ? "NULL argument" : "the buffer is smaller than strata_diloco_state_bytes");
    return STRATA_ERR_INVALID_ARG;
  }
  /* theta_global and the momentum do not change while an exchange is in flight; waiting makes
   * the checkpoint a point where none is. Its result stays, to be applied when due. */
  for (int p = 0; p < d->nfragments; p++) exchange_wait(&d->fragments[p]);
  blob_head head = {.magic = DILOCO_MAGIC,
                    .version = DILOCO_VERSION,
                    .fragments = (uint32_t)d->nfragments,
                    .total_bytes = blob_bytes(d),
                    .nparams = d->nparams,
                    .sync_every = (uint32_t)d->opt.sync_every,
                    .delay = (uint32_t)d->opt.delay};
  uint8_t *at = put(buf, &head, sizeof head);
  for (size_t i = 0; i < d->nparams; i++) {
    uint64_t v[2] = {d->params[i].count, (uint64_t)d->params[i].dtype};
    at = put(at, v, sizeof v);
  }
  at = put(at, &d->inner_steps, sizeof d->inner_steps);
  at = put(at, &d->outer_steps, sizeof d->outer_steps);
  for (int p = 0; p < d->nfragments; p++) {
    const diloco_fragment *f = &d->fragments[p];
    uint64_t v[3] = {(uint64_t)f->owed, f->due_step, f->started_step};
    at = put(at, v, sizeof v);
  }
  at = put(at, d->theta_global, d->total * sizeof(float));
  at = put(at, d->momentum, d->total * sizeof(float));
  digest(buf, (size_t)(at - (uint8_t *)buf), at);
  return STRATA_OK;
}

static int load_refuse(const strata_diloco *d, int status, const char *why) {
  STRATA_LOG(STRATA_LOG_ERROR, log_rank(d), "strata_diloco_load: %s", why);
  return status;
}

/* Everything is checked before anything changes: the envelope (magic, version, length, digest:
 * STRATA_ERR_PROTOCOL), then the shape against this state's (STRATA_ERR_MISMATCH). */
int strata_diloco_load(strata_diloco *d, const void *buf, size_t bytes) {
  if (!d || !buf) return load_refuse(d, STRATA_ERR_INVALID_ARG, "NULL argument");
  blob_head head;
  if (bytes < sizeof head + DILOCO_DIGEST_BYTES)
    return load_refuse(d, STRATA_ERR_PROTOCOL, "the checkpoint is truncated");
  const uint8_t *at = get(buf, &head, sizeof head);
  if (head.magic != DILOCO_MAGIC || head.version != DILOCO_VERSION)
    return load_refuse(d, STRATA_ERR_PROTOCOL, "not a DiLoCo checkpoint of this version");
  if (head.total_bytes != bytes)
    return load_refuse(d, STRATA_ERR_PROTOCOL, "the checkpoint's length is not the one it says");
  uint8_t want[DILOCO_DIGEST_BYTES];
  digest(buf, bytes - DILOCO_DIGEST_BYTES, want);
  if (sodium_memcmp(want, (const uint8_t *)buf + bytes - DILOCO_DIGEST_BYTES, sizeof want))
    return load_refuse(d, STRATA_ERR_PROTOCOL, "the checkpoint is damaged (digest mismatch)");
  if (head.nparams != d->nparams || head.fragments != (uint32_t)d->nfragments ||
      head.sync_every != (uint32_t)d->opt.sync_every || head.delay != (uint32_t)d->opt.delay ||
      bytes != blob_bytes(d))
    return load_refuse(d, STRATA_ERR_MISMATCH,
                       "the checkpoint is of another shape (buffers, fragments, H or delay)");
  for (size_t i = 0; i < d->nparams; i++) {
    uint64_t v[2];
    at = get(at, v, sizeof v);
    if (v[0] != d->params[i].count || v[1] != (uint64_t)d->params[i].dtype)
      return load_refuse(d, STRATA_ERR_MISMATCH, "a buffer's count or dtype differs");
  }
  for (int p = 0; p < d->nfragments; p++) exchange_abandon(&d->fragments[p]);
  at = get(at, &d->inner_steps, sizeof d->inner_steps);
  at = get(at, &d->outer_steps, sizeof d->outer_steps);
  for (int p = 0; p < d->nfragments; p++) {
    diloco_fragment *f = &d->fragments[p];
    uint64_t v[3];
    at = get(at, v, sizeof v);
    f->owed = v[0] != 0; /* restarted by the next step, from the loaded theta_global */
    f->due_step = v[1];
    f->started_step = v[2];
  }
  at = get(at, d->theta_global, d->total * sizeof(float));
  get(at, d->momentum, d->total * sizeof(float));
  return STRATA_OK;
}
