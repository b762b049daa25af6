#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bench_torchrun.sh BUILD_DIR — the unchanged `strata bench` program under torchrun (torch
# 1.13: --no_python, --master_port; our store is MASTER_PORT+1): the nccl-tests table, every
# #wrong 0. Skipped without torch.
# --redirects 2 --tee 2: torch 1.13's Std.from_str("0") returns None under Python 3.11 (IntFlag
# no longer iterates the zero member), so the default "0" crashes the agent; 2 (stderr) parses
# and leaves stdout, the table, untouched.
set -uo pipefail
build=${1:?usage: test_bench_torchrun.sh BUILD_DIR}
strata=$build/strata
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$strata" ] || { echo "FAIL: $strata not built"; exit 1; }
"$py" -c 'import torch.distributed.run' 2>/dev/null ||
  { echo "SKIP test_bench_torchrun: $py has no torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
. "$(dirname "$0")/helpers/bench_table.sh"

port=$("$py" -c 'import socket
for _ in range(50):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
    finally:
        s.close(); t.close()')
status=0
timeout 120 "$py" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
  --redirects 2 --tee 2 --no_python \
  "$strata" bench allreduce -b 8 -e 64K -f 4 -n 2 -w 1 >"$tmp/torch.out" 2>"$tmp/torch.err" ||
  status=$?
if [ "$status" = 0 ]; then check_table "$tmp/torch.out" torchrun 7
else fail "torchrun: exit $status: $(tail -3 "$tmp/torch.err")"; fi
[ "$failures" = 0 ] && echo "test_bench_torchrun: ok" || echo "test_bench_torchrun: $failures failure(s)"
[ "$failures" = 0 ]
