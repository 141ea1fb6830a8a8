"""Running a process with its clock moved, by Debian's libfaketime (package `faketime`).

`make test` installs the package when it is missing (as it installs chromium for the web UI
test); a test that needs it fails, never skips, when it is absent.
"""

from __future__ import annotations

import glob
import os

LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                 "/usr/local/lib/faketime/libfaketime.so.1")


def library() -> str | None:
    for pattern in LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def skewed_env(offset: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process whose clock is `offset` away ("-1h", "+1h"); both its wall
    clock and its monotonic clock move, as they do on a host whose clock is set wrong.
    """
    lib = library()
    if lib is None:
        raise RuntimeError("libfaketime is not installed: apt-get install -y faketime "
                           "(`make test` installs it when run as root)")
    env = dict(os.environ if base is None else base)
    env.update(LD_PRELOAD=lib, FAKETIME=offset, FAKETIME_NO_CACHE="1")
    return env
