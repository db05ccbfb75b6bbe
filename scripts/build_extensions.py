"""Build the native CPU kernels that the tests load, once per environment.

optimum-quanto compiles its C++ extension (``quanto_cpp``, int4/int2 unpacking
used by the quanto recipes and the quantized KV cache) into the installed
package the first time a kernel runs, about a minute on two cores. A fresh
environment would pay that inside whichever test comes first, while other
tests wait on its build lock; ``scripts/test.sh`` builds it here instead, beside
the linters. Prints where the extension lives; exits 0 when there is nothing
to build (quanto absent, or the extension not registered on this platform).
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from optimum.quanto.library.extensions import get_extension, is_extension_available
    except ImportError:
        print("optimum-quanto is not installed: nothing to build")
        return 0
    if not is_extension_available("quanto_cpp"):
        print("quanto_cpp is not available on this platform: nothing to build")
        return 0
    extension = get_extension("quanto_cpp")
    extension.lib  # noqa: B018 - the property compiles and loads the extension
    print(f"quanto_cpp built in {extension.build_directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
