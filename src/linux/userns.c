#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

/* The locked descriptor `fd` parked in a datagram socket's receive queue
 * (sent to itself with SCM_RIGHTS, never received): the returned socket
 * keeps the open file description, and so its lock, alive exactly as fd
 * would — until its last copy is closed, or its holder dies — without a
 * descriptor of the lock file in the process's table.  That matters in a
 * process holding many slots (sandlotd: one per sandbox): every close of a
 * descriptor of a file with POSIX or OFD locks walks the file's whole lock
 * list (locks_remove_posix), and each new sandbox's child closes all the
 * descriptors it inherited, so held lock-file descriptors made a create cost
 * time in proportion to the square of the sandboxes alive.  Where the socket
 * cannot be made, fd itself is returned. */
static int park(int fd)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0)
		return fd;
	ssize_t n = sandlot__send_with_fd(sp[0], "", 1, fd);
	close(sp[0]);
	if (n != 1) {
		close(sp[1]);
		return fd;
	}
	/* The queued datagram holds the description now. */
	close(fd);
	return sp[1];
}

int sandlot__uid_slot_acquire(const char *data_dir, struct sandlot_uid_slot *out,
			      sandlot_error_t **err)
{
	/* One lock file per host, whatever the data directory: the daemon and
	 * `sandlot run`s with their own data dirs must never share a range.
	 * Only where /run/sandlot cannot be made does the data dir hold it. */
	char path[4096];
	if (sandlot__mkdir_p("/run/sandlot", 0755) == 0)
		snprintf(path, sizeof(path), "/run/sandlot/uid-slots.lock");
	else
		snprintf(path, sizeof(path), "%s/uid-slots.lock", data_dir);
	/* Each sandbox opens the file itself: OFD locks belong to the open
	 * file description, so closing it (or dying) releases exactly this slot. */
	cleanup_close int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "open %s", path);

	unsigned start = 0;
	if (getrandom(&start, sizeof(start), GRND_NONBLOCK) < 0)
		start = (unsigned)getpid();
	for (unsigned i = 0; i < SANDLOT_UID_SLOTS; i++) {
		unsigned slot = (start + i) % SANDLOT_UID_SLOTS;
		struct flock fl = {
			.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1,
		};
		if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
			out->lock_fd = park(steal_fd(&fd));
			out->slot = slot;
			out->base = SANDLOT_UID_BASE + slot * SANDLOT_UID_RANGE;
			return 0;
		}
		if (errno != EAGAIN && errno != EACCES)
			return sandlot__error_errno(err, errno, "lock uid slot in %s", path);
	}
	return sandlot__error(err, EAGAIN, "all %u sandbox uid ranges are in use", SANDLOT_UID_SLOTS);
}

void sandlot__uid_slot_release(struct sandlot_uid_slot *s)
{
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
}

int sandlot__userns_write_maps(pid_t pid, uid_t base, sandlot_error_t **err)
{
	char path[64], map[64];
	snprintf(map, sizeof(map), "0 %u %u\n", (unsigned)base, SANDLOT_UID_RANGE);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	if (sandlot__write_file(path, map, 0) < 0)
		return sandlot__error_errno(err, errno, "write %s", path);
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	if (sandlot__write_file(path, map, 0) < 0)
		return sandlot__error_errno(err, errno, "write %s", path);
	return 0;
}
