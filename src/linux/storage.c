/* The data directory's storage pool and the workspaces in it: see
 * storage.h for the layout and the reasons. */
#include "storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/btrfs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "linux/syscalls.h"

extern char **environ;

/* Sizes.  A pool is at least 1 GiB (btrfs keeps whole chunks of metadata,
 * twice over, whatever the size) and grows by at least a quarter of itself,
 * in steps of 64 MiB.  Quotas may add up to the pool's size less an eighth
 * (at least 256 MiB): room for the filesystem's own trees, which no quota
 * counts, so that without overcommit the pool never fills before every
 * workspace has reached its quota.  The data filesystem keeps 1% of its
 * size (at least 128 MiB) free of the pool: its own registry, logs and
 * images still have room when the pool has taken the rest. */
#define POOL_MIN (1ull << 30)
#define POOL_STEP (64ull << 20)
#define POOL_OVERHEAD_MIN (256ull << 20)
#define HOST_KEEP_MIN (128ull << 20)
#define QUOTA_XATTR "trusted.sandlot.quota"
#define POOL_MARKER ".sandlot-pool"
#define LOCK_WAIT_MS 2000

/* ---- small helpers ----------------------------------------------------------- */

static int join(char *out, size_t n, const char *a, const char *b)
{
	int len = snprintf(out, n, "%s/%s", a, b);
	if (len < 0 || (size_t)len >= n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* "1.5G"-style, for messages. */
const char *sandlot__human_bytes(uint64_t v, char buf[32])
{
	static const char units[] = "BKMGTPE";
	double d = (double)v;
	int u = 0;
	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%lluB", (unsigned long long)v);
	else
		snprintf(buf, 32, d < 10 ? "%.1f%c" : "%.0f%c", d, units[u]);
	return buf;
}

static const char *human(uint64_t v, char buf[32])
{
	return sandlot__human_bytes(v, buf);
}

static uint64_t round_up(uint64_t v, uint64_t step)
{
	return (v + step - 1) / step * step;
}

static uint64_t usable_of(uint64_t size)
{
	uint64_t over = size / 8 > POOL_OVERHEAD_MIN ? size / 8 : POOL_OVERHEAD_MIN;
	return size > over ? size - over : 0;
}

/* The smallest pool size whose usable part × ratio holds `total`. */
static uint64_t size_for(uint64_t total, double ratio)
{
	double need = (double)total / ratio;
	double a = need + (double)POOL_OVERHEAD_MIN, b = need * 8.0 / 7.0;
	double s = a > b ? a : b;
	if (s > 9.0e18)
		return UINT64_MAX / 2;
	uint64_t size = round_up((uint64_t)s + 1, POOL_STEP);
	return size < POOL_MIN ? POOL_MIN : size;
}

int sandlot__workspace_name_check(const char *name, sandlot_error_t **err)
{
	size_t n = name ? strlen(name) : 0;
	int ok = n > 0 && n <= SANDLOT_WORKSPACE_NAME_MAX;
	for (size_t i = 0; ok && i < n; i++) {
		char c = name[i];
		ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		     (i > 0 && (c == '-' || c == '_' || c == '.'));
	}
	if (!ok)
		return sandlot__error(err, EINVAL,
				      "invalid workspace name \"%.80s\": 1 to 64 of [a-z0-9_.-], "
				      "starting with a letter or digit", name ? name : "");
	return 0;
}

/* Run argv[0] (an absolute path) with stdin and stdout on `in_fd` and
 * `out_fd` (-1: /dev/null), `extra_fd_a`/`extra_fd_b` (or -1) as fds 3/4,
 * and wait for it.  Returns its exit status (128 + the signal if one
 * killed it), or -1 (errno set) when it could not be run.  The start of
 * what it wrote on stderr is left in `msg` (one line, "" if nothing), for
 * the error that names its failure. */
static int run_tool_io(const char *const argv[], int in_fd, int out_fd, int extra_fd_a,
		       int extra_fd_b, char *msg, size_t msglen)
{
	msg[0] = '\0';
	/* O_CLOEXEC: children other threads spawn meanwhile must not keep the
	 * write end, or the read below would wait for them too. */
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	if (in_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
	else
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (out_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	else
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
	if (extra_fd_a >= 0)
		posix_spawn_file_actions_adddup2(&fa, extra_fd_a, 3);
	if (extra_fd_b >= 0)
		posix_spawn_file_actions_adddup2(&fa, extra_fd_b, 4);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc != 0) {
		close(pfd[0]);
		errno = rc;
		return -1;
	}
	/* Read to EOF (keeping the start) so that a chatty tool never blocks
	 * on a full pipe. */
	size_t got = 0;
	char buf[512];
	for (;;) {
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		size_t take = (size_t)n < msglen - 1 - got ? (size_t)n : msglen - 1 - got;
		memcpy(msg + got, buf, take);
		got += take;
	}
	close(pfd[0]);
	msg[got] = '\0';
	msg[strcspn(msg, "\n")] = '\0';
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	/* Killed: the status a shell would give. */
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* run_tool_io() with stdin and stdout on /dev/null. */
static int run_tool(const char *const argv[], int extra_fd_a, int extra_fd_b, char *msg,
		    size_t msglen)
{
	return run_tool_io(argv, -1, -1, extra_fd_a, extra_fd_b, msg, msglen);
}

static const char *find_tool(const char *const *candidates, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (access(candidates[i], X_OK) == 0)
			return candidates[i];
	return NULL;
}

/* ---- loop devices -------------------------------------------------------------- */

/* Threads of one process (the daemon creating many sandboxes at once)
 * would all be handed the same free device and race for it; take turns.
 * Other processes can still race us, so a lost race retries, for up to
 * about two seconds. */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;

static int attach_loop(int img_fd, uint32_t flags, char *dev, size_t devlen,
		       sandlot_error_t **err)
{
	cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) /* ENOENT would read as "no such sandbox" to sandlotd's clients */
		return sandlot__error_errno(err, errno == ENOENT ? ENODEV : errno,
					    "open /dev/loop-control (the storage pool needs loop "
					    "devices: modprobe loop)");
	uint64_t deadline = sandlot__now_ms() + 2000;
	pthread_mutex_lock(&loop_lock);
	int rc = -1, attempts = 0;
	for (;; attempts++) {
		if (attempts > 0 && sandlot__now_ms() > deadline) {
			sandlot__error(err, EBUSY, "no free loop device after %d attempts", attempts);
			break;
		}
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0) {
			sandlot__error_errno(err, errno, "find a free loop device");
			break;
		}
		snprintf(dev, devlen, "/dev/loop%d", n);
		int lfd = open(dev, (flags & LO_FLAGS_READ_ONLY ? O_RDONLY : O_RDWR) | O_CLOEXEC);
		if (lfd < 0) {
			if (errno == ENOENT) { /* devtmpfs has not created the node yet */
				usleep(500);
				continue;
			}
			sandlot__error_errno(err, errno, "open %s", dev);
			break;
		}
		struct loop_config cfg;
		memset(&cfg, 0, sizeof(cfg));
		cfg.fd = (unsigned)img_fd;
		cfg.info.lo_flags = flags;
		if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
			rc = lfd;
			break;
		}
		int e = errno;
		close(lfd);
		if (e != EBUSY) { /* EBUSY: another process took it in between */
			sandlot__error_errno(err, e, "configure %s", dev);
			break;
		}
		usleep(200);
	}
	pthread_mutex_unlock(&loop_lock);
	return rc;
}

/* The loop device already attached to the file `path` (open on img_fd),
 * opened, or -1.  A pool must never be on two devices at once: btrfs would
 * take them for one filesystem's two copies.  Only devices whose backing
 * file has our path are opened (never another program's), and the inode
 * must match too. */
static int find_loop(int img_fd, const char *path, char *dev, size_t devlen)
{
	struct stat st;
	char real[PATH_MAX];
	if (fstat(img_fd, &st) < 0 || !realpath(path, real))
		return -1;
	cleanup_closedir DIR *d = opendir("/sys/block");
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		char sys[320], bf[PATH_MAX + 16];
		snprintf(sys, sizeof(sys), "/sys/block/%s/loop/backing_file", de->d_name);
		cleanup_close int bfd = open(sys, O_RDONLY | O_CLOEXEC);
		ssize_t n = bfd >= 0 ? read(bfd, bf, sizeof(bf) - 1) : -1;
		if (n <= 0)
			continue; /* not configured */
		bf[n] = '\0';
		bf[strcspn(bf, "\n")] = '\0';
		if (strcmp(bf, real) != 0)
			continue;
		if ((size_t)snprintf(dev, devlen, "/dev/%s", de->d_name) >= devlen)
			continue;
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct loop_info64 info;
		if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_inode == st.st_ino &&
		    info.lo_device == st.st_dev)
			return fd;
		close(fd);
	}
	return -1;
}

/* ---- the pool ------------------------------------------------------------------- */

struct pool_paths {
	char dir[4096], img[4200], lock[4200], mnt[4200];
};

static int pool_paths(const char *data_dir, struct pool_paths *p)
{
	if (join(p->dir, sizeof(p->dir), data_dir, "storage") < 0 ||
	    join(p->img, sizeof(p->img), p->dir, "pool.img") < 0 ||
	    join(p->lock, sizeof(p->lock), p->dir, "pool.lock") < 0 ||
	    join(p->mnt, sizeof(p->mnt), p->dir, "mnt") < 0)
		return -1;
	return 0;
}

/* The pool's root directory, if it is mounted: an fd (so that everything
 * after works on that filesystem even if it is unmounted meanwhile), or -1. */
static int mounted_root(const struct pool_paths *p)
{
	int fd = open(p->mnt, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct statfs sf;
	struct stat st;
	if (fstatfs(fd, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC &&
	    fstatat(fd, POOL_MARKER, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return fd;
	close(fd);
	return -1;
}

/* pool.lock, flock()ed with `how` (LOCK_EX or LOCK_SH, maybe | LOCK_NB): an
 * fd to close, or -1 with err.
 *
 * Exclusive (lock_pool()): the pool is mounted, grown on request, swept,
 * unmounted, or an image of the former layout is imported; whoever holds
 * it is alone with the pool and its ledger.
 *
 * Shared (share_pool()): a workspace is being made, copied or removed, by
 * any number of threads and processes at once; each takes the ledger's lock
 * (ledger_lock()) only for its read-modify-write of `reserved`.  So the
 * btrfs calls of one creation (a subvolume, its quota, its tree: 1.1 ms
 * on average under load) no longer wait for every other creation and
 * removal: in sandlotd under 200 concurrent create+exec+delete, when every
 * one took the lock exclusively, a create waited 843 ms on average for it
 * (SANDLOT_TRACE, 400 creates on the loaded 2-CPU test host), most of its
 * time.  A sweep, which needs nobody half-way through making or removing a
 * workspace, still takes it exclusively (when no shared holder is there:
 * see sandlot__pool_sweep()).  An older sandlot that takes the lock
 * exclusively for everything is excluded by any shared holder, and
 * excludes them: mixing the two stays correct. */
static int lock_pool_how(const struct pool_paths *p, int how, sandlot_error_t **err)
{
	if (sandlot__mkdir_p(p->dir, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", p->dir);
	int fd = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "open %s", p->lock);
	while (flock(fd, how) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			return sandlot__error_errno(err, e, "lock %s", p->lock);
		}
	}
	return fd;
}

static int lock_pool(const struct pool_paths *p, sandlot_error_t **err)
{
	return lock_pool_how(p, LOCK_EX, err);
}

static int share_pool(const struct pool_paths *p, sandlot_error_t **err)
{
	return lock_pool_how(p, LOCK_SH, err);
}

/* The ledger's lock, for a holder of the shared pool lock (its fd): an OFD
 * write lock on byte 0 of pool.lock, which does not interact with the
 * flock() on the same file.  0, or -1 with errno. */
static int ledger_lock(int pool_fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	while (fcntl(pool_fd, F_OFD_SETLKW, &fl) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

static void ledger_unlock(int pool_fd)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	fcntl(pool_fd, F_OFD_SETLK, &fl);
}

int sandlot__host_room(const char *dir, uint64_t *room, uint64_t *keep)
{
	struct statvfs sv;
	if (statvfs(dir, &sv) < 0)
		return -1;
	uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
	uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	*keep = total / 100 > HOST_KEEP_MIN ? total / 100 : HOST_KEEP_MIN;
	*room = avail > *keep ? avail - *keep : 0;
	return 0;
}

/* Room on the data filesystem for the pool to grow into. */
static int host_room(const struct pool_paths *p, uint64_t *room, uint64_t *keep)
{
	return sandlot__host_room(p->dir, room, keep);
}

/* A new pool file of `size`, fully allocated, with an empty btrfs on it,
 * made under a temporary name and renamed: complete or absent. */
static int make_pool(const struct pool_paths *p, uint64_t size, sandlot_error_t **err)
{
	static const char *const mkfs_paths[] = { "/usr/sbin/mkfs.btrfs", "/sbin/mkfs.btrfs",
						  "/usr/bin/mkfs.btrfs", "/bin/mkfs.btrfs" };
	const char *mkfs = find_tool(mkfs_paths, SANDLOT_ARRAY_SIZE(mkfs_paths));
	if (!mkfs)
		/* Not ENOENT: the host lacks a tool, nothing the caller named
		 * is missing (sandlotd would answer 404). */
		return sandlot__error(err, ENODEV,
				      "mkfs.btrfs not found: the storage pool needs btrfs-progs "
				      "(apt-get install btrfs-progs), or use tmpfs storage");
	uint64_t room, keep;
	char a[32], b[32], c[32];
	if (host_room(p, &room, &keep) < 0)
		return sandlot__error_errno(err, errno, "statvfs %s", p->dir);
	if (size > room)
		return sandlot__error(err, ENOSPC,
				      "cannot make a storage pool of %s in %s: its filesystem has %s "
				      "free beyond the %s kept for itself", human(size, a), p->dir,
				      human(room, b), human(keep, c));
	/* Pool files half made by a process killed while making one (only
	 * ever made under the pool lock, which we hold): never used, remove. */
	DIR *d = opendir(p->dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strncmp(de->d_name, ".pool-", 6) == 0)
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	char tmp[4300];
	snprintf(tmp, sizeof(tmp), "%s/.pool-XXXXXX", p->dir);
	cleanup_close int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	int e = fallocate(fd, 0, 0, (off_t)size) < 0 ? errno : 0;
	if (e) {
		unlink(tmp);
		return sandlot__error_errno(err, e, "reserve %s for the storage pool in %s",
					    human(size, a), p->dir);
	}
	const char *const argv[] = { mkfs, "-q", "-f", "-L", "sandlot-pool", tmp, NULL };
	char why[256];
	int st = run_tool(argv, -1, -1, why, sizeof(why));
	if (st != 0) {
		e = errno;
		unlink(tmp);
		if (st < 0)
			return sandlot__error_errno(err, e, "run %s", mkfs);
		return sandlot__error(err, EIO, "cannot make the storage pool in %s: %s exited "
				      "with %d%s%s", p->dir, mkfs, st, why[0] ? ": " : "", why);
	}
	if (fsync(fd) < 0 || fchmod(fd, 0600) < 0 || rename(tmp, p->img) < 0) {
		e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "install %s", p->img);
	}
	return 0;
}

/* Make the loop device and the filesystem as big as the pool file (after a
 * grow, or a crash in the middle of one). */
static int fit_to_file(int root, int lfd, uint64_t size, sandlot_error_t **err)
{
	struct btrfs_ioctl_dev_info_args di;
	memset(&di, 0, sizeof(di));
	di.devid = 1;
	if (ioctl(root, BTRFS_IOC_DEV_INFO, &di) < 0)
		return sandlot__error_errno(err, errno, "storage pool device info");
	if (di.total_bytes >= size)
		return 0;
	if (ioctl(lfd, LOOP_SET_CAPACITY, 0) < 0)
		return sandlot__error_errno(err, errno, "grow the storage pool's loop device");
	struct btrfs_ioctl_vol_args va;
	memset(&va, 0, sizeof(va));
	snprintf(va.name, sizeof(va.name), "max");
	if (ioctl(root, BTRFS_IOC_RESIZE, &va) < 0)
		return sandlot__error_errno(err, errno, "grow the storage pool's filesystem");
	return 0;
}

/* First mount of a new pool: quotas on, the directories, the ledger. */
static int init_pool(int root, sandlot_error_t **err)
{
	struct btrfs_ioctl_quota_ctl_args q = { .cmd = BTRFS_QUOTA_CTL_ENABLE };
	if (ioctl(root, BTRFS_IOC_QUOTA_CTL, &q) < 0)
		return sandlot__error_errno(err, errno, "enable quotas on the storage pool");
	if ((mkdirat(root, "ws", 0700) < 0 && errno != EEXIST) ||
	    (mkdirat(root, "kept", 0700) < 0 && errno != EEXIST))
		return sandlot__error_errno(err, errno, "prepare the storage pool");
	cleanup_close int l = openat(root, "reserved", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cleanup_close int m = openat(root, POOL_MARKER, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (l < 0 || m < 0 || fchmod(root, 0700) < 0)
		return sandlot__error_errno(err, errno, "prepare the storage pool");
	return 0;
}

/* With the pool lock held: the pool mounted, made first if `create`. */
static int pool_mount_locked(const struct pool_paths *p, int create, sandlot_error_t **err)
{
	int root = mounted_root(p);
	if (root >= 0)
		return root;
	if (access(p->img, F_OK) < 0) {
		if (errno != ENOENT || !create)
			return sandlot__error_errno(err, errno, "storage pool %s", p->img);
		if (make_pool(p, POOL_MIN, err) < 0)
			return -1;
	}
	cleanup_close int img = open(p->img, O_RDWR | O_CLOEXEC);
	if (img < 0)
		return sandlot__error_errno(err, errno, "open storage pool %s", p->img);
	char dev[64];
	/* A device left attached (by a mount elsewhere, or by sandboxes that
	 * outlived an unmount) is reused; a new one detaches itself when the
	 * last mount of the pool goes. */
	cleanup_close int lfd = find_loop(img, p->img, dev, sizeof(dev));
	if (lfd < 0)
		lfd = attach_loop(img, LO_FLAGS_AUTOCLEAR, dev, sizeof(dev), err);
	if (lfd < 0)
		return sandlot__error_wrap(err, "storage pool %s", p->img);
	cleanup_close int fs = sys_fsopen("btrfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return sandlot__error_errno(err, errno, "fsopen btrfs (the storage pool needs btrfs)");
	/* nodiscard: btrfs would otherwise hand freed blocks back to the loop
	 * device, which punches them out of the pool file, making it sparse:
	 * exactly what the pool is not allowed to be. */
	if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_FLAG, "nodiscard", NULL, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sandlot__error_errno(err, errno, "mount storage pool %s from %s", p->img, dev);
	cleanup_close int m = sys_fsmount(fs, FSMOUNT_CLOEXEC,
				      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (m < 0)
		return sandlot__error_errno(err, errno, "fsmount storage pool %s", p->img);
	cleanup_close int r = openat(m, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r < 0)
		return sandlot__error_errno(err, errno, "open storage pool root");
	struct stat st;
	if (fstatat(r, POOL_MARKER, &st, AT_SYMLINK_NOFOLLOW) < 0 && init_pool(r, err) < 0)
		return -1;
	if (fstat(img, &st) < 0 || fit_to_file(r, lfd, (uint64_t)st.st_size, err) < 0)
		return -1;
	if (mkdir(p->mnt, 0700) < 0 && errno != EEXIST)
		return sandlot__error_errno(err, errno, "create %s", p->mnt);
	if (sys_move_mount(m, "", AT_FDCWD, p->mnt, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return sandlot__error_errno(err, errno, "mount the storage pool on %s", p->mnt);
	return steal_fd(&r);
}

/* The pool's root (an fd), mounting it first if it is not, and making it
 * first with `create`.  Without `create`, a missing pool is ENOENT. */
static int pool_open(const char *data_dir, int create, sandlot_error_t **err)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	int root = mounted_root(&p);
	if (root >= 0)
		return root;
	if (!create && access(p.img, F_OK) < 0)
		return sandlot__error_errno(err, errno, "storage pool %s", p.img);
	cleanup_close int lk = lock_pool(&p, err);
	if (lk < 0)
		return -1;
	return pool_mount_locked(&p, create, err);
}

/* ---- reservations --------------------------------------------------------------- */

static uint64_t ledger_read(int root)
{
	char buf[32] = "";
	cleanup_close int fd = openat(root, "reserved", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && pread(fd, buf, sizeof(buf) - 1, 0) < 0)
		buf[0] = '\0';
	return strtoull(buf, NULL, 10);
}

static int ledger_write(int root, uint64_t v)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%020llu\n", (unsigned long long)v);
	cleanup_close int fd = openat(root, "reserved", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		return -1;
	return 0;
}

/* Grow the pool file to `size` and the filesystem with it.  On failure the
 * file keeps its size. */
static int grow_locked(const struct pool_paths *p, int root, uint64_t size, sandlot_error_t **err)
{
	cleanup_close int img = open(p->img, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (img < 0 || fstat(img, &st) < 0)
		return sandlot__error_errno(err, errno, "open storage pool %s", p->img);
	if ((uint64_t)st.st_size >= size)
		return 0;
	char a[32];
	if (fallocate(img, 0, 0, (off_t)size) < 0) {
		int e = errno;
		if (ftruncate(img, st.st_size) < 0) {
			/* the next grow tries again from here */
		}
		return sandlot__error_errno(err, e, "grow storage pool %s to %s", p->img,
					    human(size, a));
	}
	char dev[64];
	cleanup_close int lfd = find_loop(img, p->img, dev, sizeof(dev));
	if (lfd < 0)
		return sandlot__error(err, ENXIO, "the storage pool %s has no loop device", p->img);
	return fit_to_file(root, lfd, size, err);
}

/* Reserve `bytes` more (pool lock held), growing the pool if need be. */
static int reserve_locked(const struct pool_paths *p, int root, uint64_t bytes, double ratio,
			  sandlot_error_t **err)
{
	if (ratio < 1)
		ratio = 1;
	uint64_t cur = ledger_read(root), total = cur + bytes;
	struct stat st;
	if (stat(p->img, &st) < 0)
		return sandlot__error_errno(err, errno, "stat storage pool %s", p->img);
	uint64_t size = (uint64_t)st.st_size;
	if ((double)usable_of(size) * ratio < (double)total) {
		uint64_t need = size_for(total, ratio), room, keep;
		if (host_room(p, &room, &keep) < 0)
			return sandlot__error_errno(err, errno, "statvfs %s", p->dir);
		char a[32], b[32], c[32], d[32], e[32], f[32];
		if (need > size + room)
			return sandlot__error(
				err, ENOSPC,
				"cannot reserve %s of disk: %s is already reserved in the storage pool "
				"(%s, overcommit ratio %g), and growing it needs %s more than the %s free "
				"on %s (beyond the %s it keeps free); use a smaller disk, free space "
				"there, or allow overcommit (sandlotd --disk-overcommit, "
				"SANDLOT_DISK_OVERCOMMIT)",
				human(bytes, a), human(cur, b), human(size, c), ratio,
				human(need - size, d), human(room, e), p->dir, human(keep, f));
		uint64_t step = round_up(size + size / 4, POOL_STEP);
		uint64_t to = need > step ? need : step;
		if (to > size + room)
			to = need;
		if (grow_locked(p, root, to, err) < 0)
			return -1;
	}
	if (ledger_write(root, total) < 0)
		return sandlot__error_errno(err, errno, "record the storage reservation");
	return 0;
}

static void unreserve_locked(int root, uint64_t bytes)
{
	uint64_t cur = ledger_read(root);
	ledger_write(root, cur > bytes ? cur - bytes : 0);
}

/* reserve_locked() and unreserve_locked() for a holder of the shared pool
 * lock `lk`, under the ledger's lock.  (An unreserve that cannot take it
 * leaves the ledger high, on the safe side, until the next sweep.) */
static int reserve_shared(const struct pool_paths *p, int lk, int root, uint64_t bytes,
			  double ratio, sandlot_error_t **err)
{
	if (ledger_lock(lk) < 0)
		return sandlot__error_errno(err, errno, "lock the ledger in %s", p->lock);
	int rc = reserve_locked(p, root, bytes, ratio, err);
	ledger_unlock(lk);
	return rc;
}

static void unreserve_shared(int lk, int root, uint64_t bytes)
{
	if (ledger_lock(lk) < 0)
		return;
	unreserve_locked(root, bytes);
	ledger_unlock(lk);
}

/* ---- one workspace ----------------------------------------------------------------- */

static uint64_t quota_of(int wfd)
{
	char buf[32];
	ssize_t n = fgetxattr(wfd, QUOTA_XATTR, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static void qgroup_forget(int dirfd, uint64_t subvol)
{
	if (!subvol)
		return;
	struct btrfs_ioctl_qgroup_create_args q = { .create = 0, .qgroupid = subvol };
	/* Refused while the kernel still drops the subvolume; the kernel
	 * removes it by itself then (or it stays as an empty record). */
	ioctl(dirfd, BTRFS_IOC_QGROUP_CREATE, &q);
}

static uint64_t subvol_id(int wfd)
{
	struct btrfs_ioctl_ino_lookup_args a;
	memset(&a, 0, sizeof(a));
	a.objectid = 256; /* BTRFS_FIRST_FREE_OBJECTID: a subvolume's root directory */
	return ioctl(wfd, BTRFS_IOC_INO_LOOKUP, &a) == 0 ? a.treeid : 0;
}

/* Delete the subvolume `name` in dirfd (its blocks are freed in the
 * background).  0 or -1 with errno. */
static int subvol_delete(int dirfd, const char *name)
{
	uint64_t id = 0;
	int w = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w >= 0) {
		id = subvol_id(w);
		close(w);
	}
	struct btrfs_ioctl_vol_args va;
	memset(&va, 0, sizeof(va));
	snprintf(va.name, sizeof(va.name), "%s", name);
	if (ioctl(dirfd, BTRFS_IOC_SNAP_DESTROY, &va) < 0)
		return -1;
	qgroup_forget(dirfd, id);
	return 0;
}

static int set_quota(int wfd, uint64_t bytes, sandlot_error_t **err)
{
	struct btrfs_ioctl_qgroup_limit_args l;
	memset(&l, 0, sizeof(l));
	l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	l.lim.max_rfer = bytes;
	if (ioctl(wfd, BTRFS_IOC_QGROUP_LIMIT, &l) < 0)
		return sandlot__error_errno(err, errno, "set the workspace quota");
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
	if (fsetxattr(wfd, QUOTA_XATTR, buf, (size_t)n, 0) < 0)
		return sandlot__error_errno(err, errno, "record the workspace quota");
	return 0;
}

/* home/ for the sandbox user (uid 1000), tmp/ for root with mode 1777, as
 * sandbox uids.  Only what is missing is made: a kept workspace being
 * reused has both, and what the sandbox made of them is left alone. */
static int prepare_tree(int root, sandlot_error_t **err)
{
	if (mkdirat(root, "home", 0755) == 0) {
		if (fchownat(root, "home", 1000, 1000, AT_SYMLINK_NOFOLLOW) < 0)
			return sandlot__error_errno(err, errno, "prepare home in storage");
	} else if (errno != EEXIST) {
		return sandlot__error_errno(err, errno, "prepare home in storage");
	}
	if (mkdirat(root, "tmp", 01777) == 0) {
		if (fchmodat(root, "tmp", 01777, 0) < 0)
			return sandlot__error_errno(err, errno, "prepare tmp in storage");
	} else if (errno != EEXIST) {
		return sandlot__error_errno(err, errno, "prepare tmp in storage");
	}
	return 0;
}

/* The workspace's lock file, locked: exclusive (`shared` = 0) or shared;
 * retried for LOCK_WAIT_MS when `wait`.  An fd, or -1 (EBUSY if held). */
static int lock_workspace(int wfd, int shared, int wait, const char *name, sandlot_error_t **err)
{
	cleanup_close int fd = openat(wfd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "open the lock of workspace %s", name);
	uint64_t deadline = sandlot__now_ms() + (wait ? LOCK_WAIT_MS : 0);
	for (;;) {
		if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0)
			return steal_fd(&fd);
		if (errno != EWOULDBLOCK && errno != EINTR)
			return sandlot__error_errno(err, errno, "lock workspace %s", name);
		if (sandlot__now_ms() >= deadline)
			return sandlot__error(err, EBUSY, "workspace %s is in use by a sandbox", name);
		usleep(2000);
	}
}

/* A new subvolume `tmpname` in dirfd with a quota of `bytes`, reserved in
 * the pool, locked (*lock_fd) and prepared.  The pool lock `lk` held,
 * shared (or exclusive: then the ledger's lock is free anyway).  On failure
 * nothing is left and nothing stays reserved.  Returns its fd. */
static int new_workspace_shared(const struct pool_paths *p, int lk, int root, int dirfd,
				const char *tmpname, uint64_t bytes, double ratio, int *lock_fd,
				sandlot_error_t **err)
{
	if (reserve_shared(p, lk, root, bytes, ratio, err) < 0)
		return -1;
	struct btrfs_ioctl_vol_args va;
	memset(&va, 0, sizeof(va));
	snprintf(va.name, sizeof(va.name), "%s", tmpname);
	if (ioctl(dirfd, BTRFS_IOC_SUBVOL_CREATE, &va) < 0) {
		int e = errno;
		unreserve_shared(lk, root, bytes);
		return sandlot__error_errno(err, e, "create workspace %s", tmpname);
	}
	cleanup_close int w = openat(dirfd, tmpname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w < 0) {
		sandlot__error_errno(err, errno, "open workspace %s", tmpname);
		goto fail;
	}
	if (set_quota(w, bytes, err) < 0 || fchmod(w, 0755) < 0 ||
	    (*lock_fd = lock_workspace(w, 0, 0, tmpname, err)) < 0)
		goto fail;
	if (prepare_tree(w, err) < 0) {
		close(*lock_fd);
		*lock_fd = -1;
		goto fail;
	}
	return steal_fd(&w);
fail:
	subvol_delete(dirfd, tmpname);
	unreserve_shared(lk, root, bytes);
	return -1;
}

/* A detached clone of the workspace's directory, executable (the pool's
 * own mount is noexec), still nosuid and nodev. */
static int clone_mount(int wfd, sandlot_error_t **err)
{
	cleanup_close int m = sys_open_tree(wfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (m < 0)
		return sandlot__error_errno(err, errno, "clone the workspace mount");
	struct mount_attr attr = { .attr_clr = MOUNT_ATTR_NOEXEC };
	if (sys_mount_setattr(m, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return sandlot__error_errno(err, errno, "set the workspace mount's flags");
	return steal_fd(&m);
}

static int open_subdir(int root, const char *name, sandlot_error_t **err)
{
	int fd = openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "open the storage pool's %s/", name);
	return fd;
}

static int storage_pool(const char *data_dir, const char *id, uint64_t bytes, const char *keep,
			int existing, double ratio, struct sandlot_storage *out, sandlot_error_t **err)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	/* Without a pool there is no workspace to resume: ENOENT (the pool's
	 * file missing), not a new pool. */
	cleanup_close int root = pool_open(data_dir, !existing, err);
	if (root < 0)
		return -1;
	cleanup_close int dir = open_subdir(root, keep ? "kept" : "ws", err);
	if (dir < 0)
		return -1;
	const char *name = keep ? keep : id;
	cleanup_close int w = -1, lock = -1;
	if (keep) {
		w = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (w < 0 && errno != ENOENT)
			return sandlot__error_errno(err, errno, "open workspace %s", name);
		if (w < 0 && existing)
			return sandlot__error(err, ENOENT, "no kept workspace %s", name);
		if (w >= 0) {
			if ((lock = lock_workspace(w, 0, 1, name, err)) < 0)
				return -1;
			bytes = quota_of(w);
			if (!bytes)
				return sandlot__error(err, EINVAL, "workspace %s has no quota recorded", name);
		}
	}
	if (w < 0) {
		char tmp[SANDLOT_WORKSPACE_NAME_MAX + 8];
		snprintf(tmp, sizeof(tmp), keep ? ".new-%s" : "%s", name);
		cleanup_close int lk = share_pool(&p, err);
		if (lk < 0)
			return -1;
		w = new_workspace_shared(&p, lk, root, dir, tmp, bytes, ratio, &lock, err);
		if (w < 0)
			return -1;
		if (keep && sys_renameat2(dir, tmp, dir, name, RENAME_NOREPLACE) < 0) {
			int e = errno;
			close(lock), lock = -1;
			subvol_delete(dir, tmp);
			unreserve_shared(lk, root, bytes);
			return sandlot__error_errno(err, e, "create workspace %s", name);
		}
	}
	int m = clone_mount(w, err);
	if (m < 0) {
		if (!keep) {
			cleanup_close int lk = share_pool(&p, NULL);
			close(lock), lock = -1;
			subvol_delete(dir, name);
			if (lk >= 0) /* else the next sweep recounts the ledger */
				unreserve_shared(lk, root, bytes);
		}
		return -1;
	}
	out->mount_fd = m;
	out->lock_fd = steal_fd(&lock);
	out->bytes = bytes;
	out->ephemeral = !keep;
	snprintf(out->name, sizeof(out->name), "%s", name);
	return 0;
}

int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, int want,
			    const char *keep, double overcommit, struct sandlot_storage *out,
			    sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	out->mount_fd = out->lock_fd = -1;
	out->bytes = bytes;
	int existing = (want & SANDLOT_STORAGE_EXISTING) != 0;
	want &= ~SANDLOT_STORAGE_EXISTING;
	if (existing && !keep)
		return sandlot__error(err, EINVAL, "no kept workspace named");
	if (keep) {
		want = SANDLOT_STORAGE_POOL; /* validated: never tmpfs */
	} else if (want == 0) {
		const char *env = getenv("SANDLOT_STORAGE");
		want = env && strcmp(env, "tmpfs") == 0 ? SANDLOT_STORAGE_TMPFS : SANDLOT_STORAGE_POOL;
	}
	out->kind = want;
	if (want == SANDLOT_STORAGE_TMPFS)
		return 0;
	if (keep && sandlot__workspace_name_check(keep, err) < 0)
		return -1;
	if (!(out->data_dir = strdup(data_dir)))
		return sandlot__error(err, ENOMEM, "out of memory");
	if (storage_pool(data_dir, id, bytes, keep, existing, overcommit, out, err) < 0) {
		free(out->data_dir);
		out->data_dir = NULL;
		return -1;
	}
	return 0;
}

int sandlot__storage_idmap(struct sandlot_storage *s, pid_t pid, sandlot_error_t **err)
{
	if (s->mount_fd < 0)
		return 0;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	cleanup_close int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return sandlot__error_errno(err, errno, "open %s", path);
	/* The sandbox's namespace maps sandbox uid u to host uid base + u:
	 * exactly the translation from the workspace's owners to the host's. */
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)ns };
	if (sys_mount_setattr(s->mount_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return sandlot__error_errno(err, errno,
					    "idmap the workspace mount (workspaces need idmapped "
					    "btrfs mounts, Linux 5.15 or later)");
	return 0;
}

void sandlot__storage_release(struct sandlot_storage *s)
{
	if (s->mount_fd >= 0)
		close(s->mount_fd);
	s->mount_fd = -1;
}

void sandlot__storage_destroy(struct sandlot_storage *s)
{
	sandlot__storage_release(s);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
	if (s->ephemeral && s->data_dir) {
		struct pool_paths p;
		cleanup_close int root = pool_paths(s->data_dir, &p) == 0 ? pool_open(s->data_dir, 0, NULL) : -1;
		cleanup_close int dir = root >= 0 ? openat(root, "ws", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (dir >= 0) {
			cleanup_close int lk = share_pool(&p, NULL);
			if (lk >= 0 && subvol_delete(dir, s->name) == 0)
				unreserve_shared(lk, root, s->bytes);
		}
		s->ephemeral = 0;
	}
	free(s->data_dir);
	s->data_dir = NULL;
}

/* ---- kept workspaces ------------------------------------------------------------------ */

static int open_kept(const char *data_dir, const char *name, int *root, int *dir,
		     sandlot_error_t **err)
{
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	*root = pool_open(data_dir, 0, err);
	if (*root < 0)
		return sandlot__error_wrap(err, "workspace %s", name);
	*dir = open_subdir(*root, "kept", err);
	if (*dir < 0)
		return -1;
	int w = openat(*dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w < 0)
		return sandlot__error_errno(err, errno, "workspace %s", name);
	return w;
}

int sandlot__workspace_copy(const char *data_dir, const char *src, const char *dst,
			    double overcommit, sandlot_error_t **err)
{
	if (sandlot__workspace_name_check(dst, err) < 0)
		return -1;
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int root = -1, dir = -1;
	cleanup_close int w = open_kept(data_dir, src, &root, &dir, err);
	if (w < 0)
		return -1;
	/* Shared: no sandbox can take it (exclusively) while we copy. */
	cleanup_close int lock = lock_workspace(w, 1, 0, src, err);
	if (lock < 0)
		return -1;
	if (faccessat(dir, dst, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sandlot__error(err, EEXIST, "workspace %s already exists", dst);
	uint64_t bytes = quota_of(w);
	if (!bytes)
		return sandlot__error(err, EINVAL, "workspace %s has no quota recorded", src);
	char tmp[SANDLOT_WORKSPACE_NAME_MAX + 8];
	snprintf(tmp, sizeof(tmp), ".new-%s", dst);
	cleanup_close int lk = share_pool(&p, err);
	if (lk < 0)
		return -1;
	if (reserve_shared(&p, lk, root, bytes, overcommit, err) < 0)
		return -1;
	struct btrfs_ioctl_vol_args_v2 va;
	memset(&va, 0, sizeof(va));
	va.fd = w;
	snprintf(va.name, sizeof(va.name), "%s", tmp);
	if (ioctl(dir, BTRFS_IOC_SNAP_CREATE_V2, &va) < 0) {
		int e = errno;
		unreserve_shared(lk, root, bytes);
		return sandlot__error_errno(err, e, "snapshot workspace %s", src);
	}
	cleanup_close int nw = openat(dir, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = nw < 0 ? sandlot__error_errno(err, errno, "open workspace %s", tmp)
			: set_quota(nw, bytes, err);
	if (rc == 0 && sys_renameat2(dir, tmp, dir, dst, RENAME_NOREPLACE) < 0)
		rc = sandlot__error_errno(err, errno, "create workspace %s", dst);
	if (rc < 0) {
		subvol_delete(dir, tmp);
		unreserve_shared(lk, root, bytes);
	}
	return rc;
}

int sandlot__workspace_remove(const char *data_dir, const char *name, sandlot_error_t **err)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int root = -1, dir = -1;
	cleanup_close int w = open_kept(data_dir, name, &root, &dir, err);
	if (w < 0)
		return -1;
	cleanup_close int lock = lock_workspace(w, 0, 0, name, err);
	if (lock < 0)
		return -1;
	uint64_t bytes = quota_of(w);
	cleanup_close int lk = share_pool(&p, err);
	if (lk < 0)
		return -1;
	if (subvol_delete(dir, name) < 0)
		return sandlot__error_errno(err, errno, "delete workspace %s", name);
	unreserve_shared(lk, root, bytes);
	return 0;
}

int sandlot__workspace_size(const char *data_dir, const char *name, uint64_t *bytes,
			    sandlot_error_t **err)
{
	cleanup_close int root = -1, dir = -1;
	cleanup_close int w = open_kept(data_dir, name, &root, &dir, err);
	if (w < 0)
		return -1;
	*bytes = quota_of(w);
	if (!*bytes)
		return sandlot__error(err, EINVAL, "workspace %s has no quota recorded", name);
	return 0;
}

int sandlot__workspace_list(const char *data_dir, char ***names, sandlot_error_t **err)
{
	*names = NULL;
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	size_t n = 0, cap = 8;
	char **v = calloc(cap, sizeof(char *));
	if (!v)
		return sandlot__error(err, ENOMEM, "out of memory");
	sandlot_error_t *e = NULL;
	cleanup_close int root = pool_open(data_dir, 0, &e);
	if (root < 0) {
		int st = sandlot_error_status(e);
		sandlot_error_free(e);
		if (st == ENOENT) {
			*names = v;
			return 0;
		}
		free(v);
		return sandlot__error(err, st, "open the storage pool of %s", data_dir);
	}
	int dfd = open_subdir(root, "kept", err);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		free(v);
		return -1;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n + 1 >= cap) {
			char **nv = realloc(v, 2 * cap * sizeof(char *));
			if (!nv)
				break;
			v = nv, cap *= 2;
		}
		if (!(v[n] = strdup(de->d_name)))
			break;
		v[++n] = NULL;
	}
	closedir(d);
	*names = v;
	return 0;
}

int sandlot__workspace_sync(const char *data_dir, sandlot_error_t **err)
{
	sandlot_error_t *e = NULL;
	cleanup_close int root = pool_open(data_dir, 0, &e);
	if (root < 0) {
		int st = sandlot_error_status(e);
		sandlot_error_free(e);
		return st == ENOENT ? 0 : sandlot__error(err, st, "open the storage pool");
	}
	if (syncfs(root) < 0)
		return sandlot__error_errno(err, errno, "sync the storage pool");
	return 0;
}

/* ---- the former layout ---------------------------------------------------------------- */

int sandlot__workspace_import(const char *data_dir, const char *name, const char *image,
			      double overcommit, sandlot_error_t **err)
{
	static const char *const cp_paths[] = { "/usr/bin/cp", "/bin/cp" };
	const char *cp = find_tool(cp_paths, SANDLOT_ARRAY_SIZE(cp_paths));
	if (!cp)
		return sandlot__error(err, ENOENT, "cp not found");
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int img = open(image, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (img < 0 || fstat(img, &st) < 0)
		return sandlot__error_errno(err, errno, "open workspace image %s", image);
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)(16u << 20))
		return sandlot__error(err, EINVAL, "%s is not a workspace image", image);
	/* Another process must not hold it (the former layout's lock). */
	if (flock(img, LOCK_SH | LOCK_NB) < 0)
		return sandlot__error(err, EBUSY, "workspace image %s is in use", image);
	char dev[64];
	cleanup_close int lfd = attach_loop(img, LO_FLAGS_AUTOCLEAR | LO_FLAGS_READ_ONLY, dev,
					    sizeof(dev), err);
	if (lfd < 0)
		return sandlot__error_wrap(err, "workspace image %s", image);
	cleanup_close int fs = sys_fsopen("ext4", FSOPEN_CLOEXEC);
	if (fs < 0 || sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sandlot__error_errno(err, errno, "mount workspace image %s", image);
	cleanup_close int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
							       MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (m < 0)
		return sandlot__error_errno(err, errno, "mount workspace image %s", image);
	close(lfd), lfd = -1; /* the mount holds the device now */

	cleanup_close int root = pool_open(data_dir, 1, err);
	if (root < 0)
		return -1;
	cleanup_close int dir = open_subdir(root, "kept", err);
	if (dir < 0)
		return -1;
	if (faccessat(dir, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sandlot__error(err, EEXIST, "workspace %s already exists", name);
	char tmp[SANDLOT_WORKSPACE_NAME_MAX + 8];
	snprintf(tmp, sizeof(tmp), ".new-%s", name);
	uint64_t bytes = (uint64_t)st.st_size;
	cleanup_close int lk = lock_pool(&p, err);
	if (lk < 0)
		return -1;
	cleanup_close int lock = -1;
	cleanup_close int w = new_workspace_shared(&p, lk, root, dir, tmp, bytes, overcommit, &lock,
						   err);
	if (w < 0)
		return -1;
	/* The quota comes back once the files are in: a nearly full ext4
	 * image may take a little more room as btrfs. */
	struct btrfs_ioctl_qgroup_limit_args l;
	memset(&l, 0, sizeof(l));
	l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	l.lim.max_rfer = (uint64_t)-1; /* btrfs: no limit */
	ioctl(w, BTRFS_IOC_QGROUP_LIMIT, &l);
	/* home/ and tmp/ exist in w (prepare_tree): copy their contents with
	 * owners, modes, times, links and xattrs (cp -a), reading the image
	 * through fd 3 and writing the workspace through fd 4. */
	int rc = 0;
	const char *const subs[] = { "home", "tmp" };
	for (size_t i = 0; rc == 0 && i < 2; i++) {
		if (faccessat(m, subs[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		char from[64], to[64];
		snprintf(from, sizeof(from), "/proc/self/fd/3/%s/.", subs[i]);
		snprintf(to, sizeof(to), "/proc/self/fd/4/%s/", subs[i]);
		const char *const argv[] = { cp, "-a", "--", from, to, NULL };
		char why[256];
		int rs = run_tool(argv, m, w, why, sizeof(why));
		if (rs < 0)
			rc = sandlot__error_errno(err, errno, "run %s", cp);
		else if (rs != 0)
			rc = sandlot__error(err, EIO, "copying %s/ of %s into the storage pool "
					    "failed%s%s", subs[i], image, why[0] ? ": " : "", why);
		/* The top directories' owners and modes, as cp -a of "dir/."
		 * sets them from the source too. */
	}
	if (rc == 0 && set_quota(w, bytes, err) < 0)
		rc = -1;
	if (rc == 0 && sys_renameat2(dir, tmp, dir, name, RENAME_NOREPLACE) < 0)
		rc = sandlot__error_errno(err, errno, "create workspace %s", name);
	if (rc < 0) {
		close(lock), lock = -1;
		subvol_delete(dir, tmp);
		unreserve_locked(root, bytes);
	}
	return rc;
}

/* ---- archives: a kept workspace as a tar stream ------------------------------------- */

static const char *const tar_paths[] = { "/usr/bin/tar", "/bin/tar" };

int sandlot__workspace_export(const char *data_dir, const char *name, int out_fd,
			      sandlot_error_t **err)
{
	const char *tar = find_tool(tar_paths, SANDLOT_ARRAY_SIZE(tar_paths));
	if (!tar)
		return sandlot__error(err, ENOENT, "tar not found (GNU tar archives workspaces)");
	cleanup_close int root = -1, dir = -1;
	cleanup_close int w = open_kept(data_dir, name, &root, &dir, err);
	if (w < 0)
		return -1;
	/* Shared, as for a copy: no sandbox takes it while tar reads. */
	cleanup_close int lock = lock_workspace(w, 1, 0, name, err);
	if (lock < 0)
		return -1;
	/* Sandbox uids as numbers (the workspace stores them so), user.*
	 * extended attributes only: security.* ones (file capabilities)
	 * have no business moving between hosts. */
	const char *const argv[] = { tar, "--create", "--file=-", "--format=posix", "--numeric-owner",
				     "--sparse", "--xattrs", "--xattrs-include=user.*",
				     "--directory=/proc/self/fd/3", "--", "home", "tmp", NULL };
	char why[256];
	int rs = run_tool_io(argv, -1, out_fd, w, -1, why, sizeof(why));
	if (rs < 0)
		return sandlot__error_errno(err, errno, "run %s", tar);
	if (rs != 0)
		return sandlot__error(err, EIO, "archiving workspace %s failed%s%s", name,
				      why[0] ? ": " : "", why);
	return 0;
}

int sandlot__workspace_import_tar(const char *data_dir, const char *name, uint64_t bytes,
				  int in_fd, double overcommit, sandlot_error_t **err)
{
	const char *tar = find_tool(tar_paths, SANDLOT_ARRAY_SIZE(tar_paths));
	if (!tar)
		return sandlot__error(err, ENOENT, "tar not found (GNU tar unpacks workspace archives)");
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	if (bytes < (16u << 20))
		return sandlot__error(err, EINVAL, "workspace %s: a quota of at least 16 MiB is needed",
				      name);
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int root = pool_open(data_dir, 1, err);
	if (root < 0)
		return -1;
	cleanup_close int dir = open_subdir(root, "kept", err);
	if (dir < 0)
		return -1;
	if (faccessat(dir, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sandlot__error(err, EEXIST, "workspace %s already exists", name);
	char tmp[SANDLOT_WORKSPACE_NAME_MAX + 8];
	snprintf(tmp, sizeof(tmp), ".new-%s", name);
	cleanup_close int lock = -1;
	cleanup_close int w = -1;
	/* Shared until the workspace has its name: a sweep meanwhile would
	 * take the half-made .new-NAME for an orphan. */
	cleanup_close int lk = share_pool(&p, err);
	if (lk < 0)
		return -1;
	w = new_workspace_shared(&p, lk, root, dir, tmp, bytes, overcommit, &lock, err);
	if (w < 0)
		return -1;
	/* The quota stays on while tar writes, so an archive bigger than
	 * `bytes` fails (EDQUOT) rather than filling the pool.  Only home/
	 * and tmp/ are taken; GNU tar refuses members with "..", strips a
	 * leading "/", and makes a symlink only after every other member, so
	 * nothing it writes can land outside the new workspace.  Devices or
	 * set-id bits an archive may carry are inert: the pool and every
	 * sandbox's view of it are nodev and nosuid. */
	const char *const argv[] = { tar, "--extract", "--file=-", "--numeric-owner", "--same-owner",
				     "--same-permissions", "--xattrs", "--xattrs-include=user.*",
				     "--directory=/proc/self/fd/4", "--", "home", "tmp", NULL };
	char why[256];
	int rs = run_tool_io(argv, in_fd, -1, -1, w, why, sizeof(why));
	int rc = 0;
	if (rs < 0)
		rc = sandlot__error_errno(err, errno, "run %s", tar);
	else if (rs != 0)
		rc = sandlot__error(err, strstr(why, "quota") ? EDQUOT : EIO,
				    "unpacking the archive of workspace %s failed%s%s", name,
				    why[0] ? ": " : "", why);
	if (rc == 0 && fsync(w) < 0)
		rc = sandlot__error_errno(err, errno, "sync workspace %s", name);
	if (rc == 0 && sys_renameat2(dir, tmp, dir, name, RENAME_NOREPLACE) < 0)
		rc = sandlot__error_errno(err, errno, "create workspace %s", name);
	if (rc < 0) {
		close(lock), lock = -1;
		subvol_delete(dir, tmp);
		unreserve_shared(lk, root, bytes);
	}
	return rc;
}

/* ---- the pool as a whole ---------------------------------------------------------------- */

int sandlot__pool_info(const char *data_dir, struct sandlot_pool_info *out, sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int root = pool_open(data_dir, 0, err);
	if (root < 0)
		return -1;
	struct stat st;
	if (stat(p.img, &st) < 0)
		return sandlot__error_errno(err, errno, "stat %s", p.img);
	out->size = (uint64_t)st.st_size;
	out->usable = usable_of(out->size);
	out->reserved = ledger_read(root);
	return 0;
}

int sandlot__pool_grow(const char *data_dir, uint64_t bytes, sandlot_error_t **err)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	cleanup_close int root = pool_open(data_dir, 1, err);
	if (root < 0)
		return -1;
	cleanup_close int lk = lock_pool(&p, err);
	if (lk < 0)
		return -1;
	struct stat st;
	if (stat(p.img, &st) < 0)
		return sandlot__error_errno(err, errno, "stat %s", p.img);
	bytes = round_up(bytes, POOL_STEP);
	if ((uint64_t)st.st_size >= bytes)
		return 0;
	uint64_t room, keep;
	char a[32], b[32], c[32];
	if (host_room(&p, &room, &keep) < 0)
		return sandlot__error_errno(err, errno, "statvfs %s", p.dir);
	if (bytes - (uint64_t)st.st_size > room)
		return sandlot__error(err, ENOSPC,
				      "cannot grow the storage pool to %s: %s has %s free beyond the "
				      "%s it keeps free", human(bytes, a), p.dir, human(room, b),
				      human(keep, c));
	return grow_locked(&p, root, bytes, err);
}

int sandlot__pool_unmount(const char *data_dir, sandlot_error_t **err)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	if (access(p.img, F_OK) < 0)
		return 0;
	cleanup_close int lk = lock_pool(&p, err);
	if (lk < 0)
		return -1;
	int root = mounted_root(&p);
	if (root < 0)
		return 0;
	close(root);
	/* Busy while a sandbox runs (its init holds the workspace's lock file,
	 * opened through this mount) or a process works in the pool: then it
	 * is detached instead.  That is safe: every user works through file
	 * descriptors, never through this path; the users keep the filesystem
	 * and its loop device until they end (then the device detaches
	 * itself), and whoever opens the pool meanwhile finds that same
	 * device and mounts it again. */
	if (umount2(p.mnt, UMOUNT_NOFOLLOW) == 0)
		return 0;
	if (errno != EBUSY || umount2(p.mnt, UMOUNT_NOFOLLOW | MNT_DETACH) < 0)
		return sandlot__error_errno(err, errno, "unmount the storage pool %s", p.mnt);
	return 0;
}

void sandlot__pool_sweep(const char *data_dir)
{
	struct pool_paths p;
	if (pool_paths(data_dir, &p) < 0)
		return;
	cleanup_close int root = mounted_root(&p);
	if (root < 0)
		return;
	/* Not while workspaces are being made or removed (shared holders, of
	 * which a busy daemon always has some: waiting would hold up the
	 * create that runs the sweep for as long as the burst lasts): the next
	 * sweep, a minute later, tries again. */
	cleanup_close int lk = lock_pool_how(&p, LOCK_EX | LOCK_NB, NULL);
	if (lk < 0)
		return;
	uint64_t total = 0;
	static const char *const dirs[] = { "ws", "kept" };
	for (size_t i = 0; i < 2; i++) {
		int dfd = openat(root, dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			if (dfd >= 0)
				close(dfd);
			continue;
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			cleanup_close int w = openat(dirfd(d), de->d_name,
						     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (w < 0)
				continue;
			/* With the pool lock held exclusively nobody is
			 * half-way through making or removing one (they hold
			 * it shared): a half-made kept workspace (.new-*) is
			 * an orphan, and so is an ephemeral one nobody holds. */
			int orphan = de->d_name[0] == '.';
			if (!orphan && i == 0) {
				cleanup_close int l = lock_workspace(w, 0, 0, de->d_name, NULL);
				orphan = l >= 0;
			}
			if (orphan && subvol_delete(dirfd(d), de->d_name) == 0)
				continue;
			total += quota_of(w);
		}
		closedir(d);
	}
	ledger_write(root, total);
}
