// SPDX-License-Identifier: Apache-2.0
/*
 * log.c — strata's diagnostic lines on stderr.
 *
 * A line looks like NCCL_DEBUG=INFO output, with strata's prefix first so it greps easily:
 *
 *     strata[3] node07:41233 INFO: connected to 7 peers over tcp
 *
 * (rank < 0, e.g. before rendezvous, prints "strata node07:41233 ..."). The level is the one piece
 * of process-wide state here: an atomic int, set from the first communicator's configuration and
 * read on every STRATA_LOG without a lock. Each line is formatted into a local buffer and written
 * with one write(2), so lines from concurrent threads (and processes) never interleave. Logging
 * must never fail or allocate: an over-long message is truncated and marked with "...".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "core/core.h"

enum { LOG_LINE_BYTES = 1024, LOG_HOST_BYTES = 64 };

static atomic_int log_level = STRATA_LOG_WARN;
static pthread_once_t log_host_once = PTHREAD_ONCE_INIT;
static char log_host[LOG_HOST_BYTES];

void strata_log_set_level(strata_log_level level) {
  if (level < STRATA_LOG_OFF) level = STRATA_LOG_OFF;
  if (level > STRATA_LOG_TRACE) level = STRATA_LOG_TRACE;
  atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

strata_log_level strata_log_get_level(void) {
  return (strata_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

static void log_host_init(void) {
  if (gethostname(log_host, sizeof log_host - 1) != 0) strcpy(log_host, "unknown");
  log_host[sizeof log_host - 1] = '\0';
  char *dot = strchr(log_host, '.'); /* short name, as NCCL prints it */
  if (dot) *dot = '\0';
}

static const char *log_level_name(strata_log_level level) {
  static const char *const names[] = {"OFF", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  return (int)level >= 0 && level <= STRATA_LOG_TRACE ? names[level] : "LOG";
}

/* Writes the "strata[rank] host:pid LEVEL: " prefix; returns its length. */
static int log_prefix(char *line, size_t size, strata_log_level level, int rank) {
  pthread_once(&log_host_once, log_host_init);
  char who[24] = "";
  if (rank >= 0) snprintf(who, sizeof who, "[%d]", rank);
  int n = snprintf(line, size, "strata%s %s:%ld %s: ", who, log_host, (long)getpid(),
                   log_level_name(level));
  return n < 0 ? 0 : (n >= (int)size ? (int)size - 1 : n);
}

/* One write(2) per line: below PIPE_BUF, so lines from threads and from other ranks sharing
 * the terminal or pipe never interleave. */
static void log_emit(const char *line, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, line, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* nowhere to report a failing stderr */
    line += n;
    len -= (size_t)n;
  }
}

void strata_log_write(strata_log_level level, int rank, const char *fmt, ...) {
  char line[LOG_LINE_BYTES];
  int used = log_prefix(line, sizeof line - 1, level, rank);
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(line + used, sizeof line - 1 - (size_t)used, fmt, args);
  va_end(args);
  size_t len = (size_t)used + (n < 0 ? 0 : (size_t)n);
  if (len > sizeof line - 2) { /* truncated: mark it, keep room for the newline */
    len = sizeof line - 2;
    memcpy(line + len - 3, "...", 3);
  }
  if (len > 0 && line[len - 1] == '\n') len--; /* callers may or may not end with \n */
  line[len++] = '\n';
  log_emit(line, len);
}
