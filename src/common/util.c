#include "util.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

int sandlot__write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

ssize_t sandlot__read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int sandlot__write_file(const char *path, const char *data, int create)
{
	int flags = O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
	cleanup_close int fd = open(path, flags, 0644);
	if (fd < 0)
		return -1;
	if (sandlot__write_all(fd, data, strlen(data)) < 0)
		return -1;
	int r = close(steal_fd(&fd));
	return r;
}

char *sandlot__read_file(const char *path, size_t max)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(max + 1);
	if (!buf)
		return NULL;
	ssize_t n = sandlot__read_full(fd, buf, max);
	if (n < 0) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

int sandlot__mkdir_p(const char *path, mode_t mode)
{
	cleanup_free char *copy = strdup(path);
	if (!copy)
		return -1;
	for (char *p = copy + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(copy, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(copy, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

void sandlot__new_id(const char *prefix, char *buf)
{
	static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
	unsigned char r[17] = { 0 };
	size_t got = 0;
	while (got < 16) {
		ssize_t n = getrandom(r + got, 16 - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			abort(); /* the kernel's CSPRNG is not optional */
		}
		got += (size_t)n;
	}
	size_t pl = strlen(prefix);
	memcpy(buf, prefix, pl);
	/* 26 base32 characters carry 130 bits; the last two are zero. */
	for (int i = 0; i < 26; i++) {
		int bit = i * 5, byte = bit / 8, off = bit % 8;
		unsigned v = ((unsigned)r[byte] << 8 | r[byte + 1]) >> (11 - off);
		buf[pl + (size_t)i] = b32[v & 31];
	}
	buf[pl + 26] = '\0';
}

uint64_t sandlot__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sandlot__deadline_in(struct timespec *ts, clockid_t clock, uint64_t ms)
{
	clock_gettime(clock, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

uint64_t sandlot__now_ms(void)
{
	return sandlot__now_ns() / 1000000u;
}

ssize_t sandlot__send_with_fd(int sock, const void *buf, size_t len, int fd)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	if (fd >= 0) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
		ch->cmsg_level = SOL_SOCKET;
		ch->cmsg_type = SCM_RIGHTS;
		ch->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(ch), &fd, sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

void sandlot__fd_park(int *fd)
{
	if (*fd < 0 || *fd >= SANDLOT_FD_PARK_MIN)
		return;
	int high = fcntl(*fd, F_DUPFD_CLOEXEC, SANDLOT_FD_PARK_MIN);
	if (high < 0)
		return;
	close(*fd);
	*fd = high;
}

static int trace_on;
static void trace_init(void)
{
	trace_on = getenv("SANDLOT_TRACE") != NULL;
}

void sandlot__trace(const char *phase)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static __thread uint64_t t0;
	pthread_once(&once, trace_init);
	if (!trace_on)
		return;
	uint64_t now = sandlot__now_ns();
	if (phase)
		fprintf(stderr, "sandlot-trace: %-14s %7.3f ms\n", phase, (double)(now - t0) / 1e6);
	t0 = now;
}

const char *sandlot__entry_name_problem(const void *name, size_t len)
{
	const char *p = name;
	if (len == 0)
		return "an empty name";
	if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
		return "a name that is . or ..";
	if (memchr(p, '/', len))
		return "a name with a '/'";
	if (memchr(p, '\0', len))
		return "a name with a NUL byte";
	return NULL;
}

/* (Both lists end with NULL.) */
char *sandlot__find_beside_self(const char *const *rel, const char *const *sys,
				const char *probe, int mode)
{
	char self[PATH_MAX];
	char cand[PATH_MAX * 2];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0 && rel) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			for (size_t i = 0; rel[i]; i++) {
				snprintf(cand, sizeof(cand), "%s%s%s", self, rel[i], probe);
				if (access(cand, mode) != 0)
					continue;
				snprintf(cand, sizeof(cand), "%s%s", self, rel[i]);
				char *r = realpath(cand, NULL);
				if (r || errno == ENOMEM)
					return r;
			}
		}
	}
	for (size_t i = 0; sys && sys[i]; i++) {
		snprintf(cand, sizeof(cand), "%s%s", sys[i], probe);
		if (access(cand, mode) == 0)
			return strdup(sys[i]);
	}
	errno = ENOENT;
	return NULL;
}
