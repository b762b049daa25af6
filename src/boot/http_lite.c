// SPDX-License-Identifier: Apache-2.0
/* http_lite.c — see http_lite.h. */
#include "boot/http_lite.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot/store_net.h"
#include "strata.h"

int http_lite_init(http_lite_conn *c, const char *endpoint) {
  memset(c, 0, sizeof *c);
  c->fd = -1;
  int port = 0;
  if (strata_store_addr_parse(endpoint, 0, c->host, sizeof c->host, &port, NULL, 0) != STRATA_OK ||
      port <= 0)
    return STRATA_ERR_INVALID_ARG;
  snprintf(c->port, sizeof c->port, "%d", port);
  return STRATA_OK;
}

void http_lite_close(http_lite_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->in_len = 0;
}

static int fail(http_lite_conn *c, int status) {
  http_lite_close(c);
  return status;
}

/* One non-blocking connect to every address of the endpoint in turn, by deadline_s. */
static int connect_endpoint(http_lite_conn *c, double deadline_s, int *errno_out) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *list = NULL;
  if (getaddrinfo(c->host, c->port, &hints, &list) != 0) {
    *errno_out = EHOSTUNREACH;
    return STRATA_ERR_PEER_LOST;
  }
  int status = STRATA_ERR_PEER_LOST;
  for (struct addrinfo *ai = list; ai && c->fd < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      *errno_out = errno;
      continue;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      int ready;
      do ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
      while (ready < 0 && errno == EINTR);
      int so_error = ready == 0 ? ETIMEDOUT : 0;
      socklen_t len = sizeof so_error;
      if (ready > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      rc = so_error ? -1 : 0;
      errno = so_error;
      if (ready == 0) status = STRATA_ERR_TIMEOUT;
    }
    if (rc != 0) {
      *errno_out = errno;
      close(fd);
      continue;
    }
    store_net_set_nodelay(fd);
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    if (getsockname(fd, (struct sockaddr *)&local, &local_len) == 0)
      store_net_format_host(&local, c->local_host, sizeof c->local_host);
    c->fd = fd;
    status = STRATA_OK;
  }
  freeaddrinfo(list);
  return status;
}

static int send_all(http_lite_conn *c, const char *buf, size_t len, double deadline_s,
                    int *errno_out) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      *errno_out = errno;
      return STRATA_ERR_PEER_LOST;
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
    int ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
    if (ready == 0) return STRATA_ERR_TIMEOUT;
    if (ready < 0 && errno != EINTR) return STRATA_ERR_SYSTEM;
  }
  return STRATA_OK;
}

/* Reads more input, by deadline_s, keeping at most limit bytes buffered. */
static int receive_some(http_lite_conn *c, size_t limit, double deadline_s, int *errno_out) {
  if (c->in_len >= limit) return STRATA_ERR_PROTOCOL;
  if (c->in_cap - c->in_len < 4096) {
    size_t cap = c->in_cap ? c->in_cap * 2 : 16384;
    char *in = realloc(c->in, cap + 1);
    if (!in) return STRATA_ERR_NO_MEMORY;
    c->in = in;
    c->in_cap = cap;
  }
  for (;;) {
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (n > 0) {
      c->in_len += (size_t)n;
      c->in[c->in_len] = '\0'; /* the status line is scanned as text */
      return STRATA_OK;
    }
    if (n == 0) return STRATA_ERR_PEER_LOST;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *errno_out = errno;
      return STRATA_ERR_PEER_LOST;
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
    if (ready == 0) return STRATA_ERR_TIMEOUT;
    if (ready < 0 && errno != EINTR) return STRATA_ERR_SYSTEM;
  }
}

/* Drops the first n buffered bytes. */
static void consume(http_lite_conn *c, size_t n) {
  memmove(c->in, c->in + n, c->in_len - n);
  c->in_len -= n;
  c->in[c->in_len] = '\0';
}

/* Waits until the buffer holds "\r\n" at or after `from`; its offset into *at. */
static int read_line(http_lite_conn *c, size_t from, size_t limit, double deadline_s, size_t *at,
                     int *errno_out) {
  for (;;) {
    for (size_t i = from; i + 1 < c->in_len; i++)
      if (c->in[i] == '\r' && c->in[i + 1] == '\n') {
        *at = i;
        return STRATA_OK;
      }
    int status = receive_some(c, limit, deadline_s, errno_out);
    if (status != STRATA_OK) return status;
  }
}

/* The value of header `name` within the header block [0, end), copied to value. */
static int header_value(const char *block, size_t end, const char *name, char *value, size_t len) {
  size_t name_len = strlen(name);
  for (size_t i = 0; i < end;) {
    const char *line = block + i, *eol = memchr(line, '\r', end - i);
    size_t line_len = eol ? (size_t)(eol - line) : end - i;
    if (line_len > name_len && line[name_len] == ':' && !strncasecmp(line, name, name_len)) {
      const char *v = line + name_len + 1;
      size_t n = line_len - name_len - 1;
      while (n && (*v == ' ' || *v == '\t')) v++, n--;
      snprintf(value, len, "%.*s", (int)n, v);
      return 1;
    }
    i += line_len + 2;
  }
  return 0;
}

/* A decimal or hexadecimal size no larger than max; -1 if not one. */
static long long parse_size(const char *text, int base, size_t max) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, base);
  if (end == text || errno || v < 0 || (unsigned long long)v > max) return -1;
  while (*end == ' ' || *end == '\t') end++;
  if (*end && *end != ';') return -1; /* chunk extensions follow a ';' */
  return v;
}

/* Appends n bytes from the buffer's front to *out. */
static int take(http_lite_conn *c, size_t n, char **out, size_t *out_len) {
  char *grown = realloc(*out, *out_len + n + 1);
  if (!grown) return STRATA_ERR_NO_MEMORY;
  *out = grown;
  memcpy(*out + *out_len, c->in, n);
  *out_len += n;
  (*out)[*out_len] = '\0';
  consume(c, n);
  return STRATA_OK;
}

static int read_exact(http_lite_conn *c, size_t n, double deadline_s, char **out, size_t *out_len,
                      int *errno_out) {
  while (n > 0) {
    if (c->in_len == 0) {
      int status = receive_some(c, HTTP_LITE_MAX_BODY, deadline_s, errno_out);
      if (status != STRATA_OK) return status;
    }
    size_t k = c->in_len < n ? c->in_len : n;
    int status = take(c, k, out, out_len);
    if (status != STRATA_OK) return status;
    n -= k;
  }
  return STRATA_OK;
}

static int read_chunked(http_lite_conn *c, double deadline_s, char **out, size_t *out_len,
                        int *errno_out) {
  for (;;) {
    size_t at;
    int status = read_line(c, 0, HTTP_LITE_MAX_HEADER, deadline_s, &at, errno_out);
    if (status != STRATA_OK) return status;
    char line[64];
    if (at >= sizeof line) return STRATA_ERR_PROTOCOL;
    memcpy(line, c->in, at);
    line[at] = '\0';
    consume(c, at + 2);
    long long size = parse_size(line, 16, HTTP_LITE_MAX_BODY - *out_len);
    if (size < 0) return STRATA_ERR_PROTOCOL;
    if (size == 0) break;
    status = read_exact(c, (size_t)size, deadline_s, out, out_len, errno_out);
    if (status == STRATA_OK) status = read_line(c, 0, 2, deadline_s, &at, errno_out);
    if (status != STRATA_OK) return status;
    if (at != 0) return STRATA_ERR_PROTOCOL;
    consume(c, 2);
  }
  for (;;) { /* trailers, up to the empty line */
    size_t at;
    int status = read_line(c, 0, HTTP_LITE_MAX_HEADER, deadline_s, &at, errno_out);
    if (status != STRATA_OK) return status;
    consume(c, at + 2);
    if (at == 0) return STRATA_OK;
  }
}

static int exchange(http_lite_conn *c, const char *path, const char *body, size_t len,
                    double deadline_s, int *status_code, char **out, size_t *out_len,
                    int *errno_out, int *keep) {
  char head[512];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n",
                   path, c->host, c->port, len);
  if (n < 0 || (size_t)n >= sizeof head) return STRATA_ERR_INVALID_ARG;
  int status = send_all(c, head, (size_t)n, deadline_s, errno_out);
  if (status == STRATA_OK) status = send_all(c, body, len, deadline_s, errno_out);
  /* the status line and headers, up to the empty line */
  size_t end = 0, at = 0;
  while (status == STRATA_OK) {
    status = read_line(c, end, HTTP_LITE_MAX_HEADER, deadline_s, &at, errno_out);
    if (status != STRATA_OK) break;
    if (at == end && end > 0) break;
    end = at + 2;
  }
  if (status != STRATA_OK) return status;
  int code = 0;
  if (sscanf(c->in, "HTTP/1.%*1d %3d", &code) != 1 || code < 100 || code > 599)
    return STRATA_ERR_PROTOCOL;
  char value[64];
  *keep =
      !(header_value(c->in, end, "Connection", value, sizeof value) && !strcasecmp(value, "close"));
  int chunked = header_value(c->in, end, "Transfer-Encoding", value, sizeof value) &&
                !strcasecmp(value, "chunked");
  long long length = -1;
  if (!chunked && header_value(c->in, end, "Content-Length", value, sizeof value)) {
    length = parse_size(value, 10, HTTP_LITE_MAX_BODY);
    if (length < 0) return STRATA_ERR_PROTOCOL;
  }
  consume(c, end + 2);
  *status_code = code;
  if (!(*out = calloc(1, 1))) return STRATA_ERR_NO_MEMORY;
  if (chunked) return read_chunked(c, deadline_s, out, out_len, errno_out);
  if (length >= 0) return read_exact(c, (size_t)length, deadline_s, out, out_len, errno_out);
  /* neither: the body runs to the end of the connection */
  *keep = 0;
  for (;;) {
    status = take(c, c->in_len, out, out_len);
    if (status != STRATA_OK) return status;
    status = receive_some(c, HTTP_LITE_MAX_BODY - *out_len, deadline_s, errno_out);
    if (status == STRATA_ERR_PEER_LOST) return STRATA_OK;
    if (status != STRATA_OK) return status;
  }
}

int http_lite_post(http_lite_conn *c, const char *path, const char *body, size_t len,
                   double deadline_s, int *status_code, char **out, size_t *out_len,
                   int *errno_out) {
  *out = NULL;
  *out_len = 0;
  *status_code = 0;
  *errno_out = 0;
  int status = STRATA_OK, keep = 1, reused = c->fd >= 0;
  if (!reused) {
    c->in_len = 0;
    status = connect_endpoint(c, deadline_s, errno_out);
  }
  if (status == STRATA_OK)
    status = exchange(c, path, body, len, deadline_s, status_code, out, out_len, errno_out, &keep);
  if (status == STRATA_ERR_PEER_LOST && reused) {
    /* a kept-alive connection the server closed while idle: once more on a fresh one (the
     * callers' requests are idempotent, so one that did arrive may arrive twice) */
    free(*out);
    *out = NULL;
    *out_len = 0;
    http_lite_close(c);
    status = connect_endpoint(c, deadline_s, errno_out);
    if (status == STRATA_OK)
      status =
          exchange(c, path, body, len, deadline_s, status_code, out, out_len, errno_out, &keep);
  }
  if (status != STRATA_OK) {
    free(*out);
    *out = NULL;
    *out_len = 0;
    return fail(c, status);
  }
  if (!keep) http_lite_close(c);
  return STRATA_OK;
}
