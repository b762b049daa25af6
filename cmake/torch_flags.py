# SPDX-License-Identifier: Apache-2.0
"""Print what CMake needs to build strata's torch backend against the torch this interpreter
imports: torch's version, then its include and library directories and its C++ ABI flag, as
torch.utils.cpp_extension gives them to any extension. One item per line; nothing and a non-zero
exit when there is no usable torch (CMakeLists.txt then builds everything but the backend)."""
import sys

try:
    import torch
    from torch.utils import cpp_extension
except Exception as error:  # any failure to import means: no backend, and why
    print(f"torch cannot be imported: {error}", file=sys.stderr)
    sys.exit(1)
print(torch.__version__.split("+")[0])
print("|".join(cpp_extension.include_paths()))
print("|".join(cpp_extension.library_paths()))
print(f"_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
