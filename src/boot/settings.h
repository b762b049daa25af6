// SPDX-License-Identifier: Apache-2.0
/*
 * settings.h — the one table of every environment variable strata reads or sets: its name, the
 * field it fills, how its value is parsed, its default and one line of documentation.
 *
 * The table drives strata_config_init (the defaults), strata_config_from_env and
 * strata_config_set (boot/env.c: the parsers), strata_kv_agent_create (the STRATA_KV_* rows) and
 * docs/config.md (tests/config_doc.c prints the tables that tests/test_config_doc.sh compares
 * with the page, and that scripts/config_doc.sh writes into it). A variable that is not
 * in the table is not read: tests/test_config_doc.sh fails on a STRATA_* name in src/ or tools/
 * that is missing here.
 */
#ifndef STRATA_BOOT_SETTINGS_H
#define STRATA_BOOT_SETTINGS_H

#include <stddef.h>
#include <stdio.h>

#include "strata.h"
#include "strata_kv.h"

typedef enum strata_setting_scope {
  STRATA_SETTING_CONFIG,   /* a field of strata_config: every rank reads it */
  STRATA_SETTING_KV,       /* read by strata_kv_agent_create: a strata_kv_config field or, without
                              one, a tuning of the process's KV agents */
  STRATA_SETTING_LAUNCHER, /* another launcher's (torchrun, OpenMPI, Slurm): boot/env.c */
  STRATA_SETTING_COMMAND,  /* read or set by the `strata` command, not by ranks */
  STRATA_SETTING_FOREIGN   /* another library's, which strata reads too (UCX) */
} strata_setting_scope;

typedef enum strata_setting_kind {
  STRATA_SETTING_INT,         /* an integer in [min, max] */
  STRATA_SETTING_U64,         /* an unsigned integer in [min, max] (no field: setting_u64) */
  STRATA_SETTING_BOOL,        /* 1/0, yes/no, true/false, on/off */
  STRATA_SETTING_SIZE,        /* bytes: 65536, 512K, 4M, 1G */
  STRATA_SETTING_WORD,        /* text without spaces that fits its field */
  STRATA_SETTING_SECRET,      /* text that fits its field, never printed */
  STRATA_SETTING_SECRET_FILE, /* a file holding the secret (fills `secret`) */
  STRATA_SETTING_ADDR,        /* HOST:PORT a client can connect to */
  STRATA_SETTING_SECONDS,     /* > 0, clamped to STRATA_TIMEOUT_MAX_S */
  STRATA_SETTING_SECONDS_OFF, /* >= 0, or "off" (0: no limit) */
  STRATA_SETTING_GBPS,        /* > 0 and <= 100000 */
  STRATA_SETTING_LOG,         /* strata_log_level */
  STRATA_SETTING_ALGO,        /* strata_algo */
  STRATA_SETTING_COMPRESS,    /* strata_compress, DEFAULT excluded */
  STRATA_SETTING_ENCRYPT,     /* strata_encrypt_mode */
  STRATA_SETTING_KV_BACKEND,  /* strata_kv_backend */
  STRATA_SETTING_TOPOLOGY,    /* refused unless STRATA_SITE is set too (env.c) */
  STRATA_SETTING_TEXT         /* not parsed by the library (launchers, the command, UCX) */
} strata_setting_kind;

typedef struct strata_setting {
  const char *name;  /* the variable */
  const char *field; /* the struct field it fills ("" for none) */
  size_t offset, size;
  strata_setting_scope scope;
  strata_setting_kind kind;
  long long min, max; /* INT, U64 */
  const char *value;  /* the default as a value of the variable (NULL: zero, nothing) */
  const char *doc;    /* one line for docs/config.md */
} strata_setting;

/* Every row, in the order the environment is read. */
const strata_setting *strata_settings(size_t *count);
/* The row of `name` ("STRATA_TIMEOUT"), NULL when none. */
const strata_setting *strata_setting_find(const char *name);
/* Parses `value` by the row into `base` + row->offset (base: a strata_config or
 * strata_kv_config; ignored for rows without a field). STRATA_OK, or STRATA_ERR_CONFIG with
 * "NAME=VALUE: expected ..." in err (err_len bytes, may be NULL). */
int strata_setting_parse(const strata_setting *row, const char *value, void *base, char *err,
                         size_t err_len);
/* The integer parser of INT rows, for the launchers' variables: *out in [min, max]. */
int strata_setting_parse_int(const char *name, const char *value, long min, long max, int *out,
                             char *err, size_t err_len);
/* "NAME=VALUE: expected EXPECTED" into err; returns STRATA_ERR_CONFIG. */
int strata_setting_error(const char *name, const char *value, const char *expected, char *err,
                         size_t err_len);
/* env.c: the caller's strata_config into `full` (this library's size: the defaults, then the
 * caller's fields), refusing one not from strata_config_init or from a newer strata (core/abi.h).
 * The error is logged and written to err (may be NULL). */
int strata_config_import(const strata_config *cfg, strata_config *full, char *err, size_t err_len);
/* strata_config's defaults, as the table gives them (header not set). */
void strata_settings_config_defaults(strata_config *cfg);
/* strata_kv_agent_create: every STRATA_KV_* variable that is set is checked, and one with a
 * strata_kv_config field fills it when `cfg` leaves it at its default. STRATA_OK or
 * STRATA_ERR_CONFIG (err says why). */
int strata_settings_kv(strata_kv_config *cfg, char *err, size_t err_len);
/* A KV tuning without a field (STRATA_KV_SYSCALL_BYTES, ...): the environment's value, or the
 * table's default when unset. strata_kv_agent_create refused an invalid one (a value made
 * invalid after that gives the default). 0 for a name not in the table. */
unsigned long long strata_setting_u64(const char *name);
/* docs/config.md's tables: one per scope, every row (markdown). */
void strata_settings_markdown(FILE *out);

#endif
