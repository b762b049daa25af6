// SPDX-License-Identifier: Apache-2.0
/*
 * http_lite.h — one HTTP/1.1 connection that POSTs a body and reads the answer, for the etcd
 * store's gateway calls (store_etcd.c). Plain sockets, keep-alive, every step bounded by the
 * caller's deadline; answers of Content-Length or chunked encoding, at most HTTP_LITE_MAX_BODY
 * bytes, with headers of at most HTTP_LITE_MAX_HEADER bytes. Whatever the server sends is
 * checked before use: a server that breaks the protocol loses the connection, never crashes us.
 */
#ifndef STRATA_BOOT_HTTP_LITE_H
#define STRATA_BOOT_HTTP_LITE_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_LITE_MAX_HEADER (16u << 10)
#define HTTP_LITE_MAX_BODY (64u << 20)

typedef struct http_lite_conn {
  char host[256]; /* the endpoint: host name or address, and port */
  char port[16];
  int fd;              /* -1 when not connected */
  char local_host[64]; /* this end's address of the last connection made */
  char *in;            /* bytes read and not yet consumed */
  size_t in_len, in_cap;
} http_lite_conn;

/* "host:port" or "[v6]:port" into c (not connected). STRATA_OK or STRATA_ERR_INVALID_ARG. */
int http_lite_init(http_lite_conn *c, const char *endpoint);
/* Closes the connection (the next post connects again). */
void http_lite_close(http_lite_conn *c);

/* POSTs body (JSON) to path and reads the answer by deadline_s (CLOCK_MONOTONIC seconds, as
 * store_net_now_s). *status_code = the HTTP status, *out = the body (malloc'd, NUL-terminated,
 * *out_len bytes before the NUL). STRATA_OK whatever the HTTP status; STRATA_ERR_TIMEOUT,
 * STRATA_ERR_PEER_LOST (could not connect, closed, reset: *errno_out says why when known),
 * STRATA_ERR_PROTOCOL (not HTTP, too large) — each closing the connection. A kept-alive
 * connection found closed is replaced once, the request sent again: requests must be idempotent. */
int http_lite_post(http_lite_conn *c, const char *path, const char *body, size_t len,
                   double deadline_s, int *status_code, char **out, size_t *out_len,
                   int *errno_out);

#endif
