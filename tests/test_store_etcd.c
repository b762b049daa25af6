// SPDX-License-Identifier: Apache-2.0
/*
 * test_store_etcd.c — the store kept in etcd (STRATA_STORE=etcd://...), against a real 3-member
 * etcd cluster on loopback (temporary data directories, free ports):
 *  - the store's calls: set, get (waits, times out), wait, set_if_absent (one winner), add (a
 *    counter, concurrent adds from several processes count each once), keys of two jobs apart;
 *  - a value planted in etcd without the job secret (or moved to another key) is refused with
 *    STRATA_ERR_AUTH; a store with another secret cannot read the job's values;
 *  - losing a member: every call goes on through the others;
 *  - a job of 4 ranks across 2 sites (STRATA_SITE) trains (an allreduce per step, every result
 *    checked exactly); one etcd member is killed, then rank 0, mid-training: the 3 survivors
 *    shrink through etcd and go on to the last step, with 0 wrong results;
 *  - KV transfer's metadata published and fetched through etcd.
 * Without etcd: a gateway that is not etcd (not HTTP, a body that is not JSON or nested too deep, a
 * terabyte announced, a bad chunk, silence) costs a bounded error, never a crash or a hang, and a
 * value it hands out unsealed is refused. The rest is skipped (77) when etcd is not installed
 * (scripts/deps.sh test installs etcd-server).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/http_lite.h"
#include "boot/json_lite.h"
#include "boot/store.h"
#include "boot/store_net.h"
#include "helpers/check.h"
#include "strata.h"
#include "strata_kv.h"

enum { MEMBERS = 3, RANKS = 4, STEPS = 24, COUNT = 4096 };
static const char *SECRET = "etcd-test-secret";
static const double RANK_TIMEOUT_S = 2.5;

static char work_dir[256];
static pid_t member_pid[MEMBERS];
static int client_port[MEMBERS], peer_port[MEMBERS];
static char url[512];

static double now_s(void) {
  return store_net_now_s();
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static const char *etcd_binary(void) {
  static char path[512];
  const char *dirs = getenv("PATH");
  char copy[4096];
  snprintf(copy, sizeof copy, "%s:/usr/bin:/usr/local/bin", dirs ? dirs : "");
  for (char *dir = strtok(copy, ":"); dir; dir = strtok(NULL, ":")) {
    snprintf(path, sizeof path, "%s/etcd", dir);
    if (access(path, X_OK) == 0) return path;
  }
  return NULL;
}

static void start_member(const char *etcd, int i) {
  char name[16], data[300], client[64], peer[64], cluster[512] = "", log[300], token[64];
  snprintf(name, sizeof name, "m%d", i);
  snprintf(data, sizeof data, "%s/m%d", work_dir, i);
  snprintf(log, sizeof log, "%s/m%d.log", work_dir, i);
  snprintf(client, sizeof client, "http://127.0.0.1:%d", client_port[i]);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", peer_port[i]);
  snprintf(token, sizeof token, "strata-test-%d", (int)getpid());
  for (int m = 0; m < MEMBERS; m++) {
    size_t used = strlen(cluster);
    snprintf(cluster + used, sizeof cluster - used, "%sm%d=http://127.0.0.1:%d", m ? "," : "", m,
             peer_port[m]);
  }
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    /* short heartbeats: a lost leader is replaced within about a second */
    execl(etcd, "etcd", "--name", name, "--data-dir", data, "--listen-client-urls", client,
          "--advertise-client-urls", client, "--listen-peer-urls", peer,
          "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
          "--initial-cluster-token", token, "--initial-cluster-state", "new",
          "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap",
          "--log-level", "error", (char *)NULL);
    _exit(127);
  }
  member_pid[i] = pid;
}

static void kill_member(int i) {
  if (member_pid[i] <= 0) return;
  kill(member_pid[i], SIGKILL);
  waitpid(member_pid[i], NULL, 0);
  member_pid[i] = 0;
}

static void stop_cluster(void) {
  for (int i = 0; i < MEMBERS; i++) kill_member(i);
  if (work_dir[0]) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work_dir);
    if (system(cmd) != 0) printf("could not remove %s\n", work_dir);
  }
}

static void show_logs(void) {
  for (int i = 0; i < MEMBERS; i++) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "tail -n 20 '%s/m%d.log'", work_dir, i);
    if (system(cmd) != 0) printf("(no log of member %d)\n", i);
  }
}

/* A loopback port the kernel gives now, its socket kept open in *fd (so the ports picked for one
 * cluster all differ); the caller closes it just before etcd binds the port. */
static int hold_port(int *fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (*fd >= 0 && bind(*fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(*fd, (struct sockaddr *)&a, &len) == 0)
    return ntohs(a.sin_port);
  return -1;
}

/* Starts the cluster: 0 when it answers (a leader is elected) within 20 s, 77 when a member could
 * not bind its port (another process took it between the pick and etcd's bind: the host is
 * shared, and that says nothing of strata), -1 otherwise. */
static int start_cluster(const char *etcd) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(work_dir, sizeof work_dir, "%s/strata-etcd-XXXXXX", base);
  if (!mkdtemp(work_dir)) return -1;
  int held[2 * MEMBERS];
  size_t used = (size_t)snprintf(url, sizeof url, "%s", STRATA_ETCD_SCHEME);
  for (int i = 0; i < MEMBERS; i++) {
    client_port[i] = hold_port(&held[2 * i]);
    peer_port[i] = hold_port(&held[2 * i + 1]);
    used += (size_t)snprintf(url + used, sizeof url - used, "%s127.0.0.1:%d", i ? "," : "",
                             client_port[i]);
  }
  for (int i = 0; i < 2 * MEMBERS; i++)
    if (held[i] >= 0) close(held[i]);
  for (int i = 0; i < MEMBERS; i++) start_member(etcd, i);
  strata_store *s = NULL;
  int status = strata_store_connect_auth(url, SECRET, "probe", 20, &s);
  strata_store_close(s);
  int alive = 1;
  for (int i = 0; i < MEMBERS; i++)
    if (waitpid(member_pid[i], NULL, WNOHANG) == member_pid[i]) { /* it exited: reaped */
      member_pid[i] = 0;
      alive = 0;
    }
  if (status == STRATA_OK && alive) return 0;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "grep -qs 'address already in use' '%s'/m*.log", work_dir);
  return system(cmd) == 0 ? 77 : -1;
}

/* ---- the store's calls ---- */

static int get_text(strata_store *s, const char *key, char *out, size_t len, double timeout_s) {
  void *value = NULL;
  size_t n = 0;
  int status = strata_store_get(s, key, &value, &n, timeout_s);
  if (status == STRATA_OK) snprintf(out, len, "%.*s", (int)n, (const char *)value);
  free(value);
  return status;
}

static void test_calls(void) {
  strata_store *s = NULL, *other = NULL;
  CHECK_STATUS(strata_store_connect_auth(url, SECRET, "calls", 10, &s), STRATA_OK);
  CHECK_STATUS(strata_store_connect_auth(url, SECRET, "calls-other", 10, &other), STRATA_OK);
  if (!s || !other) return;
  char text[64] = "";
  CHECK_STATUS(strata_store_set(s, "a", "hello", 5), STRATA_OK);
  CHECK_STATUS(get_text(s, "a", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "hello"), "got '%s'", text);
  CHECK_STATUS(strata_store_set(s, "a", "", 0), STRATA_OK); /* an empty value is a value */
  CHECK_STATUS(get_text(s, "a", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, ""), "got '%s'", text);
  /* another job's keys are apart */
  double t0 = now_s();
  CHECK_STATUS(get_text(other, "a", text, sizeof text, 0.2), STRATA_ERR_TIMEOUT);
  CHECK(now_s() - t0 < 5, "a get of 0.2 s took %.2f s", now_s() - t0);
  const char *keys[] = {"a", "b"};
  CHECK_STATUS(strata_store_wait(s, keys, 1, 1), STRATA_OK);
  CHECK_STATUS(strata_store_wait(s, keys, 2, 0.2), STRATA_ERR_TIMEOUT);
  int was_set = -1;
  CHECK_STATUS(strata_store_set_if_absent(s, "once", "first", 5, &was_set), STRATA_OK);
  CHECK(was_set == 1);
  CHECK_STATUS(strata_store_set_if_absent(other, "once", "x", 1, &was_set), STRATA_OK);
  CHECK(was_set == 1, "another job's key of the same name is its own");
  CHECK_STATUS(strata_store_set_if_absent(s, "once", "second", 6, &was_set), STRATA_OK);
  CHECK(was_set == 0);
  CHECK_STATUS(get_text(s, "once", text, sizeof text, 1), STRATA_OK);
  CHECK(!strcmp(text, "first"), "got '%s'", text);
  int64_t v = -1;
  CHECK_STATUS(strata_store_add(s, "n", 0, &v), STRATA_OK);
  CHECK(v == 0, "a fresh counter reads %lld", (long long)v);
  CHECK_STATUS(strata_store_add(s, "n", 5, &v), STRATA_OK);
  CHECK(v == 5);
  CHECK_STATUS(strata_store_add(s, "n", -2, &v), STRATA_OK);
  CHECK(v == 3);
  CHECK_STATUS(strata_store_add(s, "n/x", 7, &v), STRATA_OK); /* not an entry of "n" */
  CHECK_STATUS(strata_store_add(s, "n", 0, &v), STRATA_OK);
  CHECK(v == 3, "counter n reads %lld", (long long)v);
  /* concurrent adds from 4 processes: each result distinct, the total their sum */
  int64_t *seen = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  enum { ADDERS = 4, ADDS = 5 };
  pid_t pids[ADDERS];
  for (int p = 0; p < ADDERS; p++) {
    pids[p] = fork();
    if (pids[p] == 0) {
      strata_store *c = NULL;
      if (strata_store_connect_auth(url, SECRET, "calls", 10, &c) != STRATA_OK) _exit(1);
      for (int k = 0; k < ADDS; k++)
        if (strata_store_add(c, "tickets", 1, &seen[p * ADDS + k]) != STRATA_OK) _exit(1);
      strata_store_close(c);
      _exit(0);
    }
  }
  for (int p = 0; p < ADDERS; p++) {
    int st = 0;
    waitpid(pids[p], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "adder %d failed", p);
  }
  int hit[ADDERS * ADDS + 1] = {0};
  for (int k = 0; k < ADDERS * ADDS; k++)
    if (seen[k] >= 1 && seen[k] <= ADDERS * ADDS) hit[seen[k]]++;
  for (int k = 1; k <= ADDERS * ADDS; k++)
    CHECK(hit[k] == 1, "ticket %d taken %d times", k, hit[k]);
  munmap(seen, 4096);
  CHECK_STATUS(strata_store_add(s, "tickets", 0, &v), STRATA_OK);
  CHECK(v == ADDERS * ADDS);
  /* bad input */
  CHECK_STATUS(strata_store_set(s, "", "x", 1), STRATA_ERR_INVALID_ARG);
  strata_store *bad = NULL;
  CHECK_STATUS(strata_store_connect_auth("etcd://", SECRET, "x", 1, &bad), STRATA_ERR_CONFIG);
  CHECK_STATUS(strata_store_connect_auth("etcd://127.0.0.1:notaport", SECRET, "x", 1, &bad),
               STRATA_ERR_CONFIG);
  CHECK(!bad);
  strata_store_close(other);
  strata_store_close(s);
}

/* A raw put, as someone who reaches etcd but has no secret would make it. */
static int raw_put(const char *etcd_key, const char *value) {
  http_lite_conn c;
  char endpoint[64], body[1024], k64[400], v64[400];
  snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", client_port[1]);
  if (http_lite_init(&c, endpoint) != STRATA_OK) return -1;
  sodium_bin2base64(k64, sizeof k64, (const unsigned char *)etcd_key, strlen(etcd_key),
                    sodium_base64_VARIANT_ORIGINAL);
  sodium_bin2base64(v64, sizeof v64, (const unsigned char *)value, strlen(value),
                    sodium_base64_VARIANT_ORIGINAL);
  int n = snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\"}", k64, v64);
  int code = 0, err = 0;
  char *out = NULL;
  size_t out_len = 0;
  int status =
      http_lite_post(&c, "/v3/kv/put", body, (size_t)n, now_s() + 5, &code, &out, &out_len, &err);
  free(out);
  http_lite_close(&c);
  free(c.in);
  return status == STRATA_OK && code == 200 ? 0 : -1;
}

static void test_forgery(void) {
  strata_store *s = NULL, *stranger = NULL;
  CHECK_STATUS(strata_store_connect_auth(url, SECRET, "forge", 10, &s), STRATA_OK);
  CHECK_STATUS(strata_store_connect_auth(url, "not-the-secret", "forge", 10, &stranger),
               STRATA_OK); /* etcd admits anyone: the values are what is checked */
  if (!s || !stranger) return;
  char text[64];
  CHECK(raw_put("strata/forge/v/planted", "10.0.0.66:4444") == 0);
  CHECK_STATUS(get_text(s, "planted", text, sizeof text, 1), STRATA_ERR_AUTH);
  CHECK_STATUS(strata_store_set(stranger, "addr", "10.0.0.66:4444", 14), STRATA_OK);
  CHECK_STATUS(get_text(s, "addr", text, sizeof text, 1), STRATA_ERR_AUTH);
  CHECK_STATUS(strata_store_set(s, "real", "ok", 2), STRATA_OK);
  CHECK_STATUS(get_text(stranger, "real", text, sizeof text, 1), STRATA_ERR_AUTH);
  /* a forged entry of a counter is refused too, not summed */
  int64_t v = 0;
  CHECK_STATUS(strata_store_add(s, "count", 1, &v), STRATA_OK);
  CHECK(raw_put("strata/forge/c/5/count/00", "forged") == 0);
  CHECK_STATUS(strata_store_add(s, "count", 0, &v), STRATA_ERR_AUTH);
  strata_store_close(stranger);
  strata_store_close(s);
}

/* ---- the cluster's leader ---- */

/* POSTs body to member i's gateway; the answer parsed into doc (caller frees both). */
static int member_call(int i, const char *path, const char *body, json_lite_doc *doc,
                       char **answer) {
  http_lite_conn c;
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", client_port[i]);
  *answer = NULL;
  if (http_lite_init(&c, endpoint) != STRATA_OK) return -1;
  int code = 0, err = 0;
  size_t len = 0;
  int status = http_lite_post(&c, path, body, strlen(body), now_s() + 5, &code, answer, &len, &err);
  http_lite_close(&c);
  free(c.in);
  if (status != STRATA_OK || code != 200 || json_lite_parse(*answer, len, 4096, doc) != STRATA_OK) {
    free(*answer);
    *answer = NULL;
    return -1;
  }
  return 0;
}

/* Member i's id and the leader it knows (as decimal text). */
static int member_status(int i, char *id, char *leader, size_t len) {
  json_lite_doc doc;
  char *answer;
  if (member_call(i, "/v3/maintenance/status", "{}", &doc, &answer) != 0) return -1;
  int header = json_lite_member(&doc, 0, "header"),
      mine = json_lite_member(&doc, header, "member_id"),
      lead = json_lite_member(&doc, 0, "leader");
  int ok = mine >= 0 && lead >= 0;
  if (ok) {
    snprintf(id, len, "%.*s", (int)(doc.tokens[mine].end - doc.tokens[mine].start),
             answer + doc.tokens[mine].start);
    snprintf(leader, len, "%.*s", (int)(doc.tokens[lead].end - doc.tokens[lead].start),
             answer + doc.tokens[lead].start);
  }
  json_lite_free(&doc);
  free(answer);
  return ok ? 0 : -1;
}

/* Makes member 0 the leader (etcdctl move-leader), so that killing it costs the cluster an
 * election and every rank its connection at once. 0 when member 0 leads. */
static int lead_with_member_0(void) {
  double deadline = now_s() + 10;
  while (now_s() < deadline) {
    char id0[32], leader[32], id[32], ignored[32];
    if (member_status(0, id0, leader, sizeof id0) != 0) return -1;
    if (!strcmp(id0, leader)) return 0;
    for (int i = 1; i < MEMBERS; i++) {
      if (member_status(i, id, ignored, sizeof id) != 0 || strcmp(id, leader)) continue;
      char body[96];
      snprintf(body, sizeof body, "{\"targetID\":\"%s\"}", id0);
      json_lite_doc doc;
      char *answer;
      if (member_call(i, "/v3/maintenance/transfer-leadership", body, &doc, &answer) == 0) {
        json_lite_free(&doc);
        free(answer);
      }
    }
    sleep_s(0.05);
  }
  return -1;
}

/* ---- a job through etcd, losing an etcd member and then rank 0 ---- */

typedef struct progress {
  volatile int step[RANKS];  /* steps this rank has completed and agreed */
  volatile int wrong[RANKS]; /* results returned as success that were wrong */
  volatile int size[RANKS];  /* its communicator's size at the end */
} progress;

static float input(int id, int step, int i) {
  return (float)((id + 1) * 100 + (step % 50) * 7 + i % 13);
}

/* (id, step) of every member: whose inputs the sum holds, and where to resume. */
static int sync_members(strata_comm *comm, int id, int *step, int *ids, int *n) {
  int64_t mine[2] = {id, *step}, all[2 * RANKS];
  int size = strata_comm_size(comm);
  int status = strata_allgather(comm, mine, all, 2, STRATA_I64);
  int ok = status == STRATA_OK;
  int agreed = strata_comm_agree(comm, &ok);
  if (agreed != STRATA_OK) return agreed;
  if (!ok) return STRATA_ERR_PEER_LOST;
  *n = size;
  for (int r = 0; r < size; r++) {
    ids[r] = (int)all[2 * r];
    if (all[2 * r + 1] > *step) *step = (int)all[2 * r + 1];
  }
  return STRATA_OK;
}

static int rank_main(int id, progress *p) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = id;
  cfg.world_size = RANKS;
  cfg.local_rank = id % 2;
  snprintf(cfg.store_url, sizeof cfg.store_url, "%s", url);
  snprintf(cfg.job_id, sizeof cfg.job_id, "etcd-job-%d", (int)getppid());
  snprintf(cfg.secret, sizeof cfg.secret, "%s", SECRET);
  snprintf(cfg.site, sizeof cfg.site, "%s", id < RANKS / 2 ? "site-a" : "site-b");
  cfg.shm_enabled = 0; /* every rank a host of its own */
  cfg.timeout_s = RANK_TIMEOUT_S;
  if (getenv("STRATA_LOG")) cfg.log_level = STRATA_LOG_INFO;
  strata_comm *comm = NULL;
  int status = strata_comm_init(&cfg, &comm);
  if (status != STRATA_OK) {
    printf("rank %d: init: %s\n", id, strata_strerror(status));
    return 1;
  }
  int step = 0, ids[RANKS], n = RANKS, shrinks = 0;
  for (int r = 0; r < RANKS; r++) ids[r] = r;
  float *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
  double deadline = now_s() + 60;
  while (step < STEPS && now_s() < deadline) {
    for (int i = 0; i < COUNT; i++) in[i] = input(id, step, i);
    status = strata_allreduce(comm, in, out, COUNT, STRATA_F32, STRATA_SUM);
    int ok = status == STRATA_OK;
    for (int i = 0; ok && i < COUNT; i++) {
      float want = 0;
      for (int k = 0; k < n; k++) want += input(ids[k], step, i);
      if (out[i] != want) {
        p->wrong[id]++;
        ok = 0;
      }
    }
    int agreed = strata_comm_agree(comm, &ok);
    if (agreed == STRATA_OK && ok) {
      p->step[id] = ++step;
      continue;
    }
    /* a member is gone: shrink through etcd, learn who is left, and run the step again */
    for (;;) {
      strata_comm *next = NULL;
      status = strata_comm_shrink(comm, &next);
      if (status == STRATA_ERR_EXCLUDED || ++shrinks > 10) break;
      if (status != STRATA_OK) continue;
      strata_comm_destroy(comm);
      comm = next;
      if (sync_members(comm, id, &step, ids, &n) == STRATA_OK) break;
    }
    if (status != STRATA_OK) {
      printf("rank %d: shrink: %s\n", id, strata_strerror(status));
      break;
    }
  }
  p->size[id] = strata_comm_size(comm);
  strata_comm_destroy(comm);
  free(in);
  free(out);
  return step == STEPS ? 0 : 1;
}

/* Waits until every rank in [from, RANKS) reached `step` (or 30 s passed). */
static int wait_steps(const progress *p, int from, int step) {
  double deadline = now_s() + 30;
  for (;;) {
    int low = STEPS;
    for (int r = from; r < RANKS; r++)
      if (p->step[r] < low) low = p->step[r];
    if (low >= step) return 0;
    if (now_s() > deadline) return -1;
    sleep_s(0.002);
  }
}

static void test_job(void) {
  progress *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  if (p == MAP_FAILED) return;
  memset(p, 0, sizeof *p);
  CHECK(lead_with_member_0() == 0, "member 0 did not become the leader");
  pid_t ranks[RANKS];
  double t0 = now_s();
  for (int id = 0; id < RANKS; id++) {
    ranks[id] = fork();
    if (ranks[id] == 0) _exit(rank_main(id, p));
  }
  /* mid-training: an etcd member dies (the leader, and the first endpoint: the one every rank
   * talks to), and a few steps later so does rank 0 */
  CHECK(wait_steps(p, 0, 4) == 0, "the job did not reach step 4");
  kill_member(0);
  double killed_member = now_s();
  CHECK(wait_steps(p, 0, 8) == 0, "the job stalled after losing an etcd member");
  double member_s = now_s() - killed_member;
  kill(ranks[0], SIGKILL);
  double killed_rank = now_s();
  int st = 0;
  waitpid(ranks[0], &st, 0);
  int survivors_ok = 1;
  for (int id = 1; id < RANKS; id++) {
    st = 0;
    waitpid(ranks[id], &st, 0);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    CHECK(ok, "rank %d did not finish (step %d)", id, p->step[id]);
    CHECK(p->step[id] == STEPS, "rank %d stopped at step %d of %d", id, p->step[id], STEPS);
    CHECK(p->size[id] == RANKS - 1, "rank %d ended in a group of %d", id, p->size[id]);
    survivors_ok &= ok;
  }
  int wrong = 0;
  for (int id = 0; id < RANKS; id++) wrong += p->wrong[id];
  CHECK(wrong == 0, "%d wrong results", wrong);
  printf(
      "job: 4 ranks across 2 sites, %d steps; an etcd member lost at step >= 4 (the next 4 "
      "steps took %.2f s), rank 0 lost at step >= 8, the 3 survivors finished %.2f s later; "
      "%d wrong results; %.2f s in all\n",
      STEPS, member_s, now_s() - killed_rank, wrong, now_s() - t0);
  if (!survivors_ok) show_logs();
  munmap(p, sizeof *p);
}

/* KV transfer's metadata (strata_kv_metadata_publish / peer_fetch) through etcd too. */
static void test_kv_metadata(void) {
  strata_kv_agent *agents[2] = {NULL, NULL};
  const char *names[2] = {"prefill", "decode"};
  for (int i = 0; i < 2; i++) {
    strata_kv_config cfg;
    strata_kv_config_init(&cfg);
    cfg.name = names[i];
    cfg.secret = SECRET;
    cfg.job_id = "kv-etcd";
    cfg.timeout_s = 5;
    CHECK_STATUS(strata_kv_agent_create(&cfg, &agents[i]), STRATA_OK);
  }
  if (agents[0] && agents[1]) {
    int peer = -1;
    CHECK_STATUS(strata_kv_metadata_publish(agents[1], url, 5), STRATA_OK);
    CHECK_STATUS(strata_kv_peer_fetch(agents[0], url, "decode", 5, &peer), STRATA_OK);
    CHECK(peer >= 0);
    CHECK_STATUS(strata_kv_peer_fetch(agents[0], url, "nobody", 0.3, &peer), STRATA_ERR_TIMEOUT);
  }
  for (int i = 0; i < 2; i++) strata_kv_agent_destroy(agents[i]);
}

/* ---- a gateway that is not etcd (no etcd needed) ---- */

/* Serves `reply` (n bytes; NULL: accept and stay silent) to every request on a loopback port, in
 * a process of its own, until killed. Returns its pid; *port. */
static pid_t fake_gateway(const char *reply, size_t n, int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  pid_t pid = fork();
  if (pid != 0) {
    close(fd);
    return pid;
  }
  for (;;) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    char buf[8192];
    ssize_t got = recv(c, buf, sizeof buf, 0); /* the request (small: one segment) */
    if (got > 0 && reply) {
      size_t off = 0;
      while (off < n) {
        ssize_t k = send(c, reply + off, n - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += (size_t)k;
      }
      close(c);
    } else if (!reply) {
      sleep_s(30); /* silent: the client's deadline must end it */
      close(c);
    } else {
      close(c);
    }
  }
}

static void end_process(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* An HTTP answer around body. */
static char *http_answer(const char *status_line, const char *headers, const char *body) {
  size_t n = strlen(status_line) + strlen(headers) + strlen(body) + 64;
  char *out = malloc(n);
  snprintf(out, n, "%s\r\n%s\r\n%s", status_line, headers, body);
  return out;
}

static void test_hostile_gateway(void) {
  char nest[4100];
  memset(nest, '[', sizeof nest - 1);
  nest[sizeof nest - 1] = '\0';
  char huge_length[] = "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{}";
  struct {
    const char *what;
    char *reply; /* malloc'd; NULL = silent */
    int want;
  } cases[] = {
      {"not HTTP", strdup("SSH-2.0-OpenSSH_9.2\r\n"), STRATA_ERR_TIMEOUT},
      {"a status line only", strdup("HTTP/1.1 200 OK\r\n"), STRATA_ERR_TIMEOUT},
      {"a body that is not JSON", http_answer("HTTP/1.1 200 OK", "Content-Length: 5\r\n", "{\"kvs"),
       STRATA_ERR_TIMEOUT},
      {"JSON nested 4,099 deep", http_answer("HTTP/1.1 200 OK", "Connection: close\r\n", nest),
       STRATA_ERR_TIMEOUT},
      {"a body of a terabyte announced", strdup(huge_length), STRATA_ERR_TIMEOUT},
      {"a bad chunk size",
       http_answer("HTTP/1.1 200 OK", "Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"),
       STRATA_ERR_TIMEOUT},
      {"an error that is not etcd's",
       http_answer("HTTP/1.1 400 Bad Request", "Content-Length: 2\r\n", "{}"), STRATA_ERR_PROTOCOL},
      {"silence", NULL, STRATA_ERR_TIMEOUT},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int port = 0;
    pid_t pid = fake_gateway(cases[k].reply, cases[k].reply ? strlen(cases[k].reply) : 0, &port);
    char fake[64];
    snprintf(fake, sizeof fake, "etcd://127.0.0.1:%d", port);
    strata_store *s = NULL;
    double t0 = now_s();
    int status = strata_store_connect_auth(fake, SECRET, "hostile", 0.3, &s);
    double took = now_s() - t0;
    CHECK(status == cases[k].want, "%s: %s", cases[k].what, strata_err_name(status));
    CHECK(took < 3, "%s: %.2f s for a timeout of 0.3 s", cases[k].what, took);
    CHECK(!s);
    strata_store_close(s);
    end_process(pid);
    free(cases[k].reply);
  }
  /* a gateway that answers like etcd, chunked, with a value nobody sealed */
  char *forged = http_answer("HTTP/1.1 200 OK", "Transfer-Encoding: chunked\r\n",
                             "3\r\n{\"k\r\n34\r\nvs\":[{\"key\":\"eA==\",\"value\":\"Zm9yZ2Vk\"}],"
                             "\"count\":\"1\"}\r\n0\r\n\r\n");
  int port = 0;
  pid_t pid = fake_gateway(forged, strlen(forged), &port);
  char fake[64];
  snprintf(fake, sizeof fake, "etcd://127.0.0.1:%d", port);
  strata_store *s = NULL;
  CHECK_STATUS(strata_store_connect_auth(fake, SECRET, "hostile", 2, &s), STRATA_OK);
  void *value = NULL;
  size_t len = 0;
  if (s) CHECK_STATUS(strata_store_get(s, "x", &value, &len, 1), STRATA_ERR_AUTH);
  CHECK(!value);
  int64_t v = 0;
  if (s) CHECK(strata_store_add(s, "n", 0, &v) != STRATA_OK, "a forged counter entry was summed");
  strata_store_close(s);
  end_process(pid);
  free(forged);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  setvbuf(stdout, NULL, _IONBF, 0);
  test_hostile_gateway();
  const char *etcd = etcd_binary();
  if (!etcd) {
    printf(
        "test_store_etcd: etcd is not installed (Debian: etcd-server; scripts/deps.sh test): "
        "the rest skipped\n");
    return failures ? 1 : 77;
  }
  int started = start_cluster(etcd);
  if (started != 0) {
    printf("test_store_etcd: the etcd cluster did not come up%s\n",
           started == 77 ? ": a port was taken between its pick and etcd's bind (skipped)" : "");
    show_logs();
    stop_cluster();
    return failures ? 1 : started == 77 ? 77 : 1;
  }
  test_calls();
  test_forgery();
  test_job(); /* forks: before any thread (the KV agents have some) */
  test_kv_metadata();
  stop_cluster();
  return failures != 0;
}
