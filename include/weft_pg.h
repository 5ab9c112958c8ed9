/*
 * weft_pg.h: patchgroups (Featherstitch) for programs on a weft mount.
 *
 * A patchgroup is a set of file system changes. pg_depend(P, Q) says that
 * nothing in P may become durable before everything in Q; the changes a
 * process makes between pg_engage(P) and pg_disengage(P) belong to P, and
 * so do those of the processes it starts. pg_sync(P) waits until P is
 * durable. A group that has a dependent is sealed: it can no longer be
 * engaged, so cycles cannot be built.
 *
 * The calls are ioctls on the control file ".weft-pg" at the root of a
 * weft mount. The first call finds it from the environment variable
 * WEFT_PG_CTL (the control file's path) or else by walking up from the
 * current directory; pg_open names it explicitly. Each call returns 0 (or
 * the new group for pg_create) or -1 with errno set.
 *
 * Header only: #include "weft_pg.h" and build, nothing to link.
 */
#ifndef WEFT_PG_H
#define WEFT_PG_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

typedef int64_t pg_t;

#define WEFT_PG_CONTROL ".weft-pg"

#define WEFT_PG_CREATE _IOR('W', 1, int64_t)
#define WEFT_PG_DEPEND _IOW('W', 2, int64_t[2])
#define WEFT_PG_ENGAGE _IOW('W', 3, int64_t)
#define WEFT_PG_DISENGAGE _IOW('W', 4, int64_t)
#define WEFT_PG_SYNC _IOW('W', 5, int64_t)
#define WEFT_PG_CLOSE _IOW('W', 6, int64_t)

static int weft_pg_fd = -1;

/* pg_open uses the control file at path (a mount's ".weft-pg"). */
static inline int pg_open(const char *path) {
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (weft_pg_fd >= 0)
		close(weft_pg_fd);
	weft_pg_fd = fd;
	return 0;
}

static inline int weft_pg_ctl(void) {
	if (weft_pg_fd >= 0)
		return weft_pg_fd;
	const char *env = getenv("WEFT_PG_CTL");
	if (env && *env)
		return pg_open(env) == 0 ? weft_pg_fd : -1;
	char dir[PATH_MAX], path[PATH_MAX + sizeof(WEFT_PG_CONTROL) + 1];
	if (!getcwd(dir, sizeof dir))
		return -1;
	for (;;) {
		snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "", WEFT_PG_CONTROL);
		if (pg_open(path) == 0)
			return weft_pg_fd;
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir) {
			if (strcmp(dir, "/") == 0)
				break;
			strcpy(dir, "/");
			continue;
		}
		*slash = '\0';
	}
	errno = ENOENT;
	return -1;
}

/* pg_create returns a new, empty patchgroup, or -1. */
static inline pg_t pg_create(void) {
	int64_t id;
	int fd = weft_pg_ctl();
	if (fd < 0 || ioctl(fd, WEFT_PG_CREATE, &id) < 0)
		return -1;
	return id;
}

/* pg_depend: nothing in after becomes durable before all of before. */
static inline int pg_depend(pg_t after, pg_t before) {
	int64_t arg[2] = {after, before};
	int fd = weft_pg_ctl();
	return fd < 0 ? -1 : ioctl(fd, WEFT_PG_DEPEND, arg);
}

static inline int weft_pg_call(unsigned long cmd, pg_t pg) {
	int64_t arg = pg;
	int fd = weft_pg_ctl();
	return fd < 0 ? -1 : ioctl(fd, cmd, &arg);
}

static inline int pg_engage(pg_t pg) { return weft_pg_call(WEFT_PG_ENGAGE, pg); }
static inline int pg_disengage(pg_t pg) { return weft_pg_call(WEFT_PG_DISENGAGE, pg); }
static inline int pg_sync(pg_t pg) { return weft_pg_call(WEFT_PG_SYNC, pg); }
static inline int pg_close(pg_t pg) { return weft_pg_call(WEFT_PG_CLOSE, pg); }

#endif
