#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

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
			out->lock_fd = steal_fd(&fd);
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
