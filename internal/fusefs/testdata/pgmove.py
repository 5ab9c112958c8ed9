"""pgmove from Python: the same steps as pgmove.c, through weft_pg.

With --no-depend the rename's group does not depend on the message's: the
control case of the crash test."""
import errno
import os
import sys

import weft_pg as pg

depend = "--no-depend" not in sys.argv
os.chdir(sys.argv[1])
a = pg.pg_create()
pg.pg_engage(a)
fd = os.open("msg.tmp", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"m" * 4096)
pg.pg_disengage(a)
b = pg.pg_create()
if depend:
    pg.pg_depend(b, a)
    try:
        pg.pg_engage(a)
        sys.exit("engaging a sealed group was not refused")
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
pg.pg_engage(b)
os.rename("msg.tmp", "msg")
pg.pg_disengage(b)
print("renamed", flush=True)
sys.stdin.read()
pg.pg_sync(b)
os.close(fd)
pg.pg_close(a)
pg.pg_close(b)
