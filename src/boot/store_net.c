// SPDX-License-Identifier: Apache-2.0
/*
 * store_net.c — address parsing and small socket helpers for the rendezvous store.
 *
 * An address is "host:port": a name or IPv4 literal, a colon, a decimal port. IPv6 literals go in
 * brackets ("[fd00::2]:29500") because their colons would be ambiguous. Parsing is strict: a
 * user who writes "node1:29500x" or "node1" gets a sentence saying what was expected, never a
 * silent default.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "core/core.h"
#include "strata.h"

double store_net_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int store_net_poll_ms(double deadline_s) {
  double left_s = deadline_s - store_net_now_s();
  if (left_s <= 0) return 0;
  if (left_s > 3600.0) return 3600 * 1000;
  int ms = (int)(left_s * 1000.0);
  return (double)ms < left_s * 1000.0 ? ms + 1 : ms;
}

int store_net_set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return -1;
  return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void store_net_set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void store_net_format_host(const void *sockaddr, char *host, size_t len) {
  const struct sockaddr *sa = sockaddr;
  const void *raw = NULL;
  if (sa->sa_family == AF_INET) raw = &((const struct sockaddr_in *)sockaddr)->sin_addr;
  if (sa->sa_family == AF_INET6) raw = &((const struct sockaddr_in6 *)sockaddr)->sin6_addr;
  if (!raw || !inet_ntop(sa->sa_family, raw, host, (socklen_t)len)) snprintf(host, len, "?");
}

int store_net_auth_key(const char *secret, const char *job_id, uint8_t key[32]) {
  if (secret && secret[0]) return strata_secret_key(secret, job_id ? job_id : "", key);
  /* No secret: a public constant, so that stores and ranks agree whatever their job ids. Not
   * strata_secret_key("", ...), whose one-entry cache would then alternate between this key and
   * the data connections' and pay Argon2id again at every communicator. */
  static const char no_secret[] = "strata-store-no-secret-v2";
  crypto_generichash(key, 32, (const unsigned char *)no_secret, sizeof no_secret - 1, NULL, 0);
  return STRATA_OK;
}

void store_net_auth_mac(const uint8_t key[32], const char *domain, const uint8_t *challenge,
                        const uint8_t *nonce, uint8_t mac[32]) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, key, 32, 32);
  crypto_generichash_update(&st, (const unsigned char *)domain, strlen(domain) + 1);
  crypto_generichash_update(&st, challenge, STORE_WIRE_AUTH_BYTES);
  crypto_generichash_update(&st, nonce, STORE_WIRE_AUTH_BYTES);
  crypto_generichash_final(&st, mac, 32);
}

static int addr_error(char *err, size_t err_len, const char *addr, const char *what) {
  if (err && err_len) snprintf(err, err_len, "bad address '%s': %s", addr, what);
  return STRATA_ERR_INVALID_ARG;
}

static int parse_port(const char *text, int *port) {
  if (!*text || strlen(text) > 5) return -1;
  int value = 0;
  for (const char *c = text; *c; c++) {
    if (*c < '0' || *c > '9') return -1;
    value = value * 10 + (*c - '0');
  }
  if (value > 65535) return -1;
  *port = value;
  return 0;
}

int strata_store_addr_parse(const char *addr, int allow_empty_host, char *host, size_t host_len,
                            int *port, char *err, size_t err_len) {
  if (!addr || !host || !port || host_len == 0)
    return addr_error(err, err_len, addr ? addr : "(null)", "no address given");
  const char *host_begin = addr, *host_end, *port_text;
  if (addr[0] == '[') {
    host_begin = addr + 1;
    host_end = strchr(host_begin, ']');
    if (!host_end || host_end[1] != ':')
      return addr_error(err, err_len, addr, "expected [IPV6]:PORT");
    port_text = host_end + 2;
  } else {
    host_end = strrchr(addr, ':');
    if (!host_end) return addr_error(err, err_len, addr, "expected HOST:PORT (no ':' found)");
    if (memchr(addr, ':', (size_t)(host_end - addr)))
      return addr_error(err, err_len, addr, "an IPv6 host must be written [ADDR]:PORT");
    port_text = host_end + 1;
  }
  size_t n = (size_t)(host_end - host_begin);
  if (n == 0 && !allow_empty_host)
    return addr_error(err, err_len, addr, "expected HOST:PORT (the host is empty)");
  if (n >= host_len) return addr_error(err, err_len, addr, "the host name is too long");
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)host_begin[i] <= ' ')
      return addr_error(err, err_len, addr, "the host contains a space or control character");
  if (parse_port(port_text, port) != 0)
    return addr_error(err, err_len, addr, "the port must be a number from 0 to 65535");
  memcpy(host, host_begin, n);
  host[n] = '\0';
  return STRATA_OK;
}
