// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_lazy.c — TCP connections on demand (src/net/tcp_mesh.c): 8 ranks, TCP only.
 *  - after init each rank holds connections with one peer only, rank ^ 1 (what open waits for);
 *  - a ring allreduce leaves each rank connected with exactly its two ring neighbours, and its
 *    process holds exactly one more pair's sockets (streams + 1) than after init, counted in
 *    /proc/self/fd;
 *  - recursive halving-doubling leaves each rank connected with exactly rank ^ 1, ^ 2 and ^ 4
 *    (log2(8) peers), and no more sockets than those pairs' (streams + 1) each beyond init's;
 *  - both give the right sums, a second call of each opens nothing more, and a send/recv between
 *    two ranks that never met connects just that pair;
 *  - a rank that dies before anyone but its init pair connected to it fails the next allreduce on
 *    every survivor within the timeout.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "helpers/check.h"
#include "helpers/ranks.h"

enum { NRANKS = 8, STREAMS = 2, COUNT = 4096 };

static int sockets_open(void) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int sockets = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    char path[300];
    struct stat st;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISSOCK(st.st_mode)) sockets++;
  }
  closedir(dir);
  return sockets;
}

static int connected(strata_comm *comm, int peer) {
  return (int)strata_transport_ask(comm->net.tcp, STRATA_TRANSPORT_CONNECTED_PEERS, peer);
}

/* Every peer connected is one of want[0 .. nwant-1] and every one of those is connected. */
static int check_peers(strata_comm *comm, int rank, const int *want, int nwant, const char *when) {
  int count = (int)strata_transport_ask(comm->net.tcp, STRATA_TRANSPORT_CONNECTED_PEERS, -1);
  CHECK_OR_RETURN(count == nwant, "rank %d %s: connected with %d peers, want %d", rank, when, count,
                  nwant);
  for (int i = 0; i < nwant; i++)
    CHECK_OR_RETURN(connected(comm, want[i]), "rank %d %s: not connected with rank %d", rank, when,
                    want[i]);
  return 0;
}

static int allreduce(strata_comm *comm, int rank, strata_algo algo) {
  float *buf = malloc(COUNT * sizeof *buf);
  CHECK_OR_RETURN(buf != NULL, "out of memory");
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1);
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = buf,
                        .recvbuf = buf,
                        .count = COUNT,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .algo = algo};
  int status = strata_collective(comm, &a, NULL);
  float want = NRANKS * (NRANKS + 1) / 2.0f;
  int bad = status != STRATA_OK;
  for (int i = 0; !bad && i < COUNT; i++) bad = buf[i] != want;
  free(buf);
  CHECK_OR_RETURN(!bad, "rank %d: allreduce (%s) wrong: %s", rank,
                  algo == STRATA_ALGO_RING ? "ring" : "rhd", strata_err_name(status));
  return 0;
}

/* Wait until every rank reached `what`: through the store, which connects nobody. */
static int meet(strata_comm *comm, int n, strata_algo algo, const char *what) {
  char key[96];
  snprintf(key, sizeof key, "lazy/%s/%s", algo == STRATA_ALGO_RING ? "ring" : "rhd", what);
  int64_t arrived = 0;
  CHECK_OR_RETURN(strata_store_add(comm->store, key, 1, &arrived) == STRATA_OK, "store");
  for (double until = strata_test_now_s() + 20; arrived < n && strata_test_now_s() < until;) {
    strata_test_sleep_s(0.002);
    CHECK_OR_RETURN(strata_store_add(comm->store, key, 0, &arrived) == STRATA_OK, "store");
  }
  CHECK_OR_RETURN(arrived >= n, "the others never reached %s", what);
  return 0;
}

static int lazy_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  strata_algo algo = *(strata_algo *)arg;
  CHECK_OR_RETURN(comm && init_status == STRATA_OK && n == NRANKS, "init: %s",
                  strata_err_name(init_status));
  int partner = rank ^ 1;
  if (check_peers(comm, rank, &partner, 1, "after init")) return 1;
  int sockets_init = sockets_open();
  if (meet(comm, n, algo, "counted")) return 1; /* nobody dials before everyone counted */
  if (allreduce(comm, rank, algo)) return 1;
  int want[3], nwant = 0;
  if (algo == STRATA_ALGO_RING) {
    want[nwant++] = (rank + 1) % n;
    want[nwant++] = (rank + n - 1) % n;
  } else {
    for (int bit = 1; bit < n; bit <<= 1) want[nwant++] = rank ^ bit;
  }
  const char *when = algo == STRATA_ALGO_RING ? "after a ring allreduce" : "after an RHD allreduce";
  if (check_peers(comm, rank, want, nwant, when)) return 1;
  if (allreduce(comm, rank, algo)) return 1;
  if (check_peers(comm, rank, want, nwant, "after a second call")) return 1;
  if (meet(comm, n, algo, "called")) return 1;
  /* the partner's pair was there at init; every other peer's pair is streams + 1 sockets. A
   * dial that crossed the peer's may still be saying goodbye (its REJECT draining): wait for the
   * handshakes to end, then count */
  int sockets_want = sockets_init + (nwant - 1) * (STREAMS + 1), sockets_after = sockets_open();
  for (double until = strata_test_now_s() + 3; sockets_after != sockets_want;) {
    if (strata_test_now_s() > until) break;
    strata_test_sleep_s(0.01);
    sockets_after = sockets_open();
  }
  CHECK_OR_RETURN(sockets_after == sockets_want,
                  "rank %d %s (twice): %d sockets, %d after init: want %d more", rank, when,
                  sockets_after, sockets_init, (nwant - 1) * (STREAMS + 1));
  if (meet(comm, n, algo, "recounted")) return 1;
  /* ranks 0 and 3 never met in either algorithm at 8 ranks: a send/recv connects them alone */
  if (rank == 0 || rank == 3) {
    int peer = 3 - rank, mine = rank + 100, got = -1;
    strata_request *requests[2] = {NULL, NULL};
    CHECK_OR_RETURN(!connected(comm, peer), "rank %d already connected with %d", rank, peer);
    CHECK_OR_RETURN(strata_irecv(comm, &got, 1, STRATA_I32, peer, &requests[0]) == STRATA_OK &&
                        strata_isend(comm, &mine, 1, STRATA_I32, peer, &requests[1]) == STRATA_OK,
                    "post");
    int received = strata_request_wait(requests[0]), sent = strata_request_wait(requests[1]);
    CHECK_OR_RETURN(received == STRATA_OK && sent == STRATA_OK && got == peer + 100,
                    "rank %d: send/recv with %d: %s / %s, got %d", rank, peer,
                    strata_err_name(received), strata_err_name(sent), got);
    int after[4];
    memcpy(after, want, sizeof want);
    after[nwant] = peer;
    if (check_peers(comm, rank, after, nwant + 1, "after a send/recv")) return 1;
  }
  return meet(comm, n, algo, "done");
}

/* Rank 2 dies right after init, before any pair but its init pair (with 3) is connected: a ring
 * allreduce must fail on every survivor within the timeout — rank 1 finds 2's listener gone when
 * it dials, rank 3 sees its connections close, rank 0 hears the abort. */
static int dead_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  double timeout_s = *(double *)arg;
  CHECK_OR_RETURN(comm && init_status == STRATA_OK, "init: %s", strata_err_name(init_status));
  if (meet(comm, n, STRATA_ALGO_RING, "dead-init")) return 1;
  if (rank == 2) _exit(0); /* dies: no goodbye, its listener closes with it */
  strata_test_sleep_s(0.1);
  float x = 1;
  double start = strata_test_now_s();
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = &x,
                        .recvbuf = &x,
                        .count = 1,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .algo = STRATA_ALGO_RING};
  int status = strata_collective(comm, &a, NULL);
  double took = strata_test_now_s() - start;
  printf("  rank %d: %s after %.2f s\n", rank, strata_err_name(status), took);
  CHECK_OR_RETURN(status != STRATA_OK, "rank %d: an allreduce with a dead rank succeeded", rank);
  CHECK_OR_RETURN(took < timeout_s + 1, "rank %d: took %.2f s, past the %.1f s timeout", rank, took,
                  timeout_s);
  return 0;
}

int main(void) {
  int failed = 0;
  static const strata_algo algos[] = {STRATA_ALGO_RING, STRATA_ALGO_RHD};
  for (int i = 0; i < 2; i++) {
    strata_algo algo = algos[i];
    printf("%s allreduce, %d ranks, tcp, %d streams\n", i == 0 ? "ring" : "rhd", NRANKS, STREAMS);
    fflush(stdout);
    strata_test_ranks_opts o = {
        .shm = 0, .tcp_streams = STREAMS, .timeout_s = 10, .deadline_s = 60};
    int bad = strata_test_run_ranks(NRANKS, &o, lazy_body, &algo);
    printf("  %s\n", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("ring allreduce, 4 ranks, one dead before it ever connected\n");
  fflush(stdout);
  double timeout_s = 2;
  strata_test_ranks_opts o = {
      .shm = 0, .tcp_streams = STREAMS, .timeout_s = timeout_s, .deadline_s = 30};
  int bad = strata_test_run_ranks(4, &o, dead_body, &timeout_s);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  printf("%s\n", failed ? "test_net_lazy: FAILED" : "test_net_lazy: all passed");
  return failed ? 1 : 0;
}
