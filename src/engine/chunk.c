// SPDX-License-Identifier: Apache-2.0
/*
 * chunk.c — the pipelining chunk from the path's round trip and rate (chunk.h).
 *
 * This is the engine's policy, not the transport's: the transport measures the RTT
 * (strata_tcp_data_rtt_us), the schedule builders say how many chunks a ring keeps in flight
 * (STRATA_SCHED_RING_CHUNKS_IN_FLIGHT), and here the two meet.
 */
#include "engine/chunk.h"

#include <math.h>

#include "coll/schedule.h"
#include "net/transport.h"

/* The WAN rate assumed when STRATA_TCP_LINK_GBPS is not given: what tenants measure between
 * cloud regions (Oregon-Virginia 0.79, Virginia-Ohio 1.12 Gbit/s, DS3Lab/DT-FM scheduler config).
 * Too low a guess costs loss resilience, too high one pipeline fill time. */
static const double CHUNK_WAN_DEFAULT_GBPS = 1.0;
static const uint64_t CHUNK_WAN_MAX_BYTES = 16u << 20;
/* LAN chunks sized from a given link rate: whole multiples of 64 KiB, at most 4 MiB. */
static const double CHUNK_LAN_UNIT_BYTES = 64.0 * 1024.0;
static const uint64_t CHUNK_LAN_MAX_BYTES = 4u << 20;

uint64_t strata_chunk_for_path(unsigned rtt_us, double link_gbps, uint64_t lan_chunk_bytes) {
  if (rtt_us < STRATA_NET_WAN_RTT_US) {
    /* A LAN: the small chunk unless the user gave the link rate and its bandwidth-delay product
     * needs more in flight (100 Gbit/s x 60 us x 1.5 over 4 chunks: 320 KiB). */
    if (!(link_gbps > 0)) return lan_chunk_bytes;
    double chunk =
        link_gbps * 1e9 / 8.0 * (double)rtt_us * 1e-6 * 1.5 / STRATA_SCHED_RING_CHUNKS_IN_FLIGHT;
    uint64_t bytes = (uint64_t)ceil(chunk / CHUNK_LAN_UNIT_BYTES) * (uint64_t)CHUNK_LAN_UNIT_BYTES;
    if (bytes > CHUNK_LAN_MAX_BYTES) bytes = CHUNK_LAN_MAX_BYTES;
    return bytes > lan_chunk_bytes ? bytes : lan_chunk_bytes;
  }
  /* A WAN: one chunk holds a whole bandwidth-delay product (the next power of two), so the
   * ring's chunks in flight cover 4-8 of them. The LAN rule (R x 1.5 RTT over the window) keeps
   * too little in flight on a long link: propagation, loss repair and the streams' own windows
   * each need most of a BDP, and a transfer with no pipeline at all fills the link better than
   * a ring with chunks that small. */
  double gbps = link_gbps > 0 ? link_gbps : CHUNK_WAN_DEFAULT_GBPS;
  double bdp = gbps * 1e9 / 8.0 * (double)rtt_us * 1e-6;
  uint64_t bytes = 1u << 20;
  while (bytes < CHUNK_WAN_MAX_BYTES && (double)bytes < bdp) bytes <<= 1;
  return bytes > lan_chunk_bytes ? bytes : lan_chunk_bytes;
}
