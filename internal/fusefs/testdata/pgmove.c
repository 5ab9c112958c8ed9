/* pgmove: the test program for patchgroups from C. In the mount given as
 * argv[1]: write a message into msg.tmp under group a and keep it open,
 * then rename msg.tmp to msg under group b, which depends on a; print
 * "renamed" and wait for stdin to close. The rename's barrier must have
 * made the message durable (flushed) by then. */
#include "weft_pg.h"

static void die(const char *what) {
	perror(what);
	exit(1);
}

int main(int argc, char **argv) {
	static char msg[4096];
	if (argc != 2 || chdir(argv[1]) < 0)
		die("usage: pgmove MOUNT");
	memset(msg, 'm', sizeof msg);
	pg_t a = pg_create();
	if (a < 0 || pg_engage(a) < 0)
		die("pg_create/pg_engage a");
	int fd = open("msg.tmp", O_CREAT | O_WRONLY, 0644);
	if (fd < 0 || write(fd, msg, sizeof msg) != sizeof msg)
		die("write msg.tmp");
	if (pg_disengage(a) < 0)
		die("pg_disengage a");
	pg_t b = pg_create();
	if (b < 0 || pg_depend(b, a) < 0)
		die("pg_create/pg_depend b");
	if (pg_engage(a) == 0 || errno != EINVAL)
		die("engaging a sealed group was not refused with EINVAL");
	if (pg_engage(b) < 0 || rename("msg.tmp", "msg") < 0 || pg_disengage(b) < 0)
		die("rename under b");
	printf("renamed\n");
	fflush(stdout);
	char buf[16];
	while (read(0, buf, sizeof buf) > 0)
		;
	if (pg_sync(b) < 0 || close(fd) < 0 || pg_close(a) < 0 || pg_close(b) < 0)
		die("pg_sync/close");
	return 0;
}
