// SPDX-License-Identifier: Apache-2.0
/*
 * calibrate.h — measure, inside a running job, the links of the host model (src/model/host.h)
 * for `strata bench --predict`, through the public API only.
 */
#ifndef STRATA_TOOLS_CALIBRATE_H
#define STRATA_TOOLS_CALIBRATE_H

#include <stddef.h>

#include "planner.h"

/* Fill `out` for `comm` (collective: every rank calls it, in the same order as its other
 * collectives). The reduction is timed on `dtype` and `op`. a and b are the caller's buffers,
 * `bytes` each (at least STRATA_HOST_CALIBRATE_BYTES, not overlapping; malloc'd or from
 * strata_mem_alloc): the ones the calls to be predicted will use, because which pages a buffer
 * got decides part of its rates on a host whose caches and memory are shared. Their contents are
 * overwritten. Each figure is the slowest rank's. Returns STRATA_OK or the error of a failed
 * collective; a rank passing NULL fails it on every rank (STRATA_ERR_NO_MEMORY), one passing a
 * smaller size likewise (STRATA_ERR_INVALID_ARG). */
int calibrate_host(strata_comm *comm, strata_dtype dtype, strata_op op, void *a, void *b,
                   size_t bytes, strata_host_links *out);

#endif
