"""Optional third-party dependencies, imported only where a feature uses one.

``require("numpy", "mooncake.structured_object_store")``
returns the module or raises ImportError naming the Debian package (and the
pip one), so a missing dependency says what to install instead of failing
deep inside a call.  Nothing here is imported by ``mooncake.store`` or
``mooncake.engine``.
"""

import importlib

__all__ = ["require", "optional", "DEBIAN"]

# module -> (Debian package, pip package)
DEBIAN = {
    "aiohttp": ("python3-aiohttp", "aiohttp"),
    "fastapi": ("python3-fastapi", "fastapi"),
    "httpx": ("python3-httpx", "httpx"),
    "msgpack": ("python3-msgpack", "msgpack"),
    "numpy": ("python3-numpy", "numpy"),
    "PIL": ("python3-pil", "pillow"),
    "torch": ("python3-torch", "torch"),
}


def require(module, feature):
    """Import ``module`` or raise ImportError naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        deb, pip = DEBIAN.get(module, (f"python3-{module.lower()}", module))
        raise ImportError(f"{feature} needs {module} (Debian: apt-get install {deb}; "
                          f"pip: pip install {pip}): {e}") from e


def optional(module):
    """The module if it imports, else None (for features that adapt)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
