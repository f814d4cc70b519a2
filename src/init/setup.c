/* Sandbox setup inside sandlot-init, before it serves the protocol.
 *
 * Init starts as PID 1 of a new pid namespace, root in a new user namespace
 * (mapped to the sandbox's own unprivileged host uid range), in fresh mount,
 * network, ipc and uts namespaces, already placed in the sandbox's cgroup by
 * the host.  It builds the root filesystem on a small tmpfs:
 *
 *   /usr (and /bin, /lib, /lib64, /sbin as merged-usr links or binds)
 *                              read-only binds of the host's
 *   /etc                       generated passwd/group/hosts/... plus a
 *                              read-only allowlist of host entries that hold
 *                              no secrets (alternatives, ld.so.cache, ssl...)
 *
 * or, with a built image (--image, fd 7), the image's /usr, /var, /etc ...
 * (every top-level directory but those below) with the same generated
 * files bound over the image's, and the image's top-level links, plus
 *   /home/user, /tmp           the sandbox's own storage (fd 6, quota'd)
 *   /dev                       null zero full random urandom tty, pts, shm
 *   /proc                      the sandbox's pid namespace, sensitive files
 *                              masked and kernel knobs read-only
 *
 * then pivots into it and drops the old root entirely, so no host path is
 * reachable afterwards.  A failure is kept as "what: strerror" with its
 * errno (init_setup_error()); init answers CONFIG with them in an ERROR and
 * exits, and the host turns that into the error of sandlot_create().
 */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/etcfiles.h"
#include "linux/syscalls.h"

/* Mounted over the host's /tmp in our private mount namespace: no host
 * directory is ever created for it. */
#define NEWROOT "/tmp"
/* The storage is attached here just long enough to bind its home/ and
 * tmp/ into place; /run exists (empty) in every sandbox anyway. */
#define STORAGE NEWROOT "/run"

static void report(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Why the set-up failed, for init_setup_error(). */
static char failure[512];
static int failure_errno;

/* Keep "message: strerror" and the errno.  Setup is single-threaded and
 * runs before anything else in the sandbox, so stdio is safe here. */
static void report(int err, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(failure, sizeof(failure), "%s%s%s", msg, err ? ": " : "", err ? init__strerror(err) : "");
	failure_errno = err ? err : EIO;
}

const char *init_setup_error(int *err)
{
	*err = failure_errno ? failure_errno : EIO;
	return failure[0] ? failure : "set-up failed";
}

#define FAIL(...)                                  \
	do {                                       \
		int e_ = errno;                    \
		report(e_, __VA_ARGS__);           \
		return -1;                         \
	} while (0)

static int touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

/* Mount flags a read-only remount must keep: the kernel refuses to clear
 * flags that were locked when the mount was copied into our namespace. */
static unsigned long locked_flags(const char *path)
{
	struct statvfs sv;
	unsigned long f = 0;
	if (statvfs(path, &sv) < 0)
		return 0;
	if (sv.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		f |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		f |= MS_RELATIME;
	return f;
}

static int remount_ro(const char *path, unsigned long extra)
{
	return mount(NULL, path, NULL,
		     MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(path) | extra, NULL);
}

/* Bind src onto dst, creating dst as a file or directory like src.  Missing
 * sources are skipped when optional.  The binds are made read-only all at
 * once later (make_tree_readonly). */
static int bind_host(const char *src, const char *dst, int optional)
{
	struct stat st;
	if (stat(src, &st) < 0) {
		if (optional && errno == ENOENT)
			return 0;
		FAIL("bind %s", src);
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(dst, 0755) < 0 && errno != EEXIST)
			FAIL("mkdir %s", dst);
	} else if (touch(dst) < 0) {
		FAIL("create mount point %s", dst);
	}
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		FAIL("bind %s", src);
	return 0;
}

/* Everything mounted so far under the new root (the tmpfs, /usr, /etc
 * entries) becomes read-only, nosuid and nodev in one call instead of a
 * remount per bind: flags locked on the host's mounts can only be added
 * to, which is all this does. */
static int make_tree_readonly(void)
{
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
	};
	if (sys_mount_setattr(AT_FDCWD, NEWROOT, AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		FAIL("make the root read-only");
	return 0;
}

/* /bin, /lib... are links into /usr on merged-usr hosts (Debian 12), real
 * directories elsewhere: mirror whichever the host has. */
static int mirror_top(const char *name)
{
	char src[64], dst[128], link[64];
	snprintf(src, sizeof(src), "/%s", name);
	snprintf(dst, sizeof(dst), NEWROOT "/%s", name);
	ssize_t n = readlink(src, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		if (symlink(link, dst) < 0)
			FAIL("symlink %s", dst);
		return 0;
	}
	return bind_host(src, dst, 1);
}

/* Write our /etc files into `dir` (with an image: keeping the other users
 * and groups of the image's /etc at image_etc). */
static int write_generated_etc(const struct init_config *cfg, const char *dir, const char *image_etc)
{
	cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cleanup_close int ifd = image_etc ? open(image_etc, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd < 0)
		FAIL("open %s", dir);
	struct sandlot_etc e = {
		.hostname = cfg->hostname, .user_name = cfg->user_name,
		.uid = (unsigned)cfg->uid, .gid = (unsigned)cfg->gid, .image_etc_fd = ifd,
		.nameserver = cfg->net_dns,
	};
	const char *what;
	if (sandlot__etc_write(dfd, &e, &what) < 0)
		FAIL("write /etc/%s", what);
	return 0;
}

static int build_etc(const struct init_config *cfg)
{
	char path[256];
	if (mkdir(NEWROOT "/etc", 0755) < 0)
		FAIL("mkdir /etc");
	if (write_generated_etc(cfg, NEWROOT "/etc", NULL) < 0)
		return -1;
	for (size_t i = 0; i < sandlot__etc_allow_count; i++) {
		char src[128];
		snprintf(src, sizeof(src), "/etc/%s", sandlot__etc_allow[i]);
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", sandlot__etc_allow[i]);
		if (bind_host(src, path, 1) < 0)
			return -1;
	}
	return 0;
}

/* Where the image is attached while its parts are bound into place, and
 * where the generated /etc files wait to be bound over the image's. */
#define IMAGE NEWROOT "/.image"
#define ETCGEN NEWROOT "/.etc"

/* The root of a built image (fd 7): every top-level directory of the image
 * bound (read-only later) and every top-level link copied, except what the
 * sandbox provides itself; its /etc with our generated files bound over
 * the image's own (the image builder makes sure they exist). */
static int build_image_root(const struct init_config *cfg)
{
	static const char *const own[] = {
		"dev", "proc", "sys", "tmp", "home", "run", "root", "boot", "lost+found", "etc",
	};
	char src[512], dst[512], link[512];
	if (mkdir(IMAGE, 0700) < 0)
		FAIL("mkdir %s", IMAGE);
	if (sys_move_mount(INIT_FD_IMAGE, "", AT_FDCWD, IMAGE, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		FAIL("attach the image");
	close(INIT_FD_IMAGE);
	cleanup_closedir DIR *d = opendir(IMAGE);
	if (!d)
		FAIL("open the image root");
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
			continue;
		int skip = 0;
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(own); i++)
			skip |= strcmp(name, own[i]) == 0;
		if (skip || strlen(name) > 200)
			continue;
		snprintf(src, sizeof(src), IMAGE "/%s", name);
		snprintf(dst, sizeof(dst), NEWROOT "/%s", name);
		struct stat st;
		if (lstat(src, &st) < 0)
			FAIL("stat image /%s", name);
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(src, link, sizeof(link) - 1);
			if (n < 0)
				FAIL("read image link /%s", name);
			link[n] = '\0';
			if (symlink(link, dst) < 0)
				FAIL("symlink /%s", name);
		} else if (S_ISDIR(st.st_mode)) {
			if (bind_host(src, dst, 0) < 0)
				return -1;
		}
	}
	if (bind_host(IMAGE "/etc", NEWROOT "/etc", 0) < 0)
		return -1;
	if (mkdir(ETCGEN, 0755) < 0)
		FAIL("mkdir %s", ETCGEN);
	if (write_generated_etc(cfg, ETCGEN, IMAGE "/etc") < 0)
		return -1;
	for (size_t i = 0; i < sandlot__etc_generated_count; i++) {
		snprintf(src, sizeof(src), ETCGEN "/%s", sandlot__etc_generated[i]);
		snprintf(dst, sizeof(dst), NEWROOT "/etc/%s", sandlot__etc_generated[i]);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			FAIL("bind /etc/%s over the image's (is the image complete?)",
			     sandlot__etc_generated[i]);
		/* The bind keeps the file; its name on the root tmpfs can go. */
		if (unlink(src) < 0)
			FAIL("unlink %s", src);
	}
	if (rmdir(ETCGEN) < 0)
		FAIL("rmdir %s", ETCGEN);
	if (umount2(IMAGE, MNT_DETACH) < 0 || rmdir(IMAGE) < 0)
		FAIL("detach the image staging mount");
	return 0;
}

/* The sandbox's storage as a detached mount: the host's (fd 6, a
 * filesystem of its own with home/ owned by the sandbox user and tmp/), or
 * a tmpfs made here.  -1 if it cannot be. */
static int storage_mount(const struct init_config *cfg)
{
	if (!cfg->tmpfs_storage)
		return INIT_FD_STORAGE;
	char size[32];
	snprintf(size, sizeof(size), "%llu", (unsigned long long)cfg->disk);
	cleanup_close int fs = sys_fsopen("tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0 || sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", "tmpfs", 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return -1;
	int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (m < 0)
		return -1;
	if (mkdirat(m, "home", 0755) < 0 || mkdirat(m, "tmp", 01777) < 0 ||
	    fchmodat(m, "tmp", 01777, 0) < 0 || fchownat(m, "home", cfg->uid, cfg->gid, 0) < 0) {
		int e = errno;
		close(m);
		errno = e;
		return -1;
	}
	return m;
}

/* /home/user and /tmp: home/ and tmp/ of the storage, as detached clones
 * (fds[0], fds[1]) made before the root tree is attached, and placed into
 * it by storage_place().  Binding them from an attached copy of the
 * storage would need that copy unmounted afterwards, and every unmount
 * waits for an RCU grace period: 0.1 ms or more of each sandbox's
 * start-up on the 2-CPU test host.
 *
 * The kernel lets a process clone out of a detached mount only if the
 * mount was made by fsmount() or in the process's own mount namespace.
 * The tmpfs made here is; the host's workspace (a clone of its directory
 * in the storage pool, made in the host's namespace) is not, and open_tree
 * says EINVAL.  That one is attached at NEWROOT first, where the root tree
 * then goes on top of it: the clones are taken from there, and the
 * workspace's own mount stays a child of the old root, under the new one,
 * so the one detach of the old root in init_setup_finish() takes it too. */
static int storage_clones(const struct init_config *cfg, int fds[2])
{
	static const char *const parts[] = { "home", "tmp" };
	int m = storage_mount(cfg);
	if (m < 0)
		FAIL("prepare the workspace storage");
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(parts); i++) {
		fds[i] = sys_open_tree(m, parts[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (fds[i] < 0 && errno == EINVAL && i == 0 && m == INIT_FD_STORAGE)
			break;
		if (fds[i] < 0)
			FAIL("clone the workspace's %s", parts[i]);
		if (i == SANDLOT_ARRAY_SIZE(parts) - 1)
			return 0;
	}
	if (sys_move_mount(INIT_FD_STORAGE, "", AT_FDCWD, NEWROOT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		FAIL("attach workspace storage");
	close(INIT_FD_STORAGE);
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(parts); i++) {
		fds[i] = sys_open_tree(AT_FDCWD, i == 0 ? NEWROOT "/home" : NEWROOT "/tmp",
				       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (fds[i] < 0)
			FAIL("clone the workspace's %s", parts[i]);
	}
	return 0;
}

/* The clones of storage_clones() at their places in the attached tree;
 * closes them. */
static int storage_place(int fds[2])
{
	static const char *const at[] = { NEWROOT "/home/user", NEWROOT "/tmp" };
	for (size_t i = 0; i < 2; i++) {
		int rc = sys_move_mount(fds[i], "", AT_FDCWD, at[i], MOVE_MOUNT_F_EMPTY_PATH);
		int e = errno;
		close(fds[i]);
		fds[i] = -1;
		errno = e;
		if (rc < 0)
			FAIL("attach %s", at[i] + strlen(NEWROOT));
	}
	return 0;
}

/* The same through a staging mount, where the kernel cannot clone from a
 * detached mount (before Linux 6.15 or so). */
static int storage_staged(const struct init_config *cfg)
{
	if (cfg->tmpfs_storage) {
		char opts[64];
		snprintf(opts, sizeof(opts), "size=%llu,mode=0755", (unsigned long long)cfg->disk);
		if (mount("tmpfs", STORAGE, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
			FAIL("mount tmpfs storage");
		if (mkdir(STORAGE "/home", 0755) < 0 || mkdir(STORAGE "/tmp", 01777) < 0 ||
		    chmod(STORAGE "/tmp", 01777) < 0 || chown(STORAGE "/home", cfg->uid, cfg->gid) < 0)
			FAIL("prepare tmpfs storage");
	} else {
		if (sys_move_mount(INIT_FD_STORAGE, "", AT_FDCWD, STORAGE, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			FAIL("attach workspace storage");
		close(INIT_FD_STORAGE);
	}
	if (mount(STORAGE "/home", NEWROOT "/home/user", NULL, MS_BIND, NULL) < 0)
		FAIL("bind /home/user");
	if (mount(STORAGE "/tmp", NEWROOT "/tmp", NULL, MS_BIND, NULL) < 0)
		FAIL("bind /tmp");
	if (umount2(STORAGE, MNT_DETACH) < 0)
		FAIL("detach storage");
	return 0;
}

static int build_dev(void)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	char src[64], dst[128];
	if (mount("tmpfs", NEWROOT "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") < 0)
		FAIL("mount /dev");
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(nodes); i++) {
		snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
		snprintf(dst, sizeof(dst), NEWROOT "/dev/%s", nodes[i]);
		if (touch(dst) < 0 || mount(src, dst, NULL, MS_BIND, NULL) < 0)
			FAIL("bind %s", src);
	}
	if (mkdir(NEWROOT "/dev/pts", 0755) < 0 ||
	    mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620") < 0)
		FAIL("mount /dev/pts");
	if (symlink("pts/ptmx", NEWROOT "/dev/ptmx") < 0)
		FAIL("symlink /dev/ptmx");
	if (mkdir(NEWROOT "/dev/shm", 01777) < 0 ||
	    mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=64m,mode=1777") < 0)
		FAIL("mount /dev/shm");
	static const char *const links[][2] = {
		{ "/proc/self/fd", "fd" },      { "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" }, { "/proc/self/fd/2", "stderr" },
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(links); i++) {
		snprintf(dst, sizeof(dst), NEWROOT "/dev/%s", links[i][1]);
		if (symlink(links[i][0], dst) < 0)
			FAIL("symlink %s", dst);
	}
	return 0;
}

/* On the prepared tree's /dev (read-only, devices and mount points in
 * place): the sandbox's own ptys and shared memory. */
static int dev_mounts(void)
{
	if (mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620") < 0)
		FAIL("mount /dev/pts");
	if (mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=64m,mode=1777") < 0)
		FAIL("mount /dev/shm");
	return 0;
}

/* Bind p onto itself, then read-only: mount_setattr() only adds flags, so
 * unlike a remount it needs no statvfs() for the flags the kernel locked. */
static int bind_readonly(const char *p)
{
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
	};
	if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -1;
	return sys_mount_setattr(AT_FDCWD, p, AT_RECURSIVE, &attr, sizeof(attr));
}

static int build_proc(void)
{
	/* Files that leak host kernel state or allow host-wide actions. */
	static const char *const masked_files[] = {
		"kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug",
		"latency_stats", "kallsyms", "kmsg", "config.gz", "vmallocinfo",
		"pagetypeinfo", "slabinfo",
	};
	static const char *const masked_dirs[] = { "acpi", "scsi", "firmware", "driver" };
	static const char *const ro_paths[] = { "sys", "bus", "fs", "irq", "sysrq-trigger" };
	char p[128];

	/* Which of these a kernel has depends on its configuration: each is
	 * mounted over straight away, and ENOENT means there is nothing to
	 * hide (one call per path instead of an access() probe before it). */
	if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		FAIL("mount /proc");
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(masked_files); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", masked_files[i]);
		if (mount(NEWROOT "/dev/null", p, NULL, MS_BIND, NULL) < 0 && errno != ENOENT)
			FAIL("mask %s", p);
	}
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(masked_dirs); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", masked_dirs[i]);
		if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0,mode=0555") < 0 && errno != ENOENT)
			FAIL("mask %s", p);
	}
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(ro_paths); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", ro_paths[i]);
		if (bind_readonly(p) < 0 && errno != ENOENT)
			FAIL("make %s read-only", p);
	}
	return 0;
}

/* The root built here, where the host passed no prepared tree: a tmpfs
 * with every mount point, the host's /usr and allowed /etc entries (or
 * the image's directories), made read-only as a whole. */
static int build_root(const struct init_config *cfg)
{
	if (mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=1m,nr_inodes=4096,mode=0755") < 0)
		FAIL("mount root tmpfs");

	/* The skeleton: every mount point and link, while the tmpfs is still
	 * writable. */
	static const char *const dirs[] = {
		"/home", "/home/user", "/tmp", "/dev", "/proc", "/root", "/run",
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(dirs); i++) {
		char d[64];
		snprintf(d, sizeof(d), NEWROOT "%s", dirs[i]);
		if (mkdir(d, 0755) < 0)
			FAIL("mkdir %s", dirs[i]);
	}
	if (chmod(NEWROOT "/tmp", 01777) < 0 || chmod(NEWROOT "/root", 0700) < 0)
		FAIL("prepare the root skeleton");
	if (cfg->image) {
		/* Everything else comes from the image (its /var/tmp is a link
		 * to /tmp, made so by the image builder). */
		if (build_image_root(cfg) < 0)
			return -1;
	} else {
		if (mkdir(NEWROOT "/var", 0755) < 0 || symlink("../tmp", NEWROOT "/var/tmp") < 0)
			FAIL("prepare /var");
		if (bind_host("/usr", NEWROOT "/usr", 0) < 0)
			return -1;
		static const char *const tops[] = { "bin", "sbin", "lib", "lib64", "lib32", "libx32" };
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(tops); i++)
			if (mirror_top(tops[i]) < 0)
				return -1;
		if (build_etc(cfg) < 0)
			return -1;
	}
	return make_tree_readonly();
}

/* The host's prepared tree (fd 9, see init.h): read-only, private, with
 * every mount point in it; attach it where the root is built. */
static int attach_root_tree(const struct init_config *cfg)
{
	if (sys_move_mount(INIT_FD_ROOT, "", AT_FDCWD, NEWROOT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		FAIL("attach the root tree");
	close(INIT_FD_ROOT);
	if (cfg->image)
		close(INIT_FD_IMAGE); /* in the tree already */
	return 0;
}

/* Set by init_setup() for init_setup_finish(). */
static int pivoted, built_tree;

/* Detaching the old root waits for an RCU grace period (0.1 to 0.3 ms),
 * which was the longest step between init's OK and the first command.
 * A thread of init does it, started right after pivot_root: the wait then
 * overlaps the OK's trip to the host and back, the commands' credentials
 * and the first warm child's fork.  It shares init's working directory
 * (the new root, "."), so nothing in init changes directory until
 * init_setup_finish() has joined it, and init_setup_finish() runs before
 * any command (see loop.c). */
static pthread_t detach_thread;
static int detach_started, detach_errno;

static void *detach_main(void *arg)
{
	(void)arg;
	detach_errno = umount2(".", MNT_DETACH) < 0 ? errno : 0;
	return NULL;
}

static int detach_start(void)
{
	pthread_attr_t a;
	if (pthread_attr_init(&a) != 0)
		return -1;
	pthread_attr_setstacksize(&a, 64 << 10);
	int rc = pthread_create(&detach_thread, &a, detach_main, NULL);
	pthread_attr_destroy(&a);
	if (rc != 0)
		return -1;
	detach_started = 1;
	return 0;
}

/* init_setup_early() made the cgroup namespace already. */
static int cgroupns_done;

int init_setup_early(const struct init_config *cfg)
{
	(void)cfg;
	if (init__vm_mode) {
		errno = ENOTSUP;
		return -1;
	}
	/* The host put us into the sandbox's cgroup before we started; from now
	 * on that cgroup is our root — for the warm child forked next too. */
	if (unshare(CLONE_NEWCGROUP) < 0)
		return -1; /* init_setup() tries again, and says why */
	cgroupns_done = 1;
	/* Where pivot_root() moves it: a process whose root and working
	 * directory are the old root gets both moved to the new one. */
	return chdir("/");
}

int init_setup(struct init_config *cfg)
{
	if (init__vm_mode) {
		/* A microVM's guest: what depends on CONFIG there (vm.c). */
		char why[256];
		int e = init_vm_configure(cfg, why, sizeof(why));
		if (e) {
			errno = e;
			FAIL("%s", why);
		}
	} else {
		init_start_early(cfg); /* the first warm child, while we build */
	}
	/* The host put us into the sandbox's cgroup before we started; from now
	 * on that cgroup is our root. */
	if (!cgroupns_done && unshare(CLONE_NEWCGROUP) < 0)
		FAIL("cgroup namespace");
	if (sethostname(cfg->hostname, strlen(cfg->hostname)) < 0)
		FAIL("sethostname");
	/* Loopback is up already: the host made the network namespace (as
	 * root of the initial user namespace, so nothing here may change it). */

	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		FAIL("make / a slave mount");
	/* The host prepared the whole read-only tree (fd 9): one attach.
	 * Else we build it here, mount by mount. */
	int tree = fcntl(INIT_FD_ROOT, F_GETFD) >= 0;
	if (tree) {
		/* With the host's prepared tree the kernel can clone detached
		 * trees: the storage is cloned from, before the tree is
		 * attached (storage_clones()). */
		int ws[2] = { -1, -1 };
		int rc = storage_clones(cfg, ws) < 0 || attach_root_tree(cfg) < 0 ||
			 storage_place(ws) < 0 ? -1 : 0;
		for (int i = 0; i < 2; i++)
			if (ws[i] >= 0)
				close(ws[i]);
		if (rc < 0)
			return -1;
	} else if (build_root(cfg) < 0 || storage_staged(cfg) < 0) {
		return -1;
	}
	/* Writable and special mounts go on top of the read-only tree. */
	if ((tree ? dev_mounts() : build_dev()) < 0 || build_proc() < 0)
		return -1;

	if (chdir(NEWROOT) < 0)
		FAIL("chdir new root");
	if (sys_pivot_root(".", ".") < 0)
		FAIL("pivot_root");
	/* Nobody in the sandbox may ptrace or read the memory of init. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		FAIL("PR_SET_DUMPABLE");
	built_tree = tree;
	pivoted = 1;
	/* The old root is stacked on the new one until the detaching thread
	 * has taken it off (joined by init_setup_finish(); where no thread can
	 * be started, init_setup_finish() detaches it itself). */
	if (detach_start() < 0)
		detach_started = 0;
	return 0;
}

int init_setup_finish(const struct init_config *cfg)
{
	if (!pivoted)
		return 0;
	pivoted = 0;
	/* The host's first request is only read after this: nothing runs in
	 * the sandbox before the host's view is gone from it. */
	if (detach_started) {
		detach_started = 0;
		pthread_join(detach_thread, NULL);
		if (detach_errno) {
			errno = detach_errno;
			return -1;
		}
	} else if (umount2(".", MNT_DETACH) < 0) {
		return -1;
	}
	if (chdir("/") < 0)
		return -1;
	/* (The workspace's own mount, where storage_clones() attached one,
	 * went with the old root.) */
	/* (The prepared tree's /dev is read-only already.) */
	if (!built_tree && remount_ro("/dev", MS_NOSUID | MS_NOEXEC) < 0)
		return -1;
	if (chdir(INIT_HOME) < 0)
		return -1;
	return 0;
}

/* -- once in init, before the first command is forked -------------------- */

/* The rlimits commands get: CONFIG's, clamped to the hard limits init
 * has (0: leave the inherited one). */
static struct rlimit child_nofile, child_fsize;
static int children_ready;

/* Raising a hard limit needs CAP_SYS_RESOURCE in the host namespace,
 * which we do not have; clamp to what the host allows. */
static int clamp_rlimit(int res, uint64_t v, struct rlimit *out)
{
	struct rlimit cur;
	if (getrlimit(res, &cur) < 0)
		return -1;
	rlim_t want = (rlim_t)v;
	if (cur.rlim_max != RLIM_INFINITY && want > cur.rlim_max)
		want = cur.rlim_max;
	*out = (struct rlimit){ want, want };
	return 0;
}

int init_setup_children(const struct init_config *cfg)
{
	if (children_ready)
		return 0; /* by init_start_early() */
	/* No command may ever hold a capability, and init runs nothing but
	 * commands: the bounding set goes here once (a commit of new
	 * credentials per capability) instead of in every command's child.
	 * Init keeps its own effective capabilities (the bounding set only
	 * limits what an execve grants).  Capability numbers are dense, so
	 * the first EINVAL is the end of what this kernel knows. */
	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL)
			break;
		FAIL("drop capability %d from the bounding set", cap);
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		FAIL("clear the ambient capabilities");
	if ((cfg->nofile && clamp_rlimit(RLIMIT_NOFILE, cfg->nofile, &child_nofile) < 0) ||
	    (cfg->fsize && clamp_rlimit(RLIMIT_FSIZE, cfg->fsize, &child_fsize) < 0))
		FAIL("read the resource limits");
	children_ready = 1;
	return 0;
}

/* -- in the child, right before execve of a user command ------------------ */

int init_drop_privileges(const struct init_config *cfg)
{
	/* Only raw syscalls below: this runs in a forked child of init. */
	if (!children_ready) {
		/* init_setup_children() has not run (or failed): no command. */
		errno = EPERM;
		return -1;
	}
	if (cfg->nofile && sys_setrlimit(RLIMIT_NOFILE, &child_nofile) < 0)
		return -1;
	if (cfg->fsize && sys_setrlimit(RLIMIT_FSIZE, &child_fsize) < 0)
		return -1;
	struct rlimit zero = { 0, 0 };
	if (sys_setrlimit(RLIMIT_CORE, &zero) < 0)
		return -1;

	/* The host made init unkillable by the OOM killer where it could;
	 * commands must not inherit that, and they should always be chosen
	 * before init.  Raising the value needs no privilege; best effort. */
	int fd = sys_openat(AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC, 0);
	if (fd >= 0) {
		if (sys_write(fd, "300", 3) != 3) {
			/* keep the inherited value */
		}
		sys_close(fd);
	}

	if (cfg->uid != 0) {
		/* Root semantics off for good: no capabilities regained through
		 * exec of anything, locked. Needs CAP_SETPCAP, so before setuid. */
		if (sys_prctl(PR_SET_SECUREBITS,
			      SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
				      SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
				      SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
			      0, 0, 0) < 0)
			return -1;
	}
	/* The bounding and ambient sets are empty already (inherited from
	 * init: init_setup_children()).  The raw set-id calls skip musl's
	 * broadcast to other threads (signals blocked around each): this
	 * child has none. */
	if (sys_setgroups0() < 0)
		return -1;
	if (sys_setresgid(cfg->gid, cfg->gid, cfg->gid) < 0)
		return -1;
	if (sys_setresuid(cfg->uid, cfg->uid, cfg->uid) < 0)
		return -1;
	/* With NO_SETUID_FIXUP set, nothing was cleared by setresuid: clear
	 * effective, permitted and inheritable sets explicitly. */
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (sys_capset(&hdr, data) < 0)
		return -1;

	if (sys_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (cfg->filter) {
		struct sock_fprog prog = { cfg->filter_len, cfg->filter };
		if (sys_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, (unsigned long)&prog, 0, 0) < 0)
			return -1;
	}
	return 0;
}
