// SPDX-License-Identifier: Apache-2.0
/*
 * plugin.h — strata's NCCL network plugin, independent of the ABI version (plugin.c); tables.c
 * adapts it to the version 8 and version 12 tables NCCL loads. Every function returns an
 * ncclResult_t and never blocks: NCCL's proxy thread polls connect, accept and test.
 */
#ifndef STRATA_NCCLNET_PLUGIN_H
#define STRATA_NCCLNET_PLUGIN_H

#include <stddef.h>

#include "ncclnet/nccl_net_abi.h"

enum { STRATA_NN_MAX_RECVS = 8 }; /* buffers one irecv may group (getProperties' maxRecvs) */

/* What getProperties reports, whatever the table's layout. */
typedef struct strata_nn_props {
  char *name;       /* "strata/<interface or host>", owned by the plugin */
  int speed_mbps;   /* STRATA_TCP_LINK_GBPS when given, else the interface's, else 10000 */
  float latency_us; /* 0: NCCL's own figure (the path's RTT is unknown before a connection) */
  int max_recvs;
  int max_comms;
  size_t max_bytes; /* largest transfer */
} strata_nn_props;

/* Reads strata's configuration once per process (STRATA_* variables, docs/nccl-plugin.md) and
 * derives the job key; later calls only take a newer logger. */
ncclResult_t strata_nn_init(ncclDebugLogger_t log);
ncclResult_t strata_nn_devices(int *ndev);
ncclResult_t strata_nn_properties(int dev, strata_nn_props *props);
ncclResult_t strata_nn_listen(int dev, void *handle, void **listen_comm);
/* *send_comm stays NULL until every stream is connected and authenticated: call again. */
ncclResult_t strata_nn_connect(int dev, void *handle, void **send_comm);
/* *recv_comm stays NULL until one peer's streams are all in and authenticated: call again. */
ncclResult_t strata_nn_accept(void *listen_comm, void **recv_comm);
ncclResult_t strata_nn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t strata_nn_dereg_mr(void *comm, void *mhandle);
/* *request NULL (and ncclSuccess): the comm has NCCL_NET_MAX_REQUESTS in flight; try later. */
ncclResult_t strata_nn_isend(void *send_comm, void *data, size_t size, int tag, void **request);
ncclResult_t strata_nn_irecv(void *recv_comm, int n, void **data, const size_t *sizes,
                             const int *tags, void **request);
/* Completes a request: *done = 1 and sizes[] (1 for a send, n for a receive: the bytes that
 * arrived in each buffer); the request is then gone. A failed request returns the error (and is
 * gone too). */
ncclResult_t strata_nn_test(void *request, int *done, int *sizes);
ncclResult_t strata_nn_close_send(void *send_comm);
ncclResult_t strata_nn_close_recv(void *recv_comm);
ncclResult_t strata_nn_close_listen(void *listen_comm);

#endif
