#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

extern char **environ;

static const char *find_mkfs(void)
{
	static const char *const candidates[] = {
		"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/sbin/mke2fs", "/sbin/mke2fs",
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(candidates); i++)
		if (access(candidates[i], X_OK) == 0)
			return candidates[i];
	return NULL;
}

/* Build the template image for this size once (mkfs is the slow part) and
 * keep it in <data_dir>/cache.  Builders are serialised by a lock file (the
 * daemon creates sandboxes from many threads); each builds under a unique
 * name, syncs, and renames, so a template is complete or absent. */
static int ensure_template(const char *data_dir, uint64_t bytes, char *path, size_t pathlen,
			   sandlot_error_t **err)
{
	char dir[4096], tmp[4200], lock[4200];
	snprintf(dir, sizeof(dir), "%s/cache", data_dir);
	snprintf(path, pathlen, "%s/ext4-%llu.img", dir, (unsigned long long)bytes);
	if (access(path, R_OK) == 0)
		return 0;
	if (sandlot__mkdir_p(dir, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", dir);
	const char *mkfs = find_mkfs();
	if (!mkfs)
		return sandlot__error(err, ENOENT,
				      "mkfs.ext4 not found (install e2fsprogs, or use tmpfs storage)");
	snprintf(lock, sizeof(lock), "%s/.ext4-%llu.lock", dir, (unsigned long long)bytes);
	cleanup_close int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
		return sandlot__error_errno(err, errno, "lock %s", lock);
	if (access(path, R_OK) == 0)
		return 0; /* another builder finished while we waited */
	snprintf(tmp, sizeof(tmp), "%s/.ext4-%llu-XXXXXX", dir, (unsigned long long)bytes);
	cleanup_close int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	if (ftruncate(fd, (off_t)bytes) < 0) {
		unlink(tmp);
		return sandlot__error_errno(err, errno, "size %s", tmp);
	}
	/* No journal (scratch storage, unmounted cleanly or discarded), no
	 * reserved blocks (the quota is what the user asked for), an inode per
	 * 8 KiB (agents create many small files: node_modules, caches). */
	char *const argv[] = {
		(char *)mkfs, (char *)"-q", (char *)"-F", (char *)"-t", (char *)"ext4",
		(char *)"-O", (char *)"^has_journal,^resize_inode",
		(char *)"-m", (char *)"0", (char *)"-i", (char *)"8192",
		(char *)"-E", (char *)"lazy_itable_init=1,nodiscard",
		(char *)"-L", (char *)"sandlot", tmp, NULL,
	};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawn(&pid, mkfs, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		unlink(tmp);
		return sandlot__error_errno(err, rc, "run %s", mkfs);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		unlink(tmp);
		return sandlot__error(err, EIO, "%s failed on %s", mkfs, tmp);
	}
	if (fsync(fd) < 0 || fchmod(fd, 0600) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "install %s", path);
	}
	return 0;
}

/* Copy only the allocated extents of the template (a few hundred KiB). */
static int copy_sparse(int src, int dst, uint64_t bytes)
{
	if (ftruncate(dst, (off_t)bytes) < 0)
		return -1;
	off_t off = 0;
	for (;;) {
		off_t data = lseek(src, off, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -1;
		off_t hole = lseek(src, data, SEEK_HOLE);
		if (hole < 0)
			return -1;
		off_t in = data, out = data;
		while (in < hole) {
			ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
			if (n < 0)
				return -1;
			if (n == 0)
				break;
		}
		off = hole;
	}
}

/* Threads of one process (the daemon creating many sandboxes at once)
 * would all be handed the same free device and race for it; take turns.
 * Other processes can still race us, so a lost race retries, for up to
 * about two seconds. */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;

static int attach_loop(int img_fd, char *dev, size_t devlen, sandlot_error_t **err)
{
	cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return sandlot__error_errno(err, errno, "open /dev/loop-control");
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
		int lfd = open(dev, O_RDWR | O_CLOEXEC);
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
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
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

static int mount_ext4(const char *dev, sandlot_error_t **err)
{
	cleanup_close int fs = fsopen("ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		return sandlot__error_errno(err, errno, "fsopen ext4");
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    /* Never zero inode tables in the background: the image stays sparse. */
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sandlot__error_errno(err, errno, "mount ext4 from %s", dev);
	int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (m < 0)
		return sandlot__error_errno(err, errno, "fsmount %s", dev);
	return m;
}

/* home/ for the sandbox user (uid 1000), tmp/ for root with mode 1777, as
 * host uids (base + u) in an ephemeral image, as sandbox uids (base 0) in a
 * kept one.  Only what is missing is made: a kept image being reused has
 * both, and what the sandbox made of them is left alone. */
static int prepare_tree(int root, uid_t base, sandlot_error_t **err)
{
	if (mkdirat(root, "home", 0755) == 0) {
		if (fchownat(root, "home", base + 1000, base + 1000, AT_SYMLINK_NOFOLLOW) < 0)
			return sandlot__error_errno(err, errno, "prepare home in storage");
	} else if (errno != EEXIST) {
		return sandlot__error_errno(err, errno, "prepare home in storage");
	}
	if (mkdirat(root, "tmp", 01777) == 0) {
		if (fchmodat(root, "tmp", 01777, 0) < 0 ||
		    fchownat(root, "tmp", base, base, AT_SYMLINK_NOFOLLOW) < 0)
			return sandlot__error_errno(err, errno, "prepare tmp in storage");
	} else if (errno != EEXIST) {
		return sandlot__error_errno(err, errno, "prepare tmp in storage");
	}
	return 0;
}

/* See the header: the image's lock lives as long as its loop device.  A
 * sandbox being torn down lets go a moment after its init was reaped, so
 * a busy image is retried for up to two seconds. */
static int lock_image(int fd, const char *path, sandlot_error_t **err)
{
	uint64_t deadline = sandlot__now_ms() + 2000;
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return sandlot__error_errno(err, errno, "lock workspace image %s", path);
		if (sandlot__now_ms() > deadline)
			return sandlot__error(err, EBUSY,
					      "workspace image %s is in use by another sandbox", path);
		usleep(2000);
	}
}

/* dst's directory, for a temporary name next to it. */
static int temp_next_to(const char *dst, char *tmp, size_t n)
{
	int len = snprintf(tmp, n, "%s.tmp-XXXXXX", dst);
	return len > 0 && (size_t)len < n ? 0 : -1;
}

/* Publish the complete file `tmp` as `dst` unless dst exists (EEXIST). */
static int publish(const char *tmp, const char *dst)
{
	if (link(tmp, dst) < 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	unlink(tmp);
	return 0;
}

/* Open the kept image at `path`, creating it from the template of `bytes`
 * when missing.  *fresh says which.  The fd, or -1. */
static int open_kept(const char *data_dir, const char *path, uint64_t bytes, int *fresh,
		     char *tpl, size_t tpllen, sandlot_error_t **err)
{
	*fresh = 0;
	tpl[0] = '\0';
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0 || errno != ENOENT) {
		if (fd < 0)
			return sandlot__error_errno(err, errno, "open workspace image %s", path);
		return fd;
	}
	if (ensure_template(data_dir, bytes, tpl, tpllen, err) < 0)
		return sandlot__error_wrap(err, "storage template");
	char tmp[4200];
	if (temp_next_to(path, tmp, sizeof(tmp)) < 0)
		return sandlot__error(err, ENAMETOOLONG, "workspace image path too long");
	cleanup_close int src = open(tpl, O_RDONLY | O_CLOEXEC);
	if (src < 0)
		return sandlot__error_errno(err, errno, "open %s", tpl);
	cleanup_close int nfd = mkostemp(tmp, O_CLOEXEC);
	if (nfd < 0)
		return sandlot__error_errno(err, errno, "create workspace image %s", path);
	if (copy_sparse(src, nfd, bytes) < 0 || fchmod(nfd, 0600) < 0) {
		int e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "copy storage template to %s", path);
	}
	if (publish(tmp, path) < 0) {
		if (errno != EEXIST)
			return sandlot__error_errno(err, errno, "create workspace image %s", path);
		/* Someone made it meanwhile: theirs it is. */
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return sandlot__error_errno(err, errno, "open workspace image %s", path);
		return fd;
	}
	*fresh = 1;
	return steal_fd(&nfd);
}

int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, uid_t base,
			    int want, const char *keep, struct sandlot_storage *out,
			    sandlot_error_t **err)
{
	out->mount_fd = -1;
	out->bytes = bytes;
	out->idmapped = 0;
	if (keep) {
		want = SANDLOT_STORAGE_EXT4; /* validated: never tmpfs */
	} else if (want == 0) {
		const char *env = getenv("SANDLOT_STORAGE");
		want = (env && strcmp(env, "tmpfs") == 0) || access("/dev/loop-control", F_OK) < 0 ? SANDLOT_STORAGE_TMPFS : SANDLOT_STORAGE_EXT4;
	}
	if (want == SANDLOT_STORAGE_TMPFS) {
		out->kind = SANDLOT_STORAGE_TMPFS;
		return 0;
	}
	out->kind = SANDLOT_STORAGE_EXT4;

	char tpl[4200], img[4200], dev[64];
	int fresh = 1;
	cleanup_close int fd = -1;
	if (keep) {
		fd = open_kept(data_dir, keep, bytes, &fresh, tpl, sizeof(tpl), err);
		if (fd < 0)
			return -1;
		struct stat st;
		if (fstat(fd, &st) < 0)
			return sandlot__error_errno(err, errno, "stat workspace image %s", keep);
		if (!S_ISREG(st.st_mode) || st.st_size < (off_t)(16u << 20))
			return sandlot__error(err, EINVAL,
					      "workspace image %s is not a storage image (a regular "
					      "file of 16M or more)", keep);
		out->bytes = (uint64_t)st.st_size;
		out->idmapped = 1;
		base = 0; /* owners as sandbox uids: see the header */
		if (lock_image(fd, keep, err) < 0)
			return -1;
	} else {
		if (ensure_template(data_dir, bytes, tpl, sizeof(tpl), err) < 0)
			return sandlot__error_wrap(err, "storage template");
		char dir[4096];
		snprintf(dir, sizeof(dir), "%s/storage", data_dir);
		if (sandlot__mkdir_p(dir, 0700) < 0)
			return sandlot__error_errno(err, errno, "create %s", dir);
		snprintf(img, sizeof(img), "%s/%s.img", dir, id);

		cleanup_close int src = open(tpl, O_RDONLY | O_CLOEXEC);
		if (src < 0)
			return sandlot__error_errno(err, errno, "open %s", tpl);
		fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			return sandlot__error_errno(err, errno, "create %s", img);
		/* Ephemeral storage: the name goes now, the loop device keeps the
		 * inode alive exactly as long as the sandbox's mount exists. */
		int copied = copy_sparse(src, fd, bytes);
		int e = errno;
		unlink(img);
		if (copied < 0)
			return sandlot__error_errno(err, e, "copy storage template");
	}

	cleanup_close int lfd = attach_loop(fd, dev, sizeof(dev), err);
	if (lfd < 0)
		return -1;
	cleanup_close int m = mount_ext4(dev, err);
	if (m < 0) {
		/* A damaged template would fail every sandbox of this size: drop
		 * it so the next one rebuilds it.  (A kept image that no longer
		 * mounts is the caller's to look at: it is left as it is.) */
		int st = err ? sandlot_error_status(*err) : 0;
		if (fresh && (st == EUCLEAN || st == EINVAL || st == EBADMSG))
			unlink(tpl);
		if (keep)
			sandlot__error_wrap(err, "workspace image %s", keep);
		return -1;
	}
	if (prepare_tree(m, base, err) < 0)
		return -1;
	out->mount_fd = steal_fd(&m);
	return 0;
}

int sandlot__storage_idmap(struct sandlot_storage *s, pid_t pid, sandlot_error_t **err)
{
	if (!s->idmapped || s->mount_fd < 0)
		return 0;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	cleanup_close int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return sandlot__error_errno(err, errno, "open %s", path);
	/* The sandbox's namespace maps sandbox uid u to host uid base + u:
	 * exactly the translation from the image's owners to the host's. */
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)ns };
	if (mount_setattr(s->mount_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return sandlot__error_errno(err, errno,
					    "idmap the workspace mount (kept workspaces need "
					    "idmapped ext4 mounts, Linux 5.12 or later)");
	return 0;
}

int sandlot__storage_copy(const char *src, const char *dst, sandlot_error_t **err)
{
	cleanup_close int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return sandlot__error_errno(err, errno, "open workspace image %s", src);
	struct stat st;
	if (fstat(in, &st) < 0)
		return sandlot__error_errno(err, errno, "stat workspace image %s", src);
	if (!S_ISREG(st.st_mode))
		return sandlot__error(err, EINVAL, "workspace image %s is not a regular file", src);
	/* Shared: no sandbox can take it (exclusively) while we read. */
	if (flock(in, LOCK_SH | LOCK_NB) < 0)
		return errno == EWOULDBLOCK
			       ? sandlot__error(err, EBUSY, "workspace image %s is in use by a sandbox", src)
			       : sandlot__error_errno(err, errno, "lock workspace image %s", src);
	if (access(dst, F_OK) == 0)
		return sandlot__error(err, EEXIST, "workspace image %s already exists", dst);
	char tmp[4200];
	if (temp_next_to(dst, tmp, sizeof(tmp)) < 0)
		return sandlot__error(err, ENAMETOOLONG, "workspace image path too long");
	cleanup_close int out = mkostemp(tmp, O_CLOEXEC);
	if (out < 0)
		return sandlot__error_errno(err, errno, "create workspace image %s", dst);
	if (copy_sparse(in, out, (uint64_t)st.st_size) < 0 || fchmod(out, 0600) < 0) {
		int e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "copy workspace image %s to %s", src, dst);
	}
	if (publish(tmp, dst) < 0)
		return sandlot__error_errno(err, errno, "create workspace image %s", dst);
	return 0;
}

void sandlot__storage_release(struct sandlot_storage *s)
{
	if (s->mount_fd >= 0)
		close(s->mount_fd);
	s->mount_fd = -1;
}
