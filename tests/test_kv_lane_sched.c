// SPDX-License-Identifier: Apache-2.0
/*
 * test_kv_lane_sched.c — the lane's scheduling (cfg.lane_realtime, docs/kv.md "The lane"):
 *   - by default the target's serving thread runs SCHED_FIFO when the process may, and at the
 *     process's ordinary policy when it may not (the handler reports the policy it runs under);
 *   - a caller's thread is real-time only for the duration of its call: its policy and niceness
 *     are the same after the call as before;
 *   - lane_realtime = -1 leaves every lane thread ordinary;
 *   - without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 (a child process that dropped both) the
 *     lane falls back quietly: calls succeed, the serving thread stays SCHED_OTHER.
 * Whether this process may use SCHED_FIFO is probed first; cases that need the other answer are
 * skipped, never assumed. No timing: the latency it buys is measured by bench/kv.
 */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/check.h"
#include "strata.h"
#include "strata_kv.h"

#define SECRET "kv-lane-sched-secret"

/* The policy of the thread the handler runs on, as 4 bytes. */
static int policy_handler(void *ctx, const char *from, uint32_t tag, const void *req, size_t len,
                          void *reply, size_t cap, size_t *reply_len) {
  (void)ctx, (void)from, (void)tag, (void)req, (void)len;
  int policy;
  struct sched_param param;
  if (cap < sizeof policy || pthread_getschedparam(pthread_self(), &policy, &param) != 0)
    return STRATA_ERR_SYSTEM;
  memcpy(reply, &policy, sizeof policy);
  *reply_len = sizeof policy;
  return STRATA_OK;
}

/* 1 when this thread may switch to SCHED_FIFO (it is switched back at once). */
static int may_fifo(void) {
  int policy;
  struct sched_param saved, fifo = {.sched_priority = 1};
  pthread_getschedparam(pthread_self(), &policy, &saved);
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo) != 0) return 0;
  pthread_setschedparam(pthread_self(), policy, &saved);
  return 1;
}

typedef struct pair {
  strata_kv_agent *caller, *target;
  int peer;
} pair;

static int make_pair(pair *p, int lane_realtime) {
  memset(p, 0, sizeof *p);
  const char *names[2] = {"prefill", "decode"};
  strata_kv_agent **agents[2] = {&p->caller, &p->target};
  for (int i = 0; i < 2; i++) {
    strata_kv_config cfg;
    strata_kv_config_init(&cfg);
    cfg.name = names[i];
    cfg.secret = SECRET;
    cfg.backend = STRATA_KV_BACKEND_TCP;
    cfg.streams = 1;
    cfg.timeout_s = 10;
    cfg.lane_realtime = lane_realtime;
    CHECK_STATUS(strata_kv_agent_create(&cfg, agents[i]), STRATA_OK);
    if (!*agents[i]) return -1;
  }
  strata_kv_lane_set_handler(p->target, policy_handler, NULL);
  void *blob;
  size_t bytes;
  CHECK_STATUS(strata_kv_metadata_export(p->target, &blob, &bytes), STRATA_OK);
  CHECK_STATUS(strata_kv_peer_load(p->caller, blob, bytes, &p->peer), STRATA_OK);
  free(blob);
  return 0;
}

static void free_pair(pair *p) {
  strata_kv_agent_destroy(p->caller);
  strata_kv_agent_destroy(p->target);
}

/* The serving thread's policy as the handler saw it, -1 when the call failed. */
static int target_policy(pair *p) {
  int policy = -1;
  size_t got = 0;
  int status = strata_kv_lane_call(p->caller, p->peer, 1, "?", 1, &policy, sizeof policy, &got, 0);
  CHECK_STATUS(status, STRATA_OK);
  return status == STRATA_OK && got == sizeof policy ? policy : -1;
}

/* The caller's thread: the same policy and niceness after a call as before it. */
static void check_caller_restored(pair *p) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  int nice_before = getpriority(PRIO_PROCESS, (id_t)tid);
  CHECK(errno == 0);
  /* a niceness of its own, which a policy change must not reset */
  CHECK(setpriority(PRIO_PROCESS, (id_t)tid, nice_before + 2) == 0);
  int policy_before, policy_after;
  struct sched_param param;
  pthread_getschedparam(pthread_self(), &policy_before, &param);
  CHECK(target_policy(p) >= 0);
  pthread_getschedparam(pthread_self(), &policy_after, &param);
  errno = 0;
  int nice_after = getpriority(PRIO_PROCESS, (id_t)tid);
  CHECK(policy_after == policy_before, "caller's policy %d after the call, %d before", policy_after,
        policy_before);
  CHECK(nice_after == nice_before + 2, "caller's niceness %d after the call, %d before", nice_after,
        nice_before + 2);
}

/* In a child: give up CAP_SYS_NICE and RLIMIT_RTPRIO, then the default config must still give a
 * working lane, served by an ordinary thread. Exit 0 ok, 77 could not drop the right, 1 failed. */
static int child_without_rights(void) {
  struct rlimit none = {0, 0};
  if (setrlimit(RLIMIT_RTPRIO, &none) != 0) return 77;
  struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  if (syscall(SYS_capget, &head, data) != 0) return 77;
  int word = CAP_TO_INDEX(CAP_SYS_NICE);
  uint32_t bit = CAP_TO_MASK(CAP_SYS_NICE);
  data[word].effective &= ~bit;
  data[word].permitted &= ~bit;
  data[word].inheritable &= ~bit;
  if (syscall(SYS_capset, &head, data) != 0) return 77;
  if (may_fifo()) return 77; /* some other way in remains: nothing to test */
  pair p;
  if (make_pair(&p, 0) != 0) return 1;
  int policy = target_policy(&p);
  CHECK(policy == SCHED_OTHER, "serving thread policy %d without the right, expected OTHER",
        policy);
  check_caller_restored(&p);
  free_pair(&p);
  return failures ? 1 : 0;
}

int main(void) {
  /* first, before any agent thread exists in this process */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) _exit(child_without_rights());
  int wstatus = 0;
  CHECK(child > 0 && waitpid(child, &wstatus, 0) == child && WIFEXITED(wstatus));
  int child_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
  CHECK(child_code == 0 || child_code == 77, "the child without the right failed (%d)", child_code);
  if (child_code == 77) printf("lane sched: could not drop the right to SCHED_FIFO: not tested\n");

  int fifo = may_fifo();
  pair p;
  if (make_pair(&p, 0) != 0) return 1;
  int policy = target_policy(&p);
  CHECK(policy == (fifo ? SCHED_FIFO : SCHED_OTHER), "default: serving thread policy %d (%s)",
        policy, fifo ? "FIFO expected" : "OTHER expected");
  check_caller_restored(&p);
  free_pair(&p);

  if (make_pair(&p, -1) != 0) return 1;
  policy = target_policy(&p);
  CHECK(policy == SCHED_OTHER, "lane_realtime -1: serving thread policy %d", policy);
  check_caller_restored(&p);
  free_pair(&p);

  printf("lane sched (%s): %s\n", fifo ? "SCHED_FIFO permitted" : "SCHED_FIFO not permitted",
         failures ? "FAILED" : "ok");
  return failures != 0;
}
