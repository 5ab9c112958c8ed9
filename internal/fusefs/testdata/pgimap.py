"""pgimap: the IMAP move of the patchgroup crash checker.

pgimap.py MOUNT N BATCH [--no-pg] moves messages 0..N-1 from
mail/INBOX/cur to mail/Saved/cur, BATCH at a time, as UW IMAP with
patchgroups would: each COPY command (write the message into Saved/tmp,
close it, rename it into Saved/cur) in a group that depends on the previous
EXPUNGE's, each EXPUNGE (unlink the batch from INBOX/cur) in a group that
depends on its COPY. No fsync anywhere. With --no-pg, the same without
groups: the control case.
"""
import os
import sys

import weft_pg as pg


def name(i):
    return "%d.M%dP1.weft:2,S" % (1700000000 + i, i)


def body(i):
    line = ("message %d " % i).encode()
    return (line * (2048 // len(line) + 1))[:2048]


mount, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
use_pg = "--no-pg" not in sys.argv
os.chdir(os.path.join(mount, "mail"))
prev = None
for start in range(0, n, batch):
    ids = range(start, min(n, start + batch))
    if use_pg:
        copy = pg.pg_create()
        if prev is not None:
            pg.pg_depend(copy, prev)
        pg.pg_engage(copy)
    for i in ids:
        tmp = "Saved/tmp/" + name(i)
        with open(tmp, "wb") as f:
            f.write(body(i))
        os.rename(tmp, "Saved/cur/" + name(i))
    if use_pg:
        pg.pg_disengage(copy)
        expunge = pg.pg_create()
        pg.pg_depend(expunge, copy)
        pg.pg_engage(expunge)
    for i in ids:
        os.unlink("INBOX/cur/" + name(i))
    if use_pg:
        pg.pg_disengage(expunge)
        if prev is not None:
            pg.pg_close(prev)
        pg.pg_close(copy)
        prev = expunge
    print(start, flush=True)
if use_pg and prev is not None:
    pg.pg_sync(prev)
    pg.pg_close(prev)
print("done", flush=True)
