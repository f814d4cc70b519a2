/* src/common/util.c: sandlot__fd_park(), which moves a descriptor a process
 * keeps for long to a high number (sandlotd: what each live sandbox holds,
 * out of the way of the next sandbox's clone, src/backend/ns.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "tap.h"

/* A locked temporary file: its descriptor (the file is unlinked). */
static int locked_temp(char *path, size_t len)
{
	snprintf(path, len, "/tmp/sandlot-test-park-XXXXXX");
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether another open file description can take the lock on path. */
static int lock_free(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int free_ = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return free_;
}

static void raise_nofile(rlim_t want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		tap_skip("getrlimit(RLIMIT_NOFILE) failed");
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		tap_skip("RLIMIT_NOFILE's hard limit is below 2048 here");
	rl.rlim_cur = want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		tap_skip("setrlimit(RLIMIT_NOFILE) failed");
}

/* Moved to >= SANDLOT_FD_PARK_MIN, close-on-exec, the old number closed,
 * the same open file (its lock still held, its offset shared). */
static void test_park_moves_high_keeping_the_file(void)
{
	raise_nofile(2048);
	char path[64];
	int fd = locked_temp(path, sizeof(path));
	CHECK(fd >= 0 && fd < SANDLOT_FD_PARK_MIN);
	struct stat a, b;
	CHECK(fstat(fd, &a) == 0);
	CHECK(write(fd, "xy", 2) == 2);
	int old = fd;
	sandlot__fd_park(&fd);
	CHECK(fd >= SANDLOT_FD_PARK_MIN);
	CHECK(fcntl(old, F_GETFD) < 0 && errno == EBADF);
	CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC);
	CHECK(fstat(fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	CHECK(lseek(fd, 0, SEEK_CUR) == 2);
	CHECK(lock_free(path) == 0);
	/* Parked already: left where it is. */
	int parked = fd;
	sandlot__fd_park(&fd);
	CHECK(fd == parked);
	/* The next one takes the next high number; the low one is free. */
	int fd2 = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd2 == old);
	sandlot__fd_park(&fd2);
	CHECK(fd2 == parked + 1);
	close(fd2);
	close(fd);
	CHECK(lock_free(path) == 1);
	unlink(path);
}

/* Nothing to do for -1; where RLIMIT_NOFILE leaves no high number the
 * descriptor stays as it was, open. */
static void test_park_leaves_what_it_cannot_move(void)
{
	int none = -1;
	sandlot__fd_park(&none);
	CHECK(none == -1);
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_cur = 256;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	char path[64];
	int fd = locked_temp(path, sizeof(path));
	CHECK(fd >= 0);
	int old = fd;
	sandlot__fd_park(&fd);
	CHECK(fd == old);
	CHECK(fcntl(fd, F_GETFD) >= 0);
	CHECK(lock_free(path) == 0);
	close(fd);
	unlink(path);
}

int main(void)
{
	TAP_RUN(test_park_moves_high_keeping_the_file);
	TAP_RUN(test_park_leaves_what_it_cannot_move);
	return tap_done();
}
