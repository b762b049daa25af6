// SPDX-License-Identifier: Apache-2.0
/*
 * query.h — what the layers above the engine (train/, serve/) may ask a communicator beyond
 * strata.h. The communicator's struct is the engine's alone (engine.h): a layer above reads it
 * through these calls and the public ones (strata_comm_config, strata_comm_site, ...), so the
 * engine can change its inside without them.
 */
#ifndef STRATA_ENGINE_QUERY_H
#define STRATA_ENGINE_QUERY_H

#include "strata.h"

/* The longest round trip (microseconds) any of this rank's data connections measured at its
 * handshake, when that is a WAN one (at least STRATA_NET_WAN_RTT_US, net/transport.h); 0 on a
 * LAN, over loopback or shared memory, and for a communicator of one rank. */
unsigned strata_comm_wan_rtt_us(const strata_comm *comm);

#endif
