// SPDX-License-Identifier: Apache-2.0
/* bench_kv.c — `strata bench kv`: the KV transfer benchmark, bench/kv/kv_bench.c, compiled into
 * the command without its main (tools/bench.c dispatches to strata_kv_bench_main). One source
 * for both, so the command and build/strata-kv-bench cannot drift apart. It uses the runtime's
 * public API (strata_kv.h) alone. */
#define STRATA_KV_BENCH_COMMAND
#include "../bench/kv/kv_bench.c"
