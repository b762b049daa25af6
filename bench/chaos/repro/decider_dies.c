// SPDX-License-Identifier: Apache-2.0
/*
 * decider_dies.c — a reproduction for the library's owners (bench/chaos/README.md, finding 4).
 *
 * Three ranks; ranks 1 and 2 call strata_comm_agree first, rank 0 a moment later, so rank 0 is
 * the first to see every contribution and takes the decider's ticket (the ADD on
 * "<prefix>/decider" that returns 1). It dies (SIGKILL) right after that ADD, before it writes
 * the decision. Expected: ranks 1 and 2 finish the agreement without it (flag 1, rank 0 in the
 * failed set) within about STRATA_TIMEOUT. Seen: they poll for a decision nobody will write, for
 * ever: only the ticket's first holder ever writes one (elastic.c, agree_over_store).
 *
 * The store is this program's own (strata_comm_init_store over a table in shared memory), so
 * the death can be placed exactly; nothing else differs from `strata store`.
 *
 *   STRATA_TIMEOUT=1 ./decider_dies      exit status 0 = finished, 1 = hung (HANG printed)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <strata.h>

enum { SLOTS = 4096, KEY_BYTES = 200, VALUE_BYTES = 1024 };

typedef struct slot {
  char key[KEY_BYTES];
  size_t len;
  char value[VALUE_BYTES];
} slot;

typedef struct table {
  pthread_mutex_t lock;
  int used;
  slot slots[SLOTS];
} table;

typedef struct store {
  table *t;
  int rank;
} store;

static slot *find(table *t, const char *key, int create) {
  for (int i = 0; i < t->used; i++)
    if (!strcmp(t->slots[i].key, key)) return &t->slots[i];
  if (!create || t->used == SLOTS) return NULL;
  slot *s = &t->slots[t->used++];
  snprintf(s->key, sizeof s->key, "%s", key);
  s->len = 0;
  return s;
}

static int store_set(void *context, const char *key, const void *value, size_t len) {
  table *t = ((store *)context)->t;
  if (len > VALUE_BYTES || strlen(key) >= KEY_BYTES) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&t->lock);
  slot *s = find(t, key, 1);
  if (s) memcpy(s->value, value, len), s->len = len;
  pthread_mutex_unlock(&t->lock);
  return s ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static int store_get(void *context, const char *key, void **value, size_t *len, double timeout_s) {
  table *t = ((store *)context)->t;
  for (double waited = 0;; waited += 0.001) {
    pthread_mutex_lock(&t->lock);
    slot *s = find(t, key, 0);
    if (s) {
      *value = malloc(s->len ? s->len : 1);
      memcpy(*value, s->value, s->len);
      *len = s->len;
    }
    pthread_mutex_unlock(&t->lock);
    if (s) return STRATA_OK;
    if (waited >= timeout_s) return STRATA_ERR_TIMEOUT;
    usleep(1000);
  }
}

static int store_add(void *context, const char *key, int64_t delta, int64_t *result) {
  store *st = context;
  pthread_mutex_lock(&st->t->lock);
  slot *s = find(st->t, key, 1);
  int64_t v = 0;
  if (s && s->len == sizeof v) memcpy(&v, s->value, sizeof v);
  v += delta;
  if (s) memcpy(s->value, &v, sizeof v), s->len = sizeof v;
  pthread_mutex_unlock(&st->t->lock);
  *result = v;
  size_t n = strlen(key), suffix = strlen("/decider");
  /* rank 0 holds the decider's ticket: it dies before writing the decision */
  if (st->rank == 0 && delta > 0 && n > suffix && !strcmp(key + n - suffix, "/decider") && v == 1)
    raise(SIGKILL);
  return s ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static int rank_main(table *t, int rank, int size) {
  store st = {.t = t, .rank = rank};
  strata_store_ops ops = {.context = &st, .set = store_set, .get = store_get, .add = store_add};
  strata_config cfg;
  strata_config_init(&cfg);
  strata_config_from_env(&cfg, NULL, 0);
  cfg.rank = rank;
  cfg.world_size = size;
  snprintf(cfg.job_id, sizeof cfg.job_id, "decider-dies");
  strata_comm *comm = NULL;
  if (strata_comm_init_store(&cfg, &ops, &comm) != STRATA_OK) return 2;
  int value = 1, sum = 0;
  strata_allreduce(comm, &value, &sum, 1, STRATA_I32, STRATA_SUM);
  if (rank == 0) usleep(200000); /* the others contribute first: rank 0 will see all */
  int flag = 1, failed[8];
  alarm((unsigned)cfg.timeout_s + 6); /* SIGALRM: the parent reports the hang */
  int status = strata_comm_agree(comm, &flag);
  int nfailed = strata_comm_failed_ranks(comm, failed, 8);
  printf("rank %d: agree %s, flag %d, %d failed (first %d)\n", rank, strata_err_name(status), flag,
         nfailed, nfailed > 0 ? failed[0] : -1);
  strata_comm_destroy(comm);
  return status != STRATA_OK;
}

int main(void) {
  enum { SIZE = 3 };
  setvbuf(stdout, NULL, _IOLBF, 0);
  table *t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) return 2;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&t->lock, &attr);
  pid_t pids[SIZE];
  for (int r = 0; r < SIZE; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(t, r, SIZE));
  }
  int failures = 0;
  for (int r = 0; r < SIZE; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (r == 0) continue; /* the decider dies by design */
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) printf("HANG: rank %d still in agree\n", r);
    failures += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures != 0;
}
