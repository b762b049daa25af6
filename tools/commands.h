// SPDX-License-Identifier: Apache-2.0
/* commands.h — the subcommands of the `strata` command, one file each under tools/. Each takes
 * argv after the subcommand name (argv[0] is the subcommand) and returns the process exit
 * status: 0 success, 1 a failed run, 2 bad usage or bad input. */
#ifndef STRATA_TOOLS_COMMANDS_H
#define STRATA_TOOLS_COMMANDS_H

#include "strata.h"

int strata_cmd_launch(int argc, char **argv); /* tools/launch.c */
int strata_cmd_store(int argc, char **argv);  /* tools/store.c  */
int strata_cmd_bench(int argc, char **argv);  /* tools/bench.c  */
int strata_cmd_plan(int argc, char **argv);   /* tools/plan.c   */
int strata_cmd_demo(int argc, char **argv);   /* tools/demo.c   */
int strata_cmd_probe(int argc, char **argv);  /* tools/probe.c  */
int strata_cmd_place(int argc, char **argv);  /* tools/place.c  */
int strata_cmd_netem(int argc, char **argv);  /* tools/netem.c  */
int strata_cmd_site(int argc, char **argv);   /* tools/site.c   */
int strata_cmd_doctor(int argc, char **argv); /* tools/doctor.c */

/* `strata demo layer4` on a joined communicator (tools/demo_layer4.c); an exit status. */
int demo_layer4(strata_comm *comm);

#endif
