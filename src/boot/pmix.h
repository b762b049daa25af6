// SPDX-License-Identifier: Apache-2.0
/*
 * pmix.h — joining a job that a PMIx launcher started (OpenMPI's mpirun, Slurm's
 * `srun --mpi=pmix`, PRRTE's prterun) with no STRATA_* configuration: the rank, the world size,
 * the address of the job's store and the job secret come through the launcher's PMIx server
 * (boot/pmix.c says how).
 */
#ifndef STRATA_BOOT_PMIX_H
#define STRATA_BOOT_PMIX_H

#include "strata.h"

/* 1 when this process should rendezvous through PMIx: strata was built with PMIx support, the
 * launcher set PMIX_RANK and PMIX_NAMESPACE, and none of STRATA_RANK, STRATA_ADDR, RANK and
 * MASTER_ADDR is set (strata launch, an explicit configuration and torchrun, whose ranks inherit
 * a PMIx launcher's variables when torchrun runs under srun, all name the job themselves). Reads
 * only the environment: the planner and env.c call it without loading libpmix. */
int strata_pmix_launched(void);

/* The namespace the launcher gave the job (PMIX_NAMESPACE), or NULL. */
const char *strata_pmix_namespace(void);

/* The rendezvous of a world communicator through PMIx: fills cfg's rank and world size from the
 * PMIx server (a value already in cfg must agree), and its store_addr and, when empty, its secret
 * from rank 0, which serves the store: *server is that store on rank 0 (the caller owns it: it
 * stops it with strata_store_server_stop) and NULL elsewhere. Collective over every process of
 * the namespace (one PMIx fence), bounded by cfg->timeout_s. *round numbers this rendezvous among
 * the process's (every process makes them in the same order). STRATA_ERR_UNSUPPORTED in a build
 * without PMIx, STRATA_ERR_CONFIG where libpmix.so.2 cannot be loaded or its server reached;
 * every error is logged. */
int strata_pmix_rendezvous(strata_config *cfg, strata_store_server **server, unsigned *round);

/* The store a world communicator that strata_pmix_rendezvous started gives its transports: the
 * data-connection addresses ("<prefix>/addr/<rank>", net/tcp_mesh.c) go through PMIx — this
 * rank's is put and committed, a peer's is fetched from that peer's PMIx server when first
 * needed — and every other key goes to `inner`. An address also goes to `inner`, and one PMIx
 * cannot give is read there, so a server without direct fetches costs speed, not the job.
 * Ranks must be the namespace's (a world communicator's, never a split's); `round` is the
 * rendezvous's (a later world's store starts its counters again, so its keys repeat). *out is
 * closed with strata_store_close, which leaves `inner` open. STRATA_ERR_UNSUPPORTED without PMIx.
 */
int strata_pmix_address_book(strata_store *inner, int rank, unsigned round, strata_store **out);

#endif
