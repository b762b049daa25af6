// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_nccl_plugin.c — drives libnccl-net-strata.so as NCCL does: dlopen, the table found by
 * its symbol (ncclNetPlugin_v12, and ncclNetPlugin_v8), and NCCL's call patterns between forked
 * processes that exchange their handles as NCCL's bootstrap would:
 *
 *   ring       2, 3 and 4 processes (v12) and 2 (v8): listen, connect and accept polled to
 *              completion together; NCCL_NET_MAX_REQUESTS sends and receives in flight (one more
 *              is refused with a NULL request), received sizes smaller than posted, tests polled
 *              out of order, grouped receives (n = 4) whose sends come in another tag order (a
 *              0-byte one among them), iflush, regMr, close while idle
 *   threads    two threads per process, each with its own connections, connecting, accepting
 *              and moving data at once (as NCCL's proxy threads do; TSan watches)
 *   killed     a peer killed mid-transfer: every request pending with it fails, later ones too,
 *              nothing hangs
 *   secret     300 silent connections flood a listener, a process with another STRATA_SECRET
 *              is refused at connect, and the listener still accepts the right peer
 *   mismatch   a send larger than its receive fails both ends
 *   bad        bad handles and arguments: not strata's, a stage pointer this process never made,
 *              a port nobody listens on (fails after STRATA_TIMEOUT), NULLs, CUDA memory
 *
 * `test_net_nccl_plugin bench ...` runs one rank of a ring of large transfers over the plugin or,
 * with --plain, over one plain TCP socket per peer (bench/nccl-plugin/run.sh, across emulated
 * sites); handles then travel through files in --dir.
 *
 * The plugin is found at $STRATA_NCCL_PLUGIN, else where the build put it.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/check.h"
#include "ncclnet/nccl_net_abi.h"

#ifndef STRATA_NCCL_PLUGIN_PATH
#define STRATA_NCCL_PLUGIN_PATH "libnccl-net-strata.so"
#endif

enum { MAX_RANKS = 4, MAX_REQ = NCCL_NET_MAX_REQUESTS };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the plugin, either table ---- */

typedef struct net {
  int version;
  const ncclNet_v8_t *v8;
  const ncclNet_v12_t *v12;
  void *ctx;
} net;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (level != NCCL_LOG_WARN && !getenv("NN_TEST_VERBOSE")) return;
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "[%d] ", (int)getpid());
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
}

static int net_open(net *n, int version) {
  const char *path = getenv("STRATA_NCCL_PLUGIN");
  void *lib = dlopen(path && path[0] ? path : STRATA_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK_OR_RETURN(lib, "dlopen: %s", dlerror());
  memset(n, 0, sizeof *n);
  n->version = version;
  if (version == 12) {
    n->v12 = dlsym(lib, "ncclNetPlugin_v12");
    CHECK_OR_RETURN(n->v12, "no ncclNetPlugin_v12");
    CHECK_OR_RETURN(n->v12->init(&n->ctx, 1, NULL, logger, NULL) == ncclSuccess);
  } else {
    n->v8 = dlsym(lib, "ncclNetPlugin_v8");
    CHECK_OR_RETURN(n->v8, "no ncclNetPlugin_v8");
    CHECK_OR_RETURN(n->v8->init(logger) == ncclSuccess);
  }
  int ndev = 0;
  CHECK_OR_RETURN((n->v12 ? n->v12->devices(&ndev) : n->v8->devices(&ndev)) == ncclSuccess);
  CHECK_OR_RETURN(ndev == 1, "%d devices", ndev);
  return 0;
}

static ncclResult_t net_listen(net *n, void *handle, void **comm) {
  return n->v12 ? n->v12->listen(n->ctx, 0, handle, comm) : n->v8->listen(0, handle, comm);
}
static ncclResult_t net_connect(net *n, void *handle, void **comm) {
  return n->v12 ? n->v12->connect(n->ctx, 0, handle, comm, NULL)
                : n->v8->connect(0, handle, comm, NULL);
}
static ncclResult_t net_accept(net *n, void *listen_comm, void **comm) {
  return n->v12 ? n->v12->accept(listen_comm, comm, NULL) : n->v8->accept(listen_comm, comm, NULL);
}
static ncclResult_t net_isend(net *n, void *comm, void *data, size_t size, int tag, void **req) {
  return n->v12 ? n->v12->isend(comm, data, size, tag, NULL, NULL, req)
                : n->v8->isend(comm, data, (int)size, tag, NULL, req);
}
static ncclResult_t net_irecv(net *n, void *comm, int count, void **data, const size_t *sizes,
                              int *tags, void **req) {
  if (n->v12) return n->v12->irecv(comm, count, data, (size_t *)sizes, tags, NULL, NULL, req);
  int narrow[8];
  for (int i = 0; i < count && i < 8; i++) narrow[i] = (int)sizes[i];
  return n->v8->irecv(comm, count, data, narrow, tags, NULL, req);
}
static ncclResult_t net_test(net *n, void *req, int *done, int *sizes) {
  return n->v12 ? n->v12->test(req, done, sizes) : n->v8->test(req, done, sizes);
}
static ncclResult_t net_close_send(net *n, void *c) {
  return n->v12 ? n->v12->closeSend(c) : n->v8->closeSend(c);
}
static ncclResult_t net_close_recv(net *n, void *c) {
  return n->v12 ? n->v12->closeRecv(c) : n->v8->closeRecv(c);
}
static ncclResult_t net_close_listen(net *n, void *c) {
  return n->v12 ? n->v12->closeListen(c) : n->v8->closeListen(c);
}

/* Poll connect and accept together until both gave a comm (NCCL's proxy does the same). */
static int net_link(net *n, void *listen_comm, void *next_handle, void **send_comm,
                    void **recv_comm, double timeout_s) {
  *send_comm = *recv_comm = NULL;
  double deadline = now_s() + timeout_s;
  while (!*send_comm || !*recv_comm) {
    if (!*send_comm) CHECK_OR_RETURN(net_connect(n, next_handle, send_comm) == ncclSuccess);
    if (!*recv_comm) CHECK_OR_RETURN(net_accept(n, listen_comm, recv_comm) == ncclSuccess);
    CHECK_OR_RETURN(now_s() < deadline, "connect/accept did not finish in %.0f s", timeout_s);
    if (!*send_comm || !*recv_comm) usleep(200);
  }
  return 0;
}

/* ---- processes and the handle exchange ---- */

typedef struct job {
  int rank, nranks;
  uint8_t handles[MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
  int to_parent, from_parent;
} job;

static int read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t n = write(fd, (const char *)buf + put, len - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    put += (size_t)n;
  }
  return 0;
}

/* All ranks' handles to every rank (the parent relays: 'h' and a handle up, all handles down). */
static int exchange(job *j, const void *mine) {
  char kind = 'h';
  if (write_full(j->to_parent, &kind, 1) != 0) return -1;
  if (write_full(j->to_parent, mine, NCCL_NET_HANDLE_MAXSIZE) != 0) return -1;
  return read_full(j->from_parent, j->handles, sizeof j->handles);
}

/* A barrier through the parent ('b' up, one byte down once every rank sent its 'b'). */
static int barrier(job *j) {
  char b = 'b';
  if (write_full(j->to_parent, &b, 1) != 0) return -1;
  return read_full(j->from_parent, &b, 1);
}

typedef int (*rank_fn)(job *j, void *arg);

/* Run fn as `nranks` processes; `env` (per rank: "NAME=VALUE" or NULL) adjusts each one's
 * environment. Fails on any rank's failure or crash (rank `expect_killed` may die of SIGKILL),
 * or after timeout_s (each rank's alarm). */
static int run_ranks(const char *what, int nranks, rank_fn fn, void *arg, const char **env,
                     double timeout_s, int expect_killed) {
  pid_t pids[MAX_RANKS];
  int up[MAX_RANKS][2], down[MAX_RANKS][2];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nranks; r++) {
    if (pipe(up[r]) != 0 || pipe(down[r]) != 0) return 1;
    pids[r] = fork();
    if (pids[r] == 0) {
      for (int q = 0; q <= r; q++) {
        close(up[q][0]);
        close(down[q][1]);
      }
      failures = 0; /* the parent's count is not this rank's */
      if (env && env[r]) putenv((char *)env[r]);
      alarm((unsigned)timeout_s + 5);
      job j = {.rank = r, .nranks = nranks, .to_parent = up[r][1], .from_parent = down[r][0]};
      int rc = fn(&j, arg);
      fflush(stdout);
      exit(rc || failures ? 1 : 0); /* exit, not _exit: LeakSanitizer checks each rank */
    }
    close(up[r][1]);
    close(down[r][0]);
  }
  /* relay exchanges and barriers until a rank leaves (exits, dies) or they disagree */
  for (int relay_ok = 1; relay_ok;) {
    char kind[MAX_RANKS];
    uint8_t handles[MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
    for (int r = 0; r < nranks && relay_ok; r++)
      if (read_full(up[r][0], &kind[r], 1) != 0 || kind[r] != kind[0] ||
          (kind[r] == 'h' && read_full(up[r][0], handles[r], NCCL_NET_HANDLE_MAXSIZE) != 0))
        relay_ok = 0;
    for (int r = 0; r < nranks && relay_ok; r++)
      if ((kind[0] == 'h' ? write_full(down[r][1], handles, sizeof handles)
                          : write_full(down[r][1], &kind[0], 1)) != 0)
        relay_ok = 0;
  }
  for (int r = 0; r < nranks; r++) close(down[r][1]); /* a rank still waiting sees EOF */
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    close(up[r][0]);
    int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (r == expect_killed && killed) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("%s: rank %d of %d %s %d\n", what, r, nranks,
             WIFSIGNALED(status) ? "died of signal" : "exited with",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      bad++;
    }
  }
  CHECK(bad == 0, "%s: %d of %d ranks failed", what, bad, nranks);
  if (!bad) printf("%s: ok\n", what);
  return bad;
}

/* ---- data ---- */

static uint8_t pattern(int src, int msg, size_t i) {
  return (uint8_t)(src * 37 + msg * 11 + (int)(i * 7 % 251));
}

static void fill(uint8_t *buf, size_t len, int src, int msg) {
  for (size_t i = 0; i < len; i++) buf[i] = pattern(src, msg, i);
}

static size_t verify(const uint8_t *buf, size_t len, int src, int msg) {
  size_t wrong = 0;
  for (size_t i = 0; i < len; i++) wrong += buf[i] != pattern(src, msg, i);
  return wrong;
}

/* The size of message i of a round: small ones, odd ones, one 4 MiB one (striped), one empty. */
static size_t msg_size(int i) {
  if (i == 5) return 0;
  if (i == 17) return 4u << 20;
  return (size_t)((i * 40961u) % (300u * 1024u)) + 1;
}

/* ---- ring ---- */

typedef struct ring_arg {
  int version;
} ring_arg;

/* Wait for every request, polling in a scrambled order; sizes[k] per request. */
static int wait_all(net *n, void **reqs, int count, int (*sizes)[8], int expect_ok) {
  int left = count, spins = 0;
  int done_flags[MAX_REQ * 2] = {0};
  while (left > 0) {
    for (int k = 0; k < count; k++) {
      int i = (k * 7 + spins) % count; /* out of order, and a different order each pass */
      if (done_flags[i]) continue;
      int done = 0;
      ncclResult_t rc = net_test(n, reqs[i], &done, sizes ? sizes[i] : NULL);
      if (expect_ok) CHECK_OR_RETURN(rc == ncclSuccess, "test of request %d: %d", i, rc);
      if (done || rc != ncclSuccess) done_flags[i] = 1, left--;
    }
    spins++;
  }
  return 0;
}

static int ring_rank(job *j, void *argp) {
  ring_arg *arg = argp;
  net n;
  if (net_open(&n, arg->version) != 0) return 1;
  /* honest properties */
  if (n.v12) {
    ncclNetProperties_v12_t p;
    CHECK_OR_RETURN(n.v12->getProperties(0, &p) == ncclSuccess);
    CHECK(p.ptrSupport == NCCL_PTR_HOST && p.maxRecvs == 8 && p.speed > 0 && p.regIsGlobal == 0);
    CHECK(p.name && strncmp(p.name, "strata/", 7) == 0, "name %s", p.name ? p.name : "(null)");
    CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST && p.maxP2pBytes >= (1ull << 31));
  } else {
    ncclNetProperties_v8_t p;
    CHECK_OR_RETURN(n.v8->getProperties(0, &p) == ncclSuccess);
    CHECK(p.ptrSupport == NCCL_PTR_HOST && p.maxRecvs == 8 && p.speed > 0);
  }
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen_comm = NULL, *send_comm = NULL, *recv_comm = NULL;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen_comm) == ncclSuccess && listen_comm);
  CHECK_OR_RETURN(exchange(j, handle) == 0);
  int next = (j->rank + 1) % j->nranks, prev = (j->rank + j->nranks - 1) % j->nranks;
  if (net_link(&n, listen_comm, j->handles[next], &send_comm, &recv_comm, 20) != 0) return 1;
  void *mh = NULL;
  CHECK(n.v12 ? n.v12->regMr(send_comm, handle, 1, NCCL_PTR_HOST, &mh) == ncclSuccess
              : n.v8->regMr(send_comm, handle, 1, NCCL_PTR_HOST, &mh) == ncclSuccess);
  CHECK(n.v12 ? n.v12->regMr(send_comm, handle, 1, NCCL_PTR_CUDA, &mh) != ncclSuccess
              : n.v8->regMr(send_comm, handle, 1, NCCL_PTR_CUDA, &mh) != ncclSuccess);

  /* round 1: NCCL_NET_MAX_REQUESTS each way, receives posted larger than what comes */
  uint8_t *out[MAX_REQ], *in[MAX_REQ];
  size_t posted[MAX_REQ];
  void *sreq[MAX_REQ], *rreq[MAX_REQ];
  int rsizes[MAX_REQ][8], ssizes[MAX_REQ][8];
  for (int i = 0; i < MAX_REQ; i++) {
    size_t size = msg_size(i);
    posted[i] = size + (size_t)(i % 3) * 1000; /* truncated receives: fewer bytes come */
    out[i] = malloc(size ? size : 1);
    in[i] = malloc(posted[i] ? posted[i] : 1);
    CHECK_OR_RETURN(out[i] && in[i]);
    fill(out[i], size, j->rank, i);
    memset(in[i], 0xee, posted[i]);
  }
  for (int i = 0; i < MAX_REQ; i++) {
    int tag = 1000 + i;
    void *data = in[i];
    CHECK_OR_RETURN(net_irecv(&n, recv_comm, 1, &data, &posted[i], &tag, &rreq[i]) == ncclSuccess &&
                    rreq[i]);
  }
  for (int i = 0; i < MAX_REQ; i++)
    CHECK_OR_RETURN(net_isend(&n, send_comm, out[i], msg_size(i), 1000 + i, &sreq[i]) ==
                        ncclSuccess &&
                    sreq[i]);
  /* one more than NCCL_NET_MAX_REQUESTS: refused for now, without an error */
  void *extra = (void *)1;
  CHECK(net_isend(&n, send_comm, out[0], 1, 1, &extra) == ncclSuccess && extra == NULL);
  extra = (void *)1;
  void *data0 = in[0];
  int tag0 = 1;
  CHECK(net_irecv(&n, recv_comm, 1, &data0, &posted[0], &tag0, &extra) == ncclSuccess &&
        extra == NULL);
  void *both[2 * MAX_REQ];
  int bsizes[2 * MAX_REQ][8];
  memcpy(both, rreq, sizeof rreq);
  memcpy(both + MAX_REQ, sreq, sizeof sreq);
  if (wait_all(&n, both, 2 * MAX_REQ, bsizes, 1) != 0) return 1;
  for (int i = 0; i < MAX_REQ; i++) {
    CHECK(bsizes[i][0] == (int)msg_size(i), "message %d: %d bytes arrived, %zu sent", i,
          bsizes[i][0], msg_size(i));
    CHECK(bsizes[MAX_REQ + i][0] == (int)msg_size(i));
    CHECK(verify(in[i], msg_size(i), prev, i) == 0, "message %d from rank %d is wrong", i, prev);
    size_t tail_ok = 1;
    for (size_t b = msg_size(i); b < posted[i]; b++) tail_ok &= in[i][b] == 0xee;
    CHECK(tail_ok, "message %d wrote past what was sent", i);
  }
  (void)rsizes, (void)ssizes;

  /* round 2: a grouped receive of 4 buffers; the sends come in another tag order */
  static const int group_tags[4] = {70, 50, 30, 10};
  static const size_t group_posted[4] = {65536, 1024, 300000, 4096};
  static const size_t group_sent[4] = {65000, 0, 123457, 4096};
  void *gdata[4];
  size_t gposted[4];
  int gtags[4];
  uint8_t *gin[4], *gout[4];
  for (int g = 0; g < 4; g++) {
    gin[g] = malloc(group_posted[g]);
    gout[g] = malloc(group_sent[g] ? group_sent[g] : 1);
    CHECK_OR_RETURN(gin[g] && gout[g]);
    memset(gin[g], 0xee, group_posted[g]);
    gdata[g] = gin[g];
    gposted[g] = group_posted[g];
    gtags[g] = group_tags[g];
  }
  void *greq = NULL;
  CHECK_OR_RETURN(net_irecv(&n, recv_comm, 4, gdata, gposted, gtags, &greq) == ncclSuccess && greq);
  void *gs[4];
  for (int k = 0; k < 4; k++) { /* tag order 10, 30, 50, 70: the reverse of the receive's */
    int g = 3 - k;
    fill(gout[g], group_sent[g], j->rank, 100 + g);
    CHECK_OR_RETURN(net_isend(&n, send_comm, gout[g], group_sent[g], group_tags[g], &gs[k]) ==
                        ncclSuccess &&
                    gs[k]);
  }
  void *all[5] = {greq, gs[0], gs[1], gs[2], gs[3]};
  int asizes[5][8];
  if (wait_all(&n, all, 5, asizes, 1) != 0) return 1;
  for (int g = 0; g < 4; g++) {
    CHECK(asizes[0][g] == (int)group_sent[g], "grouped buffer %d: %d bytes, %zu sent", g,
          asizes[0][g], group_sent[g]);
    CHECK(verify(gin[g], group_sent[g], prev, 100 + g) == 0, "grouped buffer %d is wrong", g);
  }
  /* iflush: host memory needs none */
  void *flush = (void *)1;
  int fsize = 1;
  CHECK((n.v12 ? n.v12->iflush(recv_comm, 1, gdata, &fsize, NULL, &flush)
               : n.v8->iflush(recv_comm, 1, gdata, &fsize, NULL, &flush)) == ncclSuccess &&
        flush == NULL);

  /* close while idle, once everyone is idle */
  CHECK_OR_RETURN(barrier(j) == 0);
  CHECK(net_close_send(&n, send_comm) == ncclSuccess);
  CHECK(net_close_recv(&n, recv_comm) == ncclSuccess);
  CHECK(net_close_listen(&n, listen_comm) == ncclSuccess);
  for (int i = 0; i < MAX_REQ; i++) free(out[i]), free(in[i]);
  for (int g = 0; g < 4; g++) free(gin[g]), free(gout[g]);
  return 0;
}

/* ---- two threads, two connections each way, at once ---- */

typedef struct thread_arg {
  net *n;
  void *listen_comm;
  uint8_t next_handle[NCCL_NET_HANDLE_MAXSIZE];
  int rank, prev, index;
  int failed;
} thread_arg;

/* What NCCL's proxy threads do to separate comms at the same time: connect and accept, then
 * 32 messages each way, checked. */
static void *thread_ring(void *p) {
  thread_arg *a = p;
  void *send_comm = NULL, *recv_comm = NULL;
  a->failed = 1;
  if (net_link(a->n, a->listen_comm, a->next_handle, &send_comm, &recv_comm, 20) != 0) return NULL;
  enum { MSGS = MAX_REQ, BYTES = 300000 };
  uint8_t *out = malloc((size_t)MSGS * BYTES), *in = malloc((size_t)MSGS * BYTES);
  void *reqs[2 * MSGS];
  int sizes[2 * MSGS][8];
  int ok = out && in;
  for (int i = 0; ok && i < MSGS; i++) {
    fill(out + (size_t)i * BYTES, BYTES, a->rank * 10 + a->index, i);
    void *data = in + (size_t)i * BYTES;
    size_t size = BYTES;
    int tag = a->index;
    ok = net_irecv(a->n, recv_comm, 1, &data, &size, &tag, &reqs[i]) == ncclSuccess && reqs[i];
  }
  for (int i = 0; ok && i < MSGS; i++)
    ok = net_isend(a->n, send_comm, out + (size_t)i * BYTES, BYTES, a->index, &reqs[MSGS + i]) ==
             ncclSuccess &&
         reqs[MSGS + i];
  if (ok && wait_all(a->n, reqs, 2 * MSGS, sizes, 1) == 0) {
    size_t wrong = 0;
    for (int i = 0; i < MSGS; i++)
      wrong += verify(in + (size_t)i * BYTES, BYTES, a->prev * 10 + a->index, i) +
               (sizes[i][0] != BYTES);
    a->failed = wrong != 0;
  }
  /* the check counter is not the threads' to share: the rank reports */
  if (a->failed) printf("threads: thread %d of rank %d failed\n", a->index, a->rank);
  free(out);
  free(in);
  net_close_send(a->n, send_comm);
  net_close_recv(a->n, recv_comm);
  return NULL;
}

static int threads_rank(job *j, void *argp) {
  (void)argp;
  net n;
  if (net_open(&n, 12) != 0) return 1;
  enum { THREADS = 2 };
  thread_arg args[THREADS];
  pthread_t threads[THREADS];
  int next = (j->rank + 1) % j->nranks;
  for (int k = 0; k < THREADS; k++) {
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    args[k] = (thread_arg){.n = &n, .rank = j->rank, .index = k};
    args[k].prev = (j->rank + j->nranks - 1) % j->nranks;
    CHECK_OR_RETURN(net_listen(&n, handle, &args[k].listen_comm) == ncclSuccess);
    CHECK_OR_RETURN(exchange(j, handle) == 0);
    memcpy(args[k].next_handle, j->handles[next], NCCL_NET_HANDLE_MAXSIZE);
  }
  for (int k = 0; k < THREADS; k++)
    CHECK_OR_RETURN(pthread_create(&threads[k], NULL, thread_ring, &args[k]) == 0);
  int failed = 0;
  for (int k = 0; k < THREADS; k++) {
    pthread_join(threads[k], NULL);
    failed += args[k].failed;
    net_close_listen(&n, args[k].listen_comm);
  }
  return failed;
}

/* ---- a peer killed mid-transfer ---- */

static int killed_rank(job *j, void *argp) {
  (void)argp;
  net n;
  if (net_open(&n, 12) != 0) return 1;
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen_comm = NULL, *send_comm = NULL, *recv_comm = NULL;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen_comm) == ncclSuccess);
  CHECK_OR_RETURN(exchange(j, handle) == 0);
  if (net_link(&n, listen_comm, j->handles[1 - j->rank], &send_comm, &recv_comm, 20) != 0) return 1;
  size_t big = 8u << 20;
  uint8_t *buf = calloc(1, big);
  CHECK_OR_RETURN(buf);
  if (j->rank == 1) { /* take the first message, then die with everything else in flight */
    void *req = NULL;
    int tag = 0;
    void *data = buf;
    CHECK_OR_RETURN(net_irecv(&n, recv_comm, 1, &data, &big, &tag, &req) == ncclSuccess && req);
    CHECK_OR_RETURN(barrier(j) == 0); /* rank 0 has posted everything */
    int done = 0;
    while (!done) CHECK_OR_RETURN(net_test(&n, req, &done, NULL) == ncclSuccess);
    kill(getpid(), SIGKILL);
  }
  /* rank 0: 32 sends of 8 MiB (far more than the sockets hold) and 31 receives from rank 1 */
  void *reqs[2 * MAX_REQ];
  int count = 0;
  for (int i = 0; i < MAX_REQ; i++) {
    CHECK_OR_RETURN(net_isend(&n, send_comm, buf, big, 0, &reqs[count]) == ncclSuccess &&
                    reqs[count]);
    count++;
  }
  int nrecv = MAX_REQ - 1;
  uint8_t *rbuf = malloc(1 << 16);
  for (int i = 0; i < nrecv; i++) {
    void *data = rbuf;
    size_t size = 1 << 16;
    int tag = 0;
    CHECK_OR_RETURN(net_irecv(&n, recv_comm, 1, &data, &size, &tag, &reqs[count]) == ncclSuccess &&
                    reqs[count]);
    count++;
  }
  CHECK_OR_RETURN(barrier(j) == 0);
  double start = now_s();
  int failed_sends = 0, failed_recvs = 0, finished = 0, state[2 * MAX_REQ] = {0};
  while (finished < count) {
    for (int i = 0; i < count; i++) {
      if (state[i]) continue;
      int done = 0;
      ncclResult_t rc = net_test(&n, reqs[i], &done, NULL);
      if (rc != ncclSuccess) {
        state[i] = 2, finished++;
        if (i < MAX_REQ)
          failed_sends++;
        else
          failed_recvs++;
      } else if (done) {
        state[i] = 1, finished++;
      }
    }
    CHECK_OR_RETURN(now_s() - start < 15, "pending requests still pending 15 s after the kill");
  }
  CHECK(failed_recvs == nrecv, "%d of %d receives from the dead peer failed", failed_recvs, nrecv);
  CHECK(failed_sends >= MAX_REQ / 2, "only %d of %d sends failed", failed_sends, MAX_REQ);
  void *late = NULL;
  CHECK(net_isend(&n, send_comm, buf, 1, 0, &late) != ncclSuccess && late == NULL,
        "a send after the peer died was accepted");
  printf("killed: %d sends and %d receives failed in %.2f s\n", failed_sends, failed_recvs,
         now_s() - start);
  CHECK(net_close_send(&n, send_comm) == ncclSuccess);
  CHECK(net_close_recv(&n, recv_comm) == ncclSuccess);
  CHECK(net_close_listen(&n, listen_comm) == ncclSuccess);
  free(buf);
  free(rbuf);
  return 0;
}

/* ---- a process without the secret ---- */

/* Barrier steps for a rank that must keep polling meanwhile: arrive, then poll released(). */
static int barrier_arrive(job *j) {
  char b = 'b';
  return write_full(j->to_parent, &b, 1);
}

static int barrier_released(job *j) {
  struct pollfd p = {.fd = j->from_parent, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return 0;
  char b;
  return read_full(j->from_parent, &b, 1) == 0;
}

/* Rank 2 holds another secret and connects to rank 0 while rank 1, a member, does too. The
 * listener must keep polling accept so the stranger's handshakes run (and fail), then gets the
 * member alone; the member's message arrives after barrier 1. */
static int secret_rank(job *j, void *argp) {
  (void)argp;
  net n;
  if (net_open(&n, 12) != 0) return 1;
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen_comm = NULL, *comm = NULL;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen_comm) == ncclSuccess);
  CHECK_OR_RETURN(exchange(j, handle) == 0);
  double deadline = now_s() + 20;
  if (j->rank == 2) { /* the stranger: a flood of silent connections, then refused at connect */
    struct sockaddr_in listener; /* the handle's address (plugin.c's nn_handle, after 8 bytes) */
    memcpy(&listener, j->handles[0] + 8, sizeof listener);
    int flood[300];
    for (int i = 0; i < 300; i++) {
      flood[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (flood[i] >= 0 && connect(flood[i], (struct sockaddr *)&listener, sizeof listener) != 0)
        close(flood[i]), flood[i] = -1;
    }
    CHECK_OR_RETURN(barrier(j) == 0); /* the member connects through the flood */
    for (int i = 0; i < 300; i++)
      if (flood[i] >= 0) close(flood[i]);
    ncclResult_t rc;
    while ((rc = net_connect(&n, j->handles[0], &comm)) == ncclSuccess && !comm)
      CHECK_OR_RETURN(now_s() < deadline, "a connect with the wrong secret never ended");
    CHECK(rc == ncclRemoteError && !comm, "a connect with the wrong secret: %d", rc);
    CHECK_OR_RETURN(barrier(j) == 0);
  } else if (j->rank == 1) { /* the member, once the flood is in */
    CHECK_OR_RETURN(barrier(j) == 0);
    while (!comm) {
      CHECK_OR_RETURN(net_connect(&n, j->handles[0], &comm) == ncclSuccess);
      CHECK_OR_RETURN(now_s() < deadline, "the member never connected");
    }
    uint8_t msg[1000];
    fill(msg, sizeof msg, 1, 0);
    void *req = NULL;
    CHECK_OR_RETURN(net_isend(&n, comm, msg, sizeof msg, 9, &req) == ncclSuccess && req);
    if (wait_all(&n, &req, 1, NULL, 1) != 0) return 1;
    CHECK_OR_RETURN(barrier(j) == 0);
  } else { /* the listener */
    int arrived = 0, released = 0;
    CHECK_OR_RETURN(barrier(j) == 0); /* the flood sits in the accept queue */
    while (!released) {
      if (!comm) CHECK_OR_RETURN(net_accept(&n, listen_comm, &comm) == ncclSuccess);
      if (comm && !arrived) {
        CHECK_OR_RETURN(barrier_arrive(j) == 0);
        arrived = 1;
      }
      void *more = NULL; /* keeps the stranger's handshakes running */
      if (comm) CHECK_OR_RETURN(net_accept(&n, listen_comm, &more) == ncclSuccess && !more);
      released = arrived && barrier_released(j);
      if (!released) usleep(200);
      CHECK_OR_RETURN(now_s() < deadline, "the member was never accepted");
    }
    uint8_t msg[1000];
    void *req = NULL, *data = msg;
    size_t size = sizeof msg;
    int tag = 9, sizes[1][8];
    CHECK_OR_RETURN(net_irecv(&n, comm, 1, &data, &size, &tag, &req) == ncclSuccess && req);
    if (wait_all(&n, &req, 1, sizes, 1) != 0) return 1;
    CHECK(sizes[0][0] == 1000 && verify(msg, sizeof msg, 1, 0) == 0);
  }
  CHECK_OR_RETURN(barrier(j) == 0);
  if (comm) CHECK((j->rank == 0 ? net_close_recv : net_close_send)(&n, comm) == ncclSuccess);
  CHECK(net_close_listen(&n, listen_comm) == ncclSuccess);
  return 0;
}

/* ---- a send larger than its receive ---- */

static int mismatch_rank(job *j, void *argp) {
  (void)argp;
  net n;
  if (net_open(&n, 12) != 0) return 1;
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen_comm = NULL, *send_comm = NULL, *recv_comm = NULL;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen_comm) == ncclSuccess);
  CHECK_OR_RETURN(exchange(j, handle) == 0);
  if (net_link(&n, listen_comm, j->handles[1 - j->rank], &send_comm, &recv_comm, 20) != 0) return 1;
  uint8_t buf[4096];
  void *req = NULL;
  double deadline = now_s() + 15;
  int done = 0;
  ncclResult_t rc = ncclSuccess;
  if (j->rank == 0) { /* sends 4096 bytes where 1000 were posted */
    CHECK_OR_RETURN(net_isend(&n, send_comm, buf, sizeof buf, 3, &req) == ncclSuccess && req);
    while ((rc = net_test(&n, req, &done, NULL)) == ncclSuccess && !done)
      CHECK_OR_RETURN(now_s() < deadline);
    /* the receiver's ABORT reaches a later request */
    void *late = NULL;
    while (rc == ncclSuccess) {
      rc = net_isend(&n, send_comm, buf, 1, 3, &late);
      while (rc == ncclSuccess && late && (rc = net_test(&n, late, &done, NULL)) == ncclSuccess &&
             !done)
        ;
      CHECK_OR_RETURN(now_s() < deadline, "the sender never learned of the mismatch");
      usleep(1000);
    }
  } else {
    void *data = buf;
    size_t size = 1000;
    int tag = 3;
    CHECK_OR_RETURN(net_irecv(&n, recv_comm, 1, &data, &size, &tag, &req) == ncclSuccess && req);
    while ((rc = net_test(&n, req, &done, NULL)) == ncclSuccess && !done)
      CHECK_OR_RETURN(now_s() < deadline);
  }
  CHECK(rc != ncclSuccess, "rank %d: the mismatch went unreported", j->rank);
  CHECK_OR_RETURN(barrier(j) == 0);
  net_close_send(&n, send_comm);
  net_close_recv(&n, recv_comm);
  net_close_listen(&n, listen_comm);
  return 0;
}

/* ---- bad handles and arguments (one process) ---- */

static int bad_rank(job *j, void *argp) {
  (void)argp;
  net n;
  if (net_open(&n, 12) != 0) return 1;
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen_comm = NULL, *comm = (void *)1;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen_comm) == ncclSuccess);
  CHECK_OR_RETURN(exchange(j, handle) == 0);
  /* not strata's handle */
  uint8_t junk[NCCL_NET_HANDLE_MAXSIZE];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 13 + 5);
  CHECK(net_connect(&n, junk, &comm) == ncclInvalidArgument && comm == NULL);
  /* strata's handle whose connect stage this process never made */
  uint8_t forged[NCCL_NET_HANDLE_MAXSIZE];
  memcpy(forged, handle, sizeof forged);
  for (size_t i = 40; i < 48; i++) forged[i] = 0x5a; /* the connector's stage (plugin.c) */
  comm = (void *)1;
  CHECK(net_connect(&n, forged, &comm) == ncclInvalidArgument && comm == NULL);
  /* a port nobody listens on any more: fails after STRATA_TIMEOUT, never hangs */
  CHECK(net_close_listen(&n, listen_comm) == ncclSuccess);
  double start = now_s();
  ncclResult_t rc;
  comm = NULL;
  while ((rc = net_connect(&n, handle, &comm)) == ncclSuccess && !comm) {
    usleep(1000);
    CHECK_OR_RETURN(now_s() - start < 20, "a connect to a closed port never ended");
  }
  CHECK(rc != ncclSuccess && comm == NULL, "a connect to a closed port succeeded");
  printf("bad: a connect to a closed port failed after %.1f s\n", now_s() - start);
  /* NULLs and nonsense */
  int done = 0;
  void *req = NULL;
  CHECK(net_test(&n, NULL, &done, NULL) == ncclInvalidArgument);
  CHECK(net_test(&n, junk, &done, NULL) == ncclInvalidArgument);
  CHECK(net_isend(&n, NULL, junk, 1, 0, &req) == ncclInvalidArgument);
  CHECK(net_isend(&n, junk, junk, 1, 0, &req) == ncclInvalidArgument);
  size_t size = 1;
  int tag = 0;
  void *data = junk;
  CHECK(net_irecv(&n, NULL, 1, &data, &size, &tag, &req) == ncclInvalidArgument);
  CHECK(net_close_send(&n, NULL) == ncclInvalidArgument);
  CHECK(net_close_recv(&n, junk) == ncclInvalidArgument);
  CHECK(net_accept(&n, NULL, &comm) == ncclInvalidArgument);
  CHECK(net_listen(&n, NULL, &comm) == ncclInvalidArgument);
  ncclNetProperties_v12_t p;
  CHECK(n.v12->getProperties(1, &p) == ncclInvalidArgument);
  /* a grouped receive beyond maxRecvs */
  void *listen2 = NULL, *send_comm = NULL, *recv_comm = NULL;
  CHECK_OR_RETURN(net_listen(&n, handle, &listen2) == ncclSuccess);
  if (net_link(&n, listen2, handle, &send_comm, &recv_comm, 20) != 0) return 1;
  void *datas[9];
  size_t sizes[9];
  int tags[9];
  for (int i = 0; i < 9; i++) datas[i] = junk, sizes[i] = 1, tags[i] = i;
  CHECK(net_irecv(&n, recv_comm, 9, datas, sizes, tags, &req) == ncclInvalidArgument);
  CHECK(net_irecv(&n, recv_comm, 0, datas, sizes, tags, &req) == ncclInvalidArgument);
  CHECK(net_close_send(&n, send_comm) == ncclSuccess);
  CHECK(net_close_recv(&n, recv_comm) == ncclSuccess);
  CHECK(net_close_listen(&n, listen2) == ncclSuccess);
  return 0;
}

/* ---- bench: one rank of a ring of large transfers ---- */

typedef struct bench_opts {
  int rank, nranks, plain, version, iters, warmup, inflight;
  size_t bytes, chunk;
  const char *dir;
  const char *out;
} bench_opts;

static int file_put(const char *dir, const char *name, const void *data, size_t len) {
  char tmp[512], path[512];
  snprintf(tmp, sizeof tmp, "%s/.%s.%d", dir, name, (int)getpid());
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, len, f) == len;
  ok &= fclose(f) == 0;
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static int file_get(const char *dir, const char *name, void *data, size_t len, double timeout_s) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  double deadline = now_s() + timeout_s;
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(data, 1, len, f);
      fclose(f);
      if (got == len) return 0;
    }
    if (now_s() > deadline) return -1;
    usleep(10000);
  }
}

/* One plain TCP socket each way, the kernel's defaults: what an unpaced single-stream transport
 * gets. */
static int plain_link(const bench_opts *o, int *send_fd, int *recv_fd) {
  const char *host = getenv("STRATA_HOST");
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, host && host[0] ? host : "127.0.0.1", &a.sin_addr);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 4) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &len) != 0)
    return -1;
  char name[32];
  snprintf(name, sizeof name, "plain.%d", o->rank);
  if (file_put(o->dir, name, &a, sizeof a) != 0) return -1;
  struct sockaddr_in next;
  snprintf(name, sizeof name, "plain.%d", (o->rank + 1) % o->nranks);
  if (file_get(o->dir, name, &next, sizeof next, 60) != 0) return -1;
  *send_fd = socket(AF_INET, SOCK_STREAM, 0);
  double deadline = now_s() + 30;
  while (connect(*send_fd, (struct sockaddr *)&next, sizeof next) != 0) {
    if (now_s() > deadline) return -1;
    usleep(50000);
  }
  *recv_fd = accept(l, NULL, NULL);
  close(l);
  int one = 1;
  setsockopt(*send_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(*send_fd, F_SETFL, O_NONBLOCK);
  fcntl(*recv_fd, F_SETFL, O_NONBLOCK);
  return *recv_fd >= 0 ? 0 : -1;
}

static int plain_round(int send_fd, int recv_fd, uint8_t *out, uint8_t *in, size_t bytes) {
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    struct pollfd p[2] = {{.fd = send_fd, .events = sent < bytes ? POLLOUT : 0},
                          {.fd = recv_fd, .events = got < bytes ? POLLIN : 0}};
    if (poll(p, 2, 30000) <= 0) return -1;
    if (p[0].revents & (POLLOUT | POLLERR)) {
      ssize_t k = send(send_fd, out + sent, bytes - sent, MSG_NOSIGNAL);
      if (k < 0 && errno != EAGAIN) return -1;
      if (k > 0) sent += (size_t)k;
    }
    if (p[1].revents & (POLLIN | POLLERR | POLLHUP)) {
      ssize_t k = recv(recv_fd, in + got, bytes - got, 0);
      if (k == 0 || (k < 0 && errno != EAGAIN)) return -1;
      if (k > 0) got += (size_t)k;
    }
  }
  return 0;
}

/* Chunks of o->chunk, at most o->inflight requests each way, tested oldest first as NCCL's
 * proxy tests the next step of each connection: one test per direction per pass. */
static int plugin_round(net *n, void *send_comm, void *recv_comm, uint8_t *out, uint8_t *in,
                        const bench_opts *o) {
  size_t nchunks = (o->bytes + o->chunk - 1) / o->chunk;
  size_t posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
  void *sreq[MAX_REQ] = {0}, *rreq[MAX_REQ] = {0}; /* rings indexed by chunk % inflight */
  size_t inflight = (size_t)(o->inflight < MAX_REQ ? o->inflight : MAX_REQ);
  while (done_s < nchunks || done_r < nchunks) {
    while (posted_r < nchunks && posted_r - done_r < inflight) {
      size_t off = posted_r * o->chunk;
      size_t len = o->bytes - off < o->chunk ? o->bytes - off : o->chunk;
      void *data = in + off;
      int tag = 1;
      void **slot = &rreq[posted_r % inflight];
      if (net_irecv(n, recv_comm, 1, &data, &len, &tag, slot) != ncclSuccess) return -1;
      if (!*slot) break;
      posted_r++;
    }
    while (posted_s < nchunks && posted_s - done_s < inflight) {
      size_t off = posted_s * o->chunk;
      size_t len = o->bytes - off < o->chunk ? o->bytes - off : o->chunk;
      void **slot = &sreq[posted_s % inflight];
      if (net_isend(n, send_comm, out + off, len, 1, slot) != ncclSuccess) return -1;
      if (!*slot) break;
      posted_s++;
    }
    int done_recv = 0, done_send = 0;
    if (done_r < posted_r) {
      if (net_test(n, rreq[done_r % inflight], &done_recv, NULL) != ncclSuccess) return -1;
      if (done_recv) done_r++;
    }
    if (done_s < posted_s) {
      if (net_test(n, sreq[done_s % inflight], &done_send, NULL) != ncclSuccess) return -1;
      if (done_send) done_s++;
    }
    if (!done_recv && !done_send) sched_yield(); /* as NCCL's proxy thread does when idle */
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int bench_main(int argc, char **argv) {
  bench_opts o = {.nranks = 2,
                  .version = 12,
                  .iters = 5,
                  .warmup = 2,
                  .inflight = MAX_REQ,
                  .bytes = 256u << 20,
                  .chunk = 4u << 20};
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--plain")) {
      o.plain = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "bench: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--rank"))
      o.rank = atoi(v);
    else if (!strcmp(a, "--nranks"))
      o.nranks = atoi(v);
    else if (!strcmp(a, "--dir"))
      o.dir = v;
    else if (!strcmp(a, "--bytes"))
      o.bytes = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--chunk"))
      o.chunk = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--iters"))
      o.iters = atoi(v);
    else if (!strcmp(a, "--warmup"))
      o.warmup = atoi(v);
    else if (!strcmp(a, "--inflight"))
      o.inflight = atoi(v);
    else if (!strcmp(a, "--version"))
      o.version = atoi(v);
    else if (!strcmp(a, "--out"))
      o.out = v;
    else {
      fprintf(stderr, "bench: unknown option %s\n", a);
      return 2;
    }
  }
  if (!o.dir || o.nranks < 2 || o.rank < 0 || o.rank >= o.nranks || o.iters < 1 || !o.bytes ||
      !o.chunk || o.inflight < 1) {
    fprintf(stderr,
            "usage: %s bench --rank R --nranks N --dir DIR [--bytes B] [--chunk C] "
            "[--iters K] [--warmup W] [--inflight Q] [--version 8|12] [--plain] "
            "[--out FILE]\n",
            argv[0]);
    return 2;
  }
  uint8_t *out = malloc(o.bytes), *in = malloc(o.bytes);
  if (!out || !in) return 1;
  fill(out, o.bytes, o.rank, 0);
  memset(in, 0, o.bytes);
  net n;
  void *send_comm = NULL, *recv_comm = NULL, *listen_comm = NULL;
  int send_fd = -1, recv_fd = -1;
  if (o.plain) {
    if (plain_link(&o, &send_fd, &recv_fd) != 0) {
      fprintf(stderr, "bench: plain sockets did not connect\n");
      return 1;
    }
  } else {
    if (net_open(&n, o.version) != 0) return 1;
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE], next[NCCL_NET_HANDLE_MAXSIZE];
    if (net_listen(&n, handle, &listen_comm) != ncclSuccess) return 1;
    char name[32];
    snprintf(name, sizeof name, "handle.%d", o.rank);
    if (file_put(o.dir, name, handle, sizeof handle) != 0) return 1;
    snprintf(name, sizeof name, "handle.%d", (o.rank + 1) % o.nranks);
    if (file_get(o.dir, name, next, sizeof next, 60) != 0) return 1;
    if (net_link(&n, listen_comm, next, &send_comm, &recv_comm, 60) != 0) return 1;
  }
  double times[64];
  int iters = o.iters < 64 ? o.iters : 64;
  for (int it = -o.warmup; it < iters; it++) {
    double t0 = now_s();
    int rc = o.plain ? plain_round(send_fd, recv_fd, out, in, o.bytes)
                     : plugin_round(&n, send_comm, recv_comm, out, in, &o);
    if (rc != 0) {
      fprintf(stderr, "bench: rank %d: transfer failed\n", o.rank);
      return 1;
    }
    if (it >= 0) times[it] = now_s() - t0;
  }
  int prev = (o.rank + o.nranks - 1) % o.nranks;
  size_t wrong = verify(in, o.bytes, prev, 0);
  double sorted[64];
  memcpy(sorted, times, sizeof(double) * (size_t)iters);
  qsort(sorted, (size_t)iters, sizeof(double), cmp_double);
  double median = iters % 2 ? sorted[iters / 2] : (sorted[iters / 2 - 1] + sorted[iters / 2]) / 2;
  FILE *f = o.out ? fopen(o.out, "w") : stdout;
  if (!f) return 1;
  fprintf(f,
          "{\"transport\": \"%s\", \"rank\": %d, \"nranks\": %d, \"bytes\": %zu, "
          "\"chunk\": %zu, \"wrong\": %zu, \"median_s\": %.6f, \"times_s\": [",
          o.plain ? "plain-socket" : "strata-plugin", o.rank, o.nranks, o.bytes, o.chunk, wrong,
          median);
  for (int i = 0; i < iters; i++) fprintf(f, "%s%.6f", i ? ", " : "", times[i]);
  fprintf(f, "]}\n");
  if (f != stdout) fclose(f);
  if (o.plain) {
    close(send_fd);
    close(recv_fd);
  } else {
    net_close_send(&n, send_comm);
    net_close_recv(&n, recv_comm);
    net_close_listen(&n, listen_comm);
  }
  free(out);
  free(in);
  return wrong ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) return bench_main(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  /* every process: loopback, sealed frames (so the cipher runs here too), a short timeout */
  setenv("STRATA_HOST", "127.0.0.1", 1);
  setenv("STRATA_ENCRYPT", "on", 1);
  setenv("STRATA_SECRET", "nccl-plugin-test", 1);
  setenv("STRATA_JOB_ID", "nccl-plugin-test", 1);
  setenv("STRATA_TCP_STREAMS", "3", 1);
  setenv("STRATA_TIMEOUT", "10", 1);
  ring_arg v12 = {12}, v8 = {8};
  run_ranks("ring v12, 2 processes", 2, ring_rank, &v12, NULL, 60, -1);
  run_ranks("ring v12, 3 processes", 3, ring_rank, &v12, NULL, 60, -1);
  run_ranks("ring v12, 4 processes", 4, ring_rank, &v12, NULL, 60, -1);
  run_ranks("ring v8, 2 processes", 2, ring_rank, &v8, NULL, 60, -1);
  run_ranks("threads", 2, threads_rank, NULL, NULL, 60, -1);
  run_ranks("killed", 2, killed_rank, NULL, NULL, 40, 1);
  const char *stranger[3] = {NULL, NULL, "STRATA_SECRET=not-the-secret"};
  run_ranks("secret", 3, secret_rank, NULL, stranger, 40, -1);
  run_ranks("mismatch", 2, mismatch_rank, NULL, NULL, 40, -1);
  const char *short_timeout[1] = {"STRATA_TIMEOUT=1.5"};
  run_ranks("bad", 1, bad_rank, NULL, short_timeout, 40, -1);
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures != 0;
}
