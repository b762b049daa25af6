// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_tcp.c — the TCP transport on its own, over loopback, between forked ranks:
 *  - full mesh of 2, 3, 4 ranks with 1 and 4 streams: messages of 0, 1, 1000 B, 300 KiB and
 *    8 MiB (the last two striped) in both directions at once, many in flight, contents checked;
 *  - tag and size mismatch complete the receive with STRATA_ERR_MISMATCH, and the next message
 *    still arrives intact (the mismatched stripes are skipped), in clear and sealed;
 *  - a peer killed with SIGKILL: a pending receive completes with STRATA_ERR_PEER_LOST within
 *    2 s, and a rank with nothing pending towards it is told too (the control check);
 *  - an ABORT overtakes megabytes of data the receiver never asked for;
 *  - a peer that closes in order is not reported as lost, and what it sent before leaving can
 *    still be received;
 *  - the same exchange sealed (STRATA_ENCRYPT=on) with the CPU's best cipher, and with
 *    ChaCha20-Poly1305 and a rekey every few frames; on loopback STRATA_ENCRYPT=auto leaves the
 *    frames in clear;
 *  - strata_net_open picks tcp or shm per peer from the published host identities (that a process
 *    in another network namespace has another identity: test_net_identity.c).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "helpers/net_fixture.h"
#include "net/net.h"
#include "net/seal.h"
#include "net/tcp.h"
#include "helpers/check.h"

typedef struct mesh_case {
  int nranks, streams;
  const char *host; /* advertised host; NULL = 127.0.0.1 */
  int sealed;       /* 0: STRATA_ENCRYPT=auto (clear on loopback); 1: on; 2: on, ChaCha20-Poly1305,
                       rekeyed every 5 operations */
} mesh_case;

/* Open the TCP transport for process r as a rank of `nranks` with `streams`. */
static int open_tcp_sealed(const strata_net_fixture_rank *r, int nranks, int streams,
                           const char *host, int sealed, strata_store **store,
                           strata_transport **t) {
  strata_config cfg;
  strata_net_fixture_config(r, nranks, &cfg);
  cfg.tcp_streams = streams;
  if (sealed) cfg.encrypt = STRATA_ENCRYPT_ON;
  if (sealed == 2) {
    strata_seal_set_aes_for_test(0);
    strata_seal_set_rekey_after_for_test(5);
  }
  if (host) snprintf(cfg.advertise_host, sizeof cfg.advertise_host, "%s", host);
  int status = strata_net_fixture_store(r, store);
  if (status != STRATA_OK) {
    printf("  rank %d: store: %s\n", r->rank, strata_strerror(status));
    return status;
  }
  char err[512] = "";
  status = strata_tcp_open(&cfg, r->rank, nranks, *store, t, err, sizeof err);
  if (status != STRATA_OK) printf("  rank %d: strata_tcp_open: %s\n", r->rank, err);
  return status;
}

static int open_tcp_on(const strata_net_fixture_rank *r, int nranks, int streams, const char *host,
                       strata_store **store, strata_transport **t) {
  return open_tcp_sealed(r, nranks, streams, host, 0, store, t);
}

static int open_tcp(const strata_net_fixture_rank *r, int nranks, int streams, strata_store **store,
                    strata_transport **t) {
  return open_tcp_on(r, nranks, streams, NULL, store, t);
}

static void close_tcp(strata_store *store, strata_transport *t) {
  if (t) t->ops->destroy(t);
  if (store) strata_store_close(store);
}

/* ---- full mesh exchange ---- */

static const size_t MESH_SIZES[] = {0, 1, 1000, 300 * 1024, 8 * 1024 * 1024};
enum { MESH_NSIZES = sizeof MESH_SIZES / sizeof MESH_SIZES[0], MESH_SMALL_BURST = 64 };

/* Message k to every peer: sizes first, then a burst of small ones. */
static size_t mesh_msg_bytes(int k) {
  return k < MESH_NSIZES ? MESH_SIZES[k] : (size_t)(1000 + k);
}

static int mesh_body(const strata_net_fixture_rank *r) {
  const mesh_case *c = r->arg;
  int rank = r->rank, n = c->nranks, nmsgs = MESH_NSIZES + MESH_SMALL_BURST;
  strata_store *store = NULL;
  strata_transport *t = NULL;
  if (open_tcp_sealed(r, n, c->streams, c->host, c->sealed, &store, &t) != STRATA_OK) return 1;
  CHECK_OR_RETURN(!t->fuses_reduce, "tcp must not claim fused reductions");
  /* one send buffer per message index (the pattern depends on sender and index, not receiver) */
  unsigned char **sendbufs = calloc((size_t)nmsgs, sizeof *sendbufs);
  unsigned char **recvbufs = calloc((size_t)(nmsgs * n), sizeof *recvbufs);
  strata_xfer *xs = calloc((size_t)(2 * nmsgs * n), sizeof *xs);
  int done = 0, posted = 0;
  for (int k = 0; k < nmsgs; k++) {
    size_t bytes = mesh_msg_bytes(k);
    sendbufs[k] = malloc(bytes + 1);
    strata_net_fixture_fill(sendbufs[k], bytes, rank, k);
  }
  /* interleave posting: receives and sends to every peer, all in flight at once */
  for (int k = 0; k < nmsgs; k++) {
    for (int q = 0; q < n; q++) {
      if (q == rank) continue;
      size_t bytes = mesh_msg_bytes(k);
      unsigned char *rb = recvbufs[k * n + q] = malloc(bytes + 1);
      rb[bytes] = 0xA5; /* guard byte: nothing may be written past the buffer */
      strata_xfer *rx = &xs[posted++];
      *rx = (strata_xfer){.peer = q,
                          .tag = 0x1000 + (uint64_t)k,
                          .bytes = bytes,
                          .buf = rb,
                          .done = strata_net_fixture_count_done,
                          .user = &done};
      CHECK_OR_RETURN(t->ops->post_recv(t, rx) == STRATA_OK, "post_recv");
      strata_xfer *tx = &xs[posted++];
      *tx = (strata_xfer){.peer = q,
                          .tag = 0x1000 + (uint64_t)k,
                          .bytes = bytes,
                          .buf = sendbufs[k],
                          .done = strata_net_fixture_count_done,
                          .user = &done};
      CHECK_OR_RETURN(t->ops->post_send(t, tx) == STRATA_OK, "post_send");
    }
  }
  int failed_peer = -1;
  int status = strata_net_fixture_drive(t, &done, posted, 20, &failed_peer);
  CHECK_OR_RETURN(status == STRATA_OK, "drive: %s (peer %d), %d of %d done",
                  strata_err_name(status), failed_peer, done, posted);
  for (int i = 0; i < posted; i++)
    CHECK_OR_RETURN(xs[i].status == STRATA_OK, "xfer %d: %s", i, strata_err_name(xs[i].status));
  /* every pair is connected now (on demand: the transfers asked for them) */
  for (int q = 0; q < n; q++) {
    if (q == rank) continue;
    int cipher = strata_tcp_peer_cipher(t, q);
    int want = c->sealed == 0   ? -1
               : c->sealed == 2 ? STRATA_SEAL_CHACHA20_POLY1305
                                : (strata_seal_aes_available() ? STRATA_SEAL_AES256_GCM
                                                               : STRATA_SEAL_CHACHA20_POLY1305);
    CHECK_OR_RETURN(cipher == want, "frames to rank %d: cipher %d, want %d", q, cipher, want);
  }
  for (int k = 0; k < nmsgs; k++) {
    for (int q = 0; q < n; q++) {
      if (q == rank) continue;
      size_t bytes = mesh_msg_bytes(k);
      size_t bad = strata_net_fixture_check(recvbufs[k * n + q], bytes, q, k);
      CHECK_OR_RETURN(bad == (size_t)-1, "message %d (%zu B) from rank %d: byte %zu wrong", k,
                      bytes, q, bad);
      CHECK_OR_RETURN(recvbufs[k * n + q][bytes] == 0xA5,
                      "message %d from %d wrote past its buffer", k, q);
      free(recvbufs[k * n + q]);
    }
    free(sendbufs[k]);
  }
  free(sendbufs);
  free(recvbufs);
  free(xs);
  close_tcp(store, t);
  return 0;
}

/* ---- mismatch ---- */

typedef struct mismatch_msg {
  uint64_t send_tag, recv_tag;
  size_t send_bytes, recv_bytes;
} mismatch_msg;

static const mismatch_msg MISMATCH_MSGS[] = {
    {7, 8, 1000, 1000},               /* tag differs */
    {9, 9, 300 * 1024, 1000},         /* sender striped, receiver small */
    {10, 10, 1000, 400 * 1024},       /* sender small, receiver striped */
    {11, 12, 600 * 1024, 600 * 1024}, /* both striped, tag differs */
    {13, 13, 5000, 5000},             /* matches: must arrive intact after the skips */
};
enum { MISMATCH_N = sizeof MISMATCH_MSGS / sizeof MISMATCH_MSGS[0] };

static int mismatch_body(const strata_net_fixture_rank *r) {
  int rank = r->rank;
  strata_store *store = NULL;
  strata_transport *t = NULL;
  int sealed = r->arg ? *(const int *)r->arg : 0;
  if (open_tcp_sealed(r, 2, 4, NULL, sealed, &store, &t) != STRATA_OK) return 1;
  strata_xfer xs[MISMATCH_N];
  unsigned char *bufs[MISMATCH_N];
  int done = 0;
  for (int i = 0; i < MISMATCH_N; i++) {
    const mismatch_msg *m = &MISMATCH_MSGS[i];
    size_t bytes = rank == 0 ? m->send_bytes : m->recv_bytes;
    bufs[i] = malloc(bytes + 1);
    memset(bufs[i], 0x5A, bytes + 1);
    if (rank == 0) strata_net_fixture_fill(bufs[i], bytes, 0, i);
    xs[i] = (strata_xfer){.peer = 1 - rank,
                          .tag = rank == 0 ? m->send_tag : m->recv_tag,
                          .bytes = bytes,
                          .buf = bufs[i],
                          .done = strata_net_fixture_count_done,
                          .user = &done};
    int status = rank == 0 ? t->ops->post_send(t, &xs[i]) : t->ops->post_recv(t, &xs[i]);
    CHECK_OR_RETURN(status == STRATA_OK, "post %d", i);
  }
  int status = strata_net_fixture_drive(t, &done, MISMATCH_N, 10, NULL);
  CHECK_OR_RETURN(status == STRATA_OK, "drive: %s", strata_err_name(status));
  for (int i = 0; i < MISMATCH_N; i++) {
    int want = rank == 0 || i == MISMATCH_N - 1 ? STRATA_OK : STRATA_ERR_MISMATCH;
    CHECK_OR_RETURN(xs[i].status == want, "message %d: got %s, want %s", i,
                    strata_err_name(xs[i].status), strata_err_name(want));
    size_t bytes = xs[i].bytes;
    if (rank == 1 && want == STRATA_ERR_MISMATCH)
      for (size_t b = 0; b <= bytes; b++)
        CHECK_OR_RETURN(bufs[i][b] == 0x5A, "mismatched message %d wrote into the buffer", i);
    if (rank == 1 && want == STRATA_OK)
      CHECK_OR_RETURN(strata_net_fixture_check(bufs[i], bytes, 0, i) == (size_t)-1,
                      "message %d after the mismatches is corrupt", i);
    free(bufs[i]);
  }
  /* both sides done before closing, so no side sees the other leave mid-test */
  int64_t arrived = 0;
  strata_store_add(store, "mismatch/done", 1, &arrived);
  while (arrived < 2) {
    usleep(1000);
    strata_store_add(store, "mismatch/done", 0, &arrived);
  }
  close_tcp(store, t);
  return 0;
}

/* ---- a peer dies ---- */

/* rank 1 dies; rank 0 has a receive pending from it, rank 2 has nothing pending with it */
static int killed_body(const strata_net_fixture_rank *r) {
  int rank = r->rank;
  strata_store *store = NULL;
  strata_transport *t = NULL;
  if (open_tcp(r, 3, 2, &store, &t) != STRATA_OK) return 1;
  if (rank == 1) {
    usleep(200 * 1000);
    raise(SIGKILL);
  }
  int done = 0, failed_peer = -1;
  char buf[64];
  strata_xfer x = {.peer = 1,
                   .tag = 1,
                   .bytes = sizeof buf,
                   .buf = buf,
                   .done = strata_net_fixture_count_done,
                   .user = &done};
  if (rank == 0) CHECK_OR_RETURN(t->ops->post_recv(t, &x) == STRATA_OK, "post_recv");
  double start = strata_now_s();
  int status = strata_net_fixture_drive(t, &done, 1 << 30, 5, &failed_peer);
  double waited = strata_now_s() - start;
  CHECK_OR_RETURN(status == STRATA_ERR_PEER_LOST, "progress returned %s, want STRATA_ERR_PEER_LOST",
                  strata_err_name(status));
  CHECK_OR_RETURN(failed_peer == 1, "failed_peer %d, want 1", failed_peer);
  CHECK_OR_RETURN(waited < 2.0, "noticed the death after %.2f s", waited);
  if (rank == 0) {
    CHECK_OR_RETURN(done == 1 && x.status == STRATA_ERR_PEER_LOST, "pending receive: done %d, %s",
                    done, strata_err_name(x.status));
  }
  strata_xfer y = {
      .peer = 1, .tag = 2, .bytes = 0, .done = strata_net_fixture_count_done, .user = &done};
  CHECK_OR_RETURN(t->ops->post_send(t, &y) == STRATA_ERR_PEER_LOST,
                  "posting to a lost peer must fail");
  printf("  rank %d noticed rank 1's death after %.0f ms\n", rank, waited * 1000);
  close_tcp(store, t);
  return 0;
}

/* ---- abort overtakes data ---- */

static int abort_body(const strata_net_fixture_rank *r) {
  int rank = r->rank;
  strata_store *store = NULL;
  strata_transport *t = NULL;
  if (open_tcp(r, 2, 2, &store, &t) != STRATA_OK) return 1;
  int done = 0;
  if (rank == 0) {
    /* far more than the socket buffers hold; rank 1 never posts the receives */
    size_t bytes = 16 * 1024 * 1024;
    unsigned char *big = calloc(1, bytes);
    strata_xfer xs[4];
    for (int i = 0; i < 4; i++) {
      xs[i] = (strata_xfer){.peer = 1,
                            .tag = 5,
                            .bytes = bytes,
                            .buf = big,
                            .done = strata_net_fixture_count_done,
                            .user = &done};
      CHECK_OR_RETURN(t->ops->post_send(t, &xs[i]) == STRATA_OK, "post_send");
    }
    for (int i = 0; i < 20; i++) t->ops->progress(t, NULL);
    t->ops->send_abort(t, 1, STRATA_ERR_MISMATCH, 0);
    /* stay until rank 1 confirmed, so its view is not a dead peer */
    char *value = NULL;
    size_t len;
    CHECK_OR_RETURN(strata_store_get(store, "abort/seen", (void **)&value, &len, 10) == STRATA_OK,
                    "rank 1 never saw the abort");
    free(value);
    free(big);
  } else {
    double start = strata_now_s();
    while (!t->remote_abort_status && strata_now_s() - start < 5) {
      int status = t->ops->progress(t, NULL);
      CHECK_OR_RETURN(status == STRATA_OK, "progress: %s", strata_err_name(status));
      t->ops->wait(t, 1);
    }
    CHECK_OR_RETURN(t->remote_abort_status == STRATA_ERR_MISMATCH, "remote_abort_status %d",
                    t->remote_abort_status);
    CHECK_OR_RETURN(t->remote_abort_peer == 0, "remote_abort_peer %d", t->remote_abort_peer);
    strata_store_set(store, "abort/seen", "1", 1);
  }
  close_tcp(store, t);
  return 0;
}

/* ---- orderly close ---- */

static int close_body(const strata_net_fixture_rank *r) {
  int rank = r->rank;
  strata_store *store = NULL;
  strata_transport *t = NULL;
  if (open_tcp(r, 2, 4, &store, &t) != STRATA_OK) return 1;
  size_t bytes = 100 * 1024;
  unsigned char *buf = malloc(bytes);
  int done = 0;
  strata_xfer x = {.peer = 1 - rank,
                   .tag = 3,
                   .bytes = bytes,
                   .buf = buf,
                   .done = strata_net_fixture_count_done,
                   .user = &done};
  if (rank == 0) {
    strata_net_fixture_fill(buf, bytes, 0, 0);
    CHECK_OR_RETURN(t->ops->post_send(t, &x) == STRATA_OK, "post_send");
    CHECK_OR_RETURN(strata_net_fixture_drive(t, &done, 1, 5, NULL) == STRATA_OK, "send");
    close_tcp(store, t); /* leaves while rank 1 has not received yet */
    free(buf);
    return 0;
  }
  usleep(300 * 1000); /* rank 0 is gone by now */
  for (int i = 0; i < 50; i++) {
    int failed_peer = -1;
    int status = t->ops->progress(t, &failed_peer);
    CHECK_OR_RETURN(status == STRATA_OK, "an orderly close was reported as %s",
                    strata_err_name(status));
    usleep(1000);
  }
  CHECK_OR_RETURN(t->ops->post_recv(t, &x) == STRATA_OK, "post_recv after the peer left");
  int status = strata_net_fixture_drive(t, &done, 1, 5, NULL);
  CHECK_OR_RETURN(status == STRATA_OK && x.status == STRATA_OK, "receive after close: %s / %s",
                  strata_err_name(status), strata_err_name(x.status));
  CHECK_OR_RETURN(strata_net_fixture_check(buf, bytes, 0, 0) == (size_t)-1, "data corrupt");
  strata_xfer y = x;
  y.done = strata_net_fixture_count_done;
  CHECK_OR_RETURN(t->ops->post_recv(t, &y) == STRATA_OK, "second post_recv");
  status = strata_net_fixture_drive(t, &done, 2, 5, NULL);
  CHECK_OR_RETURN(status == STRATA_ERR_PEER_LOST && y.status == STRATA_ERR_PEER_LOST,
                  "a receive nobody will send must fail: %s / %s", strata_err_name(status),
                  strata_err_name(y.status));
  free(buf);
  close_tcp(store, t);
  return 0;
}

/* ---- two transports of one job ---- */

/* Open two meshes one after the other in the same job and store; each carries its own traffic. */
static int two_opens_body(const strata_net_fixture_rank *r) {
  int rank = r->rank, n = r->nprocs;
  strata_store *store1 = NULL, *store2 = NULL;
  strata_transport *t[2] = {NULL, NULL};
  CHECK_OR_RETURN(open_tcp(r, n, 2, &store1, &t[0]) == STRATA_OK, "first open");
  CHECK_OR_RETURN(open_tcp(r, n, 1, &store2, &t[1]) == STRATA_OK, "second open");
  int done[2] = {0, 0}, got[2][8], mine[2] = {1000 + rank, 2000 + rank};
  strata_xfer xs[2][16];
  for (int k = 0; k < 2; k++) {
    int posted = 0;
    for (int q = 0; q < n; q++) {
      if (q == rank) continue;
      xs[k][posted] = (strata_xfer){.peer = q,
                                    .tag = 1,
                                    .bytes = sizeof(int),
                                    .buf = &got[k][q],
                                    .done = strata_net_fixture_count_done,
                                    .user = &done[k]};
      CHECK_OR_RETURN(t[k]->ops->post_recv(t[k], &xs[k][posted++]) == STRATA_OK, "post_recv");
      xs[k][posted] = (strata_xfer){.peer = q,
                                    .tag = 1,
                                    .bytes = sizeof(int),
                                    .buf = &mine[k],
                                    .done = strata_net_fixture_count_done,
                                    .user = &done[k]};
      CHECK_OR_RETURN(t[k]->ops->post_send(t[k], &xs[k][posted++]) == STRATA_OK, "post_send");
    }
    CHECK_OR_RETURN(strata_net_fixture_drive(t[k], &done[k], posted, 10, NULL) == STRATA_OK,
                    "drive %d", k);
    for (int q = 0; q < n; q++)
      CHECK_OR_RETURN(q == rank || got[k][q] == (k ? 2000 : 1000) + q,
                      "transport %d: rank %d sent %d", k, q, got[k][q]);
  }
  int64_t arrived = 0;
  strata_store_add(store1, "twoopens/done", 1, &arrived);
  while (arrived < n) {
    usleep(1000);
    strata_store_add(store1, "twoopens/done", 0, &arrived);
  }
  close_tcp(store1, t[0]);
  close_tcp(store2, t[1]);
  return 0;
}

/* ---- net_open: locality and the transport per peer ---- */

static int net_open_body(const strata_net_fixture_rank *r) {
  int rank = r->rank, shm = *(const int *)r->arg;
  strata_config cfg;
  strata_net_fixture_config(r, r->nprocs, &cfg);
  cfg.shm_enabled = shm && rank != 2; /* rank 2 refuses shm: nobody may use it with rank 2 */
  cfg.tcp_streams = 2;
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  strata_net net;
  char err[512] = "";
  int status = strata_net_open(&cfg, rank, r->nprocs, store, &net, err, sizeof err);
  CHECK_OR_RETURN(status == STRATA_OK, "strata_net_open: %s", err);
  CHECK_OR_RETURN(net.tcp != NULL && net.peer[rank] == NULL,
                  "tcp missing or a transport to ourselves");
  for (int q = 0; q < r->nprocs; q++) {
    if (q == rank) continue;
    CHECK_OR_RETURN(net.is_local[q] == 1, "rank %d on this host is not local", q);
    int want_shm = shm && rank != 2 && q != 2;
    const char *name = net.peer[q]->ops->name;
    CHECK_OR_RETURN(strcmp(name, want_shm ? "shm" : "tcp") == 0, "rank %d goes by %s", q, name);
  }
  /* a last exchange over whatever was chosen: everyone sends its rank to everyone */
  int done = 0, posted = 0, got[8] = {0}, mine = rank + 100;
  strata_xfer xs[16];
  for (int q = 0; q < r->nprocs; q++) {
    if (q == rank) continue;
    xs[posted] = (strata_xfer){.peer = q,
                               .tag = 9,
                               .bytes = sizeof(int),
                               .buf = &got[q],
                               .done = strata_net_fixture_count_done,
                               .user = &done};
    CHECK_OR_RETURN(net.peer[q]->ops->post_recv(net.peer[q], &xs[posted++]) == STRATA_OK,
                    "post_recv");
    xs[posted] = (strata_xfer){.peer = q,
                               .tag = 9,
                               .bytes = sizeof(int),
                               .buf = &mine,
                               .done = strata_net_fixture_count_done,
                               .user = &done};
    CHECK_OR_RETURN(net.peer[q]->ops->post_send(net.peer[q], &xs[posted++]) == STRATA_OK,
                    "post_send");
  }
  double deadline = strata_now_s() + 10;
  while (done < posted && strata_now_s() < deadline) {
    if (net.tcp)
      CHECK_OR_RETURN(net.tcp->ops->progress(net.tcp, NULL) == STRATA_OK, "tcp progress");
    if (net.shm)
      CHECK_OR_RETURN(net.shm->ops->progress(net.shm, NULL) == STRATA_OK, "shm progress");
  }
  CHECK_OR_RETURN(done == posted, "exchange: %d of %d done", done, posted);
  for (int q = 0; q < r->nprocs; q++)
    CHECK_OR_RETURN(q == rank || got[q] == q + 100, "rank %d sent %d", q, got[q]);
  int64_t arrived = 0;
  strata_store_add(store, "netopen/done", 1, &arrived);
  while (arrived < r->nprocs) {
    usleep(1000);
    strata_store_add(store, "netopen/done", 0, &arrived);
  }
  strata_net_close(&net);
  strata_store_close(store);
  return 0;
}

int main(void) {
  alarm(240);
  int failed = 0;
  static const mesh_case cases[] = {{2, 1, NULL, 0},  {2, 4, NULL, 0}, {3, 1, NULL, 0},
                                    {3, 4, NULL, 0},  {4, 1, NULL, 0}, {4, 4, NULL, 0},
                                    {2, 3, "::1", 0}, {3, 4, NULL, 1}, {2, 2, NULL, 2}};
  static const char *const sealing[] = {"", ", sealed", ", sealed (ChaCha20-Poly1305, rekeyed)"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    printf("mesh exchange: %d ranks, %d stream(s)%s%s%s\n", cases[i].nranks, cases[i].streams,
           cases[i].host ? " over " : "", cases[i].host ? cases[i].host : "",
           sealing[cases[i].sealed]);
    fflush(stdout);
    double start = strata_now_s();
    int bad = strata_net_fixture_run(cases[i].nranks, mesh_body, (void *)&cases[i], 60, NULL);
    printf("  %s (%.2f s)\n", bad ? "FAILED" : "ok", strata_now_s() - start);
    failed += bad != 0;
  }
  printf("tag and size mismatch\n");
  fflush(stdout);
  int bad = strata_net_fixture_run(2, mismatch_body, NULL, 30, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  printf("tag and size mismatch, sealed (the skipped stripes keep both ends' nonces in step)\n");
  fflush(stdout);
  static const int sealed_on = 1;
  bad = strata_net_fixture_run(2, mismatch_body, (void *)&sealed_on, 30, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;

  printf("a peer killed with SIGKILL\n");
  fflush(stdout);
  int statuses[3];
  strata_net_fixture_run(3, killed_body, NULL, 30, statuses);
  bad = !(WIFSIGNALED(statuses[1]) && WTERMSIG(statuses[1]) == SIGKILL);
  for (int i = 0; i < 3; i += 2) bad |= !(WIFEXITED(statuses[i]) && WEXITSTATUS(statuses[i]) == 0);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad;

  printf("abort overtakes queued data\n");
  fflush(stdout);
  bad = strata_net_fixture_run(2, abort_body, NULL, 30, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;

  printf("orderly close\n");
  fflush(stdout);
  bad = strata_net_fixture_run(2, close_body, NULL, 30, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;

  printf("two transports of one job, 3 ranks\n");
  fflush(stdout);
  bad = strata_net_fixture_run(3, two_opens_body, NULL, 30, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;

  for (int shm = 0; shm <= 1; shm++) {
    printf("strata_net_open, 3 ranks, shm %s (rank 2 has it off)\n", shm ? "on" : "off");
    fflush(stdout);
    bad = strata_net_fixture_run(3, net_open_body, &shm, 30, NULL);
    printf("  %s\n", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("%s\n", failed ? "test_net_tcp: FAILED" : "test_net_tcp: all passed");
  return failed ? 1 : 0;
}
