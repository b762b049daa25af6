// SPDX-License-Identifier: Apache-2.0
/* forwarder.h — the userspace packet forwarder between emulated sites.
 *
 * Each site is a network namespace with one TUN device (site.h sets them up). The forwarder holds
 * every site's TUN file descriptor, reads the IPv4 packets each site sends into its TUN, finds the
 * destination site from the address (10.77.K.x is site K), runs the packet through the link of
 * that direction (link.h: queue, rate, loss, delay, jitter, reordering) and writes it into the
 * destination site's TUN when it is due. It is one thread around epoll; see forwarder.c.
 */
#ifndef STRATA_EMU_FORWARDER_H
#define STRATA_EMU_FORWARDER_H

#include <stdint.h>

#include "emu/link.h"

#define STRATA_EMU_MAX_SITES 64
#define STRATA_EMU_NET_OCTET_A 10 /* sites live in 10.77.0.0/16, site K in 10.77.K.0/24 */
#define STRATA_EMU_NET_OCTET_B 77
#define STRATA_EMU_MTU_MIN 576
#define STRATA_EMU_MTU_MAX 9000

typedef struct strata_emu_forwarder_config {
  int nsites;
  int tun_fds[STRATA_EMU_MAX_SITES];                                        /* non-blocking */
  strata_emu_link_params links[STRATA_EMU_MAX_SITES][STRATA_EMU_MAX_SITES]; /* [src][dst] */
  uint32_t mtu;
  uint32_t pool_packets; /* packets that may be queued or in flight at once; 0 = 65536 */
  uint64_t seed;
  const char *stats_path; /* rewritten about once a second and at exit; NULL = none */
  double lifetime_s;      /* stop by itself after this long; 0 = run until a signal */
  int ready_fd;           /* one byte is written here once running, then closed; -1 = none */
  int realtime_priority;  /* SCHED_FIFO priority (1..99) when possible; 0 = normal scheduling */
  int vnet_hdr; /* 1: every packet on the fds starts with a struct virtio_net_hdr and may be a
                 * TCP/IPv4 super-packet of up to 64 KiB (site.h offload); 0: plain IP packets */
} strata_emu_forwarder_config;

typedef enum strata_emu_forwarder_end {
  STRATA_EMU_END_ERROR = -1,
  STRATA_EMU_END_SIGNAL = 0,   /* SIGTERM, SIGINT or SIGHUP */
  STRATA_EMU_END_LIFETIME = 1, /* lifetime_s elapsed: the caller should tear the sites down */
} strata_emu_forwarder_end;

/* Runs the forwarder until a signal or the lifetime. Blocks SIGTERM/SIGINT/SIGHUP in the calling
 * thread (they are read through a signalfd); SIGUSR1 rewrites the stats file at once. Does not
 * close the TUN descriptors. Errors are written to stderr. */
strata_emu_forwarder_end strata_emu_forwarder_run(const strata_emu_forwarder_config *config);

#endif
