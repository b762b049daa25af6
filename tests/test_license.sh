#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file of the repository carries the SPDX line of the license in LICENSE, near its
# top (after a shebang), and the license reaches strata.pc and the CMake package.
# Usage: test_license.sh BUILD_DIR
set -euo pipefail
build=$1
cd "$(dirname "$0")/.."
tag='SPDX-License-Identifier: Apache-2.0'
grep -q 'Apache License' LICENSE && grep -q 'Version 2.0, January 2004' LICENSE \
  || { echo "LICENSE is not the Apache-2.0 text"; exit 1; }
missing=0
while IFS= read -r f; do
  head -n 3 "$f" | grep -q "$tag" || { echo "no SPDX line: $f"; missing=$((missing + 1)); }
done < <(git ls-files '*.c' '*.h' '*.cpp' '*.cu' '*.inc' '*.py' '*.pyi' '*.sh' '*.map' '*.in' \
           'CMakeLists.txt' 'Makefile' '.ci/run' 2>/dev/null || find src include tools tests python \
           -name '*.[ch]')
[ "$missing" -eq 0 ] || { echo "$missing files without '$tag'"; exit 1; }
grep -q '^License: Apache-2.0$' "$build/strata.pc" || { echo "strata.pc has no License line"; exit 1; }
grep -q 'strata_LICENSE "Apache-2.0"' "$build/strataConfig.cmake" \
  || { echo "the CMake package does not state its license"; exit 1; }
echo "license: every source file carries '$tag'; strata.pc and strataConfig.cmake state it"
