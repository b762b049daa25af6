// SPDX-License-Identifier: Apache-2.0
/*
 * test_boot_store.c — the rendezvous store: set/get/wait/add, blocking gets answered by a later
 * set, prompt timeouts, 64 concurrent client threads and 1100 simultaneous connections, a server
 * that dies under a waiting client, late servers, malformed frames and bad addresses.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "strata.h"
#include "helpers/check.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void addr_of(const strata_store_server *srv, char *addr, size_t len) {
  snprintf(addr, len, "127.0.0.1:%d", strata_store_server_port(srv));
}

/* Reads key as a NUL-terminated string into out; returns the status. */
static int get_text(strata_store *s, const char *key, char *out, size_t out_len, double t) {
  void *value = NULL;
  size_t len = 0;
  int status = strata_store_get(s, key, &value, &len, t);
  out[0] = '\0';
  if (status == STRATA_OK) snprintf(out, out_len, "%.*s", (int)len, (const char *)value);
  free(value);
  return status;
}

static void test_basic(const char *addr) {
  strata_store *s;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  if (failures) return;
  char text[64];
  CHECK_STATUS(strata_store_set(s, "a", "hello", 5), STRATA_OK);
  CHECK_STATUS(get_text(s, "a", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "hello"));
  CHECK_STATUS(strata_store_set(s, "a", "bye", 3), STRATA_OK); /* overwrite */
  CHECK_STATUS(get_text(s, "a", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "bye"));
  void *value = NULL;
  size_t len = 99;
  CHECK_STATUS(strata_store_set(s, "empty", NULL, 0), STRATA_OK);
  CHECK_STATUS(strata_store_get(s, "empty", &value, &len, 1), STRATA_OK);
  CHECK(value != NULL && len == 0);
  free(value);
  int64_t sum = 0;
  CHECK_STATUS(strata_store_add(s, "n", 5, &sum), STRATA_OK);
  CHECK(sum == 5);
  CHECK_STATUS(strata_store_add(s, "n", -7, &sum), STRATA_OK);
  CHECK(sum == -2);
  CHECK_STATUS(get_text(s, "n", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "-2"));
  CHECK_STATUS(strata_store_add(s, "a", 1, &sum), STRATA_ERR_INVALID_ARG); /* "bye" */
  const char *keys[] = {"a", "n", "empty"};
  CHECK_STATUS(strata_store_wait(s, keys, 3, 1), STRATA_OK);
  CHECK_STATUS(strata_store_set(s, "", "x", 1), STRATA_ERR_INVALID_ARG);
  char host[64];
  CHECK_STATUS(strata_store_local_host(s, host, sizeof host), STRATA_OK);
  CHECK(!strcmp(host, "127.0.0.1"));
  /* a binary value survives unchanged */
  unsigned char bytes[300];
  for (int i = 0; i < 300; i++) bytes[i] = (unsigned char)i;
  CHECK_STATUS(strata_store_set(s, "bin", bytes, sizeof bytes), STRATA_OK);
  CHECK_STATUS(strata_store_get(s, "bin", &value, &len, 1), STRATA_OK);
  CHECK(len == sizeof bytes && value && !memcmp(value, bytes, len));
  free(value);
  strata_store_close(s);
}

static void test_timeouts(const char *addr) {
  strata_store *s;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  if (failures) return;
  void *value = NULL;
  size_t len;
  double t0 = now_s();
  CHECK_STATUS(strata_store_get(s, "missing", &value, &len, 0.3), STRATA_ERR_TIMEOUT);
  double dt = now_s() - t0;
  CHECK(dt >= 0.25 && dt < 2.0);
  CHECK(value == NULL);
  t0 = now_s();
  const char *keys[] = {"a", "missing-too"};
  CHECK_STATUS(strata_store_wait(s, keys, 2, 0.2), STRATA_ERR_TIMEOUT);
  dt = now_s() - t0;
  CHECK(dt >= 0.15 && dt < 2.0);
  CHECK_STATUS(strata_store_get(s, "missing", &value, &len, 0), STRATA_ERR_TIMEOUT);
  /* the connection still works after timeouts; late replies are discarded */
  char text[16];
  CHECK_STATUS(strata_store_set(s, "after", "ok", 2), STRATA_OK);
  CHECK_STATUS(get_text(s, "after", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "ok"));
  strata_store_close(s);
}

typedef struct setter_arg {
  const char *addr;
  const char *key;
  int delay_ms;
} setter_arg;

static void *set_later(void *p) {
  setter_arg *a = p;
  strata_store *s;
  sleep_ms(a->delay_ms);
  if (strata_store_connect(a->addr, 5, &s) != STRATA_OK) return NULL;
  strata_store_set(s, a->key, "late", 4);
  strata_store_close(s);
  return NULL;
}

static void test_blocking_get(const char *addr) {
  strata_store *s;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  if (failures) return;
  setter_arg arg = {addr, "later", 150};
  pthread_t thread;
  pthread_create(&thread, NULL, set_later, &arg);
  char text[16];
  double t0 = now_s();
  CHECK_STATUS(get_text(s, "later", text, sizeof text, 5), STRATA_OK);
  CHECK(!strcmp(text, "late"));
  CHECK(now_s() - t0 < 2.0);
  pthread_join(thread, NULL);
  strata_store_close(s);
}

enum { NTHREADS = 64 };

typedef struct worker_arg {
  const char *addr;
  int index;
  int ok;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  strata_store *s;
  if (strata_store_connect(a->addr, 10, &s) != STRATA_OK) return NULL;
  char key[32], want[32], text[32];
  snprintf(key, sizeof key, "rank/%d", a->index);
  snprintf(want, sizeof want, "value-%d", a->index);
  int64_t joined;
  int ok = strata_store_set(s, key, want, strlen(want)) == STRATA_OK &&
           strata_store_add(s, "joined", 1, &joined) == STRATA_OK && joined >= 1 &&
           joined <= NTHREADS;
  char names[NTHREADS][32];
  const char *keys[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    snprintf(names[i], sizeof names[i], "rank/%d", i);
    keys[i] = names[i];
  }
  ok = ok && strata_store_wait(s, keys, NTHREADS, 10) == STRATA_OK;
  int next = (a->index + 1) % NTHREADS;
  snprintf(want, sizeof want, "value-%d", next);
  ok = ok && get_text(s, names[next], text, sizeof text, 10) == STRATA_OK && !strcmp(text, want);
  a->ok = ok;
  strata_store_close(s);
  return NULL;
}

static void test_concurrent_threads(const char *addr) {
  pthread_t threads[NTHREADS];
  worker_arg args[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i] = (worker_arg){addr, i, 0};
    pthread_create(&threads[i], NULL, worker, &args[i]);
  }
  int ok = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(threads[i], NULL);
    ok += args[i].ok;
  }
  CHECK(ok == NTHREADS);
}

/* More simultaneous connections than the classic 1024-descriptor limit. */
static void test_many_connections(const char *addr) {
  enum { N = 1100 };
  strata_store **clients = calloc(N, sizeof *clients);
  int connected = 0, added = 0;
  for (int i = 0; i < N; i++)
    if (strata_store_connect(addr, 10, &clients[i]) == STRATA_OK) connected++;
  CHECK(connected == N);
  int64_t total = 0;
  for (int i = 0; i < N; i++)
    if (clients[i] && strata_store_add(clients[i], "many", 1, &total) == STRATA_OK) added++;
  CHECK(added == N);
  CHECK(total == N);
  for (int i = 0; i < N; i++) strata_store_close(clients[i]);
  free(clients);
}

typedef struct getter_arg {
  strata_store *store;
  int status;
  double seconds;
} getter_arg;

static void *get_forever(void *p) {
  getter_arg *a = p;
  void *value = NULL;
  size_t len;
  double t0 = now_s();
  a->status = strata_store_get(a->store, "never", &value, &len, 20);
  a->seconds = now_s() - t0;
  free(value);
  return NULL;
}

static void test_server_death(void) {
  strata_store_server *srv;
  CHECK_STATUS(strata_store_server_start("127.0.0.1:0", &srv), STRATA_OK);
  if (failures) return;
  char addr[64];
  addr_of(srv, addr, sizeof addr);
  strata_store *s;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  getter_arg arg = {s, 0, 0};
  pthread_t thread;
  pthread_create(&thread, NULL, get_forever, &arg);
  sleep_ms(200);
  strata_store_server_stop(srv);
  pthread_join(thread, NULL);
  CHECK_STATUS(arg.status, STRATA_ERR_PEER_LOST);
  CHECK(arg.seconds < 3.0);
  CHECK_STATUS(strata_store_set(s, "k", "v", 1), STRATA_ERR_PEER_LOST);
  strata_store_close(s);
  /* nobody listens there now: connecting times out promptly */
  double t0 = now_s();
  CHECK_STATUS(strata_store_connect(addr, 0.3, &s), STRATA_ERR_TIMEOUT);
  CHECK(now_s() - t0 < 2.5);
}

typedef struct late_server_arg {
  char addr[64];
  strata_store_server *srv;
} late_server_arg;

static void *start_later(void *p) {
  late_server_arg *a = p;
  sleep_ms(300);
  strata_store_server_start(a->addr, &a->srv);
  return NULL;
}

static void test_late_server(void) {
  strata_store_server *probe;
  CHECK_STATUS(strata_store_server_start("127.0.0.1:0", &probe), STRATA_OK);
  if (failures) return;
  late_server_arg arg = {.srv = NULL};
  addr_of(probe, arg.addr, sizeof arg.addr);
  strata_store_server_stop(probe); /* the port is free again */
  pthread_t thread;
  pthread_create(&thread, NULL, start_later, &arg);
  strata_store *s = NULL;
  CHECK_STATUS(strata_store_connect(arg.addr, 10, &s), STRATA_OK);
  pthread_join(thread, NULL);
  CHECK(arg.srv != NULL);
  if (s) CHECK_STATUS(strata_store_set(s, "k", "v", 1), STRATA_OK);
  strata_store_close(s);
  strata_store_server_stop(arg.srv);
}

/* A client that sends garbage is dropped; the others carry on. */
static void test_garbage(const char *addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
  CHECK(connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0);
  const char junk[] = "\x00\x00\x00\x10GET / HTTP/1.1\r\n\r\n";
  CHECK(write(fd, junk, sizeof junk - 1) > 0);
  /* the server's challenge (store_wire.h: AUTH), then the close */
  char buf[16];
  size_t total = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) total += (size_t)n;
  CHECK(n == 0 && total == 4 + 12 + 32);
  close(fd);
  strata_store *s;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  if (s) CHECK_STATUS(strata_store_set(s, "still", "up", 2), STRATA_OK);
  strata_store_close(s);
}

static void test_addresses(int port) {
  char host[64], err[256], addr[64];
  int p;
  CHECK_STATUS(strata_store_addr_parse("node1:29500", 0, host, sizeof host, &p, err, sizeof err),
               STRATA_OK);
  CHECK(!strcmp(host, "node1") && p == 29500);
  CHECK_STATUS(strata_store_addr_parse("[fd00::2]:80", 0, host, sizeof host, &p, err, sizeof err),
               STRATA_OK);
  CHECK(!strcmp(host, "fd00::2") && p == 80);
  CHECK_STATUS(strata_store_addr_parse(":0", 1, host, sizeof host, &p, NULL, 0), STRATA_OK);
  CHECK(host[0] == '\0' && p == 0);
  const char *bad[] = {"node1",      "node1:",      "node1:abc", "node1:70000", ":29500",
                       "fd00::2:80", "[fd00::2]80", "no de:1",   "node1:-1",    ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    int status = strata_store_addr_parse(bad[i], 0, host, sizeof host, &p, err, sizeof err);
    if (status != STRATA_ERR_INVALID_ARG || !strstr(err, "bad address"))
      fprintf(stderr, "address '%s' gave %s '%s'\n", bad[i], strata_err_name(status), err);
    CHECK(status == STRATA_ERR_INVALID_ARG && strstr(err, "bad address"));
  }
  strata_store *s = NULL;
  CHECK_STATUS(strata_store_connect("localhost", 1, &s), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_store_connect("127.0.0.1:0", 1, &s), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_store_connect("no-such-host.invalid:1234", 1, &s), STRATA_ERR_NOT_FOUND);
  CHECK(s == NULL);
  strata_store_server *srv = NULL;
  CHECK_STATUS(strata_store_server_start("nonsense", &srv), STRATA_ERR_INVALID_ARG);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  CHECK_STATUS(strata_store_server_start(addr, &srv), STRATA_ERR_SYSTEM); /* in use */
  CHECK(srv == NULL);
  /* a host name resolves */
  snprintf(addr, sizeof addr, "localhost:%d", port);
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  strata_store_close(s);
}

/* Reached through a non-loopback address, the local host is that address (what peers would
 * use), not 127.0.0.1. Skipped on a machine with only loopback. */
static void test_local_host_interface(void) {
  struct ifaddrs *list = NULL, *ifa;
  char ip[64] = "";
  if (getifaddrs(&list) != 0) return;
  for (ifa = list; ifa && !ip[0]; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if ((ifa->ifa_flags & IFF_LOOPBACK) || !(ifa->ifa_flags & IFF_UP)) continue;
    inet_ntop(AF_INET, &((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, ip, sizeof ip);
  }
  freeifaddrs(list);
  if (!ip[0]) {
    printf("test_boot_store: no non-loopback IPv4 interface, local-host check skipped\n");
    return;
  }
  strata_store_server *srv;
  CHECK_STATUS(strata_store_server_start("0.0.0.0:0", &srv), STRATA_OK);
  if (failures) return;
  char addr[96], host[64] = "";
  snprintf(addr, sizeof addr, "%s:%d", ip, strata_store_server_port(srv));
  strata_store *s = NULL;
  CHECK_STATUS(strata_store_connect(addr, 5, &s), STRATA_OK);
  if (s) CHECK_STATUS(strata_store_local_host(s, host, sizeof host), STRATA_OK);
  if (strcmp(host, ip)) fprintf(stderr, "local host '%s', expected '%s'\n", host, ip);
  CHECK(!strcmp(host, ip));
  strata_store_close(s);
  strata_store_server_stop(srv);
}

int main(void) {
  alarm(120);
  strata_store_server *srv;
  CHECK_STATUS(strata_store_server_start("127.0.0.1:0", &srv), STRATA_OK);
  if (failures) return 1;
  char addr[64];
  addr_of(srv, addr, sizeof addr);
  CHECK(strata_store_server_port(srv) > 0);
  test_basic(addr);
  test_timeouts(addr);
  test_blocking_get(addr);
  test_concurrent_threads(addr);
  test_many_connections(addr);
  test_garbage(addr, strata_store_server_port(srv));
  test_addresses(strata_store_server_port(srv));
  strata_store_server_stop(srv);
  test_server_death();
  test_late_server();
  test_local_host_interface();
  if (failures) {
    fprintf(stderr, "test_boot_store: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_boot_store: ok\n");
  return 0;
}
