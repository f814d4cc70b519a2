/* Spare network namespaces for the next `sandlot run` (see netns.h). */
#include "linux/netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/nsfs.h>

#include "common/cleanup.h"
#include "common/util.h"

#define SPARE_BASE "/run/sandlot/netns-spare"

static const char *spare_base(void)
{
	const char *env = getenv("SANDLOT_NETNS_SPARE_DIR");
	return env && *env ? env : SPARE_BASE;
}

/* <base>/<16 hex digits of data_dir's FNV-1a hash>; -1 if too long. */
static int pool_path(char buf[PATH_MAX], const char *data_dir)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *s = data_dir; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	int n = snprintf(buf, PATH_MAX, "%s/%016llx", spare_base(), (unsigned long long)h);
	return n > 0 && n < PATH_MAX ? 0 : -1;
}

static int open_pool(const char *data_dir)
{
	char path[PATH_MAX];
	if (pool_path(path, data_dir) < 0)
		return -1;
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* name + suffix in buf (names are ours: short). */
static const char *entry(char buf[64], const char *name, const char *suffix)
{
	snprintf(buf, 64, "%s%s", name, suffix);
	return buf;
}

/* Whether d is "<name><suffix>" with a well-formed name; the name in name[]. */
static int split(const char *d, const char *suffix, char name[SANDLOT_NETNS_SPARE_NAME])
{
	size_t len = strlen(d), sl = strlen(suffix);
	if (len <= sl || len - sl >= SANDLOT_NETNS_SPARE_NAME || strcmp(d + len - sl, suffix) != 0)
		return 0;
	for (size_t i = 0; i < len - sl; i++)
		if (!((d[i] >= 'a' && d[i] <= 'z') || (d[i] >= '2' && d[i] <= '7')))
			return 0;
	memcpy(name, d, len - sl);
	name[len - sl] = '\0';
	return 1;
}

/* A listing of the open pool (its own descriptor: pool stays open), or
 * NULL. */
static DIR *list_pool(int pool)
{
	int dfd = dup(pool);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d && dfd >= 0)
		close(dfd);
	return d;
}

/* Unmount and unlink <name>.ns in pool.  The mount is detached lazily: a
 * sandbox being set up may still have a copy of it in its new mount
 * namespace (it goes with init's old root). */
static void put_at(int pool, const char *name)
{
	char e[64], path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", pool, entry(e, name, ".ns"));
	if (n > 0 && n < (int)sizeof(path))
		umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
	unlinkat(pool, e, 0);
}

int sandlot__netns_spare_take(const char *data_dir, char name[SANDLOT_NETNS_SPARE_NAME])
{
	name[0] = '\0';
	cleanup_close int pool = open_pool(data_dir);
	if (pool < 0)
		return -1;
	cleanup_closedir DIR *d = list_pool(pool);
	if (!d)
		return -1;
	int fd = -1;
	struct dirent *de;
	char e[64];
	while (fd < 0 && (de = readdir(d))) {
		if (!split(de->d_name, ".free", name))
			continue;
		/* Whoever unlinks the marker owns the spare. */
		if (unlinkat(pool, de->d_name, 0) < 0)
			continue;
		fd = openat(pool, entry(e, name, ".ns"), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		/* Only a namespace's bind mount will do (not the bare file a
		 * failed mount, or an unmount, left). */
		if (fd >= 0 && ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET) {
			close(fd);
			fd = -1;
		}
		if (fd < 0) {
			put_at(pool, name);
			name[0] = '\0';
		}
	}
	if (fd < 0)
		name[0] = '\0';
	return fd;
}

void sandlot__netns_spare_put(const char *data_dir, const char *name)
{
	if (!name || !name[0])
		return;
	cleanup_close int pool = open_pool(data_dir);
	if (pool >= 0)
		put_at(pool, name);
}

/* Free (marker) count of an open pool. */
static unsigned count_at(int pool)
{
	cleanup_closedir DIR *d = list_pool(pool);
	unsigned n = 0;
	char name[SANDLOT_NETNS_SPARE_NAME];
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += split(de->d_name, ".free", name);
	return n;
}

unsigned sandlot__netns_spare_count(const char *data_dir)
{
	cleanup_close int pool = open_pool(data_dir);
	return pool < 0 ? 0 : count_at(pool);
}

/* Make the pool directory and its data-dir file; the directory, open. */
static int make_pool(const char *data_dir)
{
	char path[PATH_MAX];
	if (pool_path(path, data_dir) < 0 || sandlot__mkdir_p(path, 0700) < 0)
		return -1;
	int pool = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pool < 0 || faccessat(pool, "data-dir", F_OK, 0) == 0)
		return pool;
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".data-dir.%d", (int)getpid());
	int fd = openat(pool, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t len = strlen(data_dir);
	int ok = fd >= 0 && write(fd, data_dir, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
	if (fd >= 0)
		close(fd);
	if (!ok || renameat(pool, tmp, pool, "data-dir") < 0) {
		unlinkat(pool, tmp, 0);
		close(pool);
		return -1;
	}
	return pool;
}

/* One spare: a new namespace with loopback up, bound onto <name>.ns, then
 * its marker.  0, or -1 with nothing left behind. */
static int make_one(int pool)
{
	char id[32], name[SANDLOT_NETNS_SPARE_NAME], e[64], path[PATH_MAX];
	sandlot__new_id("", id);
	snprintf(name, sizeof(name), "%s", id);
	int fd = openat(pool, entry(e, name, ".ns"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	close(fd);
	snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", pool, e);
	int ns_fd, saved;
	if (sandlot__netns_new(&ns_fd, &saved, NULL) < 0) {
		unlinkat(pool, e, 0);
		return -1;
	}
	sandlot__netns_leave(&saved);
	char src[64];
	snprintf(src, sizeof(src), "/proc/self/fd/%d", ns_fd);
	int rc = mount(src, path, NULL, MS_BIND, NULL);
	close(ns_fd);
	if (rc < 0) {
		unlinkat(pool, e, 0);
		return -1;
	}
	fd = openat(pool, entry(e, name, ".free"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		put_at(pool, name);
		return -1;
	}
	close(fd);
	return 0;
}

unsigned sandlot__netns_spare_fill(const char *data_dir, unsigned target)
{
	if (target > SANDLOT_NETNS_SPARE_MAX)
		target = SANDLOT_NETNS_SPARE_MAX;
	cleanup_close int pool = make_pool(data_dir);
	if (pool < 0)
		return 0;
	cleanup_close int lock = openat(pool, "fill.lock", O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
	/* Someone else fills (or drains) it now: theirs is enough. */
	if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0)
		return 0;
	unsigned made = 0;
	for (unsigned have = count_at(pool); have < target; have++, made++)
		if (make_one(pool) < 0)
			break;
	return made;
}

/* Remove every taken spare of an open pool (its taker has the namespace
 * open already, or finds the bare file, refuses it and makes its own: never
 * wrong, at worst slower) and, with `all`, every free one too.  The caller
 * holds fill.lock, so nothing is half made.  How many were removed. */
static unsigned drain_at(int pool, int all)
{
	cleanup_closedir DIR *d = list_pool(pool);
	unsigned n = 0;
	char name[SANDLOT_NETNS_SPARE_NAME], e[64];
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!split(de->d_name, ".ns", name))
			continue;
		if (faccessat(pool, entry(e, name, ".free"), F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
			/* Free: whoever unlinks the marker owns it. */
			if (!all || unlinkat(pool, e, 0) < 0)
				continue;
		}
		put_at(pool, name);
		n++;
	}
	return n;
}

/* Drain the pool at path; remove it when nothing is left in it but its
 * own files.  wait: block for a fill in progress. */
static unsigned drain_path(const char *path, int all, int wait)
{
	cleanup_close int pool = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pool < 0)
		return 0;
	cleanup_close int lock = openat(pool, "fill.lock", O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0)
		return 0;
	while (flock(lock, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0)
		if (errno != EINTR)
			return 0;
	unsigned n = drain_at(pool, all);
	if (all) {
		/* Gone only if no spare is left in it (one made since). */
		char name[SANDLOT_NETNS_SPARE_NAME];
		int busy = 0;
		cleanup_closedir DIR *d = list_pool(pool);
		struct dirent *de;
		while (d && (de = readdir(d)))
			busy |= split(de->d_name, ".ns", name);
		if (!busy) {
			unlinkat(pool, "data-dir", 0);
			unlinkat(pool, "fill.lock", 0);
			rmdir(path);
		}
	}
	return n;
}

unsigned sandlot__netns_spare_drain(const char *data_dir)
{
	char path[PATH_MAX];
	if (pool_path(path, data_dir) < 0)
		return 0;
	return drain_path(path, 1, 1);
}

void sandlot__netns_spare_sweep(void)
{
	DIR *d = opendir(spare_base());
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[PATH_MAX], file[PATH_MAX];
		if (snprintf(path, sizeof(path), "%s/%s", spare_base(), de->d_name) >= PATH_MAX ||
		    snprintf(file, sizeof(file), "%s/data-dir", path) >= PATH_MAX)
			continue;
		char *dd = sandlot__read_file(file, PATH_MAX);
		if (dd) {
			dd[strcspn(dd, "\n")] = '\0';
		}
		struct stat st;
		/* A pool for a data directory that is gone: all of it. */
		int gone = dd && stat(dd, &st) < 0 && errno == ENOENT;
		free(dd);
		drain_path(path, gone, 0);
	}
	closedir(d);
}
