// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_handshake.c — who may join: every TCP connection runs the authenticated handshake.
 *  - a rank with the wrong secret: BOTH sides fail with STRATA_ERR_AUTH and say "secret";
 *    with 3 ranks, the innocent third rank fails the same way, not with a vaguer error;
 *  - a rank of another job (same address): it fails with STRATA_ERR_JOB at once; the rank it
 *    dialed drops the connection (it proved nothing) and, the other job being invisible in its
 *    store, times out naming the dropped connection's reason;
 *  - a rank speaking another protocol version: STRATA_ERR_VERSION on both sides;
 *  - a client that sends garbage is refused at once (it reads a REJECT, then EOF) and the real
 *    peer still joins;
 *  - a stranger that sends one record to a listening port during start-up — a HELLO with another
 *    version, job id or world size, a REJECT, a plausible HELLO followed by a bad AUTH — is
 *    dropped and the job starts; and the responder never sends a MAC (AUTH) to it;
 *  - a replayed HELLO (one a real initiator sent, sent again) is refused as a replay, not as a
 *    wrong secret;
 *  - STRATA_TIMEOUT beyond what an int of milliseconds holds does not make the wait spin;
 *  - a client that connects and says nothing does not hang the open: alone it ends in
 *    STRATA_ERR_TIMEOUT at the deadline, next to a real peer it is simply ignored.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "helpers/net_fixture.h"
#include "net/handshake.h"
#include "net/tcp.h"
#include "net/wire.h"
#include "helpers/check.h"

typedef enum { BAD_SECRET, BAD_JOB, BAD_VERSION } bad_kind;

typedef struct refuse_case {
  bad_kind kind;
  int nranks;
} refuse_case;

static const char *const KIND_NAMES[] = {"wrong secret", "wrong job id", "wrong version"};
static const char *const KIND_WORDS[] = {"secret", "job", "version"};
static const int KIND_STATUS[] = {STRATA_ERR_AUTH, STRATA_ERR_JOB, STRATA_ERR_VERSION};

/* Copy rank 0's published address under another job's key, so a rank of that job dials it. */
static int alias_address(strata_store *store, const char *from_job, const char *to_job) {
  char key[128];
  snprintf(key, sizeof key, "%s/tcp/0/addr/0", from_job);
  void *value = NULL;
  size_t len = 0;
  int status = strata_store_get(store, key, &value, &len, 10);
  if (status != STRATA_OK) return status;
  snprintf(key, sizeof key, "%s/tcp/0/addr/0", to_job);
  status = strata_store_set(store, key, value, len);
  free(value);
  return status;
}

static int refuse_body(const strata_net_fixture_rank *r) {
  const refuse_case *c = r->arg;
  strata_config cfg;
  strata_net_fixture_config(r, c->nranks, &cfg);
  cfg.tcp_streams = 2;
  cfg.timeout_s = c->kind == BAD_JOB ? 2 : 5;
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  if (r->rank == 1) {
    if (c->kind == BAD_SECRET) snprintf(cfg.secret, sizeof cfg.secret, "not-the-secret");
    if (c->kind == BAD_VERSION) strata_tcp_set_announced_version_for_test(STRATA_WIRE_VERSION + 1);
    if (c->kind == BAD_JOB) {
      snprintf(cfg.job_id, sizeof cfg.job_id, "another-job");
      CHECK_OR_RETURN(alias_address(store, "netfix", "another-job") == STRATA_OK, "alias address");
    }
  }
  strata_transport *t = NULL;
  char err[512] = "";
  double start = strata_now_s();
  int status = strata_tcp_open(&cfg, r->rank, c->nranks, store, &t, err, sizeof err);
  double took = strata_now_s() - start;
  printf("  rank %d: %s: %s\n", r->rank, strata_err_name(status), err);
  if (t) t->ops->destroy(t);
  strata_store_close(store);
  /* rank 0 of a job cannot see another job's published failure: it waits out its timeout */
  int expected = c->kind == BAD_JOB && r->rank == 0 ? STRATA_ERR_TIMEOUT : KIND_STATUS[c->kind];
  CHECK_OR_RETURN(status == expected, "got %s, want %s", strata_err_name(status),
                  strata_err_name(expected));
  CHECK_OR_RETURN(strstr(err, KIND_WORDS[c->kind]) != NULL, "the message does not say \"%s\"",
                  KIND_WORDS[c->kind]);
  if (expected != STRATA_ERR_TIMEOUT)
    CHECK_OR_RETURN(took < 3.0, "took %.2f s: a refusal must not wait for the timeout", took);
  return 0;
}

/* ---- raw clients ---- */

static int raw_connect(strata_store *store) {
  void *value = NULL;
  size_t len = 0;
  if (strata_store_get(store, "netfix/tcp/0/addr/0", &value, &len, 10) != STRATA_OK) return -1;
  char text[128], *colon;
  snprintf(text, sizeof text, "%.*s", (int)len, (char *)value);
  free(value);
  colon = strrchr(text, ':');
  if (!colon) return -1;
  *colon = '\0';
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(text, colon + 1, &hints, &ai) != 0) return -1;
  int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) close(fd), fd = -1;
  freeaddrinfo(ai);
  return fd;
}

/* Read until EOF or reset; returns bytes read, or -1 if still open after timeout_s. */
static ssize_t read_until_closed(int fd, unsigned char *buf, size_t cap, double timeout_s) {
  size_t got = 0;
  double deadline = strata_now_s() + timeout_s;
  for (;;) {
    int ms = (int)((deadline - strata_now_s()) * 1000);
    if (ms <= 0) return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, ms) <= 0) continue;
    unsigned char sink[256];
    ssize_t n = recv(fd, got < cap ? buf + got : sink, got < cap ? cap - got : sizeof sink, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return (ssize_t)got;
    if (n > 0 && got < cap) got += (size_t)n;
  }
}

static int open_rank(const strata_net_fixture_rank *r, strata_store *store, double timeout_s,
                     int *status_out, double *took) {
  strata_config cfg;
  strata_net_fixture_config(r, 2, &cfg);
  cfg.timeout_s = timeout_s;
  strata_transport *t = NULL;
  char err[512] = "";
  double start = strata_now_s();
  *status_out = strata_tcp_open(&cfg, r->rank, 2, store, &t, err, sizeof err);
  *took = strata_now_s() - start;
  printf("  rank %d: %s after %.2f s%s%s\n", r->rank, strata_err_name(*status_out), *took,
         err[0] ? ": " : "", err);
  if (t) t->ops->destroy(t);
  return 0;
}

/* process 2 sends garbage to rank 0 before rank 1 starts; everyone else must be fine */
static int garbage_body(const strata_net_fixture_rank *r) {
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  if (r->rank == 2) {
    int fd = raw_connect(store);
    CHECK_OR_RETURN(fd >= 0, "cannot connect to rank 0");
    char junk[200];
    memset(junk, 'x', sizeof junk);
    memcpy(junk, "GET / HTTP/1.1\r\nHost: strata\r\n\r\n", 33);
    CHECK_OR_RETURN(send(fd, junk, sizeof junk, MSG_NOSIGNAL) == (ssize_t)sizeof junk, "send");
    strata_wire_handshake reply[2];
    double start = strata_now_s();
    ssize_t got = read_until_closed(fd, (unsigned char *)reply, sizeof reply, 3);
    double took = strata_now_s() - start;
    close(fd);
    strata_store_set(store, "garbage/sent", "1", 1);
    CHECK_OR_RETURN(got >= 0, "the garbage connection was not closed within 3 s");
    CHECK_OR_RETURN(took < 1.0, "closing the garbage connection took %.2f s", took);
    /* the responder speaks only to a HELLO: garbage gets a REJECT(protocol) and nothing else */
    CHECK_OR_RETURN(got == (ssize_t)sizeof reply[0], "read %zd bytes, want one REJECT", got);
    strata_wire_handshake_decode(&reply[0]);
    CHECK_OR_RETURN(
        memcmp(reply[0].magic, STRATA_WIRE_MAGIC, 4) == 0 && reply[0].kind == STRATA_WIRE_REJECT &&
            reply[0].reason == STRATA_WIRE_REJECT_PROTOCOL,
        "the record is not REJECT(protocol): kind %u reason %u", reply[0].kind, reply[0].reason);
    strata_store_close(store);
    return 0;
  }
  if (r->rank == 1) {
    void *v = NULL;
    size_t len;
    CHECK_OR_RETURN(strata_store_get(store, "garbage/sent", &v, &len, 10) == STRATA_OK, "wait");
    free(v);
  }
  int status;
  double took;
  open_rank(r, store, 10, &status, &took);
  strata_store_close(store);
  CHECK_OR_RETURN(status == STRATA_OK, "open failed after a garbage connection: %s",
                  strata_err_name(status));
  return 0;
}

/* ---- a stranger's one record on a listening port ---- */

typedef enum {
  STRANGE_VERSION,
  STRANGE_JOB,
  STRANGE_WORLD,
  STRANGE_REJECT,
  STRANGE_BAD_AUTH
} strange_kind;
static const char *const STRANGE_NAMES[] = {"a HELLO of another version", "a HELLO of another job",
                                            "a HELLO of another world size", "a REJECT",
                                            "a plausible HELLO, then a bad AUTH"};

/* A record as rank 1 of job "netfix" (2 ranks, the fixture's streams) would send it. */
static strata_wire_handshake stranger_record(const strata_config *cfg, uint32_t kind) {
  strata_wire_handshake h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, STRATA_WIRE_MAGIC, 4);
  h.version = STRATA_WIRE_VERSION;
  h.kind = kind;
  h.rank = 1;
  h.nranks = 2;
  h.streams = (uint32_t)cfg->tcp_streams;
  h.stream = 0;
  snprintf(h.job_id, sizeof h.job_id, "%s", cfg->job_id);
  for (size_t i = 0; i < sizeof h.nonce; i++) h.nonce[i] = (uint8_t)(9 + i);
  return h;
}

/* Process 2 is the stranger: one record (two for the bad AUTH) to rank 0 before rank 1 starts;
 * then ranks 0 and 1 must open as if nothing happened, and the stranger must never have read an
 * AUTH. */
static int strange_body(const strata_net_fixture_rank *r) {
  strange_kind kind = *(const strange_kind *)r->arg;
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  if (r->rank == 2) {
    strata_config cfg;
    strata_net_fixture_config(r, 2, &cfg);
    int fd = raw_connect(store);
    CHECK_OR_RETURN(fd >= 0, "cannot connect to rank 0");
    strata_wire_handshake h = stranger_record(&cfg, STRATA_WIRE_HELLO);
    if (kind == STRANGE_VERSION) h.version = STRATA_WIRE_VERSION + 7;
    if (kind == STRANGE_JOB) snprintf(h.job_id, sizeof h.job_id, "someone-else");
    if (kind == STRANGE_WORLD) h.nranks = 5;
    if (kind == STRANGE_REJECT) h.kind = STRATA_WIRE_REJECT, h.reason = STRATA_WIRE_REJECT_AUTH;
    strata_wire_handshake_encode(&h);
    CHECK_OR_RETURN(send(fd, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h, "send");
    if (kind == STRANGE_BAD_AUTH) {
      h = stranger_record(&cfg, STRATA_WIRE_AUTH);
      memset(h.mac, 0x5a, sizeof h.mac);
      strata_wire_handshake_encode(&h);
      CHECK_OR_RETURN(send(fd, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h, "send");
    }
    strata_wire_handshake reply[4];
    ssize_t got = read_until_closed(fd, (unsigned char *)reply, sizeof reply, 3);
    close(fd);
    strata_store_set(store, "strange/sent", "1", 1);
    strata_store_close(store);
    CHECK_OR_RETURN(got >= 0, "rank 0 did not close the stranger's connection within 3 s");
    for (ssize_t i = 0; i < got / (ssize_t)sizeof reply[0]; i++) {
      strata_wire_handshake_decode(&reply[i]);
      CHECK_OR_RETURN(reply[i].kind == STRATA_WIRE_HELLO || reply[i].kind == STRATA_WIRE_REJECT,
                      "the stranger read a record of kind %u (only HELLO or REJECT may reach it)",
                      reply[i].kind);
      static const uint8_t zero[STRATA_WIRE_MAC_BYTES];
      CHECK_OR_RETURN(memcmp(reply[i].mac, zero, sizeof zero) == 0,
                      "a record to the stranger carried a MAC");
    }
    return 0;
  }
  if (r->rank == 1) {
    void *v = NULL;
    size_t len;
    CHECK_OR_RETURN(strata_store_get(store, "strange/sent", &v, &len, 10) == STRATA_OK, "wait");
    free(v);
  }
  int status;
  double took;
  open_rank(r, store, 10, &status, &took);
  strata_store_close(store);
  CHECK_OR_RETURN(status == STRATA_OK, "the stranger's record broke the open: %s",
                  strata_err_name(status));
  return 0;
}

/* A timeout of a billion seconds (beyond an int of milliseconds) while rank 1 comes a second
 * late: rank 0 waits without spinning (its CPU time stays a fraction of the wait) and opens. */
static int huge_timeout_body(const strata_net_fixture_rank *r) {
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  strata_config cfg;
  strata_net_fixture_config(r, 2, &cfg);
  if (r->rank == 0) cfg.timeout_s = 1e9;
  if (r->rank == 1) usleep(1000 * 1000);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  strata_transport *t = NULL;
  char err[512] = "";
  int status = strata_tcp_open(&cfg, r->rank, 2, store, &t, err, sizeof err);
  getrusage(RUSAGE_SELF, &after);
  if (t) t->ops->destroy(t);
  strata_store_close(store);
  CHECK_OR_RETURN(status == STRATA_OK, "open: %s", err);
  double cpu = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
               (double)(after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
               1e-6 * (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec +
                               after.ru_stime.tv_usec - before.ru_stime.tv_usec);
  if (r->rank == 0) {
    printf("  rank 0 waited about 1 s using %.3f s of CPU\n", cpu);
    CHECK_OR_RETURN(cpu < 0.5, "rank 0 spun: %.3f s of CPU while waiting", cpu);
  }
  return 0;
}

/* process 1 (or 2) connects and says nothing. with_peer: rank 1 also joins. */
static int silent_body(const strata_net_fixture_rank *r) {
  int with_peer = *(const int *)r->arg;
  int silent_proc = with_peer ? 2 : 1;
  strata_store *store = NULL;
  CHECK_OR_RETURN(strata_net_fixture_store(r, &store) == STRATA_OK, "store");
  if (r->rank == silent_proc) {
    int fd = raw_connect(store);
    CHECK_OR_RETURN(fd >= 0, "cannot connect to rank 0");
    strata_store_set(store, "silent/connected", "1", 1);
    unsigned char buf[512];
    read_until_closed(fd, buf, sizeof buf, 4); /* rank 0 may close us; never answer */
    close(fd);
    strata_store_close(store);
    return 0;
  }
  if (r->rank == 1) {
    void *v = NULL;
    size_t len;
    CHECK_OR_RETURN(strata_store_get(store, "silent/connected", &v, &len, 10) == STRATA_OK, "wait");
    free(v);
  }
  int status;
  double took;
  double timeout_s = with_peer ? 5 : 1.5;
  open_rank(r, store, timeout_s, &status, &took);
  strata_store_close(store);
  if (with_peer) {
    CHECK_OR_RETURN(status == STRATA_OK, "a silent connection broke the open: %s",
                    strata_err_name(status));
    CHECK_OR_RETURN(took < 2.0, "the open waited %.2f s for a silent connection", took);
  } else {
    CHECK_OR_RETURN(status == STRATA_ERR_TIMEOUT, "got %s, want STRATA_ERR_TIMEOUT",
                    strata_err_name(status));
    CHECK_OR_RETURN(took > 1.3 && took < 3.0, "timed out after %.2f s, want about 1.5 s", took);
  }
  return 0;
}

/* Drives a handshake until it ends (the peer end is never answered): its status. */
static int run_responder(strata_handshake *hs) {
  for (int i = 0; i < 200; i++) {
    int status = strata_handshake_advance(hs);
    if (status != STRATA_ERR_IN_PROGRESS) return status;
    struct pollfd pfd = {.fd = hs->fd, .events = strata_handshake_events(hs)};
    poll(&pfd, 1, 10);
  }
  strata_handshake_expire(hs);
  return hs->status;
}

/* An initiator's HELLO, captured off its socket, sent again to a responder of the job. */
static int check_replay(void) {
  strata_handshake_params initiator, responder;
  if (strata_handshake_params_init(&initiator, "replayjob", "replay-secret", 1, 2, 1) !=
          STRATA_OK ||
      strata_handshake_params_init(&responder, "replayjob", "replay-secret", 0, 2, 1) != STRATA_OK)
    return 1;
  initiator.version = responder.version = STRATA_WIRE_VERSION;
  snprintf(responder.address, sizeof responder.address, "127.0.0.1:1");
  int first[2], second[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, first) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, second) != 0)
    return 1;
  strata_handshake sender, original, replayed;
  strata_handshake_start(&sender, &initiator, first[0], 0, 0, "127.0.0.1:1");
  strata_handshake_advance(&sender); /* its HELLO goes out */
  uint8_t hello[sizeof(strata_wire_handshake)];
  ssize_t got = recv(first[1], hello, sizeof hello, MSG_PEEK);
  if (got != (ssize_t)sizeof hello) return printf("  no HELLO captured (%zd)\n", got), 1;
  strata_handshake_start(&original, &responder, first[1], -1, -1, NULL);
  int status = strata_handshake_advance(&original); /* the real HELLO: answered */
  int first_ok = status == STRATA_ERR_IN_PROGRESS;
  if (send(second[0], hello, sizeof hello, 0) != (ssize_t)sizeof hello) return 1;
  strata_handshake_start(&replayed, &responder, second[1], -1, -1, NULL);
  status = run_responder(&replayed);
  printf("  the original HELLO %s; the replayed one: %s: %s\n",
         first_ok ? "was answered" : "was refused", strata_err_name(status), replayed.err);
  int ok = first_ok && status != STRATA_OK && strstr(replayed.err, "replayed") &&
           !strstr(replayed.err, "wrong job secret");
  for (int i = 0; i < 2; i++) {
    close(first[i]);
    close(second[i]);
  }
  return ok ? 0 : 1;
}

int main(void) {
  alarm(120);
  int failed = 0;
  printf("a replayed HELLO\n");
  failed += check_replay();
  static const refuse_case cases[] = {
      {BAD_SECRET, 2}, {BAD_SECRET, 3}, {BAD_JOB, 2}, {BAD_VERSION, 2}, {BAD_VERSION, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    printf("%s, %d ranks\n", KIND_NAMES[cases[i].kind], cases[i].nranks);
    fflush(stdout);
    int bad = strata_net_fixture_run(cases[i].nranks, refuse_body, (void *)&cases[i], 20, NULL);
    printf("  %s\n", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  for (int k = STRANGE_VERSION; k <= STRANGE_BAD_AUTH; k++) {
    printf("a stranger sends %s to rank 0, then the real peer joins\n", STRANGE_NAMES[k]);
    fflush(stdout);
    strange_kind kind = (strange_kind)k;
    int bad = strata_net_fixture_run(3, strange_body, &kind, 20, NULL);
    printf("  %s\n", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("a timeout of 1e9 s and a peer a second late\n");
  fflush(stdout);
  int late_bad = strata_net_fixture_run(2, huge_timeout_body, NULL, 20, NULL);
  printf("  %s\n", late_bad ? "FAILED" : "ok");
  failed += late_bad != 0;
  printf("garbage client, then the real peer\n");
  fflush(stdout);
  int bad = strata_net_fixture_run(3, garbage_body, NULL, 20, NULL);
  printf("  %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  for (int with_peer = 0; with_peer <= 1; with_peer++) {
    printf("silent client%s\n", with_peer ? " next to the real peer" : " alone");
    fflush(stdout);
    bad = strata_net_fixture_run(with_peer ? 3 : 2, silent_body, &with_peer, 20, NULL);
    printf("  %s\n", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("%s\n", failed ? "test_net_handshake: FAILED" : "test_net_handshake: all passed");
  return failed ? 1 : 0;
}
