// SPDX-License-Identifier: Apache-2.0
/*
 * weights.c — RL weight sync: a publisher's versions and the rounds that bring subscribers to
 * them (include/strata.h "RL weight sync"; docs/weights.md). weights_codec.c encodes and applies
 * one version; this file decides what to keep, what each subscriber needs, and moves it.
 *
 * A round over a communicator, rank 0 publishing:
 *   1. request  gather to rank 0: each subscriber's held version, target, set digest and host;
 *   2. plan     rank 0 chooses, per subscriber, the cheaper of "patches from held" and "newest
 *               usable anchor + patches", takes the union of the blobs chosen, arranges the
 *               subscribers that need bytes into a fan-out tree (plan_tree: a chain host by
 *               host inside a site, one copy into every other site) and broadcasts the plan:
 *               the tensor table, the blobs, each rank's choice and parent;
 *   3. stream   rank 0 sends every blob once to each of its children in chunks; each member
 *               receives a chunk from its parent, forwards it to its children and applies it:
 *               a full copy chunk by chunk as it arrives (copy and digest per tensor), a patch as
 *               soon as it is whole, into its staging copy, checking every digest;
 *   4. agree    every live rank learns whether the stream reached everyone (strata_comm_agree):
 *               all take the same branch, so survivors of a death shrink together.
 *
 * Invariants:
 *  - a subscriber's staging copy holds the version it holds between rounds; its buffers change
 *    only by a copy of a staging copy that passed every digest of the target version, so they
 *    never show a half-applied or unchecked version;
 *  - a rank that sees a transport error revokes the communicator: a member below it in the
 *    tree, blocked on a live but silent parent, is released instead of waiting forever;
 *  - a full copy's tensors are copied and checked while later chunks arrive; nothing but the
 *    commit follows the last byte;
 *  - the publisher keeps every version from min(newest - history + 1, newest anchor) on, and
 *    the full copy of the newest anchor only: memory is bounded by two copies of the set plus
 *    the patches.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/abi.h"
#include "core/core.h"
#include "engine/query.h"
#include "net/net.h"
#include "train/weights.h"
#include "train/weights_debug.h"

/* "SWR2", "SWP2": since requests and plans say whether they are a round or a preparation, a
 * peer of an older release (which would read a preparation as a round) rejects them whole. */
#define REQUEST_MAGIC 0x32525753u
#define PLAN_MAGIC 0x32505753u
#define REQUEST_BYTES 104
#define PLAN_HEAD_BYTES 64
/* The plan's first broadcast: its head and the body's first bytes. A plan that fits (about a
 * hundred tensors) crosses the WAN once; a larger one sends the rest in a second broadcast. */
#define PLAN_FIRST_BYTES 4096
#define PLAN_BLOB_BYTES 24
#define PLAN_RANK_BYTES 32
#define HOST_BYTES 512 /* as src/net/net.c prints it */
#define WINDOW 16      /* chunks in flight per hop, each way */

typedef struct stored_version {
  uint64_t version;
  uint8_t *full, *patch; /* blobs; either may be NULL */
  size_t full_len, patch_len;
  strata_weights_version_stats stats;
} stored_version;

struct strata_weights {
  int publisher;
  weights_set set;
  strata_weights_options opt;
  uint64_t version; /* newest published, or held */
  char error[512];
  /* publisher */
  uint8_t **previous; /* the newest version's bytes, per tensor */
  uint64_t *hashes;
  stored_version *versions; /* ascending */
  size_t nversions, cap_versions;
  uint64_t newest_anchor;
  /* subscriber */
  uint8_t **staging;
  int distrust;    /* a version failed its check: the next round starts from an anchor */
  int last_parent; /* who sent this rank the last round's stream (-1: nobody) */
#ifdef STRATA_TEST_HOOKS
  /* fault injection and test hooks (weights_debug.h): in test builds only */
  int corrupt_next;
  long die_after_chunks;
  char host_override[HOST_BYTES];
#endif
};

#ifdef STRATA_TEST_HOOKS
#define WEIGHTS_CORRUPT_NEXT(w) ((w)->corrupt_next)
#else
#define WEIGHTS_CORRUPT_NEXT(w) 0
#endif

/* One blob of a round's stream. */
typedef struct plan_blob {
  uint64_t version;
  uint32_t kind;
  uint64_t bytes;
} plan_blob;

/* One chunk of a round's stream: where it lands, the blob it belongs to, and whether it is the
 * blob's last. */
typedef struct chunk {
  uint64_t offset, len;
  int blob, last;
} chunk;

/* What the plan says about one rank. */
typedef struct plan_rank {
  uint64_t base; /* the anchor to start from, 0 = patches from the held version */
  uint64_t target;
  int32_t status; /* STRATA_OK, or why this subscriber is not served */
  int32_t parent; /* who sends it the stream: -1 = nobody (it needs no bytes) */
} plan_rank;

static int fail(strata_weights *w, int rank, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(strata_weights *w, int rank, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->error, sizeof w->error, fmt, ap);
  va_end(ap);
  STRATA_LOG(STRATA_LOG_ERROR, rank, "weights: %s", w->error);
  return status;
}

static void options_defaults(strata_weights_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->anchor_every = 16;
  opt->history = 32;
  opt->zstd_level = 1;
  opt->chunk_bytes = 8 << 20;
}

void strata_weights_options_init_sized(strata_weights_options *opt, size_t struct_size,
                                       int header_version) {
  strata_weights_options defaults;
  options_defaults(&defaults);
  strata_struct_init(opt, &defaults, sizeof defaults, struct_size, header_version);
}

static int create(const strata_weights_tensor *tensors, size_t ntensors,
                  const strata_weights_options *user_opt, int publisher, strata_weights **out) {
  if (!out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  /* the caller's options at this library's size (core/abi.h), or the defaults */
  strata_weights_options full;
  options_defaults(&full);
  if (user_opt) {
    int status = strata_struct_import(user_opt, &full, sizeof full, "strata_weights_options",
                                      "strata_weights_options_init", NULL, 0);
    if (status != STRATA_OK) return status;
  }
  const strata_weights_options *opt = &full;
  const char *bad = NULL;
  if (opt->anchor_every < 1) bad = "anchor_every must be at least 1";
  if (opt->history < 1) bad = "history must be at least 1";
  if (opt->zstd_level < 1 || opt->zstd_level > 19) bad = "zstd_level must lie in 1..19";
  if (opt->chunk_bytes < 4096) bad = "chunk_bytes must be at least 4096";
  if (bad) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "weights: %s", bad);
    return STRATA_ERR_INVALID_ARG;
  }
  strata_weights *w = calloc(1, sizeof *w);
  if (!w) return STRATA_ERR_NO_MEMORY;
  w->publisher = publisher;
  w->opt = *opt;
  w->last_parent = -1;
  int status = weights_set_init(&w->set, tensors, ntensors, w->error, sizeof w->error);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "weights: %s", w->error);
    free(w);
    return status;
  }
  size_t n = w->set.count ? w->set.count : 1;
  uint8_t ***copies = publisher ? &w->previous : &w->staging;
  *copies = calloc(n, sizeof **copies);
  w->hashes = calloc(n, sizeof *w->hashes);
  status = *copies && w->hashes ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; i < w->set.count && status == STRATA_OK; i++) {
    (*copies)[i] = calloc(w->set.tensors[i].bytes ? w->set.tensors[i].bytes : 1, 1);
    if (!(*copies)[i]) status = STRATA_ERR_NO_MEMORY;
  }
  if (status != STRATA_OK) {
    strata_weights_destroy(w);
    return status;
  }
  *out = w;
  return STRATA_OK;
}

int strata_weights_publisher_create(const strata_weights_tensor *tensors, size_t ntensors,
                                    const strata_weights_options *opt, strata_weights **out) {
  return create(tensors, ntensors, opt, 1, out);
}

int strata_weights_subscriber_create(const strata_weights_tensor *tensors, size_t ntensors,
                                     strata_weights **out) {
  return create(tensors, ntensors, NULL, 0, out);
}

static void free_version(stored_version *v) {
  free(v->full);
  free(v->patch);
  v->full = v->patch = NULL;
}

void strata_weights_destroy(strata_weights *w) {
  if (!w) return;
  for (size_t i = 0; i < w->set.count; i++) {
    if (w->previous) free(w->previous[i]);
    if (w->staging) free(w->staging[i]);
  }
  free(w->previous);
  free(w->staging);
  free(w->hashes);
  for (size_t i = 0; i < w->nversions; i++) free_version(&w->versions[i]);
  free(w->versions);
  weights_set_free(&w->set);
  free(w);
}

uint64_t strata_weights_version(const strata_weights *w) {
  return w ? w->version : 0;
}

const char *strata_weights_error(const strata_weights *w) {
  return w ? w->error : "";
}

static stored_version *find_version(const strata_weights *w, uint64_t version) {
  if (!w->nversions || version < w->versions[0].version ||
      version > w->versions[w->nversions - 1].version)
    return NULL;
  return &w->versions[version - w->versions[0].version];
}

int strata_weights_version_info(const strata_weights *w, uint64_t version,
                                strata_weights_version_stats *out) {
  if (!w || !out || !w->publisher) return STRATA_ERR_INVALID_ARG;
  const stored_version *v = find_version(w, version);
  if (!v) return STRATA_ERR_NOT_FOUND;
  *out = v->stats;
  return STRATA_OK;
}

/* ---- publishing ---- */

/* Drops what no subscriber can need any more: versions before min(newest - history + 1, newest
 * anchor), and every full copy but the newest anchor's. */
static void prune(strata_weights *w) {
  uint64_t newest = w->version;
  uint64_t keep_from = newest >= (uint64_t)w->opt.history ? newest - w->opt.history + 1 : 1;
  if (w->newest_anchor < keep_from) keep_from = w->newest_anchor;
  size_t drop = 0;
  while (drop < w->nversions && w->versions[drop].version < keep_from) drop++;
  for (size_t i = 0; i < w->nversions; i++)
    if (i < drop || (w->versions[i].version != w->newest_anchor && w->versions[i].full)) {
      free(w->versions[i].full);
      w->versions[i].full = NULL;
      if (i < drop) free_version(&w->versions[i]);
    }
  memmove(w->versions, w->versions + drop, (w->nversions - drop) * sizeof *w->versions);
  w->nversions -= drop;
}

int strata_weights_publish(strata_weights *w, uint64_t *version) {
  if (!w || !w->publisher) return STRATA_ERR_INVALID_ARG;
  if (w->nversions == w->cap_versions) {
    size_t cap = w->cap_versions ? 2 * w->cap_versions : 16;
    stored_version *grown = realloc(w->versions, cap * sizeof *grown);
    if (!grown) return STRATA_ERR_NO_MEMORY;
    w->versions = grown;
    w->cap_versions = cap;
  }
  stored_version v = {.version = w->version + 1};
  v.stats.version = v.version;
  for (size_t i = 0; i < w->set.count; i++) v.stats.elements += w->set.tensors[i].elements;
  double t0 = strata_now_s();
  weights_hash_all(&w->set, NULL, w->hashes);
  double t1 = strata_now_s();
  v.stats.hash_s = t1 - t0;
  size_t full_len = WEIGHTS_BLOB_HEADER_BYTES + 8 * w->set.count + w->set.total_bytes;
  v.stats.full_bytes = full_len;
  int status = STRATA_OK;
  if (v.version > 1) {
    size_t raw_len = 0;
    /* a patch larger than twice the full copy before compression will not win after it */
    status =
        weights_encode_patch(&w->set, w->previous, v.version, w->hashes, w->opt.zstd_level,
                             2 * full_len + 64, WEIGHTS_CORRUPT_NEXT(w) == WEIGHTS_CORRUPT_VALUE,
                             &v.patch, &v.patch_len, &v.stats.changed, &raw_len);
    if (status == STRATA_ERR_UNSUPPORTED) status = STRATA_OK; /* gave up: a full copy */
    if (status != STRATA_OK) return fail(w, -1, status, "publish: encoding the patch failed");
    v.stats.patch_raw_bytes = raw_len;
    v.stats.patch_bytes = v.patch_len;
#ifdef STRATA_TEST_HOOKS
    if (v.patch && w->corrupt_next == WEIGHTS_CORRUPT_FRAME) v.patch[v.patch_len / 2] ^= 0x40;
    if (v.patch) w->corrupt_next = 0;
#endif
  } else {
    v.stats.changed = v.stats.elements;
  }
  v.stats.encode_s = strata_now_s() - t1;
  int anchor = !v.patch || v.patch_len >= full_len ||
               v.version - w->newest_anchor >= (uint64_t)w->opt.anchor_every;
  if (anchor) {
    status = weights_encode_full(&w->set, v.version, w->hashes, &v.full, &v.full_len);
    if (status != STRATA_OK) {
      free(v.patch);
      return fail(w, -1, status, "publish: no memory for a full copy");
    }
    if (v.patch && v.patch_len >= full_len) { /* the full copy is the cheaper: never send it */
      free(v.patch);
      v.patch = NULL;
      v.patch_len = 0;
    }
  }
  v.stats.anchor = anchor;
  for (size_t i = 0; i < w->set.count; i++)
    if (w->set.tensors[i].bytes)
      memcpy(w->previous[i], w->set.tensors[i].data, w->set.tensors[i].bytes);
  w->versions[w->nversions++] = v;
  w->version = v.version;
  if (anchor) w->newest_anchor = v.version;
  prune(w);
  if (version) *version = w->version;
  return STRATA_OK;
}

/* ---- planning (rank 0) ---- */

/* What a collective call over the publisher and its subscribers is: a round, or a preparation
 * (strata_weights_prepare). Both sides say which, so a rank that called the other one is told
 * instead of misreading the exchange. */
enum { CALL_ROUND = 0, CALL_PREPARE = 1 };

typedef struct request {
  uint32_t kind;     /* CALL_ROUND or CALL_PREPARE */
  uint32_t distrust; /* the last round refused a version: come back through an anchor */
  uint64_t held, target, digest;
  uint64_t host; /* digest of the host identity: equal = shared memory between the two */
} request;

static void request_pack(uint8_t *p, const request *r) {
  memset(p, 0, REQUEST_BYTES);
  weights_put_u32(p, REQUEST_MAGIC);
  weights_put_u32(p + 4, r->distrust);
  weights_put_u64(p + 8, r->held);
  weights_put_u64(p + 16, r->target);
  weights_put_u64(p + 24, r->digest);
  weights_put_u64(p + 32, r->host);
  weights_put_u32(p + 40, r->kind);
}

static int request_unpack(const uint8_t *p, request *r) {
  if (weights_get_u32(p) != REQUEST_MAGIC) return 0;
  r->distrust = weights_get_u32(p + 4);
  r->held = weights_get_u64(p + 8);
  r->target = weights_get_u64(p + 16);
  r->digest = weights_get_u64(p + 24);
  r->host = weights_get_u64(p + 32);
  r->kind = weights_get_u32(p + 40);
  return 1;
}

/* Bytes of the patches (from, to], or UINT64_MAX when one is not kept. */
static uint64_t patch_chain_bytes(const strata_weights *w, uint64_t from, uint64_t to) {
  uint64_t bytes = 0;
  for (uint64_t v = from + 1; v <= to; v++) {
    const stored_version *s = find_version(w, v);
    if (!s || !s->patch) return UINT64_MAX;
    bytes += s->patch_len;
  }
  return bytes;
}

/* Chooses how rank r reaches its target; marks the blobs it needs. */
static void plan_one(strata_weights *w, const request *q, plan_rank *pr, uint8_t *need_full,
                     uint8_t *need_patch) {
  uint64_t target = q->target == STRATA_WEIGHTS_NEWEST ? w->version : q->target;
  pr->target = target;
  pr->base = 0;
  pr->status = STRATA_OK;
  if (q->digest != w->set.digest) {
    pr->status = STRATA_ERR_MISMATCH;
    return;
  }
  if (target == q->held) return;
  if (target > w->version || !find_version(w, target)) {
    pr->status = STRATA_ERR_NOT_FOUND;
    return;
  }
  uint64_t by_patches = q->held < target ? patch_chain_bytes(w, q->held, target) : UINT64_MAX;
  uint64_t by_anchor = UINT64_MAX, anchor = 0;
  for (uint64_t a = target; a >= w->versions[0].version && a > 0; a--) {
    const stored_version *s = find_version(w, a);
    if (!s->full) continue;
    uint64_t rest = patch_chain_bytes(w, a, target);
    if (rest != UINT64_MAX) by_anchor = s->full_len + rest, anchor = a;
    break;
  }
  if (by_patches == UINT64_MAX && by_anchor == UINT64_MAX) {
    pr->status = STRATA_ERR_NOT_FOUND;
    return;
  }
  uint64_t from = q->held;
  if (by_anchor < by_patches || (q->distrust && by_anchor != UINT64_MAX)) {
    pr->base = anchor;
    from = anchor;
    need_full[anchor - w->versions[0].version] = 1;
  }
  for (uint64_t v = from + 1; v <= target; v++) need_patch[v - w->versions[0].version] = 1;
}

/* The fan-out tree. Inside a site the members form a chain, host by host (the publisher's host
 * first), ranks ascending within a host: a host is entered once and its members relay to each
 * other over shared memory. Across sites, as the hierarchical broadcast does (src/coll/hier.c),
 * one member per site receives the site's one copy over the WAN — from the relay, the first
 * member of the publisher's site (the publisher itself when its site has none), so every remote
 * site is fed at once rather than through another site, and the trainer sends one copy however
 * many subscribers and sites. A chain rather than a wider tree inside a site: pipelined, it
 * delivers at the rate of its slowest hop, where an inner node of a wider tree sends two or more
 * copies down one link. Sites are the engine's (strata_comm_site, agreed from STRATA_SITE at
 * init); hosts come from the requests. member[r]: rank r has a place (in a round, it needs bytes;
 * in a preparation, its set matches), so a preparation forms the tree of a first round. */
static void plan_tree(const request *reqs, const strata_comm *comm, const uint8_t *member,
                      plan_rank *ranks, int nranks) {
  char *placed = calloc((size_t)nranks, 1);
  if (!placed) return;
  for (int r = 1; r < nranks; r++) placed[r] = !member[r];
  int relay = 0;
  /* sites in order of their first rank, the publisher's first */
  for (int first = 0; first < nranks; first++) {
    int site = strata_comm_site(comm, first), tail = -1;
    for (int pass = 0; pass < 2; pass++) /* the publisher's host, then the others */
      for (int h = 1; h < nranks; h++) {
        if (placed[h] || strata_comm_site(comm, h) != site) continue;
        if (pass == 0 && reqs[h].host != reqs[0].host) continue;
        for (int r = h; r < nranks; r++) { /* h and every later member of its host */
          if (placed[r] || strata_comm_site(comm, r) != site || reqs[r].host != reqs[h].host)
            continue;
          ranks[r].parent = tail >= 0 ? tail : first == 0 ? 0 : relay;
          tail = r;
          placed[r] = 1;
        }
      }
    if (first == 0 && tail >= 0) /* the head of the publisher's site's chain */
      for (int r = 1; r < nranks; r++)
        if (ranks[r].parent == 0) relay = r;
  }
  free(placed);
}

/* ---- the plan on the wire ---- */

typedef struct plan {
  uint32_t kind; /* CALL_ROUND or CALL_PREPARE */
  uint64_t newest, stream_bytes, chunk_bytes;
  uint32_t nblobs, nranks;
  plan_blob *blobs;
  plan_rank *ranks;
  uint8_t *table; /* the publisher's tensor table, as packed */
  size_t table_bytes;
} plan;

static void plan_free(plan *p) {
  free(p->blobs);
  free(p->ranks);
  free(p->table);
  memset(p, 0, sizeof *p);
}

static size_t table_pack(const weights_set *set, uint8_t *out) {
  size_t n = 4;
  if (out) weights_put_u32(out, (uint32_t)set->count);
  for (size_t i = 0; i < set->count; i++) {
    const weights_tensor *t = &set->tensors[i];
    size_t len = strlen(t->name);
    if (out) {
      out[n] = (uint8_t)len;
      memcpy(out + n + 1, t->name, len);
      out[n + 1 + len] = (uint8_t)t->dtype;
      out[n + 2 + len] = (uint8_t)t->ndim;
      for (int d = 0; d < t->ndim; d++)
        weights_put_u64(out + n + 3 + len + 8 * d, (uint64_t)t->shape[d]);
    }
    n += 3 + len + 8 * (size_t)t->ndim;
  }
  return n;
}

static int plan_pack(const plan *p, uint8_t head[PLAN_HEAD_BYTES], uint8_t **body,
                     size_t *body_bytes) {
  size_t n =
      p->table_bytes + (size_t)p->nblobs * PLAN_BLOB_BYTES + (size_t)p->nranks * PLAN_RANK_BYTES;
  uint8_t *b = calloc(n, 1);
  if (!b) return STRATA_ERR_NO_MEMORY;
  memcpy(b, p->table, p->table_bytes);
  uint8_t *q = b + p->table_bytes;
  for (uint32_t i = 0; i < p->nblobs; i++, q += PLAN_BLOB_BYTES) {
    weights_put_u64(q, p->blobs[i].version);
    weights_put_u32(q + 8, p->blobs[i].kind);
    weights_put_u64(q + 16, p->blobs[i].bytes);
  }
  for (uint32_t r = 0; r < p->nranks; r++, q += PLAN_RANK_BYTES) {
    weights_put_u64(q, p->ranks[r].base);
    weights_put_u64(q + 8, p->ranks[r].target);
    weights_put_u32(q + 16, (uint32_t)p->ranks[r].status);
    weights_put_u32(q + 20, (uint32_t)p->ranks[r].parent);
  }
  memset(head, 0, PLAN_HEAD_BYTES);
  weights_put_u32(head, PLAN_MAGIC);
  weights_put_u64(head + 8, n);
  weights_put_u64(head + 16, p->newest);
  weights_put_u64(head + 24, p->table_bytes);
  weights_put_u64(head + 32, p->stream_bytes);
  weights_put_u64(head + 40, p->chunk_bytes);
  weights_put_u32(head + 48, p->nblobs);
  weights_put_u32(head + 52, p->nranks);
  weights_put_u32(head + 56, p->kind);
  *body = b;
  *body_bytes = n;
  return STRATA_OK;
}

/* The bytes of the body that travel in the first broadcast, after the head; with `out`, writes
 * the head and those bytes there. */
static size_t plan_first_pack(uint8_t *out, const uint8_t *head, const uint8_t *body,
                              size_t body_bytes) {
  size_t inline_bytes = body_bytes < PLAN_FIRST_BYTES - PLAN_HEAD_BYTES
                            ? body_bytes
                            : PLAN_FIRST_BYTES - PLAN_HEAD_BYTES;
  if (out) {
    memset(out, 0, PLAN_FIRST_BYTES);
    memcpy(out, head, PLAN_HEAD_BYTES);
    memcpy(out + PLAN_HEAD_BYTES, body, inline_bytes);
  }
  return inline_bytes;
}

/* Reads a plan's head; the body's size into *body_bytes. 0 when malformed. */
static int plan_head_unpack(const uint8_t *head, plan *p, size_t *body_bytes, int nranks) {
  memset(p, 0, sizeof *p);
  if (weights_get_u32(head) != PLAN_MAGIC) return 0;
  *body_bytes = weights_get_u64(head + 8);
  p->newest = weights_get_u64(head + 16);
  p->table_bytes = weights_get_u64(head + 24);
  p->stream_bytes = weights_get_u64(head + 32);
  p->chunk_bytes = weights_get_u64(head + 40);
  p->nblobs = weights_get_u32(head + 48);
  p->nranks = weights_get_u32(head + 52);
  p->kind = weights_get_u32(head + 56);
  return p->nranks == (uint32_t)nranks && p->chunk_bytes >= 4096 && p->table_bytes >= 4 &&
         p->nblobs < (1u << 24) &&
         *body_bytes == p->table_bytes + (uint64_t)p->nblobs * PLAN_BLOB_BYTES +
                            (uint64_t)p->nranks * PLAN_RANK_BYTES;
}

static int plan_body_unpack(const uint8_t *b, plan *p) {
  p->table = malloc(p->table_bytes);
  p->blobs = calloc(p->nblobs ? p->nblobs : 1, sizeof *p->blobs);
  p->ranks = calloc(p->nranks, sizeof *p->ranks);
  if (!p->table || !p->blobs || !p->ranks) return 0;
  memcpy(p->table, b, p->table_bytes);
  const uint8_t *q = b + p->table_bytes;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < p->nblobs; i++, q += PLAN_BLOB_BYTES) {
    p->blobs[i].version = weights_get_u64(q);
    p->blobs[i].kind = weights_get_u32(q + 8);
    p->blobs[i].bytes = weights_get_u64(q + 16);
    if (p->blobs[i].bytes > UINT64_MAX - sum) return 0;
    sum += p->blobs[i].bytes;
  }
  for (uint32_t r = 0; r < p->nranks; r++, q += PLAN_RANK_BYTES) {
    p->ranks[r].base = weights_get_u64(q);
    p->ranks[r].target = weights_get_u64(q + 8);
    p->ranks[r].status = (int32_t)weights_get_u32(q + 16);
    p->ranks[r].parent = (int32_t)weights_get_u32(q + 20);
    if (p->ranks[r].parent < -1 || p->ranks[r].parent >= (int32_t)p->nranks ||
        p->ranks[r].parent == (int32_t)r)
      return 0;
  }
  return sum == p->stream_bytes;
}

/* Rank 0: packs the plan and broadcasts it (the head and the body's first bytes; the rest in a
 * second broadcast when it does not fit). STRATA_ERR_NO_MEMORY before anything was sent;
 * otherwise STRATA_OK with the broadcasts' outcome in *transport. */
static int plan_send(strata_comm *comm, const plan *p, int *transport) {
  uint8_t head[PLAN_HEAD_BYTES], *body = NULL, first[PLAN_FIRST_BYTES];
  size_t body_bytes = 0;
  int status = plan_pack(p, head, &body, &body_bytes);
  if (status != STRATA_OK) return status;
  size_t inline_bytes = plan_first_pack(first, head, body, body_bytes);
  *transport = strata_broadcast(comm, first, first, PLAN_FIRST_BYTES, STRATA_U8, 0);
  if (*transport == STRATA_OK && body_bytes > inline_bytes)
    *transport = strata_broadcast(comm, body + inline_bytes, body + inline_bytes,
                                  body_bytes - inline_bytes, STRATA_U8, 0);
  free(body);
  return STRATA_OK;
}

/* A subscriber: receives rank 0's plan into *p (plan_free it); a transport error, or
 * STRATA_ERR_PROTOCOL / STRATA_ERR_NO_MEMORY (said on w) for a malformed or oversized plan. */
static int plan_receive(strata_weights *w, strata_comm *comm, plan *p) {
  int rank = strata_comm_rank(comm);
  uint8_t first[PLAN_FIRST_BYTES], *body = NULL;
  size_t body_bytes = 0;
  int transport = strata_broadcast(comm, first, first, PLAN_FIRST_BYTES, STRATA_U8, 0);
  if (transport != STRATA_OK) return transport;
  if (!plan_head_unpack(first, p, &body_bytes, strata_comm_size(comm)) ||
      !(body = malloc(body_bytes))) {
    transport = body_bytes ? STRATA_ERR_NO_MEMORY : STRATA_ERR_PROTOCOL;
    return fail(w, rank, transport, "the round's plan is malformed or too large");
  }
  size_t inline_bytes = plan_first_pack(NULL, first, NULL, body_bytes);
  memcpy(body, first + PLAN_HEAD_BYTES, inline_bytes);
  if (body_bytes > inline_bytes)
    transport = strata_broadcast(comm, body + inline_bytes, body + inline_bytes,
                                 body_bytes - inline_bytes, STRATA_U8, 0);
  if (transport == STRATA_OK && !plan_body_unpack(body, p))
    transport = fail(w, rank, STRATA_ERR_PROTOCOL, "the round's plan is malformed");
  free(body);
  return transport;
}

/* Maps the publisher's tensor i to ours (map[i]), or names the first difference. */
static int table_match(strata_weights *w, const plan *p, size_t *map, int rank) {
  const uint8_t *q = p->table, *end = p->table + p->table_bytes;
  uint32_t count = weights_get_u32(q);
  q += 4;
  char *seen = calloc(w->set.count ? w->set.count : 1, 1);
  if (!seen) return fail(w, rank, STRATA_ERR_NO_MEMORY, "no memory to match the tensor table");
  int status = STRATA_OK;
  for (uint32_t i = 0; i < count && status == STRATA_OK; i++) {
    if (end - q < 3 || end - q < 3 + q[0] + 8 * (ptrdiff_t)q[q[0] + 2]) {
      status = fail(w, rank, STRATA_ERR_PROTOCOL, "the publisher's tensor table is malformed");
      break;
    }
    char name[WEIGHTS_NAME_MAX + 1];
    memcpy(name, q + 1, q[0]);
    name[q[0]] = 0;
    strata_dtype dtype = (strata_dtype)q[q[0] + 1];
    int ndim = q[q[0] + 2];
    const uint8_t *shape = q + q[0] + 3;
    q = shape + 8 * ndim;
    size_t j = 0;
    while (j < w->set.count && strcmp(w->set.tensors[j].name, name)) j++;
    if (j == w->set.count || seen[j]) {
      status = fail(w, rank, STRATA_ERR_MISMATCH,
                    "tensor '%s' is published but this subscriber has no such tensor", name);
      break;
    }
    const weights_tensor *t = &w->set.tensors[j];
    int same_shape = t->ndim == ndim;
    for (int d = 0; same_shape && d < ndim; d++)
      same_shape = (uint64_t)t->shape[d] == weights_get_u64(shape + 8 * d);
    if (t->dtype != dtype)
      status = fail(w, rank, STRATA_ERR_MISMATCH, "tensor '%s': %s here, %s at the publisher", name,
                    strata_dtype_name(t->dtype), strata_dtype_name(dtype));
    else if (!same_shape)
      status = fail(w, rank, STRATA_ERR_MISMATCH,
                    "tensor '%s': its shape differs from the publisher's", name);
    seen[j] = 1;
    map[i] = j;
  }
  if (status == STRATA_OK && count != w->set.count)
    for (size_t j = 0; j < w->set.count; j++)
      if (!seen[j]) {
        status = fail(w, rank, STRATA_ERR_MISMATCH,
                      "tensor '%s' is subscribed but the publisher has no such tensor",
                      w->set.tensors[j].name);
        break;
      }
  free(seen);
  return status;
}

/* ---- the stream ---- */

typedef struct sender {
  strata_request *reqs[WINDOW];
  int head, count;
  int status;
  uint64_t bytes;
} sender;

static void sender_wait_one(sender *s) {
  int status = strata_request_wait(s->reqs[s->head]);
  if (status != STRATA_OK && s->status == STRATA_OK) s->status = status;
  s->head = (s->head + 1) % WINDOW;
  s->count--;
}

static void sender_post(sender *s, strata_comm *comm, const void *buf, size_t len, int peer) {
  if (s->status != STRATA_OK) return;
  if (s->count == WINDOW) sender_wait_one(s);
  strata_request *req = NULL;
  int status = strata_isend(comm, buf, len, STRATA_U8, peer, &req);
  if (status != STRATA_OK) {
    s->status = status;
    return;
  }
  s->reqs[(s->head + s->count) % WINDOW] = req;
  s->count++;
  s->bytes += len;
}

static int sender_drain(sender *s) {
  while (s->count) sender_wait_one(s);
  return s->status;
}

/* A member's children in the plan's tree (ascending), each with its own window: every chunk goes
 * to each of them. */
typedef struct fanout {
  int count;
  int *peers;
  sender *senders;
} fanout;

static int fanout_init(fanout *f, const plan *p, int me) {
  memset(f, 0, sizeof *f);
  for (uint32_t r = 0; r < p->nranks; r++) f->count += p->ranks[r].parent == me;
  if (!f->count) return STRATA_OK;
  f->peers = calloc((size_t)f->count, sizeof *f->peers);
  f->senders = calloc((size_t)f->count, sizeof *f->senders);
  if (!f->peers || !f->senders) return STRATA_ERR_NO_MEMORY;
  for (uint32_t r = 0, k = 0; r < p->nranks; r++)
    if (p->ranks[r].parent == me) f->peers[k++] = (int)r;
  return STRATA_OK;
}

/* Posts one chunk to every child; the first failure, if any. */
static int fanout_post(fanout *f, strata_comm *comm, const void *buf, size_t len) {
  for (int k = 0; k < f->count; k++) {
    sender_post(&f->senders[k], comm, buf, len, f->peers[k]);
    if (f->senders[k].status != STRATA_OK) return f->senders[k].status;
  }
  return STRATA_OK;
}

/* Waits for every send; the first failure, and the bytes sent into *bytes. */
static int fanout_drain(fanout *f, uint64_t *bytes) {
  int status = STRATA_OK;
  *bytes = 0;
  for (int k = 0; k < f->count; k++) {
    int sent = sender_drain(&f->senders[k]);
    if (status == STRATA_OK) status = sent;
    *bytes += f->senders[k].bytes;
  }
  return status;
}

static void fanout_free(fanout *f) {
  free(f->peers);
  free(f->senders);
  memset(f, 0, sizeof *f);
}

static void maybe_die(strata_weights *w) {
#ifdef STRATA_TEST_HOOKS
  if (w->die_after_chunks > 0 && --w->die_after_chunks == 0) raise(SIGKILL);
#else
  (void)w;
#endif
}

/* Every live rank's verdict on the call (`what`: "round" or "prepare"); the first transport
 * error here, or PEER_LOST when another rank saw one. */
static int call_verdict(strata_weights *w, strata_comm *comm, int transport, const char *what) {
  if (transport != STRATA_OK) strata_comm_revoke(comm);
  int ok = transport == STRATA_OK;
  int status = strata_comm_agree(comm, &ok);
  int rank = strata_comm_rank(comm);
  if (status != STRATA_OK)
    return fail(w, rank, status, "%s: agreeing on its outcome failed (%s)", what,
                strata_err_name(status));
  if (transport != STRATA_OK)
    return fail(w, rank, transport, "%s: %s (shrink the communicator and repeat it)", what,
                strata_strerror(transport));
  if (!ok)
    return fail(w, rank, STRATA_ERR_PEER_LOST,
                "%s: it failed on another rank (shrink the communicator and repeat it)", what);
  return STRATA_OK;
}

static int round_verdict(strata_weights *w, strata_comm *comm, int transport) {
  return call_verdict(w, comm, transport, "round");
}

static int role_check(strata_weights *w, strata_comm *comm, int publisher, const char *call) {
  if (!w || !comm) return STRATA_ERR_INVALID_ARG;
  int rank = strata_comm_rank(comm);
  if (w->publisher != publisher || (rank == 0) != publisher) {
    /* the other ranks wait on this one in the round's first collective: release them */
    strata_comm_revoke(comm);
    return fail(w, rank, STRATA_ERR_INVALID_ARG,
                "rank %d called %s with a %s handle: rank 0 publishes (serve), every other rank "
                "subscribes (update)",
                rank, call, w->publisher ? "publisher" : "subscriber");
  }
  return STRATA_OK;
}

/* This process's host, as the plan compares hosts: equal values share memory. */
static uint64_t my_host(const strata_weights *w) {
  char id[HOST_BYTES];
  strata_net_host_identity(id, sizeof id);
#ifdef STRATA_TEST_HOOKS
  if (w->host_override[0]) snprintf(id, sizeof id, "%s", w->host_override);
#else
  (void)w;
#endif
  return weights_digest_bytes(id, strlen(id));
}

int strata_weights_serve(strata_weights *w, strata_comm *comm, strata_weights_round_info *info) {
  int status = role_check(w, comm, 1, "serve");
  if (status != STRATA_OK) return status;
  if (info) memset(info, 0, sizeof *info);
  double t_start = strata_now_s();
  w->error[0] = 0;
  int nranks = strata_comm_size(comm);
  uint8_t *gathered = calloc((size_t)nranks, REQUEST_BYTES), mine[REQUEST_BYTES] = {0};
  uint8_t *member = calloc((size_t)nranks, 1);
  request *reqs = calloc((size_t)nranks, sizeof *reqs);
  plan p = {.newest = w->version, .chunk_bytes = w->opt.chunk_bytes, .nranks = (uint32_t)nranks};
  p.ranks = calloc((size_t)nranks, sizeof *p.ranks);
  p.blobs = calloc(2 * (w->nversions ? w->nversions : 1), sizeof *p.blobs);
  uint8_t *need = calloc(2 * (w->nversions ? w->nversions : 1), 1);
  p.table_bytes = table_pack(&w->set, NULL);
  p.table = malloc(p.table_bytes);
  int transport = STRATA_OK, refused = 0;
  fanout f = {0};
  const stored_version **sources = calloc(2 * (w->nversions ? w->nversions : 1), sizeof *sources);
  if (!gathered || !member || !reqs || !p.ranks || !p.blobs || !need || !p.table || !sources) {
    transport = STRATA_ERR_NO_MEMORY; /* the others wait in the gather: the verdict releases them */
    goto verdict;
  }
  table_pack(&w->set, p.table);
  reqs[0] = (request){.host = my_host(w)};
  request_pack(mine, &reqs[0]);
  transport = strata_gather(comm, mine, gathered, REQUEST_BYTES, STRATA_U8, 0);
  if (transport != STRATA_OK) goto verdict;

  for (int r = 0; r < nranks; r++) p.ranks[r].parent = -1;
  for (int r = 1; r < nranks; r++) {
    if (!request_unpack(gathered + (size_t)r * REQUEST_BYTES, &reqs[r])) {
      p.ranks[r].status = STRATA_ERR_PROTOCOL;
      continue;
    }
    if (reqs[r].kind != CALL_ROUND) { /* it called strata_weights_prepare: it learns so */
      p.ranks[r].status = STRATA_ERR_INVALID_ARG;
      refused++;
      STRATA_LOG(STRATA_LOG_WARN, 0, "weights: subscriber %d prepares while rank 0 serves", r);
      continue;
    }
    plan_one(w, &reqs[r], &p.ranks[r], need, need + w->nversions);
    if (p.ranks[r].status != STRATA_OK) {
      refused++;
      STRATA_LOG(STRATA_LOG_WARN, 0, "weights: subscriber %d not served: %s", r,
                 p.ranks[r].status == STRATA_ERR_MISMATCH ? "its tensor set differs"
                                                          : "its target version is not kept");
    }
  }
  for (size_t i = 0; i < w->nversions; i++) {
    if (need[i]) {
      p.blobs[p.nblobs] =
          (plan_blob){w->versions[i].version, WEIGHTS_BLOB_FULL, w->versions[i].full_len};
      sources[p.nblobs++] = &w->versions[i];
    }
    if (need[w->nversions + i]) {
      p.blobs[p.nblobs] =
          (plan_blob){w->versions[i].version, WEIGHTS_BLOB_PATCH, w->versions[i].patch_len};
      sources[p.nblobs++] = &w->versions[i];
    }
  }
  for (uint32_t i = 0; i < p.nblobs; i++) p.stream_bytes += p.blobs[i].bytes;
  for (int r = 1; r < nranks; r++) /* those who need bytes */
    member[r] = p.ranks[r].status == STRATA_OK && p.ranks[r].target != reqs[r].held;
  plan_tree(reqs, comm, member, p.ranks, nranks);
  status = fanout_init(&f, &p, 0);
  if (status == STRATA_OK) status = plan_send(comm, &p, &transport);
  if (status != STRATA_OK) {
    transport = status;
    goto verdict;
  }
  if (transport != STRATA_OK || !f.count) goto verdict;

  /* chunk by chunk, each to every child, so all the sites' streams move at once */
  int posted = STRATA_OK;
  for (uint32_t i = 0; i < p.nblobs && posted == STRATA_OK; i++) {
    const uint8_t *blob =
        p.blobs[i].kind == WEIGHTS_BLOB_FULL ? sources[i]->full : sources[i]->patch;
    for (uint64_t off = 0; off < p.blobs[i].bytes && posted == STRATA_OK; off += p.chunk_bytes) {
      uint64_t len =
          p.blobs[i].bytes - off < p.chunk_bytes ? p.blobs[i].bytes - off : p.chunk_bytes;
      posted = fanout_post(&f, comm, blob + off, len);
      maybe_die(w);
    }
  }
  uint64_t sent = 0;
  transport = fanout_drain(&f, &sent);
  if (info) info->bytes_sent = sent;
  if (info) info->reached_s = strata_now_s() - t_start;

verdict:
  status = round_verdict(w, comm, transport);
  if (info) {
    info->version = w->version;
    info->stream_bytes = p.stream_bytes;
    info->subscribers = nranks - 1;
    info->refused = refused;
  }
  fanout_free(&f);
  free(gathered);
  free(member);
  free(reqs);
  free(need);
  free(sources);
  plan_free(&p);
  return status;
}

/* Does this subscriber apply blob b (base anchor, then patches up to its target)? */
static int wanted(const plan_rank *me, uint64_t held, const plan_blob *b) {
  if (b->kind == WEIGHTS_BLOB_FULL) return me->base && b->version == me->base;
  uint64_t from = me->base ? me->base : held;
  return b->version > from && b->version <= me->target;
}

/* Copies the tensors a round wrote: staging into the buffers (commit) or back (restore). */
static void copy_touched(strata_weights *w, const uint8_t *touched, int commit) {
  for (size_t i = 0; i < w->set.count; i++) {
    const weights_tensor *t = &w->set.tensors[i];
    if (!touched[i] || !t->bytes) continue;
    if (commit)
      memcpy(t->data, w->staging[i], t->bytes);
    else
      memcpy(w->staging[i], t->data, t->bytes);
  }
}

int strata_weights_update(strata_weights *w, strata_comm *comm, uint64_t target,
                          strata_weights_round_info *info) {
  int status = role_check(w, comm, 0, "update");
  if (status != STRATA_OK) return status;
  if (info) memset(info, 0, sizeof *info);
  w->error[0] = 0;
  w->last_parent = -1;
  int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
  uint8_t mine[REQUEST_BYTES], *stream = NULL;
  request q = {.held = w->version, .target = target, .digest = w->set.digest, .host = my_host(w)};
  q.distrust = (uint32_t)w->distrust;
  request_pack(mine, &q);
  plan p = {0};
  size_t *map = calloc(w->set.count ? w->set.count : 1, sizeof *map);
  int local = STRATA_OK; /* why this rank is not brought to its target */
  int applied = 0, full_applied = 0, wanted_blobs = 0, committed = 0;
  uint8_t *touched = calloc(w->set.count ? w->set.count : 1, 1);
  fanout f = {0};
  uint64_t sent = 0, *starts = NULL;
  chunk *chunks = NULL;
  weights_full_cursor cursor = {0};
  const plan_rank *me = NULL;
  /* where a round's time goes (logged at INFO): the plan, the stream, the commit, the verdict */
  double t_start = strata_now_s(), t_plan = 0, t_first = 0, t_stream = 0, t_commit = 0;
  int transport =
      map ? strata_gather(comm, mine, NULL, REQUEST_BYTES, STRATA_U8, 0) : STRATA_ERR_NO_MEMORY;
  if (transport == STRATA_OK) transport = plan_receive(w, comm, &p);
  if (transport != STRATA_OK) goto verdict;
  me = &p.ranks[rank];
  t_plan = strata_now_s();
  local = p.kind != CALL_ROUND
              ? fail(w, rank, STRATA_ERR_INVALID_ARG,
                     "rank 0 prepares (strata_weights_prepare) where this rank updates")
              : table_match(w, &p, map, rank);
  if (local == STRATA_OK && me->status == STRATA_ERR_NOT_FOUND)
    local = fail(w, rank, STRATA_ERR_NOT_FOUND,
                 "version %llu is not kept by the publisher (newest %llu)",
                 (unsigned long long)(target ? target : p.newest), (unsigned long long)p.newest);
  else if (local == STRATA_OK && me->status != STRATA_OK)
    local = fail(w, rank, me->status, "the publisher refused this subscriber: %s",
                 strata_err_name(me->status));
  if (local == STRATA_OK && me->parent < 0 && me->target != w->version)
    local = fail(w, rank, STRATA_ERR_PROTOCOL, "the plan brings this subscriber no bytes");
  if (me->parent < 0) goto verdict; /* nothing to receive this round */
  w->last_parent = me->parent;

  /* every chunk of the stream in order, with the blob it belongs to */
  size_t nchunks = 0;
  for (uint32_t i = 0; i < p.nblobs; i++) {
    nchunks += (size_t)((p.blobs[i].bytes + p.chunk_bytes - 1) / p.chunk_bytes);
    wanted_blobs += local == STRATA_OK && wanted(me, w->version, &p.blobs[i]);
  }
  stream = malloc(p.stream_bytes ? p.stream_bytes : 1);
  chunks = calloc(nchunks ? nchunks : 1, sizeof *chunks);
  starts = calloc(p.nblobs ? p.nblobs : 1, sizeof *starts);
  if (!stream || !chunks || !starts || fanout_init(&f, &p, rank) != STRATA_OK) {
    transport = fail(w, rank, STRATA_ERR_NO_MEMORY, "no memory for the round's %llu bytes",
                     (unsigned long long)p.stream_bytes);
    goto verdict;
  }
  uint64_t at = 0;
  for (uint32_t i = 0, c = 0; i < p.nblobs; i++) {
    starts[i] = at;
    for (uint64_t off = 0; off < p.blobs[i].bytes; off += p.chunk_bytes, c++) {
      chunks[c].offset = at + off;
      chunks[c].len =
          p.blobs[i].bytes - off < p.chunk_bytes ? p.blobs[i].bytes - off : p.chunk_bytes;
      chunks[c].blob = (int)i;
      chunks[c].last = off + chunks[c].len == p.blobs[i].bytes;
    }
    at += p.blobs[i].bytes;
  }
  /* receives are posted WINDOW chunks ahead, so a long link carries a window's bytes per round
   * trip instead of one chunk's; while this thread forwards and applies chunk c, the progress
   * thread receives the chunks after it */
  strata_request *recvs[WINDOW] = {0};
  size_t posted = 0;
  for (size_t c = 0; c < nchunks && transport == STRATA_OK; c++) {
    while (posted < nchunks && posted < c + WINDOW && transport == STRATA_OK) {
      transport = strata_irecv(comm, stream + chunks[posted].offset, chunks[posted].len, STRATA_U8,
                               me->parent, &recvs[posted % WINDOW]);
      if (transport == STRATA_OK) posted++;
    }
    if (transport != STRATA_OK) break;
    transport = strata_request_wait(recvs[c % WINDOW]);
    recvs[c % WINDOW] = NULL;
    if (transport != STRATA_OK) break;
    if (c == 0) t_first = strata_now_s();
    maybe_die(w);
    fanout_post(&f, comm, stream + chunks[c].offset, chunks[c].len);
    int i = chunks[c].blob;
    if (local != STRATA_OK || !wanted(me, w->version, &p.blobs[i])) continue;
    const uint8_t *blob = stream + starts[i];
    if (p.blobs[i].kind == WEIGHTS_BLOB_FULL) /* tensor by tensor, as it arrives */
      local = weights_full_apply_prefix(&w->set, map, w->staging, touched, &cursor, blob,
                                        chunks[c].offset + chunks[c].len - starts[i],
                                        p.blobs[i].bytes, w->error, sizeof w->error);
    else if (chunks[c].last) /* a patch decodes whole (zstd frame) */
      local = weights_blob_apply(&w->set, map, w->staging, touched, blob, p.blobs[i].bytes,
                                 w->error, sizeof w->error);
    if (local != STRATA_OK) {
      STRATA_LOG(STRATA_LOG_ERROR, rank, "weights: %s; version %llu kept", w->error,
                 (unsigned long long)w->version);
      continue;
    }
    if (!chunks[c].last) continue;
    if (p.blobs[i].kind == WEIGHTS_BLOB_FULL) {
      weights_full_cursor_free(&cursor);
      memset(&cursor, 0, sizeof cursor);
    }
    applied++;
    full_applied += p.blobs[i].kind == WEIGHTS_BLOB_FULL;
  }
  if (transport != STRATA_OK) strata_comm_revoke(comm); /* ends the receives still posted */
  for (size_t k = 0; k < WINDOW; k++)
    if (recvs[k]) strata_request_wait(recvs[k]);
  int forwarded = fanout_drain(&f, &sent);
  if (transport == STRATA_OK) transport = forwarded;
  t_stream = strata_now_s();
  if (transport == STRATA_OK && local == STRATA_OK && applied != wanted_blobs)
    local = fail(w, rank, STRATA_ERR_PROTOCOL, "the round's stream lacked a version it needs");
  if (transport == STRATA_OK && local == STRATA_OK) {
    copy_touched(w, touched, 1);
    w->version = me->target;
    w->distrust = 0;
    committed = 1;
  } else {
    copy_touched(w, touched, 0);
  }
  if (local == STRATA_ERR_PROTOCOL) w->distrust = 1;
  t_commit = strata_now_s();

verdict:
  status = round_verdict(w, comm, transport);
  if (me && t_commit > 0)
    STRATA_LOG(STRATA_LOG_INFO, rank,
               "weights: round to v%llu, %llu bytes from rank %d: plan %.3f s, first chunk after "
               "%.3f s, stream %.3f s, commit %.3f s, verdict %.3f s",
               (unsigned long long)me->target, (unsigned long long)p.stream_bytes, me->parent,
               t_plan - t_start, t_first > 0 ? t_first - t_plan : 0.0, t_stream - t_plan,
               t_commit - t_stream, strata_now_s() - t_commit);
  if (info) {
    info->version = w->version;
    info->stream_bytes = p.stream_bytes;
    info->bytes_sent = sent;
    info->blobs_applied = applied;
    info->full_applied = full_applied;
    info->subscribers = nranks - 1;
    info->reached_s = committed ? t_commit - t_start : 0;
  }
  weights_full_cursor_free(&cursor);
  fanout_free(&f);
  free(chunks);
  free(starts);
  free(map);
  free(touched);
  free(stream);
  plan_free(&p);
  return status != STRATA_OK ? status : local;
}

/* ---- preparation ---- */

/* What a preparation sends down one edge between sites, at most: past a few bandwidth-delay
 * products the windows are open. Also the most a child believes of its parent's header. */
#define WARM_MAX_BYTES (256ull << 20)
/* The rate assumed when STRATA_TCP_LINK_GBPS is not given. */
#define WARM_DEFAULT_GBPS 1.0
/* The warm-up moves in messages of the plan's chunk size, at most this: the child receives each
 * into one scratch buffer and drops it. */
#define WARM_PIECE_MAX_BYTES (8ull << 20)
#define WARM_HEAD_BYTES 16

/* STRATA_WEIGHTS_WARM_AUTO: twice the bandwidth-delay product of this rank's longest path. A
 * fresh TCP connection sends ten segments and about doubles its window each round trip, so it
 * carries a whole bandwidth-delay product in flight only after it has sent about twice that; a
 * first round that starts there moves at the link's rate from its first chunk. Nothing below a
 * WAN round trip (a LAN's windows open within microseconds). */
static uint64_t warm_auto_bytes(const strata_comm *comm) {
  uint64_t rtt_us = strata_comm_wan_rtt_us(comm);
  if (!rtt_us) return 0;
  double gbps = strata_comm_config(comm)->tcp_link_gbps > 0
                    ? strata_comm_config(comm)->tcp_link_gbps
                    : WARM_DEFAULT_GBPS;
  double bytes = 2.0 * gbps * 1e9 / 8.0 * (double)rtt_us * 1e-6;
  return bytes >= (double)WARM_MAX_BYTES ? WARM_MAX_BYTES : (uint64_t)bytes;
}

/* The child's side of one edge: the header (total, piece), then the pieces, one receive at a
 * time into one scratch buffer. Between two receives the transport's sockets keep filling from
 * the network, so the sender's window is not what this loop holds back. */
static int warm_receive(strata_weights *w, strata_comm *comm, int from, uint64_t *received) {
  int rank = strata_comm_rank(comm);
  uint8_t head[WARM_HEAD_BYTES];
  int status = strata_recv(comm, head, sizeof head, STRATA_U8, from);
  if (status != STRATA_OK) return status;
  uint64_t bytes = weights_get_u64(head), piece = weights_get_u64(head + 8);
  if (bytes > WARM_MAX_BYTES || (bytes && (piece == 0 || piece > WARM_PIECE_MAX_BYTES)))
    return fail(w, rank, STRATA_ERR_PROTOCOL,
                "prepare: rank %d announced %llu warm-up bytes in pieces of %llu (at most %llu "
                "in pieces of at most %llu)",
                from, (unsigned long long)bytes, (unsigned long long)piece,
                (unsigned long long)WARM_MAX_BYTES, (unsigned long long)WARM_PIECE_MAX_BYTES);
  uint8_t *scratch = bytes ? malloc(piece) : NULL;
  if (bytes && !scratch) return fail(w, rank, STRATA_ERR_NO_MEMORY, "prepare: no scratch memory");
  for (uint64_t at = 0; at < bytes && status == STRATA_OK; at += piece) {
    status = strata_recv(comm, scratch, bytes - at < piece ? bytes - at : piece, STRATA_U8, from);
    if (status == STRATA_OK) *received += bytes - at < piece ? bytes - at : piece;
    maybe_die(w);
  }
  free(scratch);
  return status;
}

/* The plan's edges between sites that touch this rank: each parent sends its child a header
 * and then `warm` bytes in pieces, which the child receives and drops. */
static int warm_edges(strata_weights *w, strata_comm *comm, const plan *p, uint64_t warm,
                      strata_weights_prepare_info *info) {
  int me = strata_comm_rank(comm), remote = 0;
  if (strata_comm_sites(comm) < 2) return STRATA_OK;
  const int here = strata_comm_site(comm, me);
  for (uint32_t r = 0; r < p->nranks; r++)
    remote += p->ranks[r].parent == me && strata_comm_site(comm, (int)r) != here;
  int from =
      me > 0 && p->ranks[me].parent >= 0 && strata_comm_site(comm, p->ranks[me].parent) != here
          ? p->ranks[me].parent
          : -1;
  if (!remote && from < 0) return STRATA_OK;
  uint64_t piece = p->chunk_bytes < WARM_PIECE_MAX_BYTES ? p->chunk_bytes : WARM_PIECE_MAX_BYTES;
  uint8_t head[WARM_HEAD_BYTES];
  weights_put_u64(head, warm);
  weights_put_u64(head + 8, piece);
  fanout f = {0};
  uint8_t *zeros = remote && warm ? calloc(piece, 1) : NULL;
  int status = fanout_init(&f, p, me);
  if (status == STRATA_OK && remote && warm && !zeros) status = STRATA_ERR_NO_MEMORY;
  /* only the children in other sites: the ones inside this site are dropped from the fanout */
  int kept = 0;
  for (int k = 0; k < f.count; k++)
    if (strata_comm_site(comm, f.peers[k]) != here) f.peers[kept++] = f.peers[k];
  f.count = kept;
  if (status == STRATA_OK) status = fanout_post(&f, comm, head, sizeof head);
  for (uint64_t at = 0; at < warm && status == STRATA_OK && remote; at += piece) {
    status = fanout_post(&f, comm, zeros, warm - at < piece ? warm - at : piece);
    maybe_die(w);
  }
  if (status == STRATA_OK && from >= 0)
    status = warm_receive(w, comm, from, &info->warm_bytes_received);
  if (status != STRATA_OK) strata_comm_revoke(comm); /* ends the sends still in flight */
  uint64_t sent = 0;
  int drained = fanout_drain(&f, &sent);
  if (status == STRATA_OK) status = drained;
  if (status == STRATA_OK) info->warm_bytes_sent = sent - (uint64_t)f.count * sizeof head;
  fanout_free(&f);
  free(zeros);
  return status;
}

int strata_weights_prepare(strata_weights *w, strata_comm *comm, uint64_t warm_bytes,
                           strata_weights_prepare_info *info) {
  strata_weights_prepare_info ignored;
  if (!info) info = &ignored;
  memset(info, 0, sizeof *info);
  info->parent = -1;
  if (!w || !comm) return STRATA_ERR_INVALID_ARG;
  int status = role_check(w, comm, strata_comm_rank(comm) == 0, "prepare");
  if (status != STRATA_OK) return status;
  w->error[0] = 0;
  double t_start = strata_now_s();
  int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
  uint64_t warm = warm_bytes == STRATA_WEIGHTS_WARM_AUTO ? warm_auto_bytes(comm) : warm_bytes;
  if (warm > WARM_MAX_BYTES) warm = WARM_MAX_BYTES;
  request mine = {.kind = CALL_PREPARE, .digest = w->set.digest, .host = my_host(w)};
  uint8_t packed[REQUEST_BYTES];
  request_pack(packed, &mine);
  plan p = {0};
  int transport = STRATA_OK, local = STRATA_OK;
  if (rank == 0) {
    uint8_t *gathered = calloc((size_t)nranks, REQUEST_BYTES), *member = calloc((size_t)nranks, 1);
    request *reqs = calloc((size_t)nranks, sizeof *reqs);
    p = (plan){.kind = CALL_PREPARE,
               .newest = w->version,
               .chunk_bytes = w->opt.chunk_bytes,
               .nranks = (uint32_t)nranks};
    p.ranks = calloc((size_t)nranks, sizeof *p.ranks);
    p.table_bytes = table_pack(&w->set, NULL);
    p.table = malloc(p.table_bytes);
    p.blobs = calloc(1, sizeof *p.blobs);
    if (!gathered || !member || !reqs || !p.ranks || !p.table || !p.blobs)
      transport = STRATA_ERR_NO_MEMORY; /* the others wait in the gather: the verdict releases */
    else
      transport = strata_gather(comm, packed, gathered, REQUEST_BYTES, STRATA_U8, 0);
    if (transport == STRATA_OK) {
      table_pack(&w->set, p.table);
      reqs[0] = mine;
      p.ranks[0].parent = -1;
      for (int r = 1; r < nranks; r++) {
        p.ranks[r].parent = -1;
        const char *why = NULL;
        if (!request_unpack(gathered + (size_t)r * REQUEST_BYTES, &reqs[r]))
          p.ranks[r].status = STRATA_ERR_PROTOCOL, why = "its request is malformed";
        else if (reqs[r].kind != CALL_PREPARE)
          p.ranks[r].status = STRATA_ERR_INVALID_ARG, why = "it updates while rank 0 prepares";
        else if (reqs[r].digest != w->set.digest)
          p.ranks[r].status = STRATA_ERR_MISMATCH, why = "its tensor set differs";
        p.ranks[r].target = reqs[r].held;
        member[r] = p.ranks[r].status == STRATA_OK;
        if (why) {
          info->refused++;
          STRATA_LOG(STRATA_LOG_WARN, 0, "weights: subscriber %d has no place in the tree: %s", r,
                     why);
        }
      }
      plan_tree(reqs, comm, member, p.ranks, nranks);
      int packed_ok = plan_send(comm, &p, &transport);
      if (packed_ok != STRATA_OK) transport = packed_ok;
    }
    free(gathered);
    free(member);
    free(reqs);
  } else {
    size_t *map = calloc(w->set.count ? w->set.count : 1, sizeof *map);
    transport =
        map ? strata_gather(comm, packed, NULL, REQUEST_BYTES, STRATA_U8, 0) : STRATA_ERR_NO_MEMORY;
    if (transport == STRATA_OK) transport = plan_receive(w, comm, &p);
    if (transport == STRATA_OK && p.kind != CALL_PREPARE && p.ranks[rank].parent >= 0)
      /* a plan that streams to this rank while it prepares: nobody would receive that stream */
      transport = fail(w, rank, STRATA_ERR_PROTOCOL,
                       "rank 0's round plan gives this preparing "
                       "rank a parent");
    if (transport == STRATA_OK) {
      const plan_rank *me = &p.ranks[rank];
      local = p.kind != CALL_PREPARE
                  ? fail(w, rank, STRATA_ERR_INVALID_ARG,
                         "rank 0 runs a round (strata_weights_serve) where this rank prepares")
                  : table_match(w, &p, map, rank);
      if (local == STRATA_OK && me->status != STRATA_OK)
        local = fail(w, rank, me->status, "the publisher gave this subscriber no place: %s",
                     strata_err_name(me->status));
      info->parent = me->parent;
    }
    free(map);
  }
  /* the edges as the plan draws them, whatever this rank found wrong with its own set: a parent
   * the plan gives this rank sends to it */
  if (transport == STRATA_OK && p.kind == CALL_PREPARE) {
    for (uint32_t r = 0; r < p.nranks; r++) info->children += p.ranks[r].parent == rank;
    transport = warm_edges(w, comm, &p, warm, info);
  }
  info->seconds = strata_now_s() - t_start;
  status = call_verdict(w, comm, transport, "prepare");
  /* A round that reached every live rank succeeds; a preparation that a member did not live
   * through drew a tree with that member in it, which the first round would fail on. */
  int gone[1];
  int ngone = status == STRATA_OK ? strata_comm_failed_ranks(comm, gone, 1) : 0;
  if (ngone > 0)
    status = fail(w, rank, STRATA_ERR_PEER_LOST,
                  "prepare: rank %d%s did not take part (dead or frozen): shrink the communicator "
                  "and prepare again",
                  gone[0], ngone > 1 ? " and others" : "");
  plan_free(&p);
  return status != STRATA_OK ? status : local;
}

/* ---- fault injection and test hooks (weights_debug.h) ---- */
#ifdef STRATA_TEST_HOOKS

void weights_debug_die_after_chunks(strata_weights *w, long chunks) {
  w->die_after_chunks = chunks;
}

void weights_debug_corrupt_next(strata_weights *w, int how) {
  w->corrupt_next = how;
}

void weights_debug_host(strata_weights *w, const char *host) {
  snprintf(w->host_override, sizeof w->host_override, "%s", host ? host : "");
}

int weights_debug_parent(const strata_weights *w) {
  return w->last_parent;
}
#endif
