// SPDX-License-Identifier: Apache-2.0
/*
 * nccl_net_abi.h — the part of NCCL's network-plugin ABI that strata's plugin speaks, declared
 * here from NCCL's published description of it (plugins/net in NVIDIA/nccl): the version 8 table,
 * which NCCL 2.19 and later load, and the version 12 table, the newest NCCL 2.30 loads (it looks
 * for ncclNetPlugin_v12, then v11, v10, ... v6, and takes the first it finds). Layouts are
 * NCCL's, field for field: nothing may be added, removed or reordered here.
 *
 * Only what a host-memory network needs is used; the offload (device) handles are declared so
 * the tables line up and are always answered with "none".
 */
#ifndef STRATA_NCCLNET_ABI_H
#define STRATA_NCCLNET_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

enum { NCCL_INIT = 1, NCCL_NET = 16 }; /* the log subsystems this plugin writes under */

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void **event_handle, int type, void *parent_handle,
                                               int64_t plugin_id, void *extra);

#define NCCL_NET_HANDLE_MAXSIZE 128 /* bytes NCCL exchanges between ranks for one connection */
#define NCCL_NET_MAX_REQUESTS 32    /* requests a comm may have in flight */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_MAX_NET_SIZE_BYTES (1ll << 40) /* NCCL's own bound on one transfer (1 TiB) */
#define NCCL_NET_ID_UNDEF -1
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;

/* ---- version 8 ---- */

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport; /* NCCL_PTR_* */
  int regIsGlobal;
  int speed; /* Mbit/s */
  int port;
  float latency; /* microseconds; 0 = NCCL's own figure */
  int maxComms;
  int maxRecvs; /* buffers one irecv may group */
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(int dev, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v8_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v8_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                        void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
} ncclNet_v8_t;

/* ---- version 12 ---- */

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_v12_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v12_t;

typedef struct {
  ncclNetCommAttr_v12_t sendCommAttr;
  ncclNetCommAttr_v12_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v12_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                       ncclDebugLogger_t log, ncclProfilerCallback_t profiler);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v12_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v12_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *dev, ncclNetVDeviceProps_v12_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v12_t *attr);
} ncclNet_v12_t;

#endif
