// SPDX-License-Identifier: Apache-2.0
/*
 * chunk.h — the pipelining chunk of a communicator's collectives, from the path its data takes.
 */
#ifndef STRATA_ENGINE_CHUNK_H
#define STRATA_ENGINE_CHUNK_H

#include <stdint.h>

/* Pipelining chunk for a path of round trip rtt_us (the TCP handshake's, 0 = unknown).
 * rtt_us < STRATA_NET_WAN_RTT_US (LAN, loopback, unknown): lan_chunk_bytes, or, when link_gbps
 * > 0 is given, enough for R x 1.5 RTT over STRATA_SCHED_RING_CHUNKS_IN_FLIGHT chunks in whole
 * 64 KiB, within [lan_chunk_bytes, 4 MiB]. A WAN path: the power of two (from 1 MiB) that holds
 * one bandwidth-delay product R x RTT, so the ring's STRATA_SCHED_RING_CHUNKS_IN_FLIGHT chunks in
 * flight per direction cover 4-8 of them (propagation, loss repair and the streams' own
 * windows; chunk.c says why), R = link_gbps or, unknown (<= 0), 1 Gbit/s; within
 * [lan_chunk_bytes, 16 MiB]. Pure arithmetic (tests/test_tcp_sizing.c). */
uint64_t strata_chunk_for_path(unsigned rtt_us, double link_gbps, uint64_t lan_chunk_bytes);

#endif
