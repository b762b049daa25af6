// SPDX-License-Identifier: Apache-2.0
/*
 * store.c — the rendezvous store's calls, dispatched to the store's implementation (store.h).
 */
#include "core/store.h"

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

void strata_store_close(strata_store *s) {
  if (s) impl_of(s)->close(s);
}
