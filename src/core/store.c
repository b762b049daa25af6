// SPDX-License-Identifier: Apache-2.0
/*
 * store.c — the rendezvous store's calls, dispatched to the store's implementation (store.h).
 */
#include "core/store.h"

#include <time.h>

#include "core/core.h"

/* How often a counter is polled on a store that cannot wait for one itself. */
static const double WAIT_COUNT_POLL_S = 0.005;

static const strata_store_impl *impl_of(const strata_store *s) {
  return ((const strata_store_head *)(const void *)s)->impl;
}

int strata_store_set(strata_store *s, const char *key, const void *value, size_t len) {
  return s ? impl_of(s)->set(s, key, value, len) : STRATA_ERR_INVALID_ARG;
}

int strata_store_set_if_absent(strata_store *s, const char *key, const void *value, size_t len,
                               int *was_set) {
  return s ? impl_of(s)->set_if_absent(s, key, value, len, was_set) : STRATA_ERR_INVALID_ARG;
}

int strata_store_get(strata_store *s, const char *key, void **value, size_t *len,
                     double timeout_s) {
  return s ? impl_of(s)->get(s, key, value, len, timeout_s) : STRATA_ERR_INVALID_ARG;
}

int strata_store_wait(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s) {
  return s ? impl_of(s)->wait(s, keys, nkeys, timeout_s) : STRATA_ERR_INVALID_ARG;
}

int strata_store_add(strata_store *s, const char *key, int64_t delta, int64_t *result) {
  return s ? impl_of(s)->add(s, key, delta, result) : STRATA_ERR_INVALID_ARG;
}

int strata_store_local_host(const strata_store *s, char *host, size_t len) {
  return s ? impl_of(s)->local_host(s, host, len) : STRATA_ERR_INVALID_ARG;
}

int strata_store_wait_count(strata_store *s, const char *key, int64_t target, int64_t *value,
                            double timeout_s) {
  if (!s || !key || !(timeout_s >= 0)) return STRATA_ERR_INVALID_ARG;
  const strata_store_impl *impl = impl_of(s);
  int64_t ignored;
  if (!value) value = &ignored;
  if (impl->wait_count) {
    int status = impl->wait_count(s, key, target, value, timeout_s);
    if (status != STRATA_ERR_UNSUPPORTED) return status;
  }
  double deadline_s = strata_now_s() + timeout_s;
  for (;;) {
    int status = impl->add(s, key, 0, value);
    if (status != STRATA_OK || *value >= target) return status;
    if (strata_now_s() >= deadline_s) return STRATA_ERR_TIMEOUT;
    struct timespec tick = {0, (long)(WAIT_COUNT_POLL_S * 1e9)};
    nanosleep(&tick, NULL);
  }
}

int strata_store_read_counts(strata_store *s, const char *const *keys, size_t nkeys,
                             int64_t *values) {
  if (!s || (nkeys && (!keys || !values))) return STRATA_ERR_INVALID_ARG;
  if (nkeys == 0) return STRATA_OK;
  const strata_store_impl *impl = impl_of(s);
  if (impl->read_counts) {
    int status = impl->read_counts(s, keys, nkeys, values);
    if (status != STRATA_ERR_UNSUPPORTED) return status;
  }
  for (size_t i = 0; i < nkeys; i++) {
    int status = impl->add(s, keys[i], 0, &values[i]);
    if (status != STRATA_OK) return status;
  }
  return STRATA_OK;
}

void strata_store_close(strata_store *s) {
  if (s) impl_of(s)->close(s);
}
