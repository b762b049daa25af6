// SPDX-License-Identifier: Apache-2.0
/*
 * hier.h — the hierarchical (site-aware) builders of hier.c, for schedule.c's dispatch table.
 */
#ifndef STRATA_COLL_HIER_H
#define STRATA_COLL_HIER_H

#include "coll/schedule.h"

int strata_build_allreduce_hier(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_scatter_hier(const strata_sched_params *p, strata_schedule *s);
int strata_build_allgather_hier(const strata_sched_params *p, strata_schedule *s);
int strata_build_broadcast_hier(const strata_sched_params *p, strata_schedule *s);
/* 1 when site_of_rank names >= 2 sites and some site holds >= 2 ranks (AUTO may pick HIER). */
int strata_hier_applies(const strata_sched_params *p);

#endif
