// SPDX-License-Identifier: Apache-2.0
/*
 * planner.h — the one header of the planner side, for the `strata` command and the tests.
 *
 * The planner side is everything a rank never needs: topology files and presets (topo/), link
 * matrices from `strata probe` (topo/linkmatrix.h), link physics, the cost model and the schedule
 * simulator (model/), the advisor, its lints and rank placement (plan/), and the WAN emulator
 * behind `strata netem` (emu/). It is a static library linked into the command; it may use the
 * runtime (libstrata), never the reverse. The command's files include this header and strata.h,
 * never the runtime's internal headers.
 */
#ifndef STRATA_PLANNER_H
#define STRATA_PLANNER_H

#include "strata.h"

#include "emu/forwarder.h"
#include "emu/link.h"
#include "emu/site.h"
#include "model/cipher.h"
#include "model/codec.h"
#include "model/cost.h"
#include "model/host.h"
#include "plan/place.h"
#include "plan/plan.h"
#include "topo/json.h"
#include "topo/linkmatrix.h"
#include "topo/nodes.h"
#include "topo/topo.h"

#endif
