// SPDX-License-Identifier: Apache-2.0
/*
 * store.h — the rendezvous store as an interface: a key-value store with set, get, wait, add and
 * set-if-absent (strata.h declares the calls). Every store begins with the table of its
 * implementation, and the calls dispatch through it (core/store.c). The boot layer implements
 * it (boot/store.c: a client of strata's store server, and one over the caller's callbacks) and
 * hands stores out; the transports (net/) rendezvous through this interface alone, so they never
 * depend on which store a job uses.
 */
#ifndef STRATA_CORE_STORE_H
#define STRATA_CORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

typedef struct strata_store_impl {
  int (*set)(strata_store *s, const char *key, const void *value, size_t len);
  int (*set_if_absent)(strata_store *s, const char *key, const void *value, size_t len,
                       int *was_set);
  int (*get)(strata_store *s, const char *key, void **value, size_t *len, double timeout_s);
  int (*wait)(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s);
  int (*add)(strata_store *s, const char *key, int64_t delta, int64_t *result);
  int (*local_host)(const strata_store *s, char *host, size_t len);
  void (*close)(strata_store *s);
  /* Optional (NULL, or STRATA_ERR_UNSUPPORTED from the call: core/store.c falls back on add):
   * the two calls below, done by the store itself. */
  int (*wait_count)(strata_store *s, const char *key, int64_t target, int64_t *value,
                    double timeout_s);
  int (*read_counts)(strata_store *s, const char *const *keys, size_t nkeys, int64_t *values);
} strata_store_impl;

/* The first member of every store's struct. */
typedef struct strata_store_head {
  const strata_store_impl *impl;
} strata_store_head;

/* Waits until the ADD counter at key holds at least target (a missing key holds 0), within
 * timeout_s: STRATA_OK and *value (may be NULL) its value then, or STRATA_ERR_TIMEOUT. A store
 * that waits for it itself answers once (strata's server: store_wire.h WAIT_COUNT); any other is
 * polled with an add of 0 every few milliseconds. */
int strata_store_wait_count(strata_store *s, const char *key, int64_t target, int64_t *value,
                            double timeout_s);
/* The ADD counters at keys[0 .. nkeys) into values (a missing key: 0): one request to strata's
 * server (store_wire.h COUNTS), an add of 0 per key to any other store (which then holds "0"
 * at each missing key, as an add would leave it). */
int strata_store_read_counts(strata_store *s, const char *const *keys, size_t nkeys,
                             int64_t *values);

/* The local address ("a.b.c.d") this process reaches the store from: how peers can reach it. */
int strata_store_local_host(const strata_store *s, char *host, size_t len);

#endif
