"""Patchgroups (Featherstitch) for Python programs on a weft mount.

A patchgroup is a set of file system changes. pg_depend(p, q) says that
nothing in p may become durable before everything in q; the changes a
process makes between pg_engage(p) and pg_disengage(p) belong to p, and so
do those of the processes it starts. pg_sync(p) waits until p is durable.
A group with a dependent is sealed: it can no longer be engaged.

The calls are ioctls on the control file ".weft-pg" at the root of a weft
mount, found from WEFT_PG_CTL or by walking up from the current directory
(or named with pg_open). Errors raise OSError with the errno weft gave.
"""

import fcntl
import os
import struct

CONTROL = ".weft-pg"


def _ioc(direction, nr, size):
    return direction << 30 | size << 16 | ord("W") << 8 | nr


_WRITE, _READ = 1, 2
PG_CREATE = _ioc(_READ, 1, 8)
PG_DEPEND = _ioc(_WRITE, 2, 16)
PG_ENGAGE = _ioc(_WRITE, 3, 8)
PG_DISENGAGE = _ioc(_WRITE, 4, 8)
PG_SYNC = _ioc(_WRITE, 5, 8)
PG_CLOSE = _ioc(_WRITE, 6, 8)

_fd = None


def pg_open(path):
    """Use the control file at path (a mount's .weft-pg)."""
    global _fd
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    if _fd is not None:
        os.close(_fd)
    _fd = fd


def _ctl():
    if _fd is not None:
        return _fd
    env = os.environ.get("WEFT_PG_CTL")
    if env:
        pg_open(env)
        return _fd
    d = os.getcwd()
    while True:
        p = os.path.join(d, CONTROL)
        if os.path.exists(p):
            pg_open(p)
            return _fd
        parent = os.path.dirname(d)
        if parent == d:
            raise FileNotFoundError("no weft mount above %s (set WEFT_PG_CTL)" % os.getcwd())
        d = parent


def pg_create():
    """Return a new, empty patchgroup."""
    buf = bytearray(8)
    fcntl.ioctl(_ctl(), PG_CREATE, buf, True)
    return struct.unpack("<q", buf)[0]


def pg_depend(after, before):
    """Nothing in after becomes durable before all of before."""
    fcntl.ioctl(_ctl(), PG_DEPEND, struct.pack("<qq", after, before))


def _call(cmd, pg):
    fcntl.ioctl(_ctl(), cmd, struct.pack("<q", pg))


def pg_engage(pg):
    _call(PG_ENGAGE, pg)


def pg_disengage(pg):
    _call(PG_DISENGAGE, pg)


def pg_sync(pg):
    _call(PG_SYNC, pg)


def pg_close(pg):
    _call(PG_CLOSE, pg)
