// SPDX-License-Identifier: Apache-2.0
/*
 * status.c — names and sentences for every strata_status code.
 *
 * One table, indexed by -status, is the only place a code is described; strata.h documents the
 * same meanings beside the enum. Both functions return static strings and never NULL, so a caller
 * may print them for any int it got back, including codes from a newer library.
 */
#include "strata.h"

typedef struct status_text {
  const char *name;
  const char *sentence;
} status_text;

static const status_text status_table[] = {
    [-STRATA_OK] = {"STRATA_OK", "ok: the operation succeeded"},
    [-STRATA_ERR_INVALID_ARG] = {"STRATA_ERR_INVALID_ARG",
                                 "invalid argument: a NULL pointer, bad rank, bad dtype or op, or "
                                 "a count that overflows"},
    [-STRATA_ERR_NO_MEMORY] = {"STRATA_ERR_NO_MEMORY", "out of memory: an allocation failed"},
    [-STRATA_ERR_SYSTEM] = {"STRATA_ERR_SYSTEM",
                            "system error: an operating-system call failed (the log says which)"},
    [-STRATA_ERR_TIMEOUT] = {"STRATA_ERR_TIMEOUT",
                             "timeout: a peer fell silent for STRATA_TIMEOUT, or an operation made "
                             "no progress for STRATA_OP_TIMEOUT"},
    [-STRATA_ERR_PEER_LOST] = {"STRATA_ERR_PEER_LOST",
                               "peer lost: a peer closed its connection or died"},
    [-STRATA_ERR_MISMATCH] = {"STRATA_ERR_MISMATCH",
                              "mismatch: ranks called different collectives, counts, types or "
                              "ops"},
    [-STRATA_ERR_AUTH] = {"STRATA_ERR_AUTH",
                          "authentication failed: the peer does not know the job secret"},
    [-STRATA_ERR_VERSION] = {"STRATA_ERR_VERSION",
                             "version mismatch: the peer speaks another protocol version"},
    [-STRATA_ERR_JOB] = {"STRATA_ERR_JOB", "wrong job: the peer belongs to another job"},
    [-STRATA_ERR_PROTOCOL] = {"STRATA_ERR_PROTOCOL",
                              "protocol error: a malformed or unexpected message arrived"},
    [-STRATA_ERR_ABORTED] = {"STRATA_ERR_ABORTED",
                             "aborted: the communicator was aborted by an earlier error"},
    [-STRATA_ERR_UNSUPPORTED] = {"STRATA_ERR_UNSUPPORTED",
                                 "unsupported: the combination asked for is not implemented"},
    [-STRATA_ERR_CONFIG] = {"STRATA_ERR_CONFIG",
                            "configuration error: a configuration value or environment variable "
                            "is invalid"},
    [-STRATA_ERR_PARSE] = {"STRATA_ERR_PARSE", "parse error: an input file is malformed"},
    [-STRATA_ERR_NOT_FOUND] = {"STRATA_ERR_NOT_FOUND",
                               "not found: a key, file or name does not exist"},
    [-STRATA_ERR_IN_PROGRESS] = {"STRATA_ERR_IN_PROGRESS",
                                 "in progress: the request has not completed yet"},
    [-STRATA_ERR_REVOKED] = {"STRATA_ERR_REVOKED",
                             "revoked: the communicator was revoked here or by a peer; shrink it "
                             "to go on"},
    [-STRATA_ERR_EXCLUDED] = {"STRATA_ERR_EXCLUDED",
                              "excluded: the survivors agreed on a group without this rank; join "
                              "again"},
    [-STRATA_ERR_QUOTA] = {"STRATA_ERR_QUOTA",
                           "quota: the store refused the value: it would pass the store's quota "
                           "(STRATA_STORE_QUOTA) or one connection's share of it"},
};

_Static_assert(sizeof status_table / sizeof status_table[0] == 1 - STRATA_STATUS_MIN,
               "every strata_status code needs a row in status_table");

static const status_text *status_lookup(int status) {
  if (status > 0 || status < STRATA_STATUS_MIN) return NULL;
  const status_text *text = &status_table[-status];
  return text->name ? text : NULL;
}

const char *strata_strerror(int status) {
  const status_text *text = status_lookup(status);
  return text ? text->sentence : "unknown status";
}

const char *strata_err_name(int status) {
  const status_text *text = status_lookup(status);
  return text ? text->name : "STRATA_ERR_UNKNOWN";
}

const char *strata_version(void) {
  return STRATA_VERSION_STRING;
}
