// SPDX-License-Identifier: Apache-2.0
/*
 * tables.c — the two tables this library exports, and nothing else (ncclnet.map): version 12,
 * which NCCL 2.30 looks for first, and version 8, which every NCCL from 2.19 on still loads. Both
 * call the same plugin (plugin.c); only argument widths and the properties' layout differ.
 */
#include <string.h>

#include "ncclnet/nccl_net_abi.h"
#include "ncclnet/plugin.h"

#define STRATA_NN_EXPORT __attribute__((visibility("default")))
#define STRATA_NN_NAME "strata"

/* ---- shared by both ---- */

static ncclResult_t nn_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                     int fd, void **mhandle) {
  (void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd, (void)mhandle;
  return ncclInternalError; /* host memory only: no DMA-BUF */
}

static ncclResult_t nn_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  if (!request) return ncclInvalidArgument;
  *request = NULL; /* host memory is what the socket wrote: nothing to make visible */
  return ncclSuccess;
}

static ncclResult_t nn_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle) {
  (void)comm, (void)mhandle, (void)dptr_mhandle;
  return ncclInternalError; /* no device offload */
}

static ncclResult_t nn_irecv_consumed(void *recv_comm, int n, void *request) {
  (void)recv_comm, (void)n, (void)request;
  return ncclSuccess;
}

/* The fields every table version's properties share, under the same names (the structs differ
 * in what follows them). */
#define FILL_COMMON_PROPERTIES(props, p)           \
  do {                                             \
    memset((props), 0, sizeof *(props));           \
    (props)->name = (p).name;                      \
    (props)->ptrSupport = NCCL_PTR_HOST;           \
    (props)->speed = (p).speed_mbps;               \
    (props)->latency = (p).latency_us;             \
    (props)->maxComms = (p).max_comms;             \
    (props)->maxRecvs = (p).max_recvs;             \
    (props)->netDeviceType = NCCL_NET_DEVICE_HOST; \
  } while (0)

/* ---- version 8 ---- */

static ncclResult_t v8_init(ncclDebugLogger_t log) {
  return strata_nn_init(log);
}

static ncclResult_t v8_properties(int dev, ncclNetProperties_v8_t *props) {
  strata_nn_props p;
  if (!props) return ncclInvalidArgument;
  ncclResult_t rc = strata_nn_properties(dev, &p);
  if (rc != ncclSuccess) return rc;
  FILL_COMMON_PROPERTIES(props, p);
  return ncclSuccess;
}

static ncclResult_t v8_connect(int dev, void *handle, void **send_comm,
                               ncclNetDeviceHandle_v8_t **send_dev_comm) {
  if (send_dev_comm) *send_dev_comm = NULL;
  return strata_nn_connect(dev, handle, send_comm);
}

static ncclResult_t v8_accept(void *listen_comm, void **recv_comm,
                              ncclNetDeviceHandle_v8_t **recv_dev_comm) {
  if (recv_dev_comm) *recv_dev_comm = NULL;
  return strata_nn_accept(listen_comm, recv_comm);
}

static ncclResult_t v8_isend(void *send_comm, void *data, int size, int tag, void *mhandle,
                             void **request) {
  (void)mhandle;
  if (size < 0) return ncclInvalidArgument;
  return strata_nn_isend(send_comm, data, (size_t)size, tag, request);
}

static ncclResult_t v8_irecv(void *recv_comm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request) {
  (void)mhandles;
  size_t wide[STRATA_NN_MAX_RECVS];
  if (n < 1 || n > STRATA_NN_MAX_RECVS || !sizes) return ncclInvalidArgument;
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    wide[i] = (size_t)sizes[i];
  }
  return strata_nn_irecv(recv_comm, n, data, wide, tags, request);
}

STRATA_NN_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = STRATA_NN_NAME,
    .init = v8_init,
    .devices = strata_nn_devices,
    .getProperties = v8_properties,
    .listen = strata_nn_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .regMr = strata_nn_reg_mr,
    .regMrDmaBuf = nn_reg_mr_dmabuf,
    .deregMr = strata_nn_dereg_mr,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = nn_iflush,
    .test = strata_nn_test,
    .closeSend = strata_nn_close_send,
    .closeRecv = strata_nn_close_recv,
    .closeListen = strata_nn_close_listen,
    .getDeviceMr = nn_get_device_mr,
    .irecvConsumed = nn_irecv_consumed,
};

/* ---- version 12 ---- */

/* NCCL's context per communicator: the plugin keeps none of its own, any non-NULL value does. */
static char nn_context;

static ncclResult_t v12_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                             ncclDebugLogger_t log, ncclProfilerCallback_t profiler) {
  (void)comm_id, (void)config, (void)profiler;
  if (ctx) *ctx = &nn_context;
  return strata_nn_init(log);
}

static ncclResult_t v12_properties(int dev, ncclNetProperties_v12_t *props) {
  strata_nn_props p;
  if (!props) return ncclInvalidArgument;
  ncclResult_t rc = strata_nn_properties(dev, &p);
  if (rc != ncclSuccess) return rc;
  FILL_COMMON_PROPERTIES(props, p);
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = p.max_bytes;
  props->maxCollBytes = p.max_bytes;
  props->maxMultiRequestSize = 1;
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

static ncclResult_t v12_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  (void)ctx;
  return strata_nn_listen(dev, handle, listen_comm);
}

static ncclResult_t v12_connect(void *ctx, int dev, void *handle, void **send_comm,
                                ncclNetDeviceHandle_v12_t **send_dev_comm) {
  (void)ctx;
  if (send_dev_comm) *send_dev_comm = NULL;
  return strata_nn_connect(dev, handle, send_comm);
}

static ncclResult_t v12_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void *phandle, void **request) {
  (void)mhandle, (void)phandle;
  return strata_nn_isend(send_comm, data, size, tag, request);
}

static ncclResult_t v12_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request) {
  (void)mhandles, (void)phandles;
  return strata_nn_irecv(recv_comm, n, data, sizes, tags, request);
}

static ncclResult_t v12_make_vdevice(int *dev, ncclNetVDeviceProps_v12_t *props) {
  (void)dev, (void)props;
  return ncclInvalidUsage; /* one device: nothing to fuse */
}

static ncclResult_t v12_finalize(void *ctx) {
  (void)ctx;
  return ncclSuccess;
}

static ncclResult_t v12_set_net_attr(void *ctx, ncclNetAttr_v12_t *attr) {
  (void)ctx, (void)attr;
  return ncclSuccess; /* the streams per connection are STRATA_TCP_STREAMS' */
}

STRATA_NN_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = STRATA_NN_NAME,
    .init = v12_init,
    .devices = strata_nn_devices,
    .getProperties = v12_properties,
    .listen = v12_listen,
    .connect = v12_connect,
    .accept = v8_accept,
    .regMr = strata_nn_reg_mr,
    .regMrDmaBuf = nn_reg_mr_dmabuf,
    .deregMr = strata_nn_dereg_mr,
    .isend = v12_isend,
    .irecv = v12_irecv,
    .iflush = nn_iflush,
    .test = strata_nn_test,
    .closeSend = strata_nn_close_send,
    .closeRecv = strata_nn_close_recv,
    .closeListen = strata_nn_close_listen,
    .getDeviceMr = nn_get_device_mr,
    .irecvConsumed = nn_irecv_consumed,
    .makeVDevice = v12_make_vdevice,
    .finalize = v12_finalize,
    .setNetAttr = v12_set_net_attr,
};
