// SPDX-License-Identifier: Apache-2.0
/*
 * store_net.h — socket plumbing shared by the store's client (store.c) and server
 * (store_server.c): address parsing lives in store.h; this is the private rest.
 */
#ifndef STRATA_BOOT_STORE_NET_H
#define STRATA_BOOT_STORE_NET_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC seconds. */
double store_net_now_s(void);
/* Milliseconds from now until deadline_s for poll(): 0 when past, rounded up, capped. */
int store_net_poll_ms(double deadline_s);
/* O_NONBLOCK on; returns 0 or -1 (errno set). */
int store_net_set_nonblocking(int fd);
/* TCP_NODELAY on; best effort (the store sends small frames and waits for the answer). */
void store_net_set_nodelay(int fd);
/* "a.b.c.d" or "v6" of a socket address; "?" when it cannot be printed. */
void store_net_format_host(const void *sockaddr, char *host, size_t len);

/* The key a store connection proves: the job key (core/secret.c) of (secret, job_id), or a public
 * constant when there is no secret (store_wire.h: AUTH). */
int store_net_auth_key(const char *secret, const char *job_id, uint8_t key[32]);
/* One side's proof (store_wire.h: AUTH): BLAKE2b-256 keyed with key over (domain, challenge,
 * nonce). */
#define STORE_NET_CLIENT_DOMAIN "strata-store-client-v2"
#define STORE_NET_SERVER_DOMAIN "strata-store-server-v2"
void store_net_auth_mac(const uint8_t key[32], const char *domain, const uint8_t *challenge,
                        const uint8_t *nonce, uint8_t mac[32]);

#endif
