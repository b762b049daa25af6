// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_tune.h — per-socket tuning of the TCP transport's connections: congestion control
 * (STRATA_TCP_CC) and socket buffers sized from the bandwidth-delay product (STRATA_TCP_BUFFER,
 * STRATA_TCP_LINK_GBPS). tcp_tune.c says how.
 */
#ifndef STRATA_NET_TCP_TUNE_H
#define STRATA_NET_TCP_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "net/transport.h"
#include "strata.h"

/* STRATA_OK when cfg->tcp_congestion is "" or the kernel accepts it on a fresh socket; otherwise
 * STRATA_ERR_CONFIG with a sentence naming the value, the kernel's reason and the available
 * algorithms in `err`. */
int strata_tcp_tune_check(const strata_config *cfg, char *err, size_t err_len);

/* Before connect/listen: cfg->tcp_buffer_bytes when set explicitly, and the congestion control. */
void strata_tcp_tune_before_connect(const strata_config *cfg, int fd);

/* After the handshake of a connection to `peer`: the congestion control again (an accepted socket
 * inherits the listener's, re-applying costs nothing) and, in auto mode, buffers from the RTT the
 * kernel measured. Logs one line at info level: "tcp tune: peer P stream S cc=... rtt_us=...
 * sndbuf=... rcvbuf=...". Failures only log: the connection works either way. */
void strata_tcp_tune_established(const strata_config *cfg, int fd, int rank, int peer, int stream);

/* Auto-mode buffer per socket: R·T/S × 2 for a link of link_gbps (<= 0: the 10 Gbit/s default
 * guess), round trip rtt_us, `streams` streams per pair. Pure arithmetic (tests). */
size_t strata_tcp_tune_want_bytes(double link_gbps, unsigned rtt_us, int streams);

/* Auto mode's decision for one direction: the SO_SNDBUF/SO_RCVBUF to set for a want of `want`
 * bytes given autotuning's limit (net.ipv4.tcp_rmem[2] or tcp_wmem[2]) and net.core.rmem_max or
 * wmem_max, each 0 when it could not be read; 0 = leave the socket to the kernel's autotuning
 * (it gets there, reaches further than a fixed buffer could, or the limits are unknown). */
size_t strata_tcp_tune_buffer_bytes(size_t want, long autotune_max, long core_max);

/* A connection whose handshake RTT is at least this is a WAN connection (net/transport.h). */
#define STRATA_TCP_WAN_RTT_US STRATA_NET_WAN_RTT_US

/* TCP_NOTSENT_LOWAT for a connection of this RTT: 256 KiB on a WAN (rtt_us >= 1000), 0 = not
 * set on a LAN or loopback. */
/* With STRATA_TCP_CC unset and the system default `system_default`: the congestion control a
 * socket gets before it connects (connected = 0) and after its handshake measured `rtt_us`
 * (connected = 1). For bbr: cubic, and bbr again once connected over a WAN (rtt_us >= 1 ms);
 * NULL = the system's (tcp_tune.c, "LAN default"). */
const char *strata_tcp_tune_auto_congestion(const char *system_default, int connected,
                                            unsigned rtt_us);
int strata_tcp_tune_notsent_lowat_bytes(unsigned rtt_us);
/* A bbr connection `fd` that has never left its startup and has nothing in flight starts bbr
 * afresh, which paces from its congestion window instead of from the bursts it has seen
 * (tcp_tune.c says why). 1 when it did; 0 when it did not apply or could not start (nothing
 * changed); -1 when bbr could not be set again after reno (the connection runs reno). */
int strata_tcp_tune_bbr_restart(int fd);

/* The `field`-th (0-based) integer of a /proc/sys file ("/proc/sys/net/core/rmem_max", 0), or 0
 * when unreadable. */
long strata_tcp_sysctl_long(const char *path, int field);

/* Test hook: the congestion control of `fd` into out (""), STRATA_OK or STRATA_ERR_SYSTEM. */
int strata_tcp_congestion_get(int fd, char *out, size_t cap);

#endif
