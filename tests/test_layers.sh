#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_layers.sh — the include arrows point one way (docs/architecture.md):
#   runtime  core <- net, boot <- coll <- engine <- train, serve: a layer includes its own
#            headers and those of layers below it, never a peer's (net and boot, train and
#            serve) or one above; ncclnet (NCCL's network plugin) sits on net and boot, beside
#            coll: it hands NCCL strata's TCP transport itself, so net/tcp*.h are its to include;
#   above the engine, a communicator is read through engine/query.h and the public API, never
#            engine/engine.h (the struct);
#   a header named *_internal.h is its own folder's, and so are the transports' (net/tcp*.h,
#            net/shm*.h, net/wire.h): outside net/ they are reached through net/net.h and
#            net/transport.h;
#   the runtime never includes the planner side (topo, model, plan, emu, planner.h);
#   the command (tools/) includes the public headers, planner.h and its own, nothing of src/
#            beyond them, and nothing from bench/ or tests/.
# No build needed: it reads the sources. $1 (a build directory) is ignored.
set -uo pipefail
source_dir=${STRATA_SOURCE_DIR:-$(dirname "$0")/..}
cd "$source_dir" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

rank() {
  case $1 in
    core) echo 0 ;;
    net | boot) echo 1 ;;
    coll | ncclnet) echo 2 ;;
    engine) echo 3 ;;
    train | serve) echo 4 ;;
    topo | model | plan | emu | planner.h) echo planner ;;
    *) echo other ;;
  esac
}

checked=0
for file in src/*/*.[ch]; do
  layer=$(basename "$(dirname "$file")")
  mine=$(rank "$layer")
  while IFS= read -r included; do
    checked=$((checked + 1))
    target=${included%%/*}
    theirs=$(rank "$target")
    where="$file includes \"$included\""
    case $included in
      */*_internal.h) [ "$target" = "$layer" ] || fail "$where: another folder's internal header" ;;
      net/tcp*.h | net/shm*.h | net/wire.h)
        [ "$layer" = net ] || [ "$layer" = ncclnet ] ||
          fail "$where: a transport's own header (use net/net.h, net/transport.h)" ;;
    esac
    [ "$mine" = planner ] && continue # the planner side may use the runtime
    if [ "$theirs" = planner ]; then
      fail "$where: the runtime never includes the planner side"
    elif [ "$theirs" = other ]; then
      fail "$where: not a folder of src/"
    elif [ "$target" != "$layer" ] && [ "$theirs" -ge "$mine" ]; then
      fail "$where: $layer may include only lower layers (core <- net, boot <- coll <- engine <- train, serve)"
    fi
    if [ "$mine" -gt 3 ] && [ "$included" = engine/engine.h ]; then
      fail "$where: above the engine, ask the communicator through engine/query.h"
    fi
  done < <(sed -n 's/^#include "\([^"]*\/[^"]*\)".*/\1/p' "$file")
done

for file in tools/*.[ch]; do
  while IFS= read -r included; do
    checked=$((checked + 1))
    case $included in
      strata.h | strata_kv.h | planner.h) ;;
      */*) fail "$file includes \"$included\": the command uses strata.h, strata_kv.h and planner.h" ;;
      *) [ -e "tools/$included" ] || fail "$file includes \"$included\": not a header of tools/" ;;
    esac
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done

echo "test_layers: $checked includes checked"
[ "$failures" = 0 ] && echo "test_layers: ok" || echo "test_layers: $failures failure(s)"
[ "$failures" = 0 ]
