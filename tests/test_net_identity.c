// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_identity.c — a process in another network namespace has another host identity
 * (strata_net_host_identity), so strata_net_open never takes it for a local peer and never
 * offers it shared memory it cannot reach. Needs CAP_SYS_ADMIN for unshare(CLONE_NEWNET):
 * skipped (exit 77) without it.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/check.h"
#include "net/net.h"

enum { NO_NAMESPACE = 2 };

int main(void) {
  alarm(30);
  char mine[512], theirs[512] = "";
  strata_net_host_identity(mine, sizeof mine);
  int pipefd[2];
  if (pipe(pipefd) != 0) return perror("pipe"), 1;
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(NO_NAMESPACE);
    strata_net_host_identity(theirs, sizeof theirs);
    ssize_t n = write(pipefd[1], theirs, strlen(theirs) + 1);
    _exit(n > 0 ? 0 : 1);
  }
  close(pipefd[1]);
  ssize_t n = read(pipefd[0], theirs, sizeof theirs - 1);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == NO_NAMESPACE) {
    printf("SKIP test_net_identity: cannot create a network namespace here\n");
    return 77;
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && n > 0, "the child reported nothing");
  printf("this namespace:  %s\na new namespace: %s\n", mine, theirs);
  CHECK(strcmp(mine, theirs) != 0, "the same identity: it would be taken for a local peer");
  printf("test_net_identity: %s\n", failures ? "FAIL" : "ok");
  return failures != 0;
}
