/* The sandbox's event counters, for EXIT's OOM_KILLS and PIDS_REFUSED
 * (spec/protocol.md, "Processes").
 *
 * The host hands init two read-only descriptors of its sandbox's own
 * counters (init.h: INIT_FD_OOM_EVENTS, INIT_FD_PIDS_EVENTS); the ns
 * backend opens its cgroup's files, which the sandbox's mount namespace
 * never shows.  Each is read from offset 0 (a cgroup file is produced anew
 * on every read from there), so reading costs one pread and no path
 * lookup.  A counter whose descriptor is absent or unreadable is not
 * reported.  The bytes come from the host's kernel through a descriptor
 * the host opened, never from the sandbox.
 */
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static const struct {
	int fd;
	const char *key;
} counters[INIT_EVENTS_N] = {
	[INIT_EV_OOM] = { INIT_FD_OOM_EVENTS, "oom_kill" },
	[INIT_EV_PIDS] = { INIT_FD_PIDS_EVENTS, "max" },
};

static unsigned present; /* bit i: counters[i].fd is open */

int init__events_parse(const char *buf, size_t len, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	size_t i = 0;
	while (i < len) {
		size_t end = i;
		while (end < len && buf[end] != '\n')
			end++;
		if (end - i > kl && memcmp(buf + i, key, kl) == 0 && buf[i + kl] == ' ') {
			size_t j = i + kl + 1;
			uint64_t v = 0;
			if (j == end)
				return -1;
			for (; j < end; j++) {
				if (buf[j] < '0' || buf[j] > '9')
					return -1;
				unsigned d = (unsigned)(buf[j] - '0');
				if (v > (UINT64_MAX - d) / 10)
					return -1;
				v = v * 10 + d;
			}
			*out = v;
			return 0;
		}
		i = end + 1;
	}
	return -1;
}

void init__events_setup(void)
{
	present = 0;
	for (int i = 0; i < INIT_EVENTS_N; i++)
		if (fcntl(counters[i].fd, F_SETFD, FD_CLOEXEC) == 0)
			present |= 1u << i;
}

unsigned init__events_read(uint64_t out[INIT_EVENTS_N])
{
	unsigned got = 0;
	for (int i = 0; i < INIT_EVENTS_N; i++) {
		out[i] = 0;
		if (!(present & (1u << i)))
			continue;
		/* memory.oom_control and pids.events are a few lines each. */
		char buf[512];
		ssize_t n;
		do
			n = pread(counters[i].fd, buf, sizeof(buf), 0);
		while (n < 0 && errno == EINTR);
		if (n > 0 && init__events_parse(buf, (size_t)n, counters[i].key, &out[i]) == 0)
			got |= 1u << i;
	}
	return got;
}
