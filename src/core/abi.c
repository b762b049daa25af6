// SPDX-License-Identifier: Apache-2.0
/*
 * abi.c — importing and exporting the public option structs by their header (abi.h).
 */
#include "core/abi.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

int strata_version_number(void) {
  return STRATA_VERSION_NUMBER;
}

void strata_struct_init(void *user, const void *defaults, size_t full_size, size_t struct_size,
                        int header_version) {
  if (!user || struct_size < sizeof(strata_struct_header)) return;
  size_t known = struct_size < full_size ? struct_size : full_size;
  memcpy(user, defaults, known);
  if (struct_size > known) memset((char *)user + known, 0, struct_size - known);
  strata_struct_header *h = user;
  h->struct_size = struct_size;
  h->struct_magic = STRATA_STRUCT_MAGIC;
  h->struct_version = (uint32_t)header_version;
}

static int refuse(int status, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int refuse(int status, char *err, size_t err_len, const char *fmt, ...) {
  char text[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  STRATA_LOG(STRATA_LOG_ERROR, -1, "%s", text);
  if (err && err_len) snprintf(err, err_len, "%s", text);
  return status;
}

int strata_struct_import(const void *user, void *full, size_t full_size, const char *what,
                         const char *init, char *err, size_t err_len) {
  if (!user) return STRATA_ERR_INVALID_ARG;
  strata_struct_header h;
  memcpy(&h, user, sizeof h);
  if (h.struct_magic != STRATA_STRUCT_MAGIC || h.struct_size < sizeof h)
    return refuse(STRATA_ERR_INVALID_ARG, err, err_len,
                  "%s was not filled by %s(): call it first, then change the fields", what, init);
  if (h.struct_size > full_size) {
    unsigned v = h.struct_version;
    return refuse(STRATA_ERR_VERSION, err, err_len,
                  "%s of %zu bytes (built against strata %u.%u.%u) is larger than this "
                  "library's (%zu bytes, strata %s): a program built against a newer strata "
                  "needs that libstrata or a newer one",
                  what, h.struct_size, v / 10000, v / 100 % 100, v % 100, full_size,
                  strata_version());
  }
  memcpy(full, user, h.struct_size);
  return STRATA_OK;
}

void strata_struct_export(void *user, const void *full) {
  strata_struct_header h;
  memcpy(&h, user, sizeof h);
  memcpy(user, full, h.struct_size);
}
