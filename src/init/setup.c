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
 * reachable afterwards.  Any failure is reported on the status fd as
 * "errno message" and init exits: the host turns that into the error of
 * sandlot_create().
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
#include "linux/syscalls.h"

/* Mounted over the host's /tmp in our private mount namespace: no host
 * directory is ever created for it. */
#define NEWROOT "/tmp"
/* The storage is attached here just long enough to bind its home/ and
 * tmp/ into place; /run exists (empty) in every sandbox anyway. */
#define STORAGE NEWROOT "/run"

static void report(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write "errno message\n" to the status fd.  Setup is single-threaded and
 * runs before anything else in the sandbox, so stdio is safe here. */
static void report(int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dprintf(INIT_FD_STATUS, "%d %s%s%s\n", err, msg, err ? ": " : "", err ? strerror(err) : "");
}

#define FAIL(...)                                  \
	do {                                       \
		int e_ = errno;                    \
		report(e_, __VA_ARGS__);           \
		return -1;                         \
	} while (0)

static int write_text(const char *path, const char *text, mode_t mode)
{
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	size_t n = strlen(text);
	if (write(fd, text, n) != (ssize_t)n)
		return -1;
	return 0;
}

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
	if (mount_setattr(AT_FDCWD, NEWROOT, AT_RECURSIVE, &attr, sizeof(attr)) < 0)
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

static const char *const etc_allow[] = {
	/* Only entries that hold no secrets and that programs need to run.  */
	"alternatives",            /* /usr/bin/awk and friends point here */
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"ssl", "ca-certificates", "ca-certificates.conf",
	"localtime", "timezone", "mime.types",
	"python3", "python3.11", "matplotlibrc", "fonts",
	"bash.bashrc", "profile", "inputrc", "protocols", "services",
};

/* Lines of an image's passwd or group file other than those describing
 * the sandbox user (by name or id), which we write ourselves. */
static void append_other_entries(char *out, size_t cap, const char *path, const char *name,
				 unsigned id)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return;
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
		if ((nl == strlen(name) && strncmp(line, name, nl) == 0) ||
		    (nl == 4 && strncmp(line, "user", 4) == 0) ||
		    strtoul(c2 + 1, NULL, 10) == id)
			continue;
		size_t ll = strlen(line);
		if (used + ll + 2 >= cap)
			break;
		memcpy(out + used, line, ll);
		out[used + ll] = '\n';
		used += ll + 1;
		out[used] = '\0';
	}
}

/* The files of /etc that sandlot writes itself: users (the sandbox user
 * is uid cfg->uid, named cfg->user_name), name service, hosts, hostname,
 * the resolver (sandlot's, on loopback).  With an image, its other users and
 * groups are kept (so its files show their owners' names). */
static int write_generated_etc(const struct init_config *cfg, const char *dir, const char *image_etc)
{
	char path[256], src[256];
	static char passwd[70000], group[70000];
	if (image_etc) {
		passwd[0] = group[0] = '\0';
		snprintf(src, sizeof(src), "%s/passwd", image_etc);
		append_other_entries(passwd, sizeof(passwd) - 256, src, cfg->user_name, cfg->uid);
		snprintf(src, sizeof(src), "%s/group", image_etc);
		append_other_entries(group, sizeof(group) - 256, src, cfg->user_name, cfg->gid);
	} else {
		snprintf(passwd, sizeof(passwd), "root:x:0:0:root:/root:/usr/sbin/nologin\n"
			 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
		snprintf(group, sizeof(group), "root:x:0:\nnogroup:x:65534:\n");
	}
	size_t pl = strlen(passwd), gl = strlen(group);
	snprintf(passwd + pl, sizeof(passwd) - pl, "%s:x:%u:%u:sandbox user:%s:/bin/bash\n",
		 cfg->user_name, (unsigned)cfg->uid, (unsigned)cfg->gid, INIT_HOME);
	snprintf(group + gl, sizeof(group) - gl, "%s:x:%u:\n", cfg->user_name, (unsigned)cfg->gid);
	char hosts[512], hn[300];
	snprintf(hosts, sizeof(hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
		 cfg->hostname);
	snprintf(hn, sizeof(hn), "%s\n", cfg->hostname);
	const struct {
		const char *name;
		const char *text;
	} files[] = {
		{ "passwd", passwd },
		{ "group", group },
		{ "nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\n"
				   "hosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n" },
		/* sandlot answers DNS there when the sandbox has a network
		 * (and every query to port 53 anywhere is redirected to it). */
		{ "resolv.conf", "nameserver 127.0.0.1\n" },
		{ "hosts", hosts },
		{ "hostname", hn },
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
		if (write_text(path, files[i].text, 0644) < 0)
			FAIL("write /etc/%s", files[i].name);
	}
	return 0;
}

static const char *const generated_etc[] = {
	"passwd", "group", "nsswitch.conf", "resolv.conf", "hosts", "hostname",
};

static int build_etc(const struct init_config *cfg)
{
	char path[256];
	if (mkdir(NEWROOT "/etc", 0755) < 0)
		FAIL("mkdir /etc");
	if (write_generated_etc(cfg, NEWROOT "/etc", NULL) < 0)
		return -1;
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(etc_allow); i++) {
		char src[128];
		snprintf(src, sizeof(src), "/etc/%s", etc_allow[i]);
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", etc_allow[i]);
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
	if (move_mount(INIT_FD_IMAGE, "", AT_FDCWD, IMAGE, MOVE_MOUNT_F_EMPTY_PATH) < 0)
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
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(generated_etc); i++) {
		snprintf(src, sizeof(src), ETCGEN "/%s", generated_etc[i]);
		snprintf(dst, sizeof(dst), NEWROOT "/etc/%s", generated_etc[i]);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			FAIL("bind /etc/%s over the image's (is the image complete?)", generated_etc[i]);
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

static int build_storage(const struct init_config *cfg)
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
		/* The host made a detached mount of the sandbox's own filesystem,
		 * with home/ (owned by the sandbox user) and tmp/ already in it. */
		if (move_mount(INIT_FD_STORAGE, "", AT_FDCWD, STORAGE, MOVE_MOUNT_F_EMPTY_PATH) < 0)
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

	if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		FAIL("mount /proc");
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(masked_files); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", masked_files[i]);
		if (access(p, F_OK) < 0)
			continue;
		if (mount(NEWROOT "/dev/null", p, NULL, MS_BIND, NULL) < 0)
			FAIL("mask %s", p);
	}
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(masked_dirs); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", masked_dirs[i]);
		if (access(p, F_OK) < 0)
			continue;
		if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0,mode=0555") < 0)
			FAIL("mask %s", p);
	}
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(ro_paths); i++) {
		snprintf(p, sizeof(p), NEWROOT "/proc/%s", ro_paths[i]);
		if (access(p, F_OK) < 0)
			continue;
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0 || remount_ro(p, 0) < 0)
			FAIL("make %s read-only", p);
	}
	return 0;
}

static int load_filter(struct init_config *cfg)
{
	struct stat st;
	if (fstat(INIT_FD_SECCOMP, &st) < 0)
		FAIL("seccomp program fd");
	size_t n = (size_t)st.st_size;
	if (n == 0 || n % sizeof(struct sock_filter) != 0 ||
	    n / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		errno = EINVAL;
		FAIL("seccomp program of %zu bytes", n);
	}
	cfg->filter = malloc(n);
	if (!cfg->filter)
		FAIL("seccomp program");
	if (pread(INIT_FD_SECCOMP, cfg->filter, n, 0) != (ssize_t)n)
		FAIL("read seccomp program");
	cfg->filter_len = (unsigned short)(n / sizeof(struct sock_filter));
	close(INIT_FD_SECCOMP);
	return 0;
}

int init_setup(struct init_config *cfg)
{
	if (cfg->no_setup)
		return 0;
	if (!cfg->no_seccomp && load_filter(cfg) < 0)
		return -1;

	/* The host put us into the sandbox's cgroup before we started; from now
	 * on that cgroup is our root. */
	if (unshare(CLONE_NEWCGROUP) < 0)
		FAIL("cgroup namespace");
	if (sethostname(cfg->hostname, strlen(cfg->hostname)) < 0)
		FAIL("sethostname");
	/* Loopback is up already: the host made the network namespace (as
	 * root of the initial user namespace, so nothing here may change it). */

	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		FAIL("make / a slave mount");
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
	if (make_tree_readonly() < 0)
		return -1;
	/* Writable and special mounts go on top of the read-only tree. */
	if (build_storage(cfg) < 0 || build_dev() < 0 || build_proc() < 0)
		return -1;

	if (chdir(NEWROOT) < 0)
		FAIL("chdir new root");
	if (sys_pivot_root(".", ".") < 0)
		FAIL("pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		FAIL("detach old root");
	if (chdir("/") < 0)
		FAIL("chdir /");
	if (remount_ro("/dev", MS_NOSUID | MS_NOEXEC) < 0)
		FAIL("make /dev read-only");
	if (chdir(INIT_HOME) < 0)
		FAIL("chdir %s", INIT_HOME);

	/* Nobody in the sandbox may ptrace or read the memory of init. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		FAIL("PR_SET_DUMPABLE");
	return 0;
}

/* -- in the child, right before execve of a user command ------------------ */

static int set_rlimit(int res, uint64_t v)
{
	struct rlimit cur;
	if (getrlimit(res, &cur) < 0)
		return -1;
	rlim_t want = (rlim_t)v;
	/* Raising a hard limit needs CAP_SYS_RESOURCE in the host namespace,
	 * which we do not have; clamp to what the host allows. */
	if (cur.rlim_max != RLIM_INFINITY && want > cur.rlim_max)
		want = cur.rlim_max;
	struct rlimit rl = { want, want };
	return setrlimit(res, &rl);
}

int init_drop_privileges(const struct init_config *cfg)
{
	/* Only raw syscalls below: this runs in a forked child of init. */
	if (cfg->nofile && set_rlimit(RLIMIT_NOFILE, cfg->nofile) < 0)
		return -1;
	if (cfg->fsize && set_rlimit(RLIMIT_FSIZE, cfg->fsize) < 0)
		return -1;
	struct rlimit zero = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &zero) < 0)
		return -1;

	/* The host made init unkillable by the OOM killer where it could;
	 * commands must not inherit that, and they should always be chosen
	 * before init.  Raising the value needs no privilege; best effort. */
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "300", 3) != 3) {
			/* keep the inherited value */
		}
		close(fd);
	}

	if (cfg->uid != 0) {
		/* Root semantics off for good: no capabilities regained through
		 * exec of anything, locked. Needs CAP_SETPCAP, so before setuid. */
		if (prctl(PR_SET_SECUREBITS,
			  SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
				  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
				  SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
			  0, 0, 0) < 0)
			return -1;
	}
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -1;

	if (setgroups(0, NULL) < 0)
		return -1;
	if (setresgid(cfg->gid, cfg->gid, cfg->gid) < 0)
		return -1;
	if (setresuid(cfg->uid, cfg->uid, cfg->uid) < 0)
		return -1;
	/* With NO_SETUID_FIXUP set, nothing was cleared by setresuid: clear
	 * effective, permitted and inheritable sets explicitly. */
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -1;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (cfg->filter) {
		struct sock_fprog prog = { cfg->filter_len, cfg->filter };
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
			return -1;
	}
	return 0;
}
