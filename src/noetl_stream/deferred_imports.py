"""Third-party packages that are bound when imported and run at their first use.

nats-py's transport module imports aiohttp when it is installed, for WebSocket URLs only; that
import costs ~0.1 s of CPU (two TLS contexts built from the system's certificates among it), paid
by every process that imports nats, though only the HTTP API, the `http` tool, the keychain,
`--server` and ws:// URLs use aiohttp. Deferred, `import aiohttp` binds a stand-in module; the
first attribute read through it (`aiohttp.ClientSession`, `from aiohttp import web`) imports the
package, which then replaces the stand-in in sys.modules, and every later read is the package's.
(importlib's LazyLoader would not do: on Python 3.11 the `import` statement itself reads the
module's `__spec__`, which runs it.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

DEFERRED = ("aiohttp",)


class DeferredModule(ModuleType):
    """Stands in sys.modules for a package not imported yet; reads go to the package."""

    def __getattr__(self, attribute: str) -> object:
        return getattr(self.imported(), attribute)

    def imported(self) -> ModuleType:
        """The package itself, imported on the first call. Two threads calling at once both
        reach import_module, and the import system's lock on the name runs the package once.
        """
        if sys.modules.get(self.__name__) is self:
            sys.modules.pop(self.__name__, None)
        return importlib.import_module(self.__name__)


def defer(name: str) -> None:
    """Put a stand-in for `name` in sys.modules; nothing when it is imported or not installed."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)  # finds the package without running it
    if spec is None:
        return
    module = DeferredModule(name)
    module.__spec__ = spec  # what find_spec answers while the stand-in is in sys.modules
    sys.modules[name] = module


def defer_all() -> None:
    for name in DEFERRED:
        defer(name)
