#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_install.sh BUILD_DIR — what `make install` leaves works as a user uses it: the header, the
# shared and static libraries, the command; a program built with pkg-config, and one built by a
# CMake project with find_package(strata) linking strata::strata. And the .pc file is right for
# a distribution's prefix: configured with -DCMAKE_INSTALL_PREFIX=/usr (where GNUInstallDirs
# picks a multiarch libdir) and installed with DESTDIR, its includedir is <DESTDIR>/usr/include.
set -euo pipefail
build=${1:?usage: test_install.sh BUILD_DIR}
source_dir=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/strata.h lib/libstrata.so lib/libstrata.a lib/libnccl-net-strata.so \
  lib/pkgconfig/strata.pc bin/strata \
  lib/cmake/strata/strataConfig.cmake; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cat >"$work/hello.c" <<'C'
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
cc "$work/hello.c" $(pkg-config --cflags --libs strata) -o "$work/hello_shared"
LD_LIBRARY_PATH="$prefix/lib" "$work/hello_shared" | grep -q "STRATA_OK 1 2 3" || fail "pkg-config, shared"
cc "$work/hello.c" $(pkg-config --cflags strata) "$prefix/lib/libstrata.a" \
  $(pkg-config --static --libs-only-l strata | sed 's/-lstrata//') -o "$work/hello_static"
"$work/hello_static" | grep -q "STRATA_OK 1 2 3" || fail "pkg-config, static"
"$prefix/bin/strata" version | grep -q strata || fail "the command"

# find_package(strata) from a user's CMake project
mkdir -p "$work/user"
cp "$work/hello.c" "$work/user/"
cat >"$work/user/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(hello C)
find_package(strata REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello PRIVATE strata::strata)
CMAKE
cmake -S "$work/user" -B "$work/user/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/user.log" 2>&1 &&
  cmake --build "$work/user/build" >>"$work/user.log" 2>&1 || { cat "$work/user.log"; fail "find_package(strata) project"; }
LD_LIBRARY_PATH="$prefix/lib" "$work/user/build/hello" | grep -q "STRATA_OK 1 2 3" ||
  fail "find_package(strata) program"

# -DCMAKE_INSTALL_PREFIX=/usr, installed into DESTDIR: only the library and the command are built
cmake -S "$source_dir" -B "$work/usr-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DSTRATA_TORCH=OFF \
  >"$work/usr.log" 2>&1 && cmake --build "$work/usr-build" -j2 >>"$work/usr.log" 2>&1 &&
  DESTDIR="$work/dest" cmake --install "$work/usr-build" >>"$work/usr.log" 2>&1 ||
  { tail -20 "$work/usr.log"; fail "configure, build or install with CMAKE_INSTALL_PREFIX=/usr"; }
pc=$(find "$work/dest/usr" -name strata.pc | head -1)
[ -n "$pc" ] || fail "no strata.pc under DESTDIR/usr"
cflags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags strata | tr -d "[:space:]")
[ "$(realpath -m "${cflags#-I}")" = "$work/dest/usr/include" ] ||
  fail "PREFIX=/usr: strata.pc at ${pc#$work/dest} gives '$cflags', want -I$work/dest/usr/include"
[ -e "$work/dest/usr/include/strata.h" ] || fail "PREFIX=/usr: no DESTDIR/usr/include/strata.h"

# The Python package lands where Debian's python3 looks without PYTHONPATH: for /usr in
# /usr/lib/python3/dist-packages, for any other prefix in <prefix>/lib/python3.X/dist-packages
# (/usr/local's is on Debian's sys.path).
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import sysconfig' 2>/dev/null; then
  [ -n "$(find "$work/dest/usr/lib/python3/dist-packages/strata" -name '_strata*.so' 2>/dev/null)" ] ||
    fail "PREFIX=/usr: the Python package is not in /usr/lib/python3/dist-packages"
  "$py" -c 'import sys; sys.exit(0 if "/usr/lib/python3/dist-packages" in sys.path else 1)' ||
    fail "Debian's python3 does not search /usr/lib/python3/dist-packages"
  site=$(find "$prefix/lib" -maxdepth 3 -type d -path '*/dist-packages/strata' | head -1)
  [ -n "$site" ] || fail "the Python package is not under <prefix>/lib/python3.X/dist-packages"
  rel=${site#"$prefix"/}
  "$py" -c "import sys; sys.exit(0 if '/usr/local/${rel%/strata}' in sys.path else 1)" ||
    fail "/usr/local/${rel%/strata} is not on Debian's python3 sys.path"
  version=$(PYTHONPATH="$(dirname "$site")" "$py" -c 'import strata; print(strata.__version__)') ||
    fail "the installed package does not import"
  [ "$version" = "$("$prefix/bin/strata" version | awk '{print $2}')" ] ||
    fail "strata.__version__ '$version' differs from the library's"
fi

echo "install: header, libraries, command, pkg-config, find_package(strata), PREFIX=/usr and the Python package all work"
