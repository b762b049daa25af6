// SPDX-License-Identifier: Apache-2.0
/*
 * shm.h — the shared-memory transport between ranks of one host. The design is told in its files:
 * shm_wire.h (the layout of segments and records), shm_ring.c (messages through the rings),
 * shm_pull.c (single-copy pulls of large messages) and shm_setup.c (segments, rendezvous,
 * liveness and aborts).
 */
#ifndef STRATA_NET_SHM_H
#define STRATA_NET_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"
#include "net/transport.h"
#include "strata.h"

/* Set up shared memory with every peer q where is_local[q] != 0 (is_local[rank] is ignored).
 * Collective over exactly those ranks: uses the store (keys under "<job_id>/shm/") to exchange
 * where each segment is (segments are memfds, opened by peers through /proc/<pid>/fd, so nothing
 * ever appears in /dev/shm, even after a crash) and to agree that every local peer mapped them.
 * On success *out is the transport (its post_* calls accept only local peers). */
int strata_shm_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    const int *is_local, strata_transport **out, char *err, size_t err_len);

/* 1 if large messages to `peer` (32 KiB and more) go by cross-memory attach (process_vm_readv), 0
 * if everything streams through the ring (CMA forbidden, or STRATA_SHM_CMA=0), or t is not shm.
 * The same as ops->query(STRATA_TRANSPORT_SINGLE_COPY). */
int strata_shm_uses_cma(const strata_transport *t, int peer);

/* Bytes this transport received by reading a peer's strata_mem_alloc memory through a mapping
 * (no process_vm_readv); 0 if t is not shm. */
uint64_t strata_shm_mapped_bytes(const strata_transport *t);

#endif
