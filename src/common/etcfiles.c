/* See etcfiles.h.  libc only. */
#include "etcfiles.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const sandlot__etc_allow[] = {
	"alternatives",            /* /usr/bin/awk and friends point here */
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"ssl", "ca-certificates", "ca-certificates.conf",
	"localtime", "timezone", "mime.types",
	"python3", "python3.11", "matplotlibrc", "fonts",
	"bash.bashrc", "profile", "inputrc", "protocols", "services",
};
const size_t sandlot__etc_allow_count = sizeof(sandlot__etc_allow) / sizeof(sandlot__etc_allow[0]);

const char *const sandlot__etc_generated[] = {
	"passwd", "group", "nsswitch.conf", "resolv.conf", "hosts", "hostname",
};
const size_t sandlot__etc_generated_count =
	sizeof(sandlot__etc_generated) / sizeof(sandlot__etc_generated[0]);

/* The image's own passwd/group files are at most this big. */
#define ACCOUNTS_MAX 65536

/* Append to out (cap bytes) the lines of the image's passwd or group file
 * `name` other than those describing the sandbox user (by name or id),
 * which are written afterwards. */
static void append_other_entries(char *out, size_t cap, int etc_fd, const char *name,
				 const char *user, unsigned id)
{
	int fd = openat(etc_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char *buf = malloc(ACCOUNTS_MAX + 1);
	ssize_t n = buf ? read(fd, buf, ACCOUNTS_MAX) : -1;
	close(fd);
	if (n <= 0) {
		free(buf);
		return;
	}
	buf[n] = '\0';
	size_t used = strlen(out);
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c1 || !c2 || line[0] == '#')
			continue;
		size_t nl = (size_t)(c1 - line);
		if ((nl == strlen(user) && strncmp(line, user, nl) == 0) ||
		    (nl == 4 && strncmp(line, "user", 4) == 0) || strtoul(c2 + 1, NULL, 10) == id)
			continue;
		size_t ll = strlen(line);
		if (used + ll + 2 >= cap)
			break;
		memcpy(out + used, line, ll);
		out[used + ll] = '\n';
		used += ll + 1;
		out[used] = '\0';
	}
	free(buf);
}

static int write_at(int dirfd, const char *name, const char *text)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -1;
	/* 0644 whatever the umask (the host's process may have any). */
	if (fchmod(fd, 0644) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	int e = errno;
	close(fd);
	if (w != (ssize_t)n) {
		errno = w < 0 ? e : EIO;
		return -1;
	}
	return 0;
}

int sandlot__etc_write(int dirfd, const struct sandlot_etc *e, const char **what)
{
	/* Room for the image's accounts plus ours. */
	size_t cap = ACCOUNTS_MAX + 4096;
	char *passwd = malloc(cap), *group = malloc(cap);
	int rc = -1;
	*what = "passwd";
	if (!passwd || !group) {
		errno = ENOMEM;
		goto out;
	}
	if (e->image_etc_fd >= 0) {
		passwd[0] = group[0] = '\0';
		append_other_entries(passwd, cap - 256, e->image_etc_fd, "passwd", e->user_name, e->uid);
		append_other_entries(group, cap - 256, e->image_etc_fd, "group", e->user_name, e->gid);
	} else {
		snprintf(passwd, cap, "root:x:0:0:root:/root:/usr/sbin/nologin\n"
			 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
		snprintf(group, cap, "root:x:0:\nnogroup:x:65534:\n");
	}
	size_t pl = strlen(passwd), gl = strlen(group);
	snprintf(passwd + pl, cap - pl, "%s:x:%u:%u:sandbox user:/home/user:/bin/bash\n",
		 e->user_name, e->uid, e->gid);
	snprintf(group + gl, cap - gl, "%s:x:%u:\n", e->user_name, e->gid);
	char hosts[512], hn[300];
	snprintf(hosts, sizeof(hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
		 e->hostname);
	snprintf(hn, sizeof(hn), "%s\n", e->hostname);
	/* sandlot answers DNS there when the sandbox has a network (and, in an
	 * ns sandbox, every query to port 53 anywhere is redirected to it). */
	uint32_t ns = e->nameserver ? e->nameserver : 0x7f000001u;
	char resolv[64];
	snprintf(resolv, sizeof(resolv), "nameserver %u.%u.%u.%u\n", ns >> 24, (ns >> 16) & 255,
		 (ns >> 8) & 255, ns & 255);
	const char *text[] = {
		passwd,
		group,
		"passwd: files\ngroup: files\nshadow: files\n"
		"hosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
		resolv,
		hosts,
		hn,
	};
	for (size_t i = 0; i < sandlot__etc_generated_count; i++) {
		*what = sandlot__etc_generated[i];
		if (write_at(dirfd, sandlot__etc_generated[i], text[i]) < 0)
			goto out;
	}
	rc = 0;
out:
	free(passwd);
	free(group);
	return rc;
}
