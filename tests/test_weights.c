// SPDX-License-Identifier: Apache-2.0
/*
 * test_weights.c — RL weight sync (src/train/weights.c): versions reach every subscriber bit for
 * bit, through full copies and patch chains, down the chain; a late joiner gets an anchor and
 * the patches after it; a corrupted version is refused and the previous one kept; a mismatched
 * tensor set is named; a subscriber that dies mid-update does not stop the others; a publisher
 * that dies leaves the subscribers on their last version, without a hang; with sites and hosts,
 * the fan-out sends one copy into each remote site (the trainer one copy when a subscriber shares
 * its site) and chains the members of a site host by host, and the deaths above end the same way
 * over that tree; a preparation draws the first round's tree, warms its edges between sites,
 * and names mismatched sets and disagreeing calls.
 *
 * The model is three tensors (bf16, f16, f32, one of odd length) whose version v every rank can
 * compute by itself: version 1 sets every element, each later version changes about 1 element
 * in 64 to random bits (NaNs included: a patch stores bits, not values) and a "dense" version
 * changes all of them, so its patch loses to a full copy.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/check.h"
#include "helpers/ranks.h"
#include "train/weights_debug.h"

enum { W_ROWS = 64, W_COLS = 1000, B_N = 1000, S_N = 333 };

typedef struct model {
  uint16_t w[W_ROWS * W_COLS]; /* bf16 */
  uint16_t b[B_N];             /* f16 */
  float s[S_N];                /* f32 */
} model;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Version v of the model; `dense` is a version that changes every element (0: none). */
static void model_at(model *m, int v, int dense) {
  memset(m, 0, sizeof *m);
  for (int step = 1; step <= v; step++) {
    int all = step == 1 || step == dense;
    for (size_t e = 0; e < W_ROWS * W_COLS + B_N + S_N; e++) {
      uint64_t h = mix((uint64_t)step << 32 | e);
      if (!all && h % 64) continue;
      if (e < W_ROWS * W_COLS)
        m->w[e] = (uint16_t)(h >> 16);
      else if (e < W_ROWS * W_COLS + B_N)
        m->b[e - W_ROWS * W_COLS] = (uint16_t)(h >> 16);
      else
        memcpy(&m->s[e - W_ROWS * W_COLS - B_N], &(uint32_t){(uint32_t)(h >> 16)}, 4);
    }
  }
}

/* The set; a subscriber lists it in another order (names, not positions, pair tensors). */
static void tensors_of(model *m, strata_weights_tensor t[3], int reversed) {
  strata_weights_tensor all[3] = {
      {"layers.0.w", m->w, STRATA_BF16, 2, {W_ROWS, W_COLS}},
      {"layers.0.b", m->b, STRATA_F16, 1, {B_N}},
      {"scale", m->s, STRATA_F32, 1, {S_N}},
  };
  for (int i = 0; i < 3; i++) t[i] = all[reversed ? 2 - i : i];
}

static int holds(const model *m, int v, int dense) {
  model *want = malloc(sizeof *want);
  model_at(want, v, dense);
  int same = !memcmp(m, want, sizeof *m);
  free(want);
  return same;
}

static strata_weights *make_publisher(model *m, int anchor_every, size_t chunk_bytes) {
  strata_weights_tensor t[3];
  tensors_of(m, t, 0);
  strata_weights_options opt;
  strata_weights_options_init(&opt);
  opt.anchor_every = anchor_every;
  opt.history = 8;
  opt.chunk_bytes = chunk_bytes;
  strata_weights *w = NULL;
  return strata_weights_publisher_create(t, 3, &opt, &w) == STRATA_OK ? w : NULL;
}

static strata_weights *make_subscriber(model *m) {
  strata_weights_tensor t[3];
  tensors_of(m, t, 1);
  strata_weights *w = NULL;
  return strata_weights_subscriber_create(t, 3, &w) == STRATA_OK ? w : NULL;
}

/* Publisher: sets the model to version v and publishes it. */
static int publish(strata_weights *w, model *m, int v, int dense) {
  model_at(m, v, dense);
  uint64_t got = 0;
  int status = strata_weights_publish(w, &got);
  CHECK_OR_RETURN(status == STRATA_OK && got == (uint64_t)v, "publish v%d: %s, got v%llu", v,
                  strata_err_name(status), (unsigned long long)got);
  return 0;
}

/* A round on any rank: rank 0 serves, the others update to the newest version. */
static int round_on(strata_weights *w, strata_comm *comm, int rank) {
  return rank == 0 ? strata_weights_serve(w, comm, NULL)
                   : strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL);
}

/* Where ranks are: a site (STRATA_SITE, through the engine's site table) and a host name the
 * plan takes instead of the real host identity (every rank of a test shares one machine). */
typedef struct layout {
  const char *site[8];
  const char *host[8];
  int parent[8]; /* the fan-out tree the plan must make (the "tree" cases) */
} layout;

/* Five ranks, two sites: site a holds the publisher (host h0), rank 1 (host h1) and rank 2
 * (host h0); site b holds ranks 3 and 4 (host h2). The tree: 0 -> 2 -> 1 in site a (the
 * publisher's host first), and 2 (the head of the publisher's site) -> 3 -> 4 over the WAN into
 * site b. */
static const layout TWO_SITES = {
    {"a", "a", "a", "b", "b"}, {"h0", "h1", "h0", "h2", "h2"}, {-1, 2, 0, 2, 3}};
/* The publisher alone in its site feeds each other site itself: 0 -> 1 -> 3 -> 2 in site b
 * (host h1, then h2: rank 3 of host h1 comes before rank 2), 0 -> 4 in site c. */
static const layout ALONE = {
    {"a", "b", "b", "b", "c"}, {"h0", "h1", "h2", "h1", "h3"}, {-1, 0, 3, 1, 0}};

static void layout_tweak(strata_config *cfg, int rank, void *arg) {
  const layout *l = arg;
  if (l && l->site[rank]) snprintf(cfg->site, sizeof cfg->site, "%s", l->site[rank]);
}

static void layout_apply(strata_weights *w, const layout *l, int rank) {
  if (w && l && l->host[rank]) weights_debug_host(w, l->host[rank]);
}

/* This rank's handle over *m: the publisher (chunks of chunk_bytes) on rank 0, a subscriber
 * elsewhere, with the layout's host. */
static strata_weights *member_of(model *m, int rank, size_t chunk_bytes, const layout *l) {
  strata_weights *w = rank == 0 ? make_publisher(m, 4, chunk_bytes) : make_subscriber(m);
  layout_apply(w, l, rank);
  return w;
}

/* ---- 1. chain: full copies, patches, a dense version, targets, a lagging subscriber ---- */

static int chain_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)arg, (void)n;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  enum { DENSE = 4, VERSIONS = 7 };
  if (rank == 0) {
    strata_weights *w = make_publisher(m, 6, 16384);
    CHECK_OR_RETURN(w, "publisher create");
    for (int v = 1; v <= VERSIONS; v++) {
      if (publish(w, m, v, DENSE)) return 1;
      strata_weights_round_info info;
      int status = strata_weights_serve(w, comm, &info);
      CHECK_OR_RETURN(status == STRATA_OK, "serve v%d: %s", v, strata_err_name(status));
      /* fan-out: every byte leaves the publisher once, however many subscribers */
      CHECK(info.bytes_sent == info.stream_bytes, "v%d: sent %llu of a %llu-byte stream", v,
            (unsigned long long)info.bytes_sent, (unsigned long long)info.stream_bytes);
      strata_weights_version_stats st;
      CHECK_STATUS(strata_weights_version_info(w, (uint64_t)v, &st), STRATA_OK);
      if (v == 1 || v == DENSE)
        CHECK(st.anchor && st.patch_bytes == 0 && st.changed * 100 > st.elements * 99,
              "v%d: a version that changes everything is a full copy only", v);
      else
        CHECK(st.patch_bytes > 0 && st.patch_bytes * 8 < st.full_bytes && st.changed > 0 &&
                  st.changed * 32 < st.elements,
              "v%d: a sparse version's patch (%llu bytes, %llu changed) is not small", v,
              (unsigned long long)st.patch_bytes, (unsigned long long)st.changed);
    }
    strata_weights_destroy(w);
  } else {
    strata_weights *w = make_subscriber(m);
    CHECK_OR_RETURN(w, "subscriber create");
    for (int v = 1; v <= VERSIONS; v++) {
      /* rank 3 lags: it keeps v1 until round 5, then catches up over an anchor (v4, the dense
       * version: it has no patch) and a patch; rank 2 asks for v2 in round 3; rank 1 keeps v4
       * through rounds 5 and 6, then takes the three patches */
      uint64_t target = STRATA_WEIGHTS_NEWEST;
      if ((rank == 3 && v > 1 && v < 5) || (rank == 1 && (v == 5 || v == 6)))
        target = strata_weights_version(w);
      if (rank == 2 && v == 3) target = 2;
      strata_weights_round_info info;
      int status = strata_weights_update(w, comm, target, &info);
      CHECK_OR_RETURN(status == STRATA_OK, "update v%d: %s (%s)", v, strata_err_name(status),
                      strata_weights_error(w));
      int want = rank == 3 && v < 5                ? 1
                 : rank == 2 && v == 3             ? 2
                 : rank == 1 && (v == 5 || v == 6) ? 4
                                                   : v;
      CHECK(strata_weights_version(w) == (uint64_t)want && info.version == (uint64_t)want,
            "rank %d after round %d holds v%llu, not v%d", rank, v,
            (unsigned long long)strata_weights_version(w), want);
      CHECK(holds(m, want, DENSE), "rank %d after round %d: buffers differ from v%d", rank, v,
            want);
      if (rank == 3 && v == 5)
        CHECK(info.full_applied == 1 && info.blobs_applied == 2,
              "the lagging subscriber (v1 -> v5) applied %d blobs, %d full: not anchor v4 + patch",
              info.blobs_applied, info.full_applied);
      if (rank == 1 && v == 7)
        CHECK(info.full_applied == 0 && info.blobs_applied == 3,
              "v4 -> v7 applied %d blobs, %d full: not the 3 patches", info.blobs_applied,
              info.full_applied);
    }
    strata_weights_destroy(w);
  }
  free(m);
  return failures != 0;
}

/* ---- 2. a corrupted version is refused; the previous one stays ---- */

/* K = 3: anchors at v1, v4, v7. v3's patch is damaged in one value (it decodes; only the digest
 * tells), v5's in its compressed frame. A subscriber that refused a version comes back through
 * the next anchor; until then it keeps what it holds. */
enum { CORRUPT_VERSIONS = 7 };
static const int corrupt_held[CORRUPT_VERSIONS + 1] = {0, 1, 2, 2, 4, 4, 4, 7};

static int corrupt_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)arg, (void)n;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  if (rank == 0) {
    strata_weights *w = make_publisher(m, 3, 1 << 20);
    CHECK_OR_RETURN(w, "publisher create");
    for (int v = 1; v <= CORRUPT_VERSIONS; v++) {
      if (v == 3) weights_debug_corrupt_next(w, WEIGHTS_CORRUPT_VALUE);
      if (v == 5) weights_debug_corrupt_next(w, WEIGHTS_CORRUPT_FRAME);
      if (publish(w, m, v, 0)) return 1;
      int status = strata_weights_serve(w, comm, NULL);
      CHECK_OR_RETURN(status == STRATA_OK, "serve v%d: %s", v, strata_err_name(status));
    }
    strata_weights_destroy(w);
  } else {
    strata_weights *w = make_subscriber(m);
    CHECK_OR_RETURN(w, "subscriber create");
    for (int v = 1; v <= CORRUPT_VERSIONS; v++) {
      strata_weights_round_info info;
      int status = strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, &info);
      int want = corrupt_held[v];
      if (want != v) {
        CHECK(status == STRATA_ERR_PROTOCOL, "v%d damaged: %s, not refused", v,
              strata_err_name(status));
        char what[32];
        snprintf(what, sizeof what, "version %d", v == 6 ? 5 : v);
        CHECK(strstr(strata_weights_error(w), what) &&
                  (v != 3 || strstr(strata_weights_error(w), "digest")),
              "v%d: the error does not say what failed: %s", v, strata_weights_error(w));
      } else {
        CHECK(status == STRATA_OK, "v%d: %s (%s)", v, strata_err_name(status),
              strata_weights_error(w));
      }
      CHECK(strata_weights_version(w) == (uint64_t)want, "after v%d holds v%llu, not v%d", v,
            (unsigned long long)strata_weights_version(w), want);
      CHECK(holds(m, want, 0), "after v%d the buffers are not v%d", v, want);
      if (v == 4 || v == 7) /* after a refusal the subscriber asks for an anchor */
        CHECK(status == STRATA_OK && info.full_applied == 1,
              "v%d after a refusal applied %d full copies", v, info.full_applied);
    }
    strata_weights_destroy(w);
  }
  free(m);
  return failures != 0;
}

/* ---- 3. mismatched tensor sets are refused, by name; the others are served ---- */

static int mismatch_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)arg, (void)n;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  if (rank == 0) {
    strata_weights *w = make_publisher(m, 4, 1 << 20);
    CHECK_OR_RETURN(w, "publisher create");
    /* prepare finds the same mismatches before any version exists */
    strata_weights_prepare_info prep;
    int status = strata_weights_prepare(w, comm, 0, &prep);
    CHECK(status == STRATA_OK && prep.refused == 2 && prep.children == 1,
          "prepare: %s, %d refused (want 2), %d children (want 1)", strata_err_name(status),
          prep.refused, prep.children);
    if (publish(w, m, 1, 0)) return 1;
    strata_weights_round_info info;
    status = strata_weights_serve(w, comm, &info);
    CHECK(status == STRATA_OK && info.refused == 2, "serve: %s, %d refused (want 2)",
          strata_err_name(status), info.refused);
    strata_weights_destroy(w);
  } else {
    strata_weights_tensor t[3];
    tensors_of(m, t, 1);
    const char *name = "";
    if (rank == 1) t[2].shape[1] = W_COLS - 1, name = "layers.0.w"; /* shape */
    if (rank == 2) t[0].dtype = STRATA_BF16, name = "scale";        /* dtype */
    memset(m, 0x5a, sizeof *m);
    strata_weights *w = NULL;
    CHECK_OR_RETURN(strata_weights_subscriber_create(t, 3, &w) == STRATA_OK, "create");
    strata_weights_prepare_info prep;
    int status = strata_weights_prepare(w, comm, 0, &prep);
    if (rank == 3) {
      CHECK(status == STRATA_OK && prep.parent == 0,
            "prepare, the matching subscriber: %s, "
            "parent %d",
            strata_err_name(status), prep.parent);
    } else {
      CHECK(status == STRATA_ERR_MISMATCH && strstr(strata_weights_error(w), name) &&
                prep.parent == -1,
            "prepare, rank %d: %s (%s), parent %d", rank, strata_err_name(status),
            strata_weights_error(w), prep.parent);
    }
    status = strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL);
    if (rank == 3) {
      CHECK(status == STRATA_OK && holds(m, 1, 0), "the matching subscriber: %s",
            strata_err_name(status));
    } else {
      CHECK(status == STRATA_ERR_MISMATCH, "rank %d: %s, not MISMATCH", rank,
            strata_err_name(status));
      CHECK(strstr(strata_weights_error(w), name), "rank %d: the error does not name '%s': %s",
            rank, name, strata_weights_error(w));
      CHECK(strata_weights_version(w) == 0, "a refused subscriber holds a version");
      uint8_t untouched[sizeof(model)];
      memset(untouched, 0x5a, sizeof untouched);
      CHECK(!memcmp(m, untouched, sizeof untouched), "a refused subscriber's buffers changed");
    }
    strata_weights_destroy(w);
  }
  free(m);
  return failures != 0;
}

/* ---- 4. a subscriber dies mid-update: the others complete (shrink, repeat) ---- */

/* arg: NULL (one site, one host: a chain 0 -> 1 -> 2 -> 3, rank 2 dies inside it) or
 * TWO_SITES (rank 3, site b's entry and rank 4's parent, dies) */
static int subscriber_death_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = member_of(m, rank, 4096, arg);
  CHECK_OR_RETURN(w, "create");
  if (rank == (arg ? 3 : 2)) weights_debug_die_after_chunks(w, 5); /* of the full copy's 33 */
  if (rank == 0 && publish(w, m, 1, 0)) return 1;
  /* the round rank 2 dies in fails on the others; shrunk, the same round completes */
  strata_comm *work = comm;
  int status = round_on(w, comm, rank);
  CHECK_OR_RETURN(status != STRATA_OK, "nobody died");
  status = strata_comm_shrink(comm, &work);
  CHECK_OR_RETURN(status == STRATA_OK, "shrink: %s", strata_err_name(status));
  CHECK(strata_comm_size(work) == n - 1, "shrink kept %d ranks", strata_comm_size(work));
  status = round_on(w, work, rank);
  CHECK_OR_RETURN(status == STRATA_OK, "the repeated round failed: %s", strata_err_name(status));
  if (rank != 0) CHECK(holds(m, 1, 0) && strata_weights_version(w) == 1, "survivor lacks v1");
  /* and the next version goes round the survivors at once */
  status = rank == 0 ? (publish(w, m, 2, 0), strata_weights_serve(w, work, NULL))
                     : strata_weights_update(w, work, STRATA_WEIGHTS_NEWEST, NULL);
  CHECK(status == STRATA_OK, "v2 over the survivors: %s", strata_err_name(status));
  if (rank != 0) CHECK(holds(m, 2, 0), "survivor lacks v2");
  strata_weights_destroy(w);
  if (work != comm) strata_comm_destroy(work);
  free(m);
  return failures != 0;
}

/* ---- 5. the publisher dies mid-update: subscribers keep their version, no hang ---- */

/* arg: NULL (a chain) or TWO_SITES (the publisher feeds both sites when it dies) */
static int publisher_death_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)n;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = member_of(m, rank, 4096, arg);
  CHECK_OR_RETURN(w, "create");
  for (int v = 1; v <= 2; v++) {
    if (rank == 0) {
      if (publish(w, m, v, 2)) return 1; /* v2 dense: a full copy of 33 chunks */
      if (v == 2) weights_debug_die_after_chunks(w, 10);
      CHECK_OR_RETURN(strata_weights_serve(w, comm, NULL) == STRATA_OK, "serve v%d", v);
    } else {
      double t0 = strata_test_now_s();
      int status = strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL);
      if (v == 1) CHECK_OR_RETURN(status == STRATA_OK, "v1: %s", strata_err_name(status));
      if (v == 2) {
        CHECK(status != STRATA_OK, "a round whose publisher died succeeded");
        CHECK(strata_test_now_s() - t0 < 8, "the failed round took %.1f s",
              strata_test_now_s() - t0);
        CHECK(strata_weights_version(w) == 1 && holds(m, 1, 2),
              "after the publisher's death: v%llu held, buffers %s v1",
              (unsigned long long)strata_weights_version(w), holds(m, 1, 2) ? "are" : "are not");
      }
    }
  }
  strata_weights_destroy(w);
  free(m);
  return failures != 0;
}

/* ---- 6. a subscriber joins late (strata_comm_grow): anchor + patches ---- */

enum { JOIN_MEMBERS = 2, JOINER = 2 };

static void join_tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  if (rank == JOINER) {
    cfg->join = 1;
    cfg->rank = cfg->world_size = -1;
  } else {
    cfg->world_size = JOIN_MEMBERS;
  }
}

static int join_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)arg, (void)n;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  int id = strata_comm_rank(comm);
  strata_weights *w = id == 0 ? make_publisher(m, 3, 1 << 20) : make_subscriber(m);
  CHECK_OR_RETURN(w, "create");
  strata_comm *work = comm;
  if (rank != JOINER) {
    /* v1 anchor, v2 v3 patches, v4 anchor (K = 3) with its patch, served to the member */
    for (int v = 1; v <= 4; v++) {
      if (id == 0 && publish(w, m, v, 0)) return 1;
      int status = id == 0 ? strata_weights_serve(w, comm, NULL)
                           : strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL);
      CHECK_OR_RETURN(status == STRATA_OK, "v%d: %s", v, strata_err_name(status));
    }
    /* v5, v6 published while the joiner comes */
    if (id == 0 && (publish(w, m, 5, 0) || publish(w, m, 6, 0))) return 1;
    strata_comm *next = NULL;
    int grown = strata_test_grow_to(comm, JOIN_MEMBERS + 1, 10, &next);
    CHECK_OR_RETURN(grown == STRATA_OK, "grow: %s", strata_err_name(grown));
    work = next;
  }
  strata_weights_round_info info;
  int status = id == 0 ? strata_weights_serve(w, work, &info)
                       : strata_weights_update(w, work, STRATA_WEIGHTS_NEWEST, &info);
  CHECK_OR_RETURN(status == STRATA_OK, "round with the joiner: %s (%s)", strata_err_name(status),
                  strata_weights_error(w));
  if (id != 0) CHECK(strata_weights_version(w) == 6 && holds(m, 6, 0), "rank %d lacks v6", id);
  if (rank == JOINER)
    CHECK(info.full_applied == 1 && info.blobs_applied == 3,
          "the joiner applied %d blobs, %d full: not anchor v4 + 2 patches", info.blobs_applied,
          info.full_applied);
  else if (id != 0)
    CHECK(info.full_applied == 0 && info.blobs_applied == 2,
          "the member applied %d blobs, %d full: not 2 patches", info.blobs_applied,
          info.full_applied);
  strata_weights_destroy(w);
  if (work != comm) strata_comm_destroy(work);
  free(m);
  return failures != 0;
}

/* ---- 7. the fan-out tree over sites and hosts ---- */

static uint64_t wan_sent(strata_comm *comm) {
  strata_comm_stats st;
  return strata_comm_get_stats(comm, &st) == STRATA_OK ? st.wan_bytes_sent : 0;
}

/* arg: a layout with its expected tree. Every rank checks its parent, that it sent one copy per
 * child (the publisher included) and, for the full copy, that the bytes it sent across sites are
 * one copy per child in another site (the round's own messages are a few KiB). */
static int tree_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  const layout *l = arg;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = member_of(m, rank, 8192, l);
  CHECK_OR_RETURN(w, "create");
  uint64_t children = 0, remote_children = 0;
  for (int r = 1; r < n; r++)
    if (l->parent[r] == rank) {
      children++;
      remote_children += strcmp(l->site[r], l->site[rank]) != 0;
    }
  /* v1 a full copy, v2 a patch: both go down the same tree */
  for (int v = 1; v <= 2; v++) {
    if (rank == 0 && publish(w, m, v, 0)) return 1;
    strata_weights_round_info info;
    uint64_t wan0 = wan_sent(comm);
    int status = rank == 0 ? strata_weights_serve(w, comm, &info)
                           : strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, &info);
    CHECK_OR_RETURN(status == STRATA_OK, "v%d: %s (%s)", v, strata_err_name(status),
                    strata_weights_error(w));
    uint64_t wan = wan_sent(comm) - wan0, stream = info.stream_bytes;
    CHECK(info.bytes_sent == children * stream, "v%d: rank %d sent %llu bytes, not %llu copies", v,
          rank, (unsigned long long)info.bytes_sent, (unsigned long long)children);
    if (v == 1)
      CHECK(wan >= remote_children * stream && wan < remote_children * stream + stream / 8,
            "v1: rank %d sent %llu bytes across sites, not %llu copies of %llu", rank,
            (unsigned long long)wan, (unsigned long long)remote_children,
            (unsigned long long)stream);
    if (rank == 0) continue;
    CHECK(weights_debug_parent(w) == l->parent[rank], "v%d: rank %d fed by %d, not %d", v, rank,
          weights_debug_parent(w), l->parent[rank]);
    CHECK(holds(m, v, 0) && strata_weights_version(w) == (uint64_t)v, "rank %d lacks v%d", rank, v);
  }
  strata_weights_destroy(w);
  free(m);
  return failures != 0;
}

/* ---- 7b. prepare: the tree of the first round, its WAN edges warmed; disagreeing calls ---- */

enum { WARM = 1 << 20 };

/* arg: a layout with its expected tree. Every rank prepares with WARM bytes per edge between
 * sites: each learns the parent the plan will give it, a parent sends WARM to each child in
 * another site (and those bytes cross between sites), the child receives them; the first round
 * then follows that tree. A preparation with STRATA_WEIGHTS_WARM_AUTO between ranks of one host
 * warms nothing (its round trip is far below a WAN's). */
static int prepare_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  const layout *l = arg;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = member_of(m, rank, 8192, l);
  CHECK_OR_RETURN(w, "create");
  int children = 0, remote_children = 0;
  for (int r = 1; r < n; r++)
    if (l->parent[r] == rank) {
      children++;
      remote_children += strcmp(l->site[r], l->site[rank]) != 0;
    }
  int remote_parent = rank > 0 && strcmp(l->site[l->parent[rank]], l->site[rank]) != 0;
  strata_weights_prepare_info prep;
  uint64_t wan0 = wan_sent(comm);
  int status = strata_weights_prepare(w, comm, WARM, &prep);
  CHECK_OR_RETURN(status == STRATA_OK, "prepare: %s (%s)", strata_err_name(status),
                  strata_weights_error(w));
  uint64_t wan = wan_sent(comm) - wan0;
  CHECK(prep.parent == l->parent[rank] && prep.children == children,
        "rank %d: parent %d, %d children; the tree says %d, %d", rank, prep.parent, prep.children,
        l->parent[rank], children);
  CHECK(prep.warm_bytes_sent == (uint64_t)remote_children * WARM && wan >= prep.warm_bytes_sent,
        "rank %d: %llu warm bytes sent (%llu across sites), want %d x %d", rank,
        (unsigned long long)prep.warm_bytes_sent, (unsigned long long)wan, remote_children, WARM);
  CHECK(prep.warm_bytes_received == (remote_parent ? (uint64_t)WARM : 0),
        "rank %d: %llu warm bytes received", rank, (unsigned long long)prep.warm_bytes_received);
  CHECK_STATUS(strata_weights_prepare(w, comm, STRATA_WEIGHTS_WARM_AUTO, &prep), STRATA_OK);
  CHECK(prep.warm_bytes_sent == 0 && prep.warm_bytes_received == 0,
        "rank %d: AUTO warmed %llu bytes between ranks of one host", rank,
        (unsigned long long)prep.warm_bytes_sent);
  if (rank == 0 && publish(w, m, 1, 0)) return 1;
  status = round_on(w, comm, rank);
  CHECK_OR_RETURN(status == STRATA_OK, "v1: %s (%s)", strata_err_name(status),
                  strata_weights_error(w));
  if (rank > 0)
    CHECK(weights_debug_parent(w) == l->parent[rank] && holds(m, 1, 0),
          "rank %d: v1 from %d, prepared for %d", rank, weights_debug_parent(w), l->parent[rank]);
  strata_weights_destroy(w);
  free(m);
  return failures != 0;
}

/* TWO_SITES: rank 3, site b's entry, dies while it receives its warm-up from rank 2: every other
 * rank's preparation returns a transport error, and over the shrunk communicator the preparation
 * and the first round succeed. */
static int prepare_death_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = member_of(m, rank, 8192, arg);
  CHECK_OR_RETURN(w, "create");
  if (rank == 3) weights_debug_die_after_chunks(w, 2); /* of the warm-up's 128 pieces */
  strata_weights_prepare_info prep;
  int status = strata_weights_prepare(w, comm, WARM, &prep);
  CHECK_OR_RETURN(status != STRATA_OK, "rank %d: the preparation rank 3 died in succeeded", rank);
  strata_comm *work = NULL;
  status = strata_comm_shrink(comm, &work);
  CHECK_OR_RETURN(status == STRATA_OK && strata_comm_size(work) == n - 1, "shrink: %s",
                  strata_err_name(status));
  status = strata_weights_prepare(w, work, WARM, &prep);
  CHECK_OR_RETURN(status == STRATA_OK, "prepare over the survivors: %s (%s)",
                  strata_err_name(status), strata_weights_error(w));
  if (rank == 0 && publish(w, m, 1, 0)) return 1;
  status = round_on(w, work, rank);
  CHECK(status == STRATA_OK && (rank == 0 || holds(m, 1, 0)), "v1 over the survivors: %s",
        strata_err_name(status));
  strata_weights_destroy(w);
  strata_comm_destroy(work);
  free(m);
  return failures != 0;
}

/* Rank 0 serves while rank 2 prepares, then rank 0 prepares while rank 1 updates: the rank that
 * called the other function is told so, the others go on. */
static int prepare_mixed_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)n, (void)arg;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  model *m = calloc(1, sizeof *m);
  strata_weights *w = rank == 0 ? make_publisher(m, 4, 8192) : make_subscriber(m);
  CHECK_OR_RETURN(w, "create");
  if (rank == 0 && publish(w, m, 1, 0)) return 1;
  strata_weights_round_info info;
  strata_weights_prepare_info prep;
  int status = rank == 0   ? strata_weights_serve(w, comm, &info)
               : rank == 1 ? strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL)
                           : strata_weights_prepare(w, comm, 0, &prep);
  if (rank == 0)
    CHECK(status == STRATA_OK && info.refused == 1, "serve: %s, %d refused",
          strata_err_name(status), info.refused);
  if (rank == 1)
    CHECK(status == STRATA_OK && holds(m, 1, 0), "update: %s", strata_err_name(status));
  if (rank == 2)
    CHECK(status == STRATA_ERR_INVALID_ARG && strstr(strata_weights_error(w), "serve") &&
              strata_weights_version(w) == 0,
          "prepare against serve: %s (%s)", strata_err_name(status), strata_weights_error(w));
  status = rank == 1 ? strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, NULL)
                     : strata_weights_prepare(w, comm, 0, &prep);
  if (rank == 0)
    CHECK(status == STRATA_OK && prep.refused == 1, "prepare: %s, %d refused",
          strata_err_name(status), prep.refused);
  if (rank == 1)
    CHECK(status == STRATA_ERR_INVALID_ARG && strstr(strata_weights_error(w), "prepares") &&
              strata_weights_version(w) == 1,
          "update against prepare: %s (%s)", strata_err_name(status), strata_weights_error(w));
  if (rank == 2)
    CHECK(status == STRATA_OK && prep.parent == 0, "prepare: %s, parent %d",
          strata_err_name(status), prep.parent);
  strata_weights_destroy(w);
  free(m);
  return failures != 0;
}

/* ---- 8. a plan larger than its first broadcast (many tensors, long names) ---- */

enum { MANY = 240, MANY_ELEMENTS = 5 };

static int many_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  failures = 0; /* this rank's own: the parent's count came with the fork */
  (void)n, (void)arg;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  static float data[MANY][MANY_ELEMENTS];
  static char names[MANY][64];
  strata_weights_tensor t[MANY];
  for (int i = 0; i < MANY; i++) {
    snprintf(names[i], sizeof names[i], "model.layers.%03d.self_attention.output_projection", i);
    t[i] = (strata_weights_tensor){names[i], data[i], STRATA_F32, 1, {MANY_ELEMENTS}};
    for (int e = 0; e < MANY_ELEMENTS; e++) data[i][e] = rank == 0 ? (float)(i * 10 + e) : 0.0f;
  }
  strata_weights *w = NULL;
  int status = rank == 0 ? strata_weights_publisher_create(t, MANY, NULL, &w)
                         : strata_weights_subscriber_create(t, MANY, &w);
  CHECK_OR_RETURN(status == STRATA_OK, "create: %s", strata_err_name(status));
  if (rank == 0) CHECK_OR_RETURN(strata_weights_publish(w, NULL) == STRATA_OK, "publish");
  status = round_on(w, comm, rank);
  CHECK_OR_RETURN(status == STRATA_OK, "round: %s (%s)", strata_err_name(status),
                  strata_weights_error(w));
  int same = 1;
  for (int i = 0; i < MANY; i++)
    for (int e = 0; e < MANY_ELEMENTS; e++) same &= data[i][e] == (float)(i * 10 + e);
  CHECK(same && strata_weights_version(w) == 1, "rank %d lacks v1 of %d tensors", rank, MANY);
  strata_weights_destroy(w);
  return failures != 0;
}

/* ---- bad input ---- */

static void bad_input(void) {
  model *m = calloc(1, sizeof *m);
  strata_weights_tensor t[3];
  tensors_of(m, t, 0);
  strata_weights *w = NULL;
  t[1].name = "layers.0.w";
  CHECK_STATUS(strata_weights_publisher_create(t, 3, NULL, &w), STRATA_ERR_INVALID_ARG);
  tensors_of(m, t, 0);
  t[0].dtype = STRATA_I32;
  CHECK_STATUS(strata_weights_publisher_create(t, 3, NULL, &w), STRATA_ERR_UNSUPPORTED);
  tensors_of(m, t, 0);
  t[2].shape[0] = -1;
  CHECK_STATUS(strata_weights_subscriber_create(t, 3, &w), STRATA_ERR_INVALID_ARG);
  tensors_of(m, t, 0);
  strata_weights_options opt;
  strata_weights_options_init(&opt);
  opt.chunk_bytes = 10;
  CHECK_STATUS(strata_weights_publisher_create(t, 3, &opt, &w), STRATA_ERR_INVALID_ARG);
  CHECK(w == NULL, "a failed create gave a handle");
  CHECK_STATUS(strata_weights_subscriber_create(t, 3, &w), STRATA_OK);
  CHECK_STATUS(strata_weights_publish(w, NULL), STRATA_ERR_INVALID_ARG); /* not a publisher */
  strata_weights_destroy(w);
  strata_weights_destroy(NULL);
  free(m);
}

static void run(const char *what, int nranks, strata_test_body body, int expected_dead,
                void (*tweak)(strata_config *, int, void *), const layout *l) {
  strata_test_ranks_opts o = {.shm = 0, .timeout_s = 3, .deadline_s = 20, .tweak = tweak};
  if (l) o.tweak = layout_tweak;
  double t0 = strata_test_now_s();
  int bad = strata_test_run_ranks(nranks, &o, body, (void *)l);
  CHECK(bad == expected_dead, "%s: %d ranks failed (%d die on purpose)", what, bad, expected_dead);
  printf("%s %s (%.1f s)\n", bad == expected_dead ? "ok" : "FAIL", what, strata_test_now_s() - t0);
  fflush(stdout);
}

int main(void) {
  bad_input();
  run("chain: full copies, patches, targets, a lagging subscriber", 4, chain_body, 0, NULL, NULL);
  run("corrupted versions refused, previous kept", 3, corrupt_body, 0, NULL, NULL);
  run("mismatched tensor sets named", 4, mismatch_body, 0, NULL, NULL);
  run("a subscriber dies mid-update, the others complete", 4, subscriber_death_body, 1, NULL, NULL);
  run("the publisher dies mid-update, subscribers keep their version", 3, publisher_death_body, 1,
      NULL, NULL);
  run("a late joiner gets anchor + patches", JOIN_MEMBERS + 1, join_body, 0, join_tweak, NULL);
  run("tree: one copy per site, a chain host by host inside a site", 5, tree_body, 0, NULL,
      &TWO_SITES);
  run("tree: a publisher alone in its site feeds every other site", 5, tree_body, 0, NULL, &ALONE);
  run("tree: a site's entry dies mid-update, the others complete", 5, subscriber_death_body, 1,
      NULL, &TWO_SITES);
  run("tree: the publisher dies mid-update, subscribers keep their version", 5,
      publisher_death_body, 1, NULL, &TWO_SITES);
  run("prepare: the first round's tree, its edges between sites warmed", 5, prepare_body, 0, NULL,
      &TWO_SITES);
  run("prepare: a site's entry dies in its warm-up, the others return", 5, prepare_death_body, 1,
      NULL, &TWO_SITES);
  run("prepare against a round: the odd rank is told", 3, prepare_mixed_body, 0, NULL, NULL);
  run("a plan larger than its first broadcast", 3, many_body, 0, NULL, NULL);
  printf("%d failed\n", failures);
  return failures != 0;
}
