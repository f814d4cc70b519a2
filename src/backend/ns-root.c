/* A sandbox's root filesystem as one prepared mount tree (ns backend).
 *
 * Building the root inside the sandbox took sandlot-init about 55 mount
 * calls, with a mkdir or a file for each mount point: a read-only tmpfs,
 * /usr and an allowlist of /etc entries (or a built image's directories),
 * the generated /etc files, /dev.  None of that differs between sandboxes
 * with the same image, hostname and user, so the host builds it once per
 * process as a detached mount tree — the "template" — and gives each
 * sandbox a clone of it: one open_tree(OPEN_TREE_CLONE | AT_RECURSIVE) of
 * a few microseconds, which init attaches with one move_mount.  Init then
 * adds only what is the sandbox's own: its storage, /dev/pts, /dev/shm and
 * /proc.
 *
 * The template, all of it:
 *   /                 tmpfs, mount points and links, made read-only: the
 *                     superblock itself (not just the mount), so no clone
 *                     can ever be made writable, whoever holds it
 *   /usr, /bin...     read-only binds of the host's (or the image's
 *                     top-level directories and links)
 *   /etc              host image: generated files on the tmpfs plus
 *                     read-only binds of the allowlisted host entries;
 *                     built image: the image's /etc with the generated
 *                     files bound over the image's
 *   /dev              on the root tmpfs: read-only binds of null, zero,
 *                     full, random, urandom, tty, the pts and shm mount
 *                     points and the fd/stdin/stdout/stderr links
 * Every mount is read-only, nosuid and nodev (but /dev's device binds),
 * and private: no host mount event propagates into a template or a clone.
 *
 * Per clone, once the sandbox's user namespace exists, the parts sandlot
 * made (the root tmpfs, an image's directories and its generated /etc
 * files) are idmapped through it, so they show their owners as the
 * sandbox sees them (root, or the image's users) instead of as nobody.
 * The host's own binds are never idmapped.
 *
 * Staleness: binds of host *files* (ld.so.cache...) pin the file the host
 * had when the template was made; packages replace such files by renaming
 * over them, which changes /etc itself, so a template is rebuilt when the
 * host's /etc has changed since.  An image never changes (its digest is
 * its content).
 *
 * Kernel support: detached trees built with move_mount into them and
 * cloned with open_tree need Linux 6.15 or so; where any step fails the
 * caller passes no tree and sandlot-init builds the root itself as before.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ns.h"
#include "common/cleanup.h"
#include "common/etcfiles.h"
#include "common/util.h"
#include "linux/syscalls.h"

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

/* Templates kept per process (image x hostname x user). */
#define MAX_TEMPLATES 8
/* Paths idmapped per clone, at most. */
#define MAX_IDMAP 64

struct template {
	char key[4400];                 /* empty: a free slot */
	int fd;                         /* the detached tree, when key is set */
	struct timespec etc_mtime;      /* host /etc when it was made */
	ino_t etc_ino;
	dev_t rootfs_dev;               /* a built image's rootfs when it was made */
	ino_t rootfs_ino;
	char *rootfs;
	char *idmap[MAX_IDMAP];         /* paths relative to the root; "" = the root */
	size_t nidmap;
	uint64_t used;                  /* for eviction */
};

static pthread_mutex_t templates_lock = PTHREAD_MUTEX_INITIALIZER;
static struct template templates[MAX_TEMPLATES];
static uint64_t use_clock;

/* mkdirat and openat with exactly `mode`: the process's umask is not
 * ours to rely on (sandlotd narrows it for a moment while it creates its
 * socket, in another thread). */
static int mkdir_exact(int dirfd, const char *path, mode_t mode)
{
	if (mkdirat(dirfd, path, mode) < 0)
		return -1;
	return fchmodat(dirfd, path, mode, 0);
}

static int touch_exact(int dirfd, const char *path, mode_t mode)
{
	int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	int rc = fchmod(fd, mode);
	close(fd);
	return rc;
}

static void template_free(struct template *t)
{
	if (t->key[0] && t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	for (size_t i = 0; i < t->nidmap; i++)
		free(t->idmap[i]);
	t->nidmap = 0;
	free(t->rootfs);
	t->rootfs = NULL;
	t->key[0] = '\0';
}

/* Drop the templates of images that were removed (`sandlot image rm`): their
 * binds would keep the deleted files, and their disk space, for as long as
 * this process lives.  Called with templates_lock held, on every clone. */
static void drop_removed_images(void)
{
	for (size_t i = 0; i < MAX_TEMPLATES; i++) {
		struct template *t = &templates[i];
		struct stat st;
		if (t->key[0] && t->rootfs &&
		    (stat(t->rootfs, &st) < 0 || st.st_ino != t->rootfs_ino ||
		     st.st_dev != t->rootfs_dev))
			template_free(t);
	}
}

static int add_idmap(struct template *t, const char *path)
{
	if (t->nidmap == MAX_IDMAP)
		return 0; /* shown as nobody: only cosmetic */
	t->idmap[t->nidmap] = strdup(path);
	if (!t->idmap[t->nidmap])
		return -1;
	t->nidmap++;
	return 0;
}

/* A fresh detached tmpfs mount. */
static int new_tmpfs(const char *size, const char *mode, unsigned attrs, int *fs_out,
		     sandlot_error_t **err)
{
	cleanup_close int fs = sys_fsopen("tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return sandlot__error_errno(err, errno, "fsopen tmpfs");
	if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", "4096", 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sandlot__error_errno(err, errno, "create tmpfs");
	int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	if (m < 0)
		return sandlot__error_errno(err, errno, "fsmount tmpfs");
	if (fs_out)
		*fs_out = steal_fd(&fs);
	return m;
}

/* Make the superblock of the mount `m` read-only for good. */
static int seal_superblock(int m, sandlot_error_t **err)
{
	cleanup_close int fs = sys_fspick(m, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC);
	if (fs < 0 || sys_fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
	    sys_fsconfig(fs, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
		return sandlot__error_errno(err, errno, "make the template tmpfs read-only");
	return 0;
}

/* Bind `src` (a host path) at `dst` inside the tree `root`, making the
 * mount point like the source (a directory or an empty file).  A missing
 * source is skipped when optional. */
static int bind_into(int root, const char *dst, const char *src, int recursive, int optional,
		     sandlot_error_t **err)
{
	struct stat st;
	if (stat(src, &st) < 0) {
		if (optional && errno == ENOENT)
			return 0;
		return sandlot__error_errno(err, errno, "bind %s", src);
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir_exact(root, dst, 0755) < 0 && errno != EEXIST)
			return sandlot__error_errno(err, errno, "mount point /%s", dst);
	} else if (touch_exact(root, dst, 0644) < 0) {
		return sandlot__error_errno(err, errno, "mount point /%s", dst);
	}
	cleanup_close int m = sys_open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
					(recursive ? AT_RECURSIVE : 0));
	if (m < 0)
		return sandlot__error_errno(err, errno, "clone %s", src);
	if (sys_move_mount(m, "", root, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return sandlot__error_errno(err, errno, "bind %s at /%s", src, dst);
	return 0;
}

/* /bin, /lib... are links into /usr on merged-usr hosts, directories
 * elsewhere: mirror whichever the host has. */
static int mirror_top(int root, const char *name, sandlot_error_t **err)
{
	char src[64], link[256];
	snprintf(src, sizeof(src), "/%s", name);
	ssize_t n = readlink(src, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		if (symlinkat(link, root, name) < 0)
			return sandlot__error_errno(err, errno, "symlink /%s", name);
		return 0;
	}
	return bind_into(root, name, src, 1, 1, err);
}

static int host_root(int root, const struct sandlot_etc *etc, sandlot_error_t **err)
{
	if (mkdir_exact(root, "var", 0755) < 0 || symlinkat("../tmp", root, "var/tmp") < 0)
		return sandlot__error_errno(err, errno, "prepare /var");
	if (bind_into(root, "usr", "/usr", 1, 0, err) < 0)
		return -1;
	static const char *const tops[] = { "bin", "sbin", "lib", "lib64", "lib32", "libx32" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(tops); i++)
		if (mirror_top(root, tops[i], err) < 0)
			return -1;
	if (mkdir_exact(root, "etc", 0755) < 0)
		return sandlot__error_errno(err, errno, "mkdir /etc");
	cleanup_close int etcfd = openat(root, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	const char *what = "";
	if (etcfd < 0 || sandlot__etc_write(etcfd, etc, &what) < 0)
		return sandlot__error_errno(err, errno, "write /etc/%s", etcfd < 0 ? "" : what);
	for (size_t i = 0; i < sandlot__etc_allow_count; i++) {
		char src[128], dst[128];
		snprintf(src, sizeof(src), "/etc/%s", sandlot__etc_allow[i]);
		snprintf(dst, sizeof(dst), "etc/%s", sandlot__etc_allow[i]);
		if (bind_into(root, dst, src, 1, 1, err) < 0)
			return -1;
	}
	return 0;
}

/* A built image: its top-level directories bound and its top-level links
 * copied, except what the sandbox provides itself; its /etc with our
 * generated files bound over the image's own (the builder makes sure
 * they exist). */
static int image_root(struct template *t, int root, const char *rootfs, struct sandlot_etc *etc,
		      sandlot_error_t **err)
{
	static const char *const own[] = {
		"dev", "proc", "sys", "tmp", "home", "run", "root", "boot", "lost+found", "etc",
	};
	cleanup_closedir DIR *d = opendir(rootfs);
	if (!d)
		return sandlot__error_errno(err, errno, "open image root %s", rootfs);
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
			continue;
		int skip = strlen(name) > 200;
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(own); i++)
			skip |= strcmp(name, own[i]) == 0;
		if (skip)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return sandlot__error_errno(err, errno, "stat image /%s", name);
		if (S_ISLNK(st.st_mode)) {
			char link[512];
			ssize_t n = readlinkat(dirfd(d), name, link, sizeof(link) - 1);
			if (n < 0)
				return sandlot__error_errno(err, errno, "read image link /%s", name);
			link[n] = '\0';
			if (symlinkat(link, root, name) < 0)
				return sandlot__error_errno(err, errno, "symlink /%s", name);
		} else if (S_ISDIR(st.st_mode)) {
			char src[4400];
			snprintf(src, sizeof(src), "%s/%s", rootfs, name);
			if (bind_into(root, name, src, 1, 0, err) < 0 || add_idmap(t, name) < 0)
				return -1;
		}
	}
	char src[4400];
	snprintf(src, sizeof(src), "%s/etc", rootfs);
	if (bind_into(root, "etc", src, 1, 0, err) < 0 || add_idmap(t, "etc") < 0)
		return -1;
	/* The generated files, written to a hidden directory of the root
	 * tmpfs, bound over the image's and unlinked there. */
	cleanup_close int image_etc = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (image_etc < 0)
		return sandlot__error_errno(err, errno, "open %s", src);
	etc->image_etc_fd = image_etc;
	if (mkdir_exact(root, ".etc", 0755) < 0)
		return sandlot__error_errno(err, errno, "mkdir /.etc");
	cleanup_close int gen = openat(root, ".etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	const char *what = "";
	if (gen < 0 || sandlot__etc_write(gen, etc, &what) < 0)
		return sandlot__error_errno(err, errno, "write /etc/%s", gen < 0 ? "" : what);
	for (size_t i = 0; i < sandlot__etc_generated_count; i++) {
		const char *name = sandlot__etc_generated[i];
		char dst[64];
		snprintf(dst, sizeof(dst), "etc/%s", name);
		cleanup_close int m = sys_open_tree(gen, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (m < 0 || sys_move_mount(m, "", root, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return sandlot__error_errno(err, errno,
						    "bind /etc/%s over the image's (is the image complete?)",
						    name);
		/* (Idmapped with the image's /etc, whose subtree they are.) */
		if (unlinkat(gen, name, 0) < 0)
			return sandlot__error_errno(err, errno, "unlink /.etc/%s", name);
	}
	if (unlinkat(root, ".etc", AT_REMOVEDIR) < 0)
		return sandlot__error_errno(err, errno, "rmdir /.etc");
	return 0;
}

/* The template's /dev, in the root tmpfs itself (so that it is idmapped
 * with the root): mount points for the device binds, pts and shm, and the
 * fd links.  The binds come later (dev_binds), after the tree was made
 * nodev. */
static int dev_skeleton(int root, sandlot_error_t **err)
{
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(dev_nodes); i++) {
		char p[32];
		snprintf(p, sizeof(p), "dev/%s", dev_nodes[i]);
		if (touch_exact(root, p, 0644) < 0)
			return sandlot__error_errno(err, errno, "mount point /%s", p);
	}
	if (mkdir_exact(root, "dev/pts", 0755) < 0 || mkdir_exact(root, "dev/shm", 01777) < 0 ||
	    symlinkat("pts/ptmx", root, "dev/ptmx") < 0)
		return sandlot__error_errno(err, errno, "prepare /dev");
	static const char *const links[][2] = {
		{ "/proc/self/fd", "dev/fd" },      { "/proc/self/fd/0", "dev/stdin" },
		{ "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(links); i++)
		if (symlinkat(links[i][0], root, links[i][1]) < 0)
			return sandlot__error_errno(err, errno, "symlink /%s", links[i][1]);
	return 0;
}

/* Read-only binds of the host's harmless devices (writes to /dev/null go
 * to the device, not to a filesystem: read-only is fine). */
static int dev_binds(int root, sandlot_error_t **err)
{
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(dev_nodes); i++) {
		char src[32], dst[32];
		snprintf(src, sizeof(src), "/dev/%s", dev_nodes[i]);
		snprintf(dst, sizeof(dst), "dev/%s", dev_nodes[i]);
		cleanup_close int m = sys_open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (m < 0 || sys_mount_setattr(m, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0 ||
		    sys_move_mount(m, "", root, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return sandlot__error_errno(err, errno, "bind %s", src);
	}
	return 0;
}

static int build(struct template *t, const struct ns_root_key *k, sandlot_error_t **err)
{
	cleanup_close int root = new_tmpfs("1m", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, NULL, err);
	if (root < 0)
		return -1;
	if (add_idmap(t, "") < 0)
		return sandlot__error(err, ENOMEM, "out of memory");
	static const struct {
		const char *path;
		mode_t mode;
	} dirs[] = { { "home", 0755 }, { "home/user", 0755 }, { "tmp", 01777 }, { "dev", 0755 },
		     { "proc", 0755 },  { "root", 0700 },      { "run", 0755 } };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(dirs); i++)
		if (mkdir_exact(root, dirs[i].path, dirs[i].mode) < 0)
			return sandlot__error_errno(err, errno, "mkdir /%s", dirs[i].path);
	struct sandlot_etc etc = {
		.hostname = k->hostname, .user_name = k->user_name, .uid = 1000, .gid = 1000,
		.image_etc_fd = -1,
	};
	if (dev_skeleton(root, err) < 0 ||
	    (k->rootfs ? image_root(t, root, k->rootfs, &etc, err) : host_root(root, &etc, err)))
		return -1;
	/* Everything so far read-only, nosuid, nodev in one call; the device
	 * binds come after, usable. */
	struct mount_attr ro = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
	};
	if (sys_mount_setattr(root, "", AT_EMPTY_PATH | AT_RECURSIVE, &ro, sizeof(ro)) < 0)
		return sandlot__error_errno(err, errno, "make the template read-only");
	if (dev_binds(root, err) < 0 || seal_superblock(root, err) < 0)
		return -1;
	/* Private, all of it: a clone of a host mount would otherwise join
	 * its peer group and receive the host's mount events. */
	struct mount_attr priv = { .propagation = MS_PRIVATE };
	if (sys_mount_setattr(root, "", AT_EMPTY_PATH | AT_RECURSIVE, &priv, sizeof(priv)) < 0)
		return sandlot__error_errno(err, errno, "make the template private");
	t->fd = steal_fd(&root);
	return 0;
}

static void key_string(const struct ns_root_key *k, char *buf, size_t n)
{
	snprintf(buf, n, "%s\n%s\n%s", k->rootfs ? k->rootfs : "host", k->hostname, k->user_name);
}

/* Whether t is still good: the host's /etc unchanged (host image). */
static int fresh(const struct template *t, const struct ns_root_key *k, const struct stat *etc)
{
	if (k->rootfs)
		return 1;
	return etc->st_ino == t->etc_ino && etc->st_mtim.tv_sec == t->etc_mtime.tv_sec &&
	       etc->st_mtim.tv_nsec == t->etc_mtime.tv_nsec;
}

int sandlot__ns_root_clone(const struct ns_root_key *k, struct ns_root *out, int may_build,
			   sandlot_error_t **err)
{
	out->fd = -1;
	out->nidmap = 0;
	char key[sizeof(templates[0].key)];
	key_string(k, key, sizeof(key));
	struct stat etc;
	if (!k->rootfs && stat("/etc", &etc) < 0)
		return sandlot__error_errno(err, errno, "stat /etc");

	pthread_mutex_lock(&templates_lock);
	drop_removed_images();
	struct template *t = NULL, *victim = &templates[0];
	for (size_t i = 0; i < MAX_TEMPLATES; i++) {
		struct template *c = &templates[i];
		if (c->key[0] && strcmp(c->key, key) == 0) {
			t = c;
			break;
		}
		if (!c->key[0] || (victim->key[0] && c->used < victim->used))
			victim = c;
	}
	if (t && !fresh(t, k, &etc)) {
		template_free(t); /* the host's /etc changed: build anew */
		victim = t;
		t = NULL;
	}
	if (!t && !may_build) {
		pthread_mutex_unlock(&templates_lock);
		return sandlot__error(err, ENOENT, "no prepared root");
	}
	if (!t) {
		t = victim;
		template_free(t);
		struct stat st;
		if (k->rootfs && (stat(k->rootfs, &st) < 0 || !(t->rootfs = strdup(k->rootfs)))) {
			pthread_mutex_unlock(&templates_lock);
			return sandlot__error_errno(err, errno ? errno : ENOMEM, "image root %s", k->rootfs);
		}
		if (k->rootfs) {
			t->rootfs_dev = st.st_dev;
			t->rootfs_ino = st.st_ino;
		}
		if (build(t, k, err) < 0) {
			template_free(t); /* frees the idmap list (no key: no fd) */
			pthread_mutex_unlock(&templates_lock);
			return sandlot__error_wrap(err, "prepare the sandbox root");
		}
		snprintf(t->key, sizeof(t->key), "%s", key);
		if (!k->rootfs) {
			t->etc_ino = etc.st_ino;
			t->etc_mtime = etc.st_mtim;
		}
	}
	t->used = ++use_clock;
	out->fd = sys_open_tree(t->fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
				   AT_EMPTY_PATH);
	int e = errno;
	for (size_t i = 0; out->fd >= 0 && i < t->nidmap; i++)
		if ((out->idmap[out->nidmap] = strdup(t->idmap[i])))
			out->nidmap++;
	pthread_mutex_unlock(&templates_lock);
	if (out->fd < 0)
		return sandlot__error_errno(err, e, "clone the sandbox root");
	return 0;
}

void sandlot__ns_root_idmap(struct ns_root *r, pid_t pid)
{
	if (r->fd < 0)
		return;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	cleanup_close int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return;
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)ns };
	for (size_t i = 0; i < r->nidmap; i++) {
		const char *p = r->idmap[i];
		if (!*p) {
			/* The root tmpfs: its own mount only (the host's binds on
			 * it stay as they are). */
			sys_mount_setattr(r->fd, "", AT_EMPTY_PATH, &attr, sizeof(attr));
			continue;
		}
		/* The kernel idmaps only the top of a detached tree: clone the
		 * subtree (a tree of its own), idmap that whole, and mount it
		 * over the original in the clone. */
		cleanup_close int sub = sys_open_tree(r->fd, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
						  AT_RECURSIVE);
		if (sub < 0 ||
		    sys_mount_setattr(sub, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
			continue; /* cannot be idmapped here: owners show as nobody */
		sys_move_mount(sub, "", r->fd, p, MOVE_MOUNT_F_EMPTY_PATH);
	}
}

size_t sandlot__ns_root_templates(int *fds, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&templates_lock);
	for (size_t i = 0; i < MAX_TEMPLATES && n < max; i++)
		if (templates[i].key[0] && templates[i].fd >= 0)
			fds[n++] = templates[i].fd;
	pthread_mutex_unlock(&templates_lock);
	return n;
}

void sandlot__ns_root_release(struct ns_root *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	for (size_t i = 0; i < r->nidmap; i++)
		free(r->idmap[i]);
	r->nidmap = 0;
}
