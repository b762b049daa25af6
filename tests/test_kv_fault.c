// SPDX-License-Identifier: Apache-2.0
/*
 * test_kv_fault.c — a KV peer in another process (fork), on each backend: transfers across the
 * process boundary move the right bytes (SHM: the child copies with cross-memory attach into
 * and out of this process); a peer that freezes (SIGSTOP) fails a transfer with
 * STRATA_ERR_TIMEOUT within about the agent's timeout, and a lane call too; a peer that dies
 * (SIGKILL) fails the next one with STRATA_ERR_PEER_LOST at once. Nothing waits past its
 * timeout. `test_kv_fault ucx` runs the same on the UCX backend (77, skipped, without UCX), and
 * then the roles swapped: a writer in another process frozen, then one killed, while its WRITEs'
 * rendezvous are in flight — the target's strata_kv_deregister returns within about the timeout
 * (the receives it pinned the region for are ended) and the region is not written after it.
 * With UCX_TLS=tcp (test_kv_fault_ucx_tcp) a receive must have been in flight at the freeze;
 * over shared memory the target fetches the bytes itself (cma), so one rarely is.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/check.h"
#include "serve/kv_internal.h"
#include "strata.h"
#include "strata_kv.h"

#define SECRET "kv-fault-secret"
#define BYTES (8u << 20)
#define TIMEOUT_S 1.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static strata_kv_agent *make_agent(const char *name, int backend) {
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = name;
  cfg.secret = SECRET;
  cfg.backend = backend;
  cfg.timeout_s = TIMEOUT_S;
  strata_kv_agent *a = NULL;
  if (strata_kv_agent_create(&cfg, &a) != STRATA_OK) return NULL;
  return a;
}

static int echo(void *ctx, const char *from, uint32_t tag, const void *req, size_t len, void *reply,
                size_t cap, size_t *reply_len) {
  (void)ctx, (void)from, (void)tag;
  if (len > cap) return STRATA_ERR_INVALID_ARG;
  memcpy(reply, req, len);
  *reply_len = len;
  return STRATA_OK;
}

/* The child: a decode agent whose region holds i*3 bytes; it sends its blob and waits. */
static void child_main(int backend, int to_parent) {
  strata_kv_agent *a = make_agent("decode", backend);
  if (!a) _exit(2);
  strata_kv_lane_set_handler(a, echo, NULL);
  uint8_t *mem = malloc(BYTES);
  for (size_t i = 0; i < BYTES; i++) mem[i] = (uint8_t)(i * 3);
  uint32_t id;
  void *blob;
  size_t bytes;
  if (strata_kv_register(a, mem, BYTES, &id) || strata_kv_metadata_export(a, &blob, &bytes))
    _exit(2);
  uint64_t len = bytes;
  if (write(to_parent, &len, sizeof len) != sizeof len ||
      write(to_parent, blob, bytes) != (ssize_t)bytes)
    _exit(2);
  for (;;) pause(); /* until killed */
}

static void suite(int backend, const char *label) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    CHECK(!"pipe");
    return;
  }
  pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    child_main(backend, pipefd[1]);
  }
  close(pipefd[1]);
  uint64_t len = 0;
  void *blob = NULL;
  int ok = read(pipefd[0], &len, sizeof len) == sizeof len && len < (1 << 20) &&
           (blob = malloc(len)) && read(pipefd[0], blob, len) == (ssize_t)len;
  close(pipefd[0]);
  strata_kv_agent *a = make_agent("prefill", backend);
  uint8_t *local = calloc(1, BYTES);
  uint32_t local_id;
  int peer = -1;
  if (!ok || !a) {
    CHECK(!"the child published its metadata");
    goto done;
  }
  CHECK_STATUS(strata_kv_register(a, local, BYTES, &local_id), STRATA_OK);
  CHECK_STATUS(strata_kv_peer_load(a, blob, len, &peer), STRATA_OK);
  uint32_t id;
  uint64_t base, bytes;
  CHECK_STATUS(strata_kv_peer_region(a, peer, 0, &id, &base, &bytes), STRATA_OK);
  CHECK(bytes == BYTES);
  /* READ it all, then WRITE half of it back shifted and READ that */
  strata_kv_desc l = {(uint64_t)(uintptr_t)local, BYTES, 0, 0};
  strata_kv_desc r = {base, BYTES, id, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(a, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x), STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  strata_kv_xfer_release(x);
  size_t bad = 0;
  for (size_t i = 0; i < BYTES; i++) bad += local[i] != (uint8_t)(i * 3);
  CHECK(bad == 0, "%s: %zu bytes differ after a READ from another process", label, bad);
  strata_kv_desc wl = {(uint64_t)(uintptr_t)local, BYTES / 2, 0, 0};
  strata_kv_desc wr = {base + BYTES / 2, BYTES / 2, id, 0};
  CHECK_STATUS(strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, &wl, &wr, 1, NULL, 0, &x), STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  strata_kv_xfer_release(x);
  memset(local, 0, BYTES);
  CHECK_STATUS(strata_kv_xfer_post(a, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x), STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  strata_kv_xfer_release(x);
  bad = 0;
  for (size_t i = 0; i < BYTES; i++) bad += local[i] != (uint8_t)((i % (BYTES / 2)) * 3);
  CHECK(bad == 0, "%s: %zu bytes differ after WRITE + READ", label, bad);
  size_t got;
  char reply[8];
  CHECK_STATUS(strata_kv_lane_call(a, peer, 5, "ping", 4, reply, sizeof reply, &got, 0), STRATA_OK);

  /* Frozen: the transfer and the lane give up after about the timeout. */
  kill(child, SIGSTOP);
  int stopped = 0; /* a thread mid-system-call finishes it before stopping: wait for the stop */
  CHECK(waitpid(child, &stopped, WUNTRACED) == child && WIFSTOPPED(stopped));
  double t0 = now_s();
  CHECK_STATUS(strata_kv_xfer_post(a, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x), STRATA_OK);
  int status = strata_kv_xfer_wait(x, 20 * TIMEOUT_S);
  double waited = now_s() - t0;
  CHECK(status == STRATA_ERR_TIMEOUT, "%s: a frozen peer: %s (%s)", label, strata_err_name(status),
        strata_kv_xfer_error(x));
  CHECK(waited < 8 * TIMEOUT_S, "%s: a frozen peer held the transfer %.1f s", label, waited);
  strata_kv_xfer_release(x);
  t0 = now_s();
  CHECK_STATUS(strata_kv_lane_call(a, peer, 5, "ping", 4, reply, sizeof reply, &got, 0),
               STRATA_ERR_TIMEOUT);
  CHECK(now_s() - t0 < 8 * TIMEOUT_S);
  /* The peer is now dead to us; so is a newly posted transfer. */
  status = strata_kv_xfer_post(a, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x);
  CHECK(status == STRATA_ERR_TIMEOUT, "%s: posting to a peer that timed out: %s", label,
        strata_err_name(status));
  if (status == STRATA_OK) strata_kv_xfer_release(x);
  CHECK_STATUS(strata_kv_peer_forget(a, peer), STRATA_OK);

  /* Killed: a fresh agent loading its blob cannot reach it. */
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  child = -1;
  t0 = now_s();
  status = strata_kv_peer_load(a, blob, len, &peer);
  CHECK(status == STRATA_ERR_PEER_LOST, "%s: loading a dead peer: %s", label,
        strata_err_name(status));
  CHECK(now_s() - t0 < 8 * TIMEOUT_S);
done:
  if (child > 0) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
  }
  strata_kv_agent_destroy(a);
  free(local);
  free(blob);
  printf("%s: %s\n", label, failures ? "FAILED" : "ok");
}

/* A peer that dies mid-transfer: the transfer fails with PEER_LOST (or TIMEOUT), promptly. */
static void killed_mid_transfer(int backend, const char *label) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    CHECK(!"pipe");
    return;
  }
  pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    child_main(backend, pipefd[1]);
  }
  close(pipefd[1]);
  uint64_t len = 0;
  void *blob = NULL;
  int ok = read(pipefd[0], &len, sizeof len) == sizeof len && len < (1 << 20) &&
           (blob = malloc(len)) && read(pipefd[0], blob, len) == (ssize_t)len;
  close(pipefd[0]);
  strata_kv_agent *a = make_agent("prefill", backend);
  uint8_t *local = calloc(1, BYTES);
  uint32_t local_id;
  int peer;
  if (ok && a && strata_kv_register(a, local, BYTES, &local_id) == STRATA_OK &&
      strata_kv_peer_load(a, blob, len, &peer) == STRATA_OK) {
    uint32_t id;
    uint64_t base, bytes;
    strata_kv_peer_region(a, peer, 0, &id, &base, &bytes);
    /* many small slices' worth: 64 reads of the region back to back */
    strata_kv_desc l[64], r[64];
    for (int i = 0; i < 64; i++) {
      l[i] = (strata_kv_desc){(uint64_t)(uintptr_t)local, BYTES, 0, 0};
      r[i] = (strata_kv_desc){base, BYTES, id, 0};
    }
    strata_kv_xfer *x;
    CHECK_STATUS(strata_kv_xfer_post(a, STRATA_KV_READ, peer, l, r, 64, NULL, 0, &x), STRATA_OK);
    kill(child, SIGKILL);
    double t0 = now_s();
    int status = strata_kv_xfer_wait(x, 20 * TIMEOUT_S);
    CHECK(status == STRATA_ERR_PEER_LOST || status == STRATA_ERR_TIMEOUT || status == STRATA_OK,
          "%s: killed mid-transfer: %s", label, strata_err_name(status));
    CHECK(now_s() - t0 < 8 * TIMEOUT_S, "%s: waited %.1f s", label, now_s() - t0);
    strata_kv_xfer_release(x);
  } else {
    CHECK(!"set up");
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  strata_kv_agent_destroy(a);
  free(local);
  free(blob);
  printf("%s killed mid-transfer: %s\n", label, failures ? "FAILED" : "ok");
}

/* The writer: loads the target's blob from the pipe and WRITEs 0x5a over its region, again
 * and again, until killed. */
static void writer_main(int backend, int from_parent) {
  uint64_t len;
  void *blob;
  if (read(from_parent, &len, sizeof len) != sizeof len || len >= (1 << 20) ||
      !(blob = malloc(len)) || read(from_parent, blob, len) != (ssize_t)len)
    _exit(2);
  strata_kv_agent *a = make_agent("prefill", backend);
  uint8_t *local = malloc(BYTES);
  uint32_t local_id, id;
  uint64_t base, bytes;
  int peer;
  if (!a || !local) _exit(2);
  memset(local, 0x5a, BYTES);
  if (strata_kv_register(a, local, BYTES, &local_id) || strata_kv_peer_load(a, blob, len, &peer) ||
      strata_kv_peer_region(a, peer, 0, &id, &base, &bytes))
    _exit(2);
  strata_kv_desc l = {(uint64_t)(uintptr_t)local, BYTES, 0, 0};
  strata_kv_desc r = {base, BYTES, id, 0};
  for (;;) {
    strata_kv_xfer *x;
    if (strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x) != STRATA_OK)
      for (;;) pause(); /* the target is gone to us: wait to be killed */
    strata_kv_xfer_wait(x, 20);
    strata_kv_xfer_release(x);
  }
}

static void stalled_writer(int backend, const char *label, int killed) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    CHECK(!"pipe");
    return;
  }
  pid_t child = fork(); /* before this process starts UCX's threads */
  if (child == 0) {
    close(pipefd[1]);
    writer_main(backend, pipefd[0]);
  }
  close(pipefd[0]);
  strata_kv_agent *a = make_agent("decode", backend);
  uint8_t *mem = calloc(1, BYTES), *after = malloc(BYTES);
  uint32_t id;
  void *blob = NULL;
  size_t len = 0;
  if (!a || !mem || !after || strata_kv_register(a, mem, BYTES, &id) ||
      strata_kv_metadata_export(a, &blob, &len)) {
    CHECK(!"set up");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return;
  }
  uint64_t len64 = len;
  CHECK(write(pipefd[1], &len64, sizeof len64) == sizeof len64 &&
        write(pipefd[1], blob, len) == (ssize_t)len);
  close(pipefd[1]);
  /* its bytes arrive: WRITEs are running */
  double t0 = now_s();
  while (((volatile uint8_t *)mem)[BYTES - 1] != 0x5a && now_s() - t0 < 20) usleep(1000);
  CHECK(mem[BYTES - 1] == 0x5a, "%s: the writer's bytes never arrived", label);
  /* The state under test: the writer frozen while a receive of its bytes is in flight. It
   * writes without pause, so that state comes; the writer is stopped, and let go again until it
   * has (bounded by time, as the wait for its bytes above). */
  size_t receiving = 0;
  t0 = now_s();
  for (;;) {
    kill(child, SIGSTOP);
    int stopped = 0;
    waitpid(child, &stopped, WUNTRACED);
    receiving = kv_ucx_receiving_for_test(a);
    if (receiving || now_s() - t0 > 5) break;
    kill(child, SIGCONT);
    usleep(1000);
  }
  const char *tls = getenv("UCX_TLS");
  if (tls && !strcmp(tls, "tcp"))
    CHECK(receiving > 0, "%s: no rendezvous receive in flight at the freeze", label);
  if (killed) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    child = -1;
  }
  t0 = now_s();
  CHECK_STATUS(strata_kv_deregister(a, id), STRATA_OK);
  double waited = now_s() - t0;
  CHECK(waited < 8 * TIMEOUT_S, "%s: deregister waited %.1f s for a %s writer", label, waited,
        killed ? "killed" : "frozen");
  memcpy(after, mem, BYTES);
  if (child > 0) { /* woken, it finds its target gone; nothing lands after deregistration */
    kill(child, SIGCONT);
    usleep(300 * 1000);
  }
  CHECK(memcmp(after, mem, BYTES) == 0, "%s: the region changed after deregistration", label);
  if (child > 0) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
  }
  strata_kv_agent_destroy(a);
  free(mem);
  free(after);
  free(blob);
  printf("%s %s writer mid-rendezvous (%zu receives in flight): %s\n", label,
         killed ? "killed" : "frozen", receiving, failures ? "FAILED" : "ok");
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && !strcmp(argv[1], "ucx")) {
    if (!strata_kv_backend_supported(STRATA_KV_BACKEND_UCX)) {
      printf("ucx: SKIP (built without UCX)\n");
      return 77;
    }
    suite(STRATA_KV_BACKEND_UCX, "ucx");
    killed_mid_transfer(STRATA_KV_BACKEND_UCX, "ucx");
    stalled_writer(STRATA_KV_BACKEND_UCX, "ucx", 0);
    stalled_writer(STRATA_KV_BACKEND_UCX, "ucx", 1);
    return failures != 0;
  }
  suite(STRATA_KV_BACKEND_TCP, "tcp");
  suite(STRATA_KV_BACKEND_SHM, "shm");
  killed_mid_transfer(STRATA_KV_BACKEND_TCP, "tcp");
  killed_mid_transfer(STRATA_KV_BACKEND_SHM, "shm");
  return failures != 0;
}
