// SPDX-License-Identifier: Apache-2.0
/*
 * store.h — the rendezvous key-value store (set / get / wait / add) over TCP. Rank 0 serves it
 * from a thread inside the job, or `strata store` serves it standalone. Values are byte strings.
 * Every blocking call takes a timeout and returns STRATA_ERR_TIMEOUT rather than hang.
 */
#ifndef STRATA_BOOT_STORE_H
#define STRATA_BOOT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h" /* the interface every store implements */
#include "strata.h"

/* The client calls (connect_auth, set, get, wait, set_if_absent, add, close), the server
 * (strata_store_server_*) and strata_store_addr_parse are public: strata.h. The calls on a store
 * dispatch through core/store.h's interface; this file makes the stores. */

/* Every connection proves the job key first (store_wire.h: AUTH), the key of (secret, job_id)
 * (core/secret.c; the job id counts only with a secret, and an elastic epoch's id names its base
 * job's key). The functions without a secret use "" and so reach only stores started without
 * one. A store that refuses our proof, or cannot prove its own, gives STRATA_ERR_AUTH at once and
 * a log line naming its address. */

/* Connect, retrying until timeout_s (the server may not be up yet). */
int strata_store_connect(const char *addr, double timeout_s, strata_store **out);
/* A store that rank 0 of one communicator of job_id (nranks ranks) serves: it admits each rank
 * of that job once (store_wire.h: HELLO), so a later communicator of the job never uses it. */
int strata_store_server_start_job(const char *addr, const char *job_id, int nranks,
                                  strata_store_server **out);
int strata_store_server_start_job_auth(const char *addr, const char *secret, const char *job_id,
                                       int nranks, strata_store_server **out);
/* Connect as rank `rank` of nranks of job_id to the store its rank 0 serves: a store that serves an
 * earlier communicator of the job, or another job, is waited out until it closes, and the one
 * that replaces it is the one connected to (all within timeout_s). */
int strata_store_connect_job(const char *addr, const char *job_id, int rank, int nranks,
                             double timeout_s, strata_store **out);
int strata_store_connect_job_auth(const char *addr, const char *secret, const char *job_id,
                                  int rank, int nranks, double timeout_s, strata_store **out);
/* store_etcd.c: a store kept in an etcd cluster, url "etcd://HOST:PORT[,HOST:PORT...]" (the
 * members to try, in turn); values sealed with the key of (secret, job_id), keys under
 * "strata/<job>/". strata_store_connect_auth takes such a url too. */
#define STRATA_ETCD_SCHEME "etcd://"
int strata_store_is_etcd_url(const char *url);
int strata_store_connect_etcd(const char *url, const char *secret, const char *job_id,
                              double timeout_s, strata_store **out);
/* The store a communicator of cfg uses when nobody in it serves one: cfg->store_url when set
 * (STRATA_STORE), else cfg->store_addr. */
const char *strata_store_address(const strata_config *cfg);

/* env_names.c: whether `name` (len bytes) is a STRATA_* variable strata reads; and a warning,
 * once per process, for each STRATA_* variable of envp that is not, naming the closest real one
 * (strata_config_from_env calls it). */
int strata_env_name_known(const char *name, size_t len);
void strata_env_warn_unknown(char *const *envp);

/* Runs `len` bytes, as one connection sent them, through the server's request parser and
 * handlers (no socket, no thread; replies are discarded): for fuzzing (tests/fuzz/fuzz_store.c).
 * `authenticated` 0 starts the connection as a stranger that must send AUTH first (for the key
 * of the empty secret and a challenge of zeros). STRATA_OK if the server would keep the
 * connection open, STRATA_ERR_PROTOCOL if it would close it, STRATA_ERR_NO_MEMORY. */
int strata_store_server_feed(const uint8_t *bytes, size_t len, int authenticated);
/* A store whose calls go to the caller's callbacks (strata.h: strata_store_ops, copied). The
 * local host peers reach us at is this host's route towards rendezvous_host (may be NULL or ""
 * when unknown). */
int strata_store_from_ops(const strata_store_ops *ops, const char *rendezvous_host,
                          strata_store **out);
/* strata_store_set_if_absent on such a store: STRATA_ERR_UNSUPPORTED when the callbacks have no
 * set_if_absent. */

#endif
