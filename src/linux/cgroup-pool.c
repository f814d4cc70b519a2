/* Prepared cgroups: see "prepared cgroups" in cgroup.h for the design. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/sbid.h"
#include "common/util.h"

#define POOL_BASE "/run/sandlot/cgroup-pool"
/* Never more than this many free ones per pool, whatever fill is asked for. */
#define POOL_MAX 64
/* Markers looked at per take (the pool is small). */
#define TAKE_CANDIDATES 32
/* The length of a sandbox id, either shape (common/sbid.h). */
#define NAME_LEN SANDLOT_ID_LEN
/* A pool directory's own name: "<mode>-<16 hex digits>". */
#define LEAF_MAX 32

/* Names this process took and has not adopted or returned yet, with the
 * pool each came from. */
struct reservation {
	char name[NAME_LEN + 1];
	char leaf[LEAF_MAX];
	struct sandlot_cgroup_limits preset;
};
static pthread_mutex_t reserved_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reservation reserved[64];
static size_t nreserved;

static uint64_t fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static const char *pool_base(void)
{
	const char *env = getenv("SANDLOT_CGROUP_POOL_DIR");
	return env && *env ? env : POOL_BASE;
}

/* The name of data_dir's pool directory under pool_base(): one per data
 * dir and set of hierarchies (prepared cgroups of a v1 host mean nothing
 * to a process told to use another root).  -1 in "none" mode: no pool. */
static int pool_leaf(const char *data_dir, char leaf[LEAF_MAX])
{
	const struct sandlot_cgroup_ops *o = sandlot__cgroup_ops();
	if (!o->adopt || !data_dir)
		return -1;
	uint64_t h = 0xcbf29ce484222325ull;
	h = fnv1a(h, o->mode);
	h = fnv1a(h, "\n");
	h = fnv1a(h, sandlot__cgroup_v1_root());
	h = fnv1a(h, "\n");
	h = fnv1a(h, sandlot__cgroup_v2_root());
	h = fnv1a(h, "\n");
	h = fnv1a(h, data_dir);
	snprintf(leaf, LEAF_MAX, "%s-%016llx", o->mode, (unsigned long long)h);
	return 0;
}

static int leaf_path(char *buf, const char *leaf)
{
	return sandlot__cg_pathf(buf, "%s/%s", pool_base(), leaf);
}

static int pool_path(char *buf, const char *data_dir)
{
	char leaf[LEAF_MAX];
	return pool_leaf(data_dir, leaf) < 0 ? -1 : leaf_path(buf, leaf);
}

/* Parse a marker name "<name>.<memory>.<pids>.<cpus_milli>". */
static bool parse_marker(const char *m, char name[NAME_LEN + 1], struct sandlot_cgroup_limits *lim)
{
	if (strncmp(m, "sb-", 3) != 0 || strlen(m) < NAME_LEN + 6 || m[NAME_LEN] != '.')
		return false;
	memcpy(name, m, NAME_LEN);
	name[NAME_LEN] = '\0';
	unsigned long long mem, pids, cpu;
	char tail;
	if (sscanf(m + NAME_LEN, ".%llu.%llu.%llu%c", &mem, &pids, &cpu, &tail) != 3 ||
	    pids > UINT32_MAX || cpu > UINT32_MAX)
		return false;
	lim->memory_bytes = mem;
	lim->pids = (uint32_t)pids;
	lim->cpus_milli = (uint32_t)cpu;
	return true;
}

/* Whether a prepared cgroup's name is an id of this process's node
 * (sandlot__node_id_set): a pool taken over from a preparer with another
 * --node-id holds names that must not become this node's ids; they are
 * neither taken nor counted, only drained. */
static bool ours(const char *name)
{
	char node[SANDLOT_NODE_ID_MAX + 1];
	const char *mine = sandlot__node_id();
	return sandlot__sbid_parse(name, strlen(name), node) && strcmp(node, mine ? mine : "") == 0;
}

static int marker_path(char *buf, const char *pool, const char *name,
		       const struct sandlot_cgroup_limits *lim)
{
	return sandlot__cg_pathf(buf, "%s/%s.%llu.%u.%u", pool, name,
				 (unsigned long long)lim->memory_bytes, lim->pids, lim->cpus_milli);
}

static bool same_limits(const struct sandlot_cgroup_limits *a, const struct sandlot_cgroup_limits *b)
{
	return a->memory_bytes == b->memory_bytes && a->pids == b->pids &&
	       a->cpus_milli == b->cpus_milli;
}

/* One directory of the cgroup `name` (v1: the memory hierarchy's), whose
 * age the stale collector looks at. */
static int age_dir(char *buf, const char *name)
{
	if (strcmp(sandlot__cgroup_mode(), "v1") == 0)
		return sandlot__cg_pathf(buf, "%s/memory/sandlot/%s", sandlot__cgroup_v1_root(), name);
	return sandlot__cg_pathf(buf, "%s/sandlot/%s", sandlot__cgroup_v2_root(), name);
}

static bool reserve(const char *name, const char *leaf, const struct sandlot_cgroup_limits *preset)
{
	pthread_mutex_lock(&reserved_lock);
	bool ok = nreserved < SANDLOT_ARRAY_SIZE(reserved);
	if (ok) {
		snprintf(reserved[nreserved].name, sizeof(reserved[0].name), "%s", name);
		snprintf(reserved[nreserved].leaf, sizeof(reserved[0].leaf), "%s", leaf);
		reserved[nreserved].preset = *preset;
		nreserved++;
	}
	pthread_mutex_unlock(&reserved_lock);
	return ok;
}

/* Forget the reservation of `name`: 1 with its pool's leaf and preset, or
 * 0 when this process holds none. */
static int unreserve(const char *name, char leaf[LEAF_MAX], struct sandlot_cgroup_limits *preset)
{
	int found = 0;
	pthread_mutex_lock(&reserved_lock);
	for (size_t i = 0; i < nreserved; i++) {
		if (strcmp(reserved[i].name, name) == 0) {
			*preset = reserved[i].preset;
			if (leaf)
				memcpy(leaf, reserved[i].leaf, LEAF_MAX);
			reserved[i] = reserved[--nreserved];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&reserved_lock);
	return found;
}

int sandlot__cg_pool_claimed(const char *name, struct sandlot_cgroup_limits *preset)
{
	return unreserve(name, NULL, preset);
}

/* Put the marker back: the cgroup is free again. */
static void unclaim(const char *pool, const char *name, const struct sandlot_cgroup_limits *preset)
{
	char path[PATH_MAX];
	if (marker_path(path, pool, name, preset) < 0)
		return;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

int sandlot__cgroup_pool_take(const char *data_dir, const struct sandlot_cgroup_limits *lim,
			      char name[32])
{
	static const struct sandlot_cgroup_limits none = { 0, 0, 0 };
	if (!lim)
		lim = &none;
	char leaf[LEAF_MAX], pool[PATH_MAX];
	if (pool_leaf(data_dir, leaf) < 0 || leaf_path(pool, leaf) < 0)
		return 0;
	cleanup_closedir DIR *d = opendir(pool);
	if (!d)
		return 0;
	struct cand {
		char marker[NAME_MAX + 1];
		char name[NAME_LEN + 1];
		struct sandlot_cgroup_limits preset;
	} c[TAKE_CANDIDATES];
	size_t n = 0;
	struct dirent *de;
	while (n < TAKE_CANDIDATES && (de = readdir(d))) {
		if (!parse_marker(de->d_name, c[n].name, &c[n].preset) || !ours(c[n].name))
			continue;
		snprintf(c[n].marker, sizeof(c[n].marker), "%s", de->d_name);
		/* Matching limits first: nothing to rewrite. */
		if (n > 0 && same_limits(&c[n].preset, lim) && !same_limits(&c[0].preset, lim)) {
			struct cand t = c[0];
			c[0] = c[n];
			c[n] = t;
		}
		n++;
	}
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX], dir[PATH_MAX];
		if (sandlot__cg_pathf(path, "%s/%s", pool, c[i].marker) < 0 ||
		    age_dir(dir, c[i].name) < 0)
			continue;
		/* Young before it is unmarked: the stale collector looks at the
		 * marker first and the age second, so it never removes a
		 * cgroup taken a moment ago and not yet populated. */
		if (utimensat(AT_FDCWD, dir, NULL, 0) < 0) {
			/* Removed behind the pool's back (by hand, or by an older
			 * sandlot that does not know the markers): a dead
			 * marker. */
			if (errno == ENOENT)
				unlink(path);
			continue;
		}
		if (unlink(path) < 0)
			continue; /* another taker was first */
		if (!reserve(c[i].name, leaf, &c[i].preset)) {
			unclaim(pool, c[i].name, &c[i].preset);
			return 0;
		}
		memcpy(name, c[i].name, NAME_LEN + 1);
		return 1;
	}
	return 0;
}

void sandlot__cgroup_pool_return(const char *name)
{
	struct sandlot_cgroup_limits preset;
	char leaf[LEAF_MAX], pool[PATH_MAX];
	if (name && unreserve(name, leaf, &preset) && leaf_path(pool, leaf) == 0)
		unclaim(pool, name, &preset);
}

/* Free markers in `pool`; with `check`, markers whose cgroup is gone are
 * removed instead of counted (off the critical path only: a stat each). */
static unsigned count_markers(const char *pool, int check)
{
	cleanup_closedir DIR *d = opendir(pool);
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *de;
	char name[NAME_LEN + 1], dir[PATH_MAX];
	struct sandlot_cgroup_limits lim;
	while ((de = readdir(d))) {
		if (!parse_marker(de->d_name, name, &lim) || !ours(name))
			continue;
		if (check && age_dir(dir, name) == 0 && access(dir, F_OK) < 0 && errno == ENOENT) {
			unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		n++;
	}
	return n;
}

unsigned sandlot__cgroup_pool_count(const char *data_dir)
{
	char pool[PATH_MAX];
	return pool_path(pool, data_dir) == 0 ? count_markers(pool, 0) : 0;
}

/* The pool directory with its "data-dir" file (written once, atomically,
 * so that a reader never sees half of it). */
static int make_pool(const char *pool, const char *data_dir)
{
	if (sandlot__mkdir_p(pool, 0700) < 0)
		return -1;
	char path[PATH_MAX], tmp[PATH_MAX];
	if (sandlot__cg_pathf(path, "%s/data-dir", pool) < 0)
		return -1;
	if (access(path, F_OK) == 0)
		return 0;
	if (sandlot__cg_pathf(tmp, "%s/.data-dir.%d", pool, (int)getpid()) < 0)
		return -1;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	size_t len = strlen(data_dir);
	int ok = write(fd, data_dir, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
	close(fd);
	if (!ok || rename(tmp, path) < 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

unsigned sandlot__cgroup_pool_fill(const char *data_dir, const struct sandlot_cgroup_limits *lim,
				   unsigned target)
{
	static const struct sandlot_cgroup_limits none = { 0, 0, 0 };
	if (!lim)
		lim = &none;
	char pool[PATH_MAX];
	if (pool_path(pool, data_dir) < 0)
		return 0;
	if (target > POOL_MAX)
		target = POOL_MAX;
	unsigned have = count_markers(pool, 1);
	if (have >= target)
		return 0;
	if (make_pool(pool, data_dir) < 0)
		return 0;
	unsigned made = 0;
	while (have + made < target) {
		char name[32], path[PATH_MAX];
		sandlot__sbid_new(name);
		if (marker_path(path, pool, name, lim) < 0)
			break;
		sandlot_cgroup_t *cg = sandlot__cgroup_create(name, lim, NULL);
		if (!cg)
			break;
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			sandlot__cgroup_destroy(cg);
			break;
		}
		close(fd);
		sandlot__cgroup_close(cg);
		made++;
	}
	return made;
}

static unsigned drain_pool(const char *pool)
{
	cleanup_closedir DIR *d = opendir(pool);
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char name[NAME_LEN + 1];
		struct sandlot_cgroup_limits lim;
		if (!parse_marker(de->d_name, name, &lim))
			continue;
		/* Taken by us, then removed as an unused cgroup. */
		if (unlinkat(dirfd(d), de->d_name, 0) < 0)
			continue;
		sandlot__cgroup_remove_named(name, 0);
		n++;
	}
	return n;
}

unsigned sandlot__cgroup_pool_drain(const char *data_dir)
{
	char pool[PATH_MAX];
	return pool_path(pool, data_dir) == 0 ? drain_pool(pool) : 0;
}

/* Whether `fd` is still the file at `path` (and not one unlinked by whoever
 * removed the pool since it was opened). */
static bool still_linked(int fd, const char *path)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* Remove an empty pool directory: call with its lock held exclusively, so
 * that no preparer holds it; a preparer that opens the lock meanwhile sees
 * it unlinked (still_linked) and starts over. */
static void remove_pool(const char *pool)
{
	char path[PATH_MAX];
	if (count_markers(pool, 0) > 0)
		return;
	if (sandlot__cg_pathf(path, "%s/data-dir", pool) == 0)
		unlink(path);
	if (sandlot__cg_pathf(path, "%s/preparer.lock", pool) == 0)
		unlink(path);
	rmdir(pool); /* fails, harmlessly, if anything else appeared */
}

int sandlot__cgroup_pool_hold(const char *data_dir, sandlot_error_t **err)
{
	char pool[PATH_MAX], path[PATH_MAX];
	if (pool_path(pool, data_dir) < 0)
		return sandlot__error(err, ENOTSUP, "no prepared cgroups without a cgroup hierarchy");
	if (sandlot__cg_pathf(path, "%s/preparer.lock", pool) < 0)
		return sandlot__error(err, ENAMETOOLONG, "cgroup pool path too long");
	for (;;) {
		if (make_pool(pool, data_dir) < 0)
			return sandlot__error_errno(err, errno, "make the cgroup pool %s", pool);
		int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return sandlot__error_errno(err, errno, "open %s", path);
		/* Held exclusively only while a reclaimer drains a pool it
		 * found without a preparer: a moment. */
		int rc;
		while ((rc = flock(fd, LOCK_SH)) < 0 && errno == EINTR)
			;
		if (rc < 0) {
			int e = errno;
			close(fd);
			return sandlot__error_errno(err, e, "lock %s", path);
		}
		if (still_linked(fd, path))
			return fd;
		close(fd); /* the pool was removed meanwhile: make it again */
	}
}

void sandlot__cgroup_pool_release(const char *data_dir, int fd)
{
	char pool[PATH_MAX], path[PATH_MAX];
	if (fd < 0)
		return;
	if (pool_path(pool, data_dir) == 0 && sandlot__cg_pathf(path, "%s/preparer.lock", pool) == 0) {
		drain_pool(pool);
		/* Exclusive now (nobody else holds it: there is one preparer)
		 * for the removal; a reclaimer that holds it gets there
		 * instead. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && still_linked(fd, path))
			remove_pool(pool);
	}
	close(fd);
}

/* A pool of `sandlot run`'s spares says so in its preparer.lock: "spare"
 * (in the lock file rather than a file of its own so that every sandlot
 * that removes pools, older ones too, removes it with the lock). */
#define SPARE_MARK "spare\n"

static bool is_spare(const char *pool)
{
	char path[PATH_MAX], buf[sizeof(SPARE_MARK)];
	if (sandlot__cg_pathf(path, "%s/preparer.lock", pool) < 0)
		return false;
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 && read(fd, buf, sizeof(buf)) == (ssize_t)strlen(SPARE_MARK) &&
	       memcmp(buf, SPARE_MARK, strlen(SPARE_MARK)) == 0;
}

/* Whether a pool without a preparer is the spares of `sandlot run`
 * (sandlot__cgroup_pool_spare) for a data directory that exists, with no
 * more than SANDLOT_CGROUP_SPARE_MAX free. */
static bool spare_kept(const char *pool)
{
	char path[PATH_MAX];
	if (!is_spare(pool) || sandlot__cg_pathf(path, "%s/data-dir", pool) < 0)
		return false;
	char *dd = sandlot__read_file(path, PATH_MAX);
	if (!dd)
		return false;
	dd[strcspn(dd, "\n")] = '\0';
	struct stat st;
	bool kept = stat(dd, &st) == 0 && count_markers(pool, 0) <= SANDLOT_CGROUP_SPARE_MAX;
	free(dd);
	return kept;
}

unsigned sandlot__cgroup_pool_spare(const char *data_dir, const struct sandlot_cgroup_limits *lim,
				    unsigned target)
{
	char pool[PATH_MAX], path[PATH_MAX];
	if (pool_path(pool, data_dir) < 0 || sandlot__cg_pathf(path, "%s/preparer.lock", pool) < 0)
		return 0;
	if (target > SANDLOT_CGROUP_SPARE_MAX)
		target = SANDLOT_CGROUP_SPARE_MAX;
	/* The preparer's lock while it fills, so no reclaimer drains the
	 * pool under it; marked before the lock goes, so none drains it
	 * after. */
	cleanup_close int fd = sandlot__cgroup_pool_hold(data_dir, NULL);
	if (fd < 0)
		return 0;
	if (!is_spare(pool)) {
		int w = open(path, O_WRONLY | O_CLOEXEC);
		if (w < 0)
			return 0;
		ssize_t n = pwrite(w, SPARE_MARK, strlen(SPARE_MARK), 0);
		close(w);
		if (n != (ssize_t)strlen(SPARE_MARK))
			return 0;
	}
	return sandlot__cgroup_pool_fill(data_dir, lim, target);
}

unsigned sandlot__cgroup_pool_drain_spare(const char *data_dir)
{
	char pool[PATH_MAX], path[PATH_MAX];
	if (pool_path(pool, data_dir) < 0 || sandlot__cg_pathf(path, "%s/preparer.lock", pool) < 0)
		return 0;
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	/* A preparer holds it (sandlotd): the pool is its to drain. */
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || !still_linked(fd, path))
		return 0;
	unsigned n = drain_pool(pool);
	remove_pool(pool);
	return n;
}

unsigned sandlot__cgroup_pool_reclaim(void)
{
	/* The "none" mode has no pools (and no hierarchy to remove from). */
	if (!sandlot__cgroup_ops()->adopt)
		return 0;
	cleanup_closedir DIR *d = opendir(pool_base());
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char pool[PATH_MAX], path[PATH_MAX];
		if (leaf_path(pool, de->d_name) < 0 ||
		    sandlot__cg_pathf(path, "%s/preparer.lock", pool) < 0)
			continue;
		cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
		/* No lock file: it is being made (or removed); look again next
		 * time. */
		if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || !still_linked(fd, path))
			continue;
		/* Spares of `sandlot run` whose data directory is still there:
		 * kept (bounded). */
		if (spare_kept(pool))
			continue;
		n += drain_pool(pool);
		remove_pool(pool);
	}
	return n;
}

bool sandlot__cgroup_pool_has(const char *name)
{
	cleanup_closedir DIR *base = opendir(pool_base());
	if (!base)
		return false;
	size_t l = strlen(name);
	struct dirent *pe;
	while ((pe = readdir(base))) {
		if (pe->d_name[0] == '.')
			continue;
		cleanup_close int pfd = openat(dirfd(base), pe->d_name,
					       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (pfd < 0)
			continue;
		cleanup_closedir DIR *d = fdopendir(pfd);
		if (!d)
			continue;
		pfd = -1; /* the DIR owns it */
		struct dirent *de;
		while ((de = readdir(d)))
			if (strncmp(de->d_name, name, l) == 0 && de->d_name[l] == '.')
				return true;
	}
	return false;
}
