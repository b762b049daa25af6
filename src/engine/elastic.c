// SPDX-License-Identifier: Apache-2.0
/*
 * elastic.c — communicators that outlive their members: revoke, shrink, agree, grow.
 *
 * The survivors of a failure cannot use the communicator that failed to agree on anything: its
 * data paths are abandoned (engine.c, strata_engine_fail) and a dead rank would block any
 * collective over it. They agree through the rendezvous store instead, which every rank reaches
 * and which outlives members as long as it is served apart from them (`strata store`, torchrun's
 * agent, or a rank that survives). What each survivor knows on its own is its failure detector:
 * the socket mesh keeps beating and listening after the failure (tcp.c: liveness), so a dead
 * rank's connections close and a frozen rank falls silent for STRATA_TIMEOUT.
 *
 * One agreement (shrink, agree) over the ranks of a communicator, under a key prefix every member
 * derives alike:
 *   1. a rank sets  <prefix>/in/<rank>  to its contribution, then
 *   2. waits on <prefix>/progress; while no decision is announced, it checks whether every rank its
 *      detector still holds alive has contributed. A rank that sees that proposes: the ranks that
 *      took part and are alive in its view, with their contributions. The first proposal written
 *      (set-if-absent) is the decision (propose() below).
 *   3. every rank reads the one decision. A rank the decision leaves out (it came too late, or
 *      was taken for dead) learns so and gets STRATA_ERR_EXCLUDED.
 * A rank that is alive but busy elsewhere is waited for, as the failure detector still sees it:
 * a survivor that has not noticed the failure yet hears of it through the revocation the others
 * sent (its idle progress fails the communicator) and comes. The wait is bounded by
 * STRATA_OP_TIMEOUT when set.
 *
 * A rank never moves past an agreement it took part in before it has read the decision. The
 * others may have decided it and gone on with the group it names; a rank that gave up on it (its
 * wait timed out, the store did not answer) and started the next one would find them gone and
 * decide a group of its own — two groups of one epoch. So a failed call leaves the agreement open
 * and the next agree or shrink resumes it with the contribution already in the store; a decision
 * binds every rank it names, and one without this rank excludes it from `comm` for good.
 *
 * Every communicator has an epoch; shrink and grow make one of the next epoch, whose job id
 * (and so its store keys, shared-memory names and the job id every handshake checks) is derived
 * from its parent's job id and what formed it (strata_epoch_job_id). A message of an older epoch
 * travels on connections the new communicator does not have and could not authenticate into: it is
 * never mixed into a newer collective.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/store.h"
#include "core/core.h"
#include "engine/engine.h"
#include "net/net.h"

/* The largest group a grant may name. */
enum { STRATA_JOIN_MAX_RANKS = 1 << 20 };

/* The job id of a communicator of epoch `epoch` that `how` formed from the communicator whose
 * job id is `parent` (job `base`): a shrink names its deciding agreement ("shrink", index), a
 * grow the ticket count it granted up to ("grow", count). Every member of the new group derives
 * the same id from what it shares with the others (joiners read it in their grant), and two
 * groups that parted never share one, even at one epoch number: a grow that came up on some
 * members only, followed by a shrink of the old communicator, makes two groups of epoch e + 1
 * whose agreements must not read each other's decisions. The job's base id comes first, so the
 * key's salt (core/secret.c: the id up to '~') is the job's own. */
void strata_epoch_job_id(const char *base, const char *parent, uint64_t epoch, const char *how,
                         uint64_t count, char *out, size_t len) {
  uint64_t h = 1469598103934665603ull;
  char text[256];
  int n = snprintf(text, sizeof text, "%s|%s|%llu|%llu", parent, how, (unsigned long long)epoch,
                   (unsigned long long)count);
  for (int i = 0; i < n && i < (int)sizeof text; i++)
    h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
  snprintf(out, len, "%.32s~e%llu~%016llx", base, (unsigned long long)epoch, (unsigned long long)h);
}

int strata_comm_revoke(strata_comm *comm) {
  if (!comm) return STRATA_ERR_INVALID_ARG;
  /* no lock: a call blocked in this communicator holds it. The flag is seen by whoever drives
   * progress next (a waiter's loop, or the progress thread within its idle period). */
  atomic_store(&comm->revoke_requested, 1);
  pthread_cond_broadcast(&comm->cond);
  return STRATA_OK;
}

uint64_t strata_comm_epoch(const strata_comm *comm) {
  return comm ? comm->epoch : 0;
}

/* Fail the communicator (if it is not already) so its data paths are abandoned and only the
 * failure detector runs: an agreement is only ever made over a communicator nobody uses. */
static void quiesce(strata_comm *comm) {
  pthread_mutex_lock(&comm->lock);
  if (!atomic_load(&comm->error)) strata_engine_fail(comm, STRATA_ERR_REVOKED, 1);
  pthread_mutex_unlock(&comm->lock);
}

/* `watch`: connect to a peer this rank has no pair with, to judge it (else it is alive until
 * found gone). */
static int peer_alive(strata_comm *comm, int peer, int watch) {
  if (peer == comm->rank) return 1;
  if (!comm->have_net) return 0;
  pthread_mutex_lock(&comm->lock);
  /* a failed communicator's detector runs here too (the progress thread's runs every 10 ms); a
   * healthy one's runs in its progress */
  if (atomic_load(&comm->error)) strata_net_keepalive(&comm->net);
  int alive = watch ? strata_net_peer_alive(&comm->net, peer)
                    : strata_net_peer_alive_seen(&comm->net, peer);
  pthread_mutex_unlock(&comm->lock);
  return alive;
}

/* A contribution: one int64 per rank (a flag, say), and whether that rank took part. */
typedef struct agreement {
  int n;
  int *member;    /* [n] 1 = took part and alive in the decider's view */
  int64_t *value; /* [n] its contribution */
  int members;    /* how many */
} agreement;

static void agreement_free(agreement *a) {
  free(a->member);
  free(a->value);
  memset(a, 0, sizeof *a);
}

/* "<n> <member0>:<value0> ..." */
static char *decision_encode(const agreement *a) {
  size_t cap = 32 + (size_t)a->n * 32;
  char *text = malloc(cap);
  if (!text) return NULL;
  size_t used = (size_t)snprintf(text, cap, "%d", a->n);
  for (int r = 0; r < a->n; r++)
    used +=
        (size_t)snprintf(text + used, cap - used, " %d:%lld", a->member[r], (long long)a->value[r]);
  return text;
}

static int decision_decode(const char *text, size_t len, int n, agreement *a) {
  char *copy = malloc(len + 1);
  if (!copy) return STRATA_ERR_NO_MEMORY;
  memcpy(copy, text, len);
  copy[len] = '\0';
  char *p = copy, *end;
  long count = strtol(p, &end, 10);
  int status = STRATA_OK;
  if (end == p || count != n) status = STRATA_ERR_PROTOCOL;
  a->members = 0;
  for (int r = 0; status == STRATA_OK && r < n; r++) {
    p = end;
    long m = strtol(p, &end, 10);
    if (end == p || *end != ':' || (m != 0 && m != 1)) {
      status = STRATA_ERR_PROTOCOL;
      break;
    }
    p = end + 1;
    long long v = strtoll(p, &end, 10);
    if (end == p) {
      status = STRATA_ERR_PROTOCOL;
      break;
    }
    a->member[r] = (int)m;
    a->value[r] = v;
    a->members += (int)m;
  }
  free(copy);
  return status;
}

/* A contribution v >= 0 is stored as the counter <prefix>/in/<r> = v + 1, 0 meaning "not yet",
 * and every contribution also moves <prefix>/progress by one; every proposer moves it by
 * AGREE_DECIDED once its decision is in place. So a rank learns everything it waits for from
 * one counter: the server answers its wait when enough ranks have contributed or a decision was
 * announced (strata_store_wait_count), and it reads all contributions in one request
 * (strata_store_read_counts) only then. (A GET of a missing key waits for it, and one whose
 * timeout is below the round trip never sees it: on a WAN a look must not be a GET.) */
static const int64_t AGREE_DECIDED = (int64_t)1 << 32;

/* A ready rank proposes its view. The first proposal written is the decision: with the store's
 * set-if-absent that write is one atomic step, so a proposer that dies right after it leaves the
 * decision in place, and one that dies before it leaves the others to propose. Every proposer
 * then moves the progress counter by AGREE_DECIDED, so the decision is announced even if its
 * writer died before announcing it. A caller's store without set-if-absent falls back to a
 * ticket: the first rank to take it writes the decision — a rank that dies between taking it and
 * writing stalls the agreement. */
static int propose(strata_comm *comm, const char *prefix, const char *decision_key,
                   const char *progress_key, const agreement *a) {
  char *encoded = decision_encode(a);
  if (!encoded) return STRATA_ERR_NO_MEMORY;
  int was_set = 0;
  int status =
      strata_store_set_if_absent(comm->store, decision_key, encoded, strlen(encoded), &was_set);
  if (status == STRATA_ERR_UNSUPPORTED) {
    char key[256];
    int64_t ticket = 0;
    snprintf(key, sizeof key, "%s/decider", prefix);
    status = strata_store_add(comm->store, key, 1, &ticket);
    if (status == STRATA_OK && ticket == 1)
      status = strata_store_set(comm->store, decision_key, encoded, strlen(encoded));
    else if (status == STRATA_OK)
      status = STRATA_ERR_IN_PROGRESS; /* the ticket's holder announces */
  }
  free(encoded);
  int64_t ignored;
  if (status == STRATA_OK)
    status = strata_store_add(comm->store, progress_key, AGREE_DECIDED, &ignored);
  return status == STRATA_ERR_IN_PROGRESS ? STRATA_OK : status;
}

/* Step 1: this rank's contribution to the agreement at <prefix>. Once in the store it stands —
 * the others may decide on it at any time — so a call that resumes an agreement this rank left
 * open keeps what it contributed then, whatever it would contribute now. A contribution whose
 * write failed may have landed all the same: the resuming call reads before it writes again (a
 * second ADD would count it twice). The progress counter moves after the contribution landed,
 * so it never counts one that is not there; until a move of it was answered, the resuming call
 * moves it (again: one more count than contributions at worst, when only the answer was lost,
 * and agree_over_store never waits for a value the counter already holds). */
static int contribute(strata_comm *comm, const char *prefix, int64_t mine) {
  char key[256], progress_key[256];
  snprintf(key, sizeof key, "%s/in/%d", prefix, comm->rank);
  snprintf(progress_key, sizeof progress_key, "%s/progress", prefix);
  int64_t stored = 0;
  int status = STRATA_OK;
  if (comm->agreement_open) {
    status = strata_store_add(comm->store, key, 0, &stored);
    if (status != STRATA_OK || (stored > 0 && comm->agreement_counted)) return status;
  }
  if (stored <= 0) {
    if (mine < 0) return STRATA_ERR_INVALID_ARG;
    comm->agreement_open = 1;
    comm->agreement_counted = 0;
    status = strata_store_add(comm->store, key, mine + 1, &stored);
  }
  if (status == STRATA_OK) status = strata_store_add(comm->store, progress_key, 1, &stored);
  if (status == STRATA_OK) comm->agreement_counted = 1;
  return status;
}

/* How long one wait on the store lasts at most: a rank the detector finds dead meanwhile is
 * noticed (it may be the one the others wait for) within this. */
static const double AGREE_WAIT_S = 0.05;
/* Contributions are read again at least this often even when the progress counter did not say
 * so (a rank whose counter update was lost with its store connection). */
static const double AGREE_REREAD_S = 1.0;
/* A rank that has not contributed this long into the agreement, that this rank has no TCP pair
 * with and that no rank reported gone, is connected to so that it is judged
 * (strata_net_peer_alive). Before that a rank relies on what the ranks that talked to it saw
 * ("<prefix>/gone/<r>", below): every rank has a pair with at least one other (net/tcp_mesh.c),
 * which beats to it. Dialing every silent rank at once would make each early rank connect to all
 * the others — N^2 connections job-wide, each one a chance to judge a live rank gone under load. */
static const double AGREE_WATCH_AFTER_S = 2.0;

typedef struct agree_look {
  int n;
  char **keys;     /* [n] <prefix>/in/<r> */
  int64_t *counts; /* [n] as read */
  int *alive;      /* [n] in this rank's view */
  int *reported;   /* [n] this rank has reported the rank gone ("<prefix>/gone/<r>") */
  int contributed; /* at the last read */
  int missing;     /* live ranks that had not contributed at the last read */
  double read_s;   /* when */
} agree_look;

static void agree_look_free(agree_look *l) {
  for (int r = 0; l->keys && r < 2 * l->n; r++) free(l->keys[r]);
  free(l->keys);
  free(l->counts);
  free(l->alive);
  free(l->reported);
}

static int agree_look_init(agree_look *l, const char *prefix, int n) {
  memset(l, 0, sizeof *l);
  l->n = n;
  /* keys and counts [0, n): contributions ("in"), [n, 2n): ranks reported gone ("gone") */
  l->keys = calloc(2 * (size_t)n, sizeof *l->keys);
  l->counts = calloc(2 * (size_t)n, sizeof *l->counts);
  l->alive = calloc((size_t)n, sizeof *l->alive);
  l->reported = calloc((size_t)n, sizeof *l->reported);
  if (!l->keys || !l->counts || !l->alive || !l->reported) return STRATA_ERR_NO_MEMORY;
  for (int r = 0; r < 2 * n; r++) {
    char key[256];
    snprintf(key, sizeof key, "%s/%s/%d", prefix, r < n ? "in" : "gone", r < n ? r : r - n);
    if (!(l->keys[r] = strdup(key))) return STRATA_ERR_NO_MEMORY;
  }
  return STRATA_OK;
}

/* How many ranks this rank's detector holds alive now (l->alive: which). */
static int agree_alive(strata_comm *comm, agree_look *l, double since_s) {
  int alive = 0, watch_silent = strata_now_s() - since_s >= AGREE_WATCH_AFTER_S;
  for (int r = 0; r < l->n; r++) {
    int silent = l->counts[r] <= 0 && l->counts[l->n + r] <= 0;
    l->alive[r] = peer_alive(comm, r, watch_silent && silent) && l->counts[l->n + r] <= 0;
    /* what this rank's own pair with r found, for the ranks that have none */
    if (!l->alive[r] && !l->reported[r] && l->counts[l->n + r] <= 0) {
      l->reported[r] = 1;
      strata_store_add(comm->store, l->keys[l->n + r], 1, NULL);
    }
    alive += l->alive[r];
  }
  return alive;
}

/* Reads every contribution in one request: into a, who took part and is alive, and whether
 * every live rank has contributed (*ready). */
static int agree_read(strata_comm *comm, agree_look *l, agreement *a, int *ready) {
  int status = strata_store_read_counts(comm->store, (const char *const *)l->keys, 2 * (size_t)l->n,
                                        l->counts);
  if (status != STRATA_OK) return status;
  l->read_s = strata_now_s();
  l->contributed = l->missing = 0;
  for (int r = 0; r < l->n; r++) {
    if (l->counts[l->n + r] > 0) l->alive[r] = 0; /* another rank's pair with r found it gone */
    int in = l->counts[r] > 0;
    l->contributed += in;
    l->missing += l->alive[r] && !in;
    a->member[r] = in && l->alive[r];
    a->value[r] = in ? l->counts[r] - 1 : 0;
  }
  *ready = l->missing == 0;
  return STRATA_OK;
}

/* Steps 2-3 above: every live rank's contribution and who took part. A rank waits on the
 * progress counter for the contributions it lacks (or a decision), reads them all when they are
 * in, and proposes when every rank alive in its view has contributed: O(1) requests per rank per
 * look, where reading each contribution was O(N). */
static int agree_over_store(strata_comm *comm, const char *prefix, agreement *a) {
  int n = comm->nranks;
  a->n = n;
  a->member = calloc((size_t)n, sizeof *a->member);
  a->value = calloc((size_t)n, sizeof *a->value);
  agree_look look;
  int status = agree_look_init(&look, prefix, n);
  if (!a->member || !a->value || status != STRATA_OK) {
    agree_look_free(&look);
    agreement_free(a);
    return STRATA_ERR_NO_MEMORY;
  }
  char progress_key[256], decision_key[256];
  snprintf(decision_key, sizeof decision_key, "%s/decision", prefix);
  snprintf(progress_key, sizeof progress_key, "%s/progress", prefix);
  double start = strata_now_s();
  int out_of_time = 0, last_alive = -1;
  int64_t progress = 0, last_progress = -1;
  status = strata_store_add(comm->store, progress_key, 0, &progress);
  while (status == STRATA_OK) {
    if (progress >= AGREE_DECIDED) { /* written before the counter moved: there to read */
      void *data = NULL;
      size_t data_len = 0;
      status = strata_store_get(comm->store, decision_key, &data, &data_len, comm->cfg.timeout_s);
      if (status == STRATA_OK) status = decision_decode(data, data_len, n, a);
      free(data);
      break;
    }
    /* out of time only just after a look that found no decision: one made while this rank was
     * counting contributions is read, not missed */
    if (out_of_time) {
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
                 "%s: the live ranks did not all take part within %.1f s (STRATA_OP_TIMEOUT); "
                 "this rank's contribution stands, and its next agree or shrink resumes here",
                 prefix, comm->cfg.op_timeout_s);
      status = STRATA_ERR_TIMEOUT;
      break;
    }
    /* can this rank decide? every rank alive in its view has contributed. Read again when
     * the counter moved, the view changed, or a while passed. */
    int alive = agree_alive(comm, &look, start);
    if (progress != last_progress || alive != last_alive ||
        strata_now_s() - look.read_s >= AGREE_REREAD_S) {
      int ready = 0;
      status = agree_read(comm, &look, a, &ready);
      if (status != STRATA_OK) break;
      last_progress = progress;
      last_alive = alive;
      if (ready) {
        status = propose(comm, prefix, decision_key, progress_key, a);
        if (status == STRATA_OK) status = strata_store_add(comm->store, progress_key, 0, &progress);
        continue; /* the decision is read back like everyone else's */
      }
    }
    double left_s = AGREE_WAIT_S;
    if (comm->cfg.op_timeout_s > 0) {
      double until_s = start + comm->cfg.op_timeout_s - strata_now_s();
      if (until_s < left_s) left_s = until_s > 0 ? until_s : 0;
    }
    /* the counter at which every live rank of the last read has contributed; never one it
     * holds already (it may count a contribution twice: contribute), or the wait would spin */
    int64_t target = (int64_t)look.contributed + look.missing;
    if (target <= last_progress) target = last_progress + 1;
    status = strata_store_wait_count(comm->store, progress_key, target, &progress, left_s);
    if (status == STRATA_ERR_TIMEOUT) status = STRATA_OK;
    out_of_time = comm->cfg.op_timeout_s > 0 && strata_now_s() - start > comm->cfg.op_timeout_s;
  }
  agree_look_free(&look);
  if (status != STRATA_OK) {
    agreement_free(a);
    return status;
  }
  if (!a->member[comm->rank]) {
    agreement_free(a);
    return STRATA_ERR_EXCLUDED;
  }
  return STRATA_OK;
}

static void record_failed(strata_comm *comm, const agreement *a) {
  comm->nfailed = 0;
  if (!comm->failed_ranks)
    comm->failed_ranks = calloc(a->n > 0 ? (size_t)a->n : 1u, sizeof *comm->failed_ranks);
  if (!comm->failed_ranks) return;
  for (int r = 0; r < a->n; r++)
    if (!a->member[r]) comm->failed_ranks[comm->nfailed++] = r;
}

/* Agree and shrink share one numbered sequence of agreements per communicator, so ranks that
 * took different branches after a failure still meet: one whose grow failed goes to shrink
 * while another, whose grow had finished, fails its next collective and goes to agree. A
 * contribution says which call made it (kind) and carries the call's value. */
enum { KIND_FALSE = 0, KIND_TRUE = 1, KIND_SHRINK = 2, KIND_BITS = 2 };

static int64_t contribution_of(int kind, int64_t payload) {
  return payload * (1 << KIND_BITS) + kind;
}
static int kind_of(int64_t v) {
  return (int)(v & ((1 << KIND_BITS) - 1));
}
static int64_t payload_of(int64_t v) {
  return v >> KIND_BITS;
}

/* The agreement this rank takes part in next: the one it left open, if a call failed after
 * contributing (timed out, lost the store), else a new one. A rank never moves past an
 * agreement before it has read the decision: one the others decided names the groups they went
 * on with, and a rank that skipped it could decide a group of its own in the next (two groups
 * of one epoch). A decision without this rank ends its part in `comm` for good. */
static int next_agreement(strata_comm *comm, int64_t contribution, agreement *a) {
  if (comm->excluded) return STRATA_ERR_EXCLUDED;
  char prefix[200];
  snprintf(prefix, sizeof prefix, "%s/agreement/%llu", comm->cfg.job_id,
           (unsigned long long)comm->agreements);
  int status = contribute(comm, prefix, contribution);
  if (status == STRATA_OK) status = agree_over_store(comm, prefix, a);
  /* A decision that cannot be read as this communicator's (another group of the same epoch
   * wrote it: a grow that came up on some members only is followed by a shrink into the same
   * epoch) never will be: resuming it would fail the same way on every call, so it is closed. */
  if (status == STRATA_OK || status == STRATA_ERR_EXCLUDED || status == STRATA_ERR_PROTOCOL) {
    comm->agreements++;
    comm->agreement_open = 0;
  }
  if (status == STRATA_ERR_EXCLUDED) comm->excluded = 1;
  return status;
}

int strata_comm_agree(strata_comm *comm, int *flag) {
  if (!comm || !flag) return STRATA_ERR_INVALID_ARG;
  if (comm->nranks == 1) return STRATA_OK;
  if (!comm->store) return STRATA_ERR_UNSUPPORTED;
  agreement a = {0};
  int status = next_agreement(comm, contribution_of(*flag ? KIND_TRUE : KIND_FALSE, 0), &a);
  if (status != STRATA_OK) return status;
  int all = 1;
  for (int r = 0; r < a.n; r++) /* a rank that is shrinking says no */
    if (a.member[r] && kind_of(a.value[r]) != KIND_TRUE) all = 0;
  record_failed(comm, &a);
  agreement_free(&a);
  *flag = all;
  comm->agreed_last = 1;
  return STRATA_OK;
}

int strata_comm_undo(strata_comm *comm) {
  if (!comm) return STRATA_ERR_INVALID_ARG;
  if (!comm->undo_ready) return 0;
  memcpy(comm->last_input_dst, comm->last_input, comm->last_input_bytes);
  comm->undo_ready = 0;
  return 1;
}

int strata_comm_failed_ranks(const strata_comm *comm, int *ranks, int capacity) {
  if (!comm || (capacity > 0 && !ranks)) return STRATA_ERR_INVALID_ARG;
  for (int i = 0; i < comm->nfailed && i < capacity; i++) ranks[i] = comm->failed_ranks[i];
  return comm->nfailed;
}

/* A communicator of the next epoch over the same store: rank `rank` of `size`, job `job_id`
 * (strata_epoch_job_id). The store keeps
 * being served by whichever process served it (a server this rank runs moves to the new
 * communicator, so destroying the old one does not take the store away). */
static int next_epoch(strata_comm *comm, int rank, int size, const char *job_id,
                      strata_comm **out) {
  strata_config cfg = comm->cfg;
  cfg.rank = rank;
  cfg.world_size = size;
  cfg.chunk_bytes = comm->chunk_bytes_asked;
  snprintf(cfg.job_id, sizeof cfg.job_id, "%s", job_id);
  if (!comm->has_store_ops) cfg.store_external = 1;
  int status = strata_comm_create(&cfg, comm->has_store_ops ? &comm->store_ops : NULL, out);
  if (status != STRATA_OK) return status;
  (*out)->epoch = comm->epoch + 1;
  snprintf((*out)->base_job, sizeof(*out)->base_job, "%s", comm->base_job);
  /* A communicator of one rank has no connections and so no store of its own; the last survivor
   * keeps the job's, to shrink and grow through it later. */
  if (!(*out)->store) {
    status = comm->has_store_ops
                 ? strata_store_from_ops(&comm->store_ops, "", &(*out)->store)
                 : strata_store_connect_auth(strata_store_address(&cfg), cfg.secret, cfg.job_id,
                                             cfg.timeout_s, &(*out)->store);
    if (status != STRATA_OK) {
      strata_comm_destroy(*out);
      *out = NULL;
      return status;
    }
  }
  (*out)->store_server = comm->store_server;
  comm->store_server = NULL;
  return STRATA_OK;
}

/* The agreement of a shrink: every member of the decision shrinks, and this rank is one of them.
 * Sets comm->shrink_rank and shrink_size: this rank's place in the group decided. */
static int shrink_agree(strata_comm *comm) {
  agreement a = {0};
  for (;;) {
    int status = next_agreement(
        comm, contribution_of(KIND_SHRINK, (int64_t)(comm->lineage_base + comm->colls_ok)), &a);
    if (status != STRATA_OK) return status;
    int all = 1;
    for (int r = 0; r < a.n; r++)
      if (a.member[r] && kind_of(a.value[r]) != KIND_SHRINK) all = 0;
    if (all) {
      comm->shrink_agreement = comm->agreements - 1; /* next_agreement counted it */
      break;
    }
    /* some member was in strata_comm_agree: it learnt "no" and comes to shrink next */
    agreement_free(&a);
  }
  for (int r = 0; r < a.n; r++) a.value[r] = payload_of(a.value[r]);
  /* A collective that failed on some survivor but finished here (a rank died just after sending
   * us its last bytes) is undone here too, so the survivors retry it from the same inputs. */
  int64_t fewest = INT64_MAX;
  for (int r = 0; r < a.n; r++)
    if (a.member[r] && a.value[r] < fewest) fewest = a.value[r];
  int64_t ahead = (int64_t)(comm->lineage_base + comm->colls_ok) - fewest;
  comm->shrink_fewest = (uint64_t)fewest;
  comm->undo_ready = ahead == 1 && comm->last_input;
  if (ahead > 0)
    STRATA_LOG(comm->undo_ready ? STRATA_LOG_INFO : STRATA_LOG_WARN, comm->rank,
               "shrink: this rank finished %lld collective(s) that another survivor did not%s",
               (long long)ahead,
               comm->undo_ready ? " (strata_comm_undo puts the last one's input back)" : "");
  comm->shrink_rank = 0;
  for (int r = 0; r < comm->rank; r++) comm->shrink_rank += a.member[r];
  comm->shrink_size = a.members;
  record_failed(comm, &a);
  agreement_free(&a);
  STRATA_LOG(STRATA_LOG_INFO, comm->rank, "shrink: %d of %d ranks go on; this one is rank %d",
             comm->shrink_size, comm->nranks, comm->shrink_rank);
  return STRATA_OK;
}

int strata_comm_shrink(strata_comm *comm, strata_comm **out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  if (!comm->store) return STRATA_ERR_UNSUPPORTED;
  quiesce(comm);
  /* Called again after an error: an agreement left open is resumed (shrink_agree). */
  int status = shrink_agree(comm);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_WARN, comm->rank, "shrink: %s", strata_strerror(status));
    return status;
  }
  /* The decided group's communicator fails to come up when one of its members dies meanwhile;
   * the agreement is closed, so shrinking `comm` again agrees anew, without that member (forming
   * the same group again would wait for the dead one every time). */
  char job_id[sizeof comm->cfg.job_id];
  strata_epoch_job_id(comm->base_job, comm->cfg.job_id, comm->epoch + 1, "shrink",
                      comm->shrink_agreement, job_id, sizeof job_id);
  status = next_epoch(comm, comm->shrink_rank, comm->shrink_size, job_id, out);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "shrink: the new communicator: %s",
               strata_strerror(status));
    return status;
  }
  /* The lineage goes on from where the survivors agree it is: a rank that agreed after its last
   * collective retries from the fewest any survivor finished, as the others do. One that did not
   * goes on from its own count, so if it finished a collective another survivor did not, their
   * next collectives carry different indices and fail with STRATA_ERR_MISMATCH instead of summing
   * two different steps. */
  (*out)->lineage_base =
      comm->agreed_last ? comm->shrink_fewest : comm->lineage_base + comm->colls_ok;
  return STRATA_OK;
}

/* ---- joining ----
 * A joiner takes a ticket (an atomic add on <base>/join/tickets) and waits for its grant. At
 * strata_comm_grow the members' rank 0 grants every ticket taken since the last grow — rank
 * size + i, the epoch, the new size — and tells the members how many joined by a broadcast. */

static void join_key(const char *base, const char *what, char *out, size_t len) {
  snprintf(out, len, "%s/join/%s", base, what);
}

/* Is `id` a job id a grow of job `base` writes for epoch `epoch`: the base's first 32 characters,
 * "~e<epoch>~" and 16 hex digits? */
static int grant_job_id_ok(const char *base, unsigned long long epoch, const char *id) {
  char prefix[64];
  int n = snprintf(prefix, sizeof prefix, "%.32s~e%llu~", base, epoch);
  if (n <= 0 || (size_t)n >= sizeof prefix || strncmp(id, prefix, (size_t)n) != 0) return 0;
  const char *hex = id + n;
  if (strlen(hex) != 16) return 0;
  for (int i = 0; i < 16; i++)
    if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'))) return 0;
  return 1;
}

int strata_comm_join(const strata_config *cfg, const strata_store_ops *ops, strata_comm **out) {
  if (!cfg || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_store *store = NULL;
  int status;
  if (ops) {
    status = strata_store_from_ops(ops, "", &store);
  } else {
    status = strata_store_connect_auth(strata_store_address(cfg), cfg->secret, cfg->job_id,
                                       cfg->timeout_s, &store);
  }
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "join: cannot reach the rendezvous store at %s: %s",
               strata_store_address(cfg), strata_strerror(status));
    return status;
  }
  char key[256];
  int64_t ticket = 0;
  join_key(cfg->job_id, "tickets", key, sizeof key);
  status = strata_store_add(store, key, 1, &ticket);
  char grant_key[256], what[64];
  snprintf(what, sizeof what, "%lld/grant", (long long)ticket);
  join_key(cfg->job_id, what, grant_key, sizeof grant_key);
  double start = strata_now_s();
  void *data = NULL;
  size_t len = 0;
  /* admission comes at the members' next grow, which may be a while: wait in timeout-long
   * rounds, bounded only by STRATA_OP_TIMEOUT */
  while (status == STRATA_OK) {
    status = strata_store_get(store, grant_key, &data, &len, cfg->timeout_s);
    if (status != STRATA_ERR_TIMEOUT) break;
    if (cfg->op_timeout_s > 0 && strata_now_s() - start > cfg->op_timeout_s) break;
    status = STRATA_OK;
  }
  strata_store_close(store);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "join: ticket %lld was not granted: %s", (long long)ticket,
               strata_strerror(status));
    return status;
  }
  char text[160] = "", job_id[sizeof cfg->job_id] = "";
  memcpy(text, data, len < sizeof text - 1 ? len : sizeof text - 1);
  free(data);
  unsigned long long epoch = 0;
  int rank = -1, size = -1, used = 0;
  /* the grant comes from the store, which only holders of the job secret can write; still,
   * refuse what no grow writes: a rank outside the size, a size no communicator can have, a job
   * id that is not one of this job's (strata_epoch_job_id: "<base, at most 32>~e<epoch>~...") */
  if (sscanf(text, "%llu %d %d %63s%n", &epoch, &rank, &size, job_id, &used) != 4 || rank < 0 ||
      size <= rank || size > STRATA_JOIN_MAX_RANKS || (size_t)used != strlen(text) ||
      !grant_job_id_ok(cfg->job_id, epoch, job_id)) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "join: the grant for ticket %lld is malformed",
               (long long)ticket);
    return STRATA_ERR_PROTOCOL;
  }
  strata_config mine = *cfg;
  mine.rank = rank;
  mine.world_size = size;
  mine.store_external = 1;
  mine.join = 0;
  snprintf(mine.job_id, sizeof mine.job_id, "%s", job_id);
  status = strata_comm_create(&mine, ops, out);
  if (status != STRATA_OK) return status;
  (*out)->epoch = epoch;
  snprintf((*out)->base_job, sizeof(*out)->base_job, "%s", cfg->job_id);
  STRATA_LOG(STRATA_LOG_INFO, rank, "joined as rank %d of %d (epoch %llu)", rank, size, epoch);
  return STRATA_OK;
}

int strata_comm_grow(strata_comm *comm, strata_comm **out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  if (!comm->store) return STRATA_ERR_UNSUPPORTED;
  int64_t counts[2] = {0, 0}; /* tickets granted before, tickets now */
  int status = STRATA_OK;
  char key[256];
  if (comm->rank == 0) {
    join_key(comm->base_job, "tickets", key, sizeof key);
    status = strata_store_add(comm->store, key, 0, &counts[1]);
    join_key(comm->base_job, "granted", key, sizeof key);
    if (status == STRATA_OK) status = strata_store_add(comm->store, key, 0, &counts[0]);
  }
  /* every member learns the same counts, or every member fails */
  int bcast = strata_broadcast(comm, counts, counts, 2, STRATA_I64, 0);
  if (status == STRATA_OK) status = bcast;
  if (status != STRATA_OK) return status;
  int64_t joining = counts[1] - counts[0];
  if (joining <= 0) return STRATA_OK; /* nobody waits: keep going on `comm` */
  int size = comm->nranks + (int)joining;
  char job_id[sizeof comm->cfg.job_id];
  strata_epoch_job_id(comm->base_job, comm->cfg.job_id, comm->epoch + 1, "grow",
                      (uint64_t)counts[1], job_id, sizeof job_id);
  if (comm->rank == 0) {
    for (int64_t t = counts[0] + 1; t <= counts[1] && status == STRATA_OK; t++) {
      char what[64], grant[160];
      snprintf(what, sizeof what, "%lld/grant", (long long)t);
      join_key(comm->base_job, what, key, sizeof key);
      int len =
          snprintf(grant, sizeof grant, "%llu %d %d %s", (unsigned long long)(comm->epoch + 1),
                   comm->nranks + (int)(t - counts[0] - 1), size, job_id);
      status = strata_store_set(comm->store, key, grant, (size_t)len);
    }
    int64_t ignored;
    join_key(comm->base_job, "granted", key, sizeof key);
    if (status == STRATA_OK) status = strata_store_add(comm->store, key, joining, &ignored);
  }
  if (status != STRATA_OK) return status;
  status = next_epoch(comm, comm->rank, size, job_id, out);
  if (status == STRATA_OK)
    STRATA_LOG(STRATA_LOG_INFO, comm->rank, "grow: %lld joined; %d ranks (epoch %llu)",
               (long long)joining, size, (unsigned long long)(comm->epoch + 1));
  return status;
}
