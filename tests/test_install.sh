#!/usr/bin/env bash
# make install's result works: headers, shared and static libraries, the command and a
# pkg-config file that finds them from wherever the prefix lands.
set -euo pipefail
build=${1:?build dir}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/strata.h lib/libstrata.so lib/libstrata.a lib/pkgconfig/strata.pc bin/strata; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cat > "$prefix/hello.c" <<'C'
#include <stdio.h>
#include <strata.h>
int main(void) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = 0, cfg.world_size = 1;
  strata_comm *comm;
  if (strata_comm_init(&cfg, &comm) != STRATA_OK) return 1;
  double in[3] = {1, 2, 3}, out[3] = {0};
  int status = strata_allreduce(comm, in, out, 3, STRATA_F64, STRATA_SUM);
  strata_comm_destroy(comm);
  printf("%s %g %g %g\n", strata_err_name(status), out[0], out[1], out[2]);
  return status != STRATA_OK || out[2] != 3;
}
C
cc "$prefix/hello.c" $(pkg-config --cflags --libs strata) -o "$prefix/hello_shared"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_shared" | grep -q "STRATA_OK 1 2 3" || { echo "FAIL: shared"; exit 1; }
cc "$prefix/hello.c" $(pkg-config --cflags strata) "$prefix/lib/libstrata.a" $(pkg-config --static --libs-only-l strata | sed 's/-lstrata//') -o "$prefix/hello_static"
"$prefix/hello_static" | grep -q "STRATA_OK 1 2 3" || { echo "FAIL: static"; exit 1; }
"$prefix/bin/strata" version | grep -q strata || { echo "FAIL: command"; exit 1; }
echo "install: headers, shared and static libraries, command and pkg-config all work"
