/* src/linux/userns.c's uid slots, against the host's real slot lock file
 * (/run/sandlot/uid-slots.lock).  Needs root (the file lives in /run).
 *
 * A slot taken here is a real one for as long as a case holds it: other
 * sandboxes on the host just take others.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "linux/userns.h"
#include "tap.h"

#define LOCK_FILE "/run/sandlot/uid-slots.lock"

static void need_root(void)
{
	if (geteuid() != 0)
		tap_skip("needs root (the slot lock file is in /run)");
}

/* Whether byte `slot` of the lock file is locked by some open file
 * description (asked through a new one of our own). */
static int slot_locked(unsigned slot)
{
	int fd = open(LOCK_FILE, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1 };
	int rc = fcntl(fd, F_OFD_GETLK, &fl);
	close(fd);
	if (rc < 0)
		return -1;
	return fl.l_type != F_UNLCK;
}

/* Descriptors of this process that are the lock file. */
static int lock_file_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char p[300], t[PATH_MAX];
		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		ssize_t k = readlink(p, t, sizeof(t) - 1);
		if (k < 0)
			continue;
		t[k] = '\0';
		n += strcmp(t, LOCK_FILE) == 0;
	}
	closedir(d);
	return n;
}

/* A slot stays locked while it is held, by no descriptor of the lock file
 * in the holder (sandlotd holds one per sandbox, and every sandbox's child
 * closes all it inherited: a close of a lock file's descriptor walks its
 * whole lock list), and is free again after release. */
static void test_held_then_released(void)
{
	need_root();
	struct sandlot_uid_slot a, b;
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__uid_slot_acquire("/nonexistent", &a, &err), 0);
	CHECK_EQ_INT(sandlot__uid_slot_acquire("/nonexistent", &b, &err), 0);
	CHECK(a.slot != b.slot);
	CHECK(a.base != b.base);
	CHECK(a.lock_fd >= 0 && b.lock_fd >= 0);
	CHECK_EQ_INT(slot_locked(a.slot), 1);
	CHECK_EQ_INT(slot_locked(b.slot), 1);
	CHECK_EQ_INT(lock_file_fds(), 0);
	sandlot__uid_slot_release(&a);
	CHECK_EQ_INT(a.lock_fd, -1);
	CHECK_EQ_INT(slot_locked(a.slot), 0);
	CHECK_EQ_INT(slot_locked(b.slot), 1);
	sandlot__uid_slot_release(&b);
	CHECK_EQ_INT(slot_locked(b.slot), 0);
	sandlot_error_free(err);
}

/* A holder killed with SIGKILL lets its slot go; a copy of the holding
 * descriptor (a child's, say) keeps it until that copy goes too. */
static void test_released_by_death_and_kept_by_copies(void)
{
	need_root();
	int p[2];
	CHECK_EQ_INT(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct sandlot_uid_slot s;
		if (sandlot__uid_slot_acquire("/nonexistent", &s, NULL) < 0)
			_exit(1);
		/* A copy that outlives this process's own descriptor. */
		int copy = dup(s.lock_fd);
		sandlot__uid_slot_release(&s);
		if (write(p[1], &s.slot, sizeof(s.slot)) != sizeof(s.slot))
			_exit(1);
		(void)copy;
		pause();
		_exit(0);
	}
	close(p[1]);
	unsigned slot = 0;
	CHECK_EQ_INT((int)read(p[0], &slot, sizeof(slot)), (int)sizeof(slot));
	close(p[0]);
	CHECK_EQ_INT(slot_locked(slot), 1);
	kill(pid, SIGKILL);
	int st = 0;
	CHECK_EQ_INT(waitpid(pid, &st, 0), pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK_EQ_INT(slot_locked(slot), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	TAP_RUN(test_held_then_released);
	TAP_RUN(test_released_by_death_and_kept_by_copies);
	return tap_done();
}
