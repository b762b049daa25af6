// SPDX-License-Identifier: Apache-2.0
/*
 * test_store_crowd.c — the store holds a crowd and still serves a job through it: 1,600
 * authenticated clients and 1,000 idle strangers (2,600 connections on loopback) are held
 * open against one server while a 3-rank job rendezvouses through that store, allreduces and
 * agrees; then every authenticated client still gets an answer (one ADD each, all sent before
 * any is read). Also the store's counter calls: WAIT_COUNT and COUNTS on strata's server and
 * through the callbacks of a caller's store (the generic fallback on add). And clients that
 * leave while a forked child holds copies of the server's sockets are forgotten cleanly.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "helpers/check.h"
#include "helpers/ranks.h"
#include "strata.h"

#define SECRET "crowd-test-secret"
#define JOB "crowd-job"

enum { AUTHENTICATED = 1600, STRANGERS = 1000, RANKS = 3, COUNT = 4096 };

static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
    close(fd);
    return -1;
  }
  struct timeval limit = {.tv_sec = 10}; /* a read that never completes fails the test */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  return fd;
}

static int read_exact(int fd, void *buf, size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t n = recv(fd, (uint8_t *)buf + off, len - off, 0);
    if (n <= 0) return -1;
    off += (size_t)n;
  }
  return 0;
}

/* One reply frame: its status and up to `cap` bytes of body; -1 when the stream broke. */
static int read_reply(int fd, uint8_t *body, size_t cap, size_t *body_len, int *status) {
  uint8_t head[4 + STORE_WIRE_REPLY_HEADER_BYTES];
  if (read_exact(fd, head, sizeof head) != 0) return -1;
  size_t len = store_wire_get_u32(head) - STORE_WIRE_REPLY_HEADER_BYTES;
  if (len > cap || read_exact(fd, body, len) != 0) return -1;
  *body_len = len;
  *status = (int32_t)store_wire_get_u32(head + 12);
  return 0;
}

static int send_frame(int fd, uint8_t op, uint32_t id, const void *body, size_t body_len) {
  uint8_t frame[4 + STORE_WIRE_REQUEST_HEADER_BYTES + 256];
  size_t len = 4 + STORE_WIRE_REQUEST_HEADER_BYTES + body_len;
  store_wire_put_u32(frame, (uint32_t)(len - 4));
  store_wire_put_u16(frame + 4, STORE_WIRE_MAGIC);
  frame[6] = STORE_WIRE_VERSION;
  frame[7] = op;
  store_wire_put_u32(frame + 8, id);
  store_wire_put_u32(frame + 12, 1000);
  memcpy(frame + 16, body, body_len);
  return send(fd, frame, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* A raw client that proves the key (derived once by the caller); -1 on any failure. */
static int auth_connect(int port, const uint8_t key[32]) {
  int fd = raw_connect(port);
  if (fd < 0) return -1;
  uint8_t challenge[64], body[2 * STORE_WIRE_AUTH_BYTES], mac[64];
  size_t len;
  int status;
  memset(body, 0x33, STORE_WIRE_AUTH_BYTES);
  if (read_reply(fd, challenge, sizeof challenge, &len, &status) == 0 &&
      len == STORE_WIRE_AUTH_BYTES) {
    store_net_auth_mac(key, STORE_NET_CLIENT_DOMAIN, challenge, body, body + 32);
    if (send_frame(fd, STORE_WIRE_AUTH, 1, body, sizeof body) == 0 &&
        read_reply(fd, mac, sizeof mac, &len, &status) == 0 && status == STRATA_OK)
      return fd;
  }
  close(fd);
  return -1;
}

typedef struct rank_run {
  const char *addr;
  int rank;
  int status, flag;
  float sum_error;
} rank_run;

/* A rank of the job: rendezvous through the crowded store, allreduce, agree. */
static void *rank_main(void *arg) {
  rank_run *r = arg;
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = r->rank;
  cfg.world_size = RANKS;
  cfg.store_external = 1;
  cfg.timeout_s = 20;
  snprintf(cfg.store_addr, sizeof cfg.store_addr, "%s", r->addr);
  snprintf(cfg.secret, sizeof cfg.secret, "%s", SECRET);
  snprintf(cfg.job_id, sizeof cfg.job_id, "%s", JOB);
  strata_comm *comm = NULL;
  r->status = strata_comm_init(&cfg, &comm);
  if (r->status != STRATA_OK) return NULL;
  float *data = malloc(COUNT * sizeof *data);
  for (int i = 0; i < COUNT; i++) data[i] = (float)(r->rank + 1) * (float)(i % 7);
  r->status = strata_allreduce(comm, data, data, COUNT, STRATA_F32, STRATA_SUM);
  for (int i = 0; i < COUNT && r->status == STRATA_OK; i++) {
    float want = (float)(RANKS * (RANKS + 1) / 2) * (float)(i % 7), error = data[i] - want;
    if (error < 0) error = -error;
    if (error > r->sum_error) r->sum_error = error;
  }
  free(data);
  r->flag = 1;
  if (r->status == STRATA_OK) r->status = strata_comm_agree(comm, &r->flag);
  strata_comm_destroy(comm);
  return NULL;
}

static void test_job_in_a_crowd(void) {
  struct rlimit limit;
  getrlimit(RLIMIT_NOFILE, &limit);
  rlim_t need = 2 * (AUTHENTICATED + STRANGERS) + 512;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < need) {
    printf("skipped: the hard descriptor limit %llu is below the %llu this test holds\n",
           (unsigned long long)limit.rlim_max, (unsigned long long)need);
    exit(77);
  }
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);

  strata_store_server *srv = NULL;
  CHECK_STATUS(strata_store_server_start_auth("127.0.0.1:0", SECRET, JOB, &srv), STRATA_OK);
  if (!srv) return;
  int port = strata_store_server_port(srv);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  uint8_t key[32];
  CHECK_STATUS(store_net_auth_key(SECRET, JOB, key), STRATA_OK);

  double t0 = strata_test_now_s();
  int *clients = malloc(AUTHENTICATED * sizeof *clients),
      *strangers = malloc(STRANGERS * sizeof *strangers);
  int nclients = 0, nstrangers = 0;
  for (int i = 0; i < AUTHENTICATED; i++)
    if ((clients[nclients] = auth_connect(port, key)) >= 0) nclients++;
  for (int i = 0; i < STRANGERS; i++)
    if ((strangers[nstrangers] = raw_connect(port)) >= 0) nstrangers++;
  double crowd_s = strata_test_now_s() - t0;
  printf("%d authenticated clients and %d idle strangers connected in %.2f s\n", nclients,
         nstrangers, crowd_s);
  CHECK(nclients == AUTHENTICATED, "only %d of %d clients proved the key", nclients, AUTHENTICATED);
  CHECK(nstrangers == STRANGERS, "only %d of %d strangers connected", nstrangers, STRANGERS);

  /* the job, while the crowd is held (strangers are dropped 5 s after connecting) */
  t0 = strata_test_now_s();
  pthread_t threads[RANKS];
  rank_run runs[RANKS];
  for (int i = 0; i < RANKS; i++) {
    runs[i] = (rank_run){.addr = addr, .rank = i};
    pthread_create(&threads[i], NULL, rank_main, &runs[i]);
  }
  for (int i = 0; i < RANKS; i++) pthread_join(threads[i], NULL);
  double job_s = strata_test_now_s() - t0;
  printf("a %d-rank job: init, allreduce and agree in %.2f s among %d connections\n", RANKS, job_s,
         nclients + nstrangers);
  for (int i = 0; i < RANKS; i++) {
    CHECK_STATUS(runs[i].status, STRATA_OK);
    CHECK(runs[i].flag == 1, "rank %d agreed on %d", i, runs[i].flag);
    CHECK(runs[i].sum_error == 0, "rank %d: allreduce off by %g", i, (double)runs[i].sum_error);
  }

  /* every authenticated client is still served: all ask at once, then all read */
  uint8_t body[4 + 16 + 8];
  store_wire_put_u32(body, 16);
  memcpy(body + 4, "crowd/adds/total", 16);
  store_wire_put_u64(body + 20, 1);
  int sent = 0, answered = 0;
  for (int i = 0; i < nclients; i++)
    sent += send_frame(clients[i], STORE_WIRE_ADD, 2, body, sizeof body) == 0;
  int64_t highest = 0;
  for (int i = 0; i < nclients; i++) {
    uint8_t reply[16];
    size_t len;
    int status;
    if (read_reply(clients[i], reply, sizeof reply, &len, &status) == 0 && status == STRATA_OK &&
        len == 8) {
      answered++;
      int64_t value = (int64_t)store_wire_get_u64(reply);
      if (value > highest) highest = value;
    }
  }
  printf("%d of %d held clients answered an ADD sent by all at once (the counter reached %lld)\n",
         answered, nclients, (long long)highest);
  CHECK(sent == nclients && answered == nclients, "%d sent, %d answered of %d", sent, answered,
        nclients);
  CHECK(highest == nclients, "the counter reached %lld, want %d", (long long)highest, nclients);
  for (int i = 0; i < nclients; i++) close(clients[i]);
  for (int i = 0; i < nstrangers; i++) close(strangers[i]);
  free(clients);
  free(strangers);
  strata_store_server_stop(srv);
}

/* ---- the counter calls ---- */

typedef struct waiter_run {
  strata_store *store;
  int status;
  int64_t value;
  double waited_s;
} waiter_run;

static void *count_waiter(void *arg) {
  waiter_run *w = arg;
  double t0 = strata_test_now_s();
  w->status = strata_store_wait_count(w->store, "counter/progress", 3, &w->value, 10);
  w->waited_s = strata_test_now_s() - t0;
  return NULL;
}

static void check_counter_calls(strata_store *a, strata_store *b, const char *what) {
  int64_t value = -1;
  CHECK_STATUS(strata_store_wait_count(a, "counter/progress", 1, &value, 0.05), STRATA_ERR_TIMEOUT);
  waiter_run w = {.store = b};
  pthread_t thread;
  pthread_create(&thread, NULL, count_waiter, &w);
  for (int i = 0; i < 3; i++) {
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    nanosleep(&tick, NULL);
    CHECK_STATUS(strata_store_add(a, "counter/progress", 1, NULL), STRATA_OK);
  }
  pthread_join(thread, NULL);
  CHECK_STATUS(w.status, STRATA_OK);
  CHECK(w.value == 3, "%s: the wait ended at %lld, want 3", what, (long long)w.value);
  CHECK(w.waited_s >= 0.04, "%s: the wait ended after %.3f s, before the third add", what,
        w.waited_s);
  CHECK_STATUS(strata_store_add(a, "counter/in/0", 5, NULL), STRATA_OK);
  CHECK_STATUS(strata_store_add(a, "counter/in/2", -7, NULL), STRATA_OK);
  const char *keys[] = {"counter/in/0", "counter/in/1", "counter/in/2"};
  int64_t values[3] = {-1, -1, -1};
  CHECK_STATUS(strata_store_read_counts(b, keys, 3, values), STRATA_OK);
  CHECK(values[0] == 5 && values[1] == 0 && values[2] == -7, "%s: read %lld %lld %lld", what,
        (long long)values[0], (long long)values[1], (long long)values[2]);
  /* a key that holds something other than a counter */
  CHECK_STATUS(strata_store_set(a, "counter/text", "abc", 3), STRATA_OK);
  const char *text_key[] = {"counter/text"};
  if (strcmp(what, "callbacks") != 0) { /* the callbacks' add decides for itself */
    CHECK_STATUS(strata_store_read_counts(b, text_key, 1, values), STRATA_ERR_INVALID_ARG);
    CHECK_STATUS(strata_store_wait_count(b, "counter/text", 1, &value, 1), STRATA_ERR_INVALID_ARG);
  }
  printf("counter calls (%s): ok\n", what);
}

/* A caller's store over strata's server: only set, get and add, as a binding's would be. */
static int ops_set(void *ctx, const char *key, const void *value, size_t len) {
  return strata_store_set(ctx, key, value, len);
}
static int ops_get(void *ctx, const char *key, void **value, size_t *len, double timeout_s) {
  return strata_store_get(ctx, key, value, len, timeout_s);
}
static int ops_add(void *ctx, const char *key, int64_t delta, int64_t *result) {
  return strata_store_add(ctx, key, delta, result);
}

static void test_counter_calls(void) {
  strata_store_server *srv = NULL;
  CHECK_STATUS(strata_store_server_start("127.0.0.1:0", &srv), STRATA_OK);
  if (!srv) return;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_store_server_port(srv));
  strata_store *a = NULL, *b = NULL, *inner = NULL, *over_ops = NULL;
  CHECK_STATUS(strata_store_connect(addr, 5, &a), STRATA_OK);
  CHECK_STATUS(strata_store_connect(addr, 5, &b), STRATA_OK);
  if (a && b) check_counter_calls(a, b, "server");
  strata_store_server_stop(srv);
  strata_store_close(a);
  strata_store_close(b);

  CHECK_STATUS(strata_store_server_start("127.0.0.1:0", &srv), STRATA_OK);
  if (!srv) return;
  snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_store_server_port(srv));
  CHECK_STATUS(strata_store_connect(addr, 5, &a), STRATA_OK);
  CHECK_STATUS(strata_store_connect(addr, 5, &inner), STRATA_OK);
  strata_store_ops ops = {.context = inner, .set = ops_set, .get = ops_get, .add = ops_add};
  CHECK_STATUS(strata_store_from_ops(&ops, "", &over_ops), STRATA_OK);
  if (a && over_ops) check_counter_calls(a, over_ops, "callbacks");
  strata_store_close(over_ops);
  strata_store_close(inner);
  strata_store_close(a);
  strata_store_server_stop(srv);
}

/* Clients leave while a child of the serving process holds a copy of every socket the server
 * accepted (a launcher forking a rank): each closed connection must leave the epoll set all the
 * same, or epoll keeps reporting the hung-up socket with a pointer to the freed connection (a
 * crash; ASan names the use after free). The child closes its copies of the clients' ends, so
 * the server sees them leave. A client that stays is still answered. */
static void test_clients_leave_while_forked(void) {
  strata_store_server *srv = NULL;
  CHECK_STATUS(strata_store_server_start_auth("127.0.0.1:0", SECRET, JOB, &srv), STRATA_OK);
  if (!srv) return;
  int port = strata_store_server_port(srv);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  uint8_t key[32];
  CHECK_STATUS(store_net_auth_key(SECRET, JOB, key), STRATA_OK);
  enum { LEAVING = 8, ROUNDS = 200 };
  int leaving[LEAVING];
  for (int i = 0; i < LEAVING; i++) /* authenticated: the server has accepted each */
    CHECK((leaving[i] = auth_connect(port, key)) >= 0, "client %d", i);
  strata_store *stays = NULL;
  CHECK_STATUS(strata_store_connect_auth(addr, SECRET, JOB, 5, &stays), STRATA_OK);
  int parent_alive[2] = {-1, -1};
  CHECK(pipe(parent_alive) == 0, "pipe");
  pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < LEAVING; i++) close(leaving[i]);
    close(parent_alive[1]);
    char byte;
    while (read(parent_alive[0], &byte, 1) < 0) { /* holds its copies until the test is done */
    }
    _exit(0);
  }
  CHECK(child > 0, "fork");
  close(parent_alive[0]);
  for (int i = 0; i < LEAVING; i++) close(leaving[i]);
  int64_t value = 0;
  for (int i = 0; stays && i < ROUNDS; i++) /* the server goes round its loop: the closes settle */
    CHECK_STATUS(strata_store_add(stays, "stays", 1, &value), STRATA_OK);
  CHECK(value == ROUNDS, "the client that stayed counted %lld, want %d", (long long)value, ROUNDS);
  close(parent_alive[1]); /* the child ends */
  if (child > 0) waitpid(child, NULL, 0);
  strata_store_close(stays);
  strata_store_server_stop(srv);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  signal(SIGPIPE, SIG_IGN);
  test_counter_calls();
  test_clients_leave_while_forked();
  test_job_in_a_crowd();
  printf("test_store_crowd: %s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
