// SPDX-License-Identifier: Apache-2.0
/*
 * weights_debug.h — fault injection and test hooks for tests/test_weights.c, not part of the
 * public API: the tests link the runtime's objects and so reach these hidden functions.
 */
#ifndef STRATA_TRAIN_WEIGHTS_DEBUG_H
#define STRATA_TRAIN_WEIGHTS_DEBUG_H

#include "strata.h"

/* The process raises SIGKILL once it has sent (publisher) or received (subscriber) this many
 * chunks of a round's stream: a death in the middle of an update. */
void weights_debug_die_after_chunks(strata_weights *w, long chunks);

#define WEIGHTS_CORRUPT_VALUE                                                                \
  1                             /* one new value's low bit, before compression: decodes, and \
                                   only the digest can tell */
#define WEIGHTS_CORRUPT_FRAME 2 /* one byte of the compressed frame, as a bad link would */
/* The next published patch is damaged after its digests were taken. */
void weights_debug_corrupt_next(strata_weights *w, int how);

/* The plan takes this name for the handle's host instead of the process's host identity, so
 * one machine's ranks can stand for several hosts (NULL or "": the real identity again). */
void weights_debug_host(strata_weights *w, const char *host);
/* The rank that sent this subscriber the stream in its last round (-1: none). */
int weights_debug_parent(const strata_weights *w);

#endif
