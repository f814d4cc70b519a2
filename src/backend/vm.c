/* The `vm` backend: a QEMU microvm per sandbox (docs/vm.md).
 *
 * The guest is Debian's cloud kernel (booted straight from its vmlinux,
 * PVH) with a small initramfs whose /init is sandlot-init (guest mode):
 * it mounts the read-only root image (virtio-blk, serial "root") and the
 * workspace disk (serial "work"), and speaks spec/protocol.md over the
 * virtio-serial port org.sandlot.ctl.  The host end of that port is one
 * end of a socketpair that QEMU gets as an already connected chardev
 * (fd 3): it becomes sb->conn_fd, so nothing is bound on the filesystem.
 *
 * QEMU is jailed the way Firecracker's jailer does it, because under TCG
 * it is no security boundary of its own:
 *   - a cgroup named after the sandbox whose memory limit covers guest RAM,
 *     QEMU's translation cache and its own overhead;
 *   - new mount, pid, ipc and uts namespaces (QEMU is PID 1 of its pid
 *     namespace, so killing it ends everything it could start), and the
 *     sandbox's network namespace, which the host made as for an ns
 *     sandbox, with its egress rules (vm-net.c: the guest's NIC is QEMU's
 *     user-mode network, whose sockets live there);
 *   - a root that is a small tmpfs holding only the kernel, the initramfs,
 *     the two disks, the console log, /dev/null, /dev/urandom (and
 *     /dev/kvm under KVM), and /usr read-only for QEMU's own program,
 *     libraries and firmware;
 *   - an unprivileged host uid of its own (the sandbox's uid range's base),
 *     no supplementary groups, no capabilities, no_new_privs;
 *   - QEMU's own seccomp filter (-sandbox on with obsolete, elevation,
 *     spawning and resource control denied);
 *   - SIGKILL when the process that made it dies (PR_SET_PDEATHSIG).  That
 *     signal follows the *thread* that forked, so every jail is forked by
 *     one thread that lives as long as the process (launcher_main).
 *
 * On the host a sandbox's files are <data_dir>/vm/<id>/ (the workspace
 * disk, the console log, a lock its owner holds) and a link to that
 * directory at /run/sandlot/vm/<id>, so that remove_leftovers (which is
 * given only the id) and the sweep of a later start (for an owner that was
 * SIGKILLed: its lock is free) find them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "backend/vm.h"
#include "backend/vm-pause.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "core/internal.h"
#include "core/private.h"
#include "linux/storage.h"
#include "linux/cgroup.h"
#include "linux/syscalls.h"
#include "linux/userns.h"

extern char **environ;

#define QEMU_PATH "/usr/bin/qemu-system-x86_64"
#define RUN_DIR "/run/sandlot/vm"
/* QEMU's translation-block cache under TCG (-accel tcg,tb-size=128: the
 * 1 GiB default made hosts run out of memory) and QEMU's own memory. */
#define TB_CACHE_BYTES (128ull << 20)
#define QEMU_OVERHEAD_BYTES (96ull << 20)
/* QEMU's threads: the main loop, one per vCPU, the I/O thread pool. */
#define QEMU_PIDS 128
#define BOOT_TIMEOUT_MS 45000
/* Below about 80 MiB Debian's cloud kernel dies unpacking the initramfs,
 * before its console exists (so without a word). */
#define MIN_GUEST_MEMORY (128ull << 20)
/* The jail's root tmpfs: the console log lives there. */
#define JAIL_TMPFS_OPTS "size=4m,nr_inodes=64,mode=0755"

struct vm_state {
	pid_t pid;                  /* QEMU, PID 1 of its namespace, a child of this process */
	int pidfd;
	sandlot_cgroup_t *cg;
	struct sandlot_uid_slot slot;
	char *dir;                  /* <data_dir>/vm/<id> */
	int lock_fd;                /* flock on dir/lock while this process owns it */
	int kvm;
	int restored;               /* started from a template's saved state */
	char *vm_root;              /* <data_dir>/vm, and the template's key when restored */
	char *template_key;
	struct vm_monitor mon;      /* QEMU's QMP monitor (vm-pause.c) */
	struct vm_kept kept;        /* the kept workspace, when it has one (vm-pause.h) */
	char ident[1024];           /* what a saved state of it needs (state.meta) */
	struct sandlot_vm_net net;  /* the network namespace QEMU runs in */
};

/* ---- where things are ----------------------------------------------------------- */

/* The directory with vmlinux and initramfs.cpio: $SANDLOT_VM_DIR, else
 * next to the program (build/bin/../vm, an install's lib/sandlot/vm),
 * else the usual system places.  NULL + ENOENT naming where it looked. */
static char *find_vm_dir(sandlot_error_t **err)
{
	const char *env = getenv("SANDLOT_VM_DIR");
	char cand[PATH_MAX + 64];
	if (env && *env) {
		snprintf(cand, sizeof(cand), "%s/vmlinux", env);
		if (access(cand, R_OK) < 0)
			return sandlot__error_errno(err, errno, "SANDLOT_VM_DIR: %s", cand), NULL;
		return strdup(env);
	}
	static const char *const rel[] = { "/../vm", "/../lib/sandlot/vm", NULL };
	static const char *const sys[] = {
#ifdef SANDLOT_INSTALLED_VM_DIR
		SANDLOT_INSTALLED_VM_DIR,
#endif
		"/usr/lib/sandlot/vm", "/usr/local/lib/sandlot/vm", NULL,
	};
	char *found = sandlot__find_beside_self(rel, sys, "/vmlinux", R_OK);
	if (found || errno == ENOMEM)
		return found ? found : (sandlot__error(err, ENOMEM, "out of memory"), NULL);
	sandlot__error(err, ENOENT,
		       "the vm backend's guest kernel (vmlinux, initramfs.cpio) was not found next "
		       "to this program or in /usr/lib/sandlot/vm: build it (make vm) or set "
		       "SANDLOT_VM_DIR");
	return NULL;
}

/* The root disk: a built image's erofs file.  "host" cannot be a VM's
 * root (it is the host's own /usr): vm sandboxes of the image "host" get
 * $SANDLOT_VM_ROOT (an erofs file) when set, else the built image named
 * "minimal" (images/minimal.recipe). */
static int root_image_path(const struct sandlot *sb, char *out, size_t n, sandlot_error_t **err)
{
	if (sb->img.lock_fd >= 0) {
		snprintf(out, n, "%s/images/%s/rootfs.erofs", sb->data_dir, sb->img.digest);
		if (access(out, R_OK) == 0)
			return 0;
		return sandlot__error_errno(err, errno,
					    "image %s has no VM root (%s): rebuild it with this "
					    "sandlot", sb->image, out);
	}
	const char *env = getenv("SANDLOT_VM_ROOT");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		if (access(out, R_OK) == 0)
			return 0;
		return sandlot__error_errno(err, errno, "SANDLOT_VM_ROOT: %s", env);
	}
	char digest[SANDLOT_DIGEST_HEX + 1];
	sandlot_error_t *e = NULL;
	if (sandlot__image_resolve(sb->data_dir, "minimal", digest, &e) < 0) {
		sandlot_error_free(e);
		return sandlot__error(err, ENOENT,
				      "the image \"host\" cannot be a VM's root: vm sandboxes use the "
				      "built image \"minimal\" instead, which is not built (sandlot "
				      "image build images/minimal.recipe), or choose an image");
	}
	snprintf(out, n, "%s/images/%s/rootfs.erofs", sb->data_dir, digest);
	if (access(out, R_OK) == 0)
		return 0;
	return sandlot__error_errno(err, errno, "the image \"minimal\" has no VM root (%s): "
				    "rebuild it with this sandlot", out);
}

/* ---- the workspace disk ----------------------------------------------------------- */

/* Run argv (a program of the host's, full path) with stdout and stderr
 * into a buffer; 0 when it exited 0, else -1 with err quoting it. */
static int run_tool(char *const argv[], sandlot_error_t **err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sandlot__error_errno(err, errno, "pipe");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	pid_t pid;
	char *const envp[] = { (char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C", NULL };
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return sandlot__error_errno(err, rc, "run %s", argv[0]);
	}
	char out[400];
	size_t len = 0;
	for (;;) {
		char buf[256];
		ssize_t k = read(p[0], buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		for (ssize_t i = 0; i < k && len < sizeof(out) - 1; i++)
			out[len++] = buf[i] == '\n' ? ' ' : buf[i];
	}
	out[len] = '\0';
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	return sandlot__error(err, EIO, "%s failed (%s%d): %s", argv[0],
			      WIFEXITED(st) ? "status " : "signal ",
			      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), out);
}

/* An empty ext4 of `bytes`, made once per size in the data dir
 * (<data_dir>/vm/empty-<bytes>.ext4), appearing complete or not at all.
 * Copying it sparsely is cheaper than mkfs per create: about 0.5 ms against
 * 4 to 22 ms for 1 GiB, depending on the machine's load (bench/vm.py). */
static int empty_ext4(const char *vm_root, uint64_t bytes, char *out, size_t n,
		      sandlot_error_t **err)
{
	snprintf(out, n, "%s/empty-%llu.ext4", vm_root, (unsigned long long)bytes);
	if (access(out, R_OK) == 0)
		return 0;
	char tmp[PATH_MAX + 128];
	/* Per thread, not per process: two threads of one process (a create
	 * and a template's making, vm-template.c) may both make it, and a
	 * shared name let one unlink and remake the file the other's mkfs
	 * was writing (a broken empty disk, then every copy of it). */
	snprintf(tmp, sizeof(tmp), "%s.%d.%d.tmp", out, (int)getpid(), (int)gettid());
	/* No journal: the disk lives and dies with one sandbox (cache=unsafe
	 * anyway).  Inode tables zeroed now, so the guest's kernel does not
	 * spend emulated time on it.  The root directory is the guest's
	 * root's; the guest makes home/user and tmp in it. */
	char *const argv[] = {
		(char *)"/sbin/mkfs.ext4", (char *)"-q", (char *)"-F", (char *)"-m", (char *)"0",
		(char *)"-O", (char *)"^has_journal",
		(char *)"-E", (char *)"lazy_itable_init=0,root_owner=0:0",
		(char *)"-L", (char *)"sandlot-work", tmp, NULL,
	};
	/* A sparse file of the size first: mkfs then leaves its unused parts
	 * holes (about 0.6 MB of data in 1 GiB), which the copy skips. */
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	int rc = ftruncate(fd, (off_t)bytes);
	int e = errno;
	close(fd);
	if (rc < 0) {
		unlink(tmp);
		return sandlot__error_errno(err, e, "size %s", tmp);
	}
	if (run_tool(argv, err) < 0) {
		unlink(tmp);
		return sandlot__error_wrap(err, "make an empty workspace disk");
	}
	if (rename(tmp, out) < 0) {
		e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "rename %s", tmp);
	}
	return 0;
}

/* ---- reserving disks ---------------------------------------------------------------- */

/* A vm disk is a file on the data filesystem, next to the storage pool, so
 * it is admitted as the pool's growth is: against the room sandlot may take
 * there (sandlot__host_room), times the overcommit ratio.  Checked before
 * anything is written: an empty ext4 of a size that cannot be had is never
 * made (mkfs writes its inode tables). */
int sandlot__vm_disk_admit(const char *dir, uint64_t file_bytes, double overcommit,
			   sandlot_error_t **err)
{
	uint64_t room, keep;
	if (sandlot__host_room(dir, &room, &keep) < 0)
		return sandlot__error_errno(err, errno, "statvfs %s", dir);
	if (overcommit < 1)
		overcommit = 1;
	if ((double)file_bytes <= (double)room * overcommit)
		return 0;
	char a[32], b[32], c[32];
	return sandlot__error(
		err, ENOSPC,
		"cannot reserve %s for a vm sandbox's disk: %s has %s free beyond the %s kept "
		"for the host (overcommit ratio %g); use a smaller disk, free space there, or "
		"allow overcommit (sandlotd --disk-overcommit, SANDLOT_DISK_OVERCOMMIT)",
		sandlot__human_bytes(file_bytes, a), dir, sandlot__human_bytes(room, b),
		sandlot__human_bytes(keep, c), overcommit);
}

/* Copy src to a new file dst, leaving its holes holes (vm-pause.h). */
int sandlot__vm_sparse_copy(const char *src, const char *dst, uid_t owner, int reserve,
			    sandlot_error_t **err)
{
	cleanup_close int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return sandlot__error_errno(err, errno, "open %s", src);
	struct stat st;
	if (fstat(in, &st) < 0)
		return sandlot__error_errno(err, errno, "stat %s", src);
	cleanup_close int outfd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (outfd < 0)
		return sandlot__error_errno(err, errno, "create %s", dst);
	if (ftruncate(outfd, st.st_size) < 0)
		goto fail;
	off_t pos = 0;
	while (pos < st.st_size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0) {
			if (errno == ENXIO)
				break; /* only a hole is left */
			goto fail;
		}
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			goto fail;
		loff_t a = data, b = data;
		size_t left = (size_t)(hole - data);
		while (left > 0) {
			ssize_t k = copy_file_range(in, &a, outfd, &b, left, 0);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				goto fail;
			left -= (size_t)k;
		}
		pos = hole;
	}
	if (fchown(outfd, owner, owner) < 0)
		goto fail;
	/* Every block of the disk allocated now (the copied ones stay as they
	 * are): the guest's writes then never meet a full host, which QEMU
	 * could only answer by stopping the VM, and a full host fails this
	 * create instead of a neighbour's writes.  QEMU passes no discard
	 * through (-drive discard=ignore, its default), so the guest cannot
	 * punch the reservation back out. */
	if (reserve && st.st_size > 0) {
		int r;
		while ((r = fallocate(outfd, 0, 0, st.st_size)) < 0 && errno == EINTR)
			;
		if (r < 0) {
			int e = errno;
			char a[32];
			unlink(dst);
			return sandlot__error_errno(err, e, "reserve %s for a vm sandbox's disk (%s)",
						    sandlot__human_bytes((uint64_t)st.st_size, a), dst);
		}
	}
	return 0;
fail:;
	int e = errno ? errno : EIO;
	unlink(dst);
	return sandlot__error_errno(err, e, "copy %s to %s", src, dst);
}

/* ---- leftovers --------------------------------------------------------------------- */

void sandlot__vm_remove_dir(const char *dir)
{
	cleanup_closedir DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
				unlinkat(dirfd(d), e->d_name, 0);
	}
	rmdir(dir);
}

/* What remains of sandbox `id` (its link in RUN_DIR, its directory, its
 * cgroup), removed unless its lock is held (a live owner) or force. */
static unsigned remove_by_link(const char *id, int force, int kill)
{
	char link[128], dir[PATH_MAX];
	snprintf(link, sizeof(link), RUN_DIR "/%s", id);
	ssize_t n = readlink(link, dir, sizeof(dir) - 1);
	unsigned left = 0;
	if (n > 0) {
		dir[n] = '\0';
		char lock[PATH_MAX + 8];
		snprintf(lock, sizeof(lock), "%s/lock", dir);
		cleanup_close int fd = open(lock, O_RDONLY | O_CLOEXEC);
		if (!force && fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0)
			return 0; /* its owner lives */
		/* A lock this process cannot see (another mount namespace, a
		 * data dir it cannot reach) says nothing about its owner: a
		 * live sandbox of another sandlot must not be killed for it.
		 * A sandbox whose owner died has lost its QEMU already (its
		 * parent-death signal); its owner's next start sweeps the rest. */
		if (!force && fd < 0)
			return 0;
		/* Killed processes take the kernel a moment to let go of their
		 * cgroup: wait a little for it (this runs after a crash only). */
		int busy = sandlot__cgroup_remove_named(id, kill);
		for (int i = 0; busy && kill && i < 150; i++) {
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			busy = sandlot__cgroup_remove_named(id, kill);
		}
		left += (unsigned)busy;
		/* The link stays while the kernel still releases its cgroup:
		 * the next sweep (or remove_leftovers) finds it and tries again. */
		if (left == 0) {
			sandlot__vm_remove_dir(dir);
			unlink(link);
		}
	}
	return left;
}

/* Sandboxes whose owner died without releasing them (SIGKILL): QEMU died
 * with it (parent-death signal); its files and cgroup are removed here. */
static void sweep_stale(void)
{
	cleanup_closedir DIR *d = opendir(RUN_DIR);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (sandlot__sandbox_id_valid(e->d_name))
			remove_by_link(e->d_name, 0, 1);
}

static unsigned vm_remove_leftovers(const char *id, int kill)
{
	return remove_by_link(id, 1, kill);
}

/* ---- the jail ---------------------------------------------------------------------- */

/* What the child needs, all made before clone (it may not allocate). */
struct jail {
	const struct sandlot_cgroup_join *join;
	int sync_rd, sync_wr, status_wr, sock, qmp, console_fd;
	int netns_fd;                  /* the sandbox's network namespace */
	uid_t uid;
	int kvm;
	char mnt[PATH_MAX + 16];       /* where the jail's tmpfs goes */
	char vmlinux[PATH_MAX], initrd[PATH_MAX], root[PATH_MAX], work[PATH_MAX];
	char console[PATH_MAX + 64];
	char *const *argv;
	int incoming_fd;               /* a saved state to restore (fd 5), or -1 */
};

/* An empty file at name in dirfd, bind-mounted from src (read-only unless rw). */
static SANDLOT_CLONE_CHILD int bind_file(int dfd, const char *name, const char *src, int rw)
{
	int fd = sys_openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	sys_close(fd);
	if (sys_mount(src, name, NULL, MS_BIND, NULL) < 0)
		return -1;
	unsigned long ro = rw ? 0 : MS_RDONLY;
	return sys_mount(NULL, name, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | ro, NULL);
}

static SANDLOT_CLONE_CHILD __attribute__((noreturn)) void jail_main(const struct jail *j)
{
	int sfd = j->status_wr;
	/* Our copy of the parent's end: see the hang-up check before exec. */
	sys_close(j->sync_wr);
	if (sandlot__cgroup_join_self(j->join) < 0)
		sys_child_fail(sfd, "join the VM's cgroup");
	char c;
	ssize_t n;
	do
		n = sys_read(j->sync_rd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		sys_exit_group(1); /* the parent gave up on us */
	/* The network namespace the host made (it owns it: nothing in here
	 * may change its rules), while we still have the right to enter it. */
	if (sys_setns(j->netns_fd, CLONE_NEWNET) < 0)
		sys_child_fail(sfd, "enter the sandbox's network namespace");
	/* Nothing of what follows may reach the host's mount table. */
	if (sys_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		sys_child_fail(sfd, "make the mounts private");
	if (sys_mount("sandlot-vm", j->mnt, "tmpfs", MS_NOSUID, JAIL_TMPFS_OPTS) < 0)
		sys_child_fail(sfd, "mount the jail's tmpfs");
	if (sys_chdir(j->mnt) < 0)
		sys_child_fail(sfd, "enter the jail");
	/* Relative to the new tmpfs from here on. */
	if (sys_mkdirat(AT_FDCWD, "usr", 0755) < 0 || sys_mkdirat(AT_FDCWD, "dev", 0755) < 0)
		sys_child_fail(sfd, "make the jail's directories");
	if (sys_mount("/usr", "usr", NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    sys_mount(NULL, "usr", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		      NULL) < 0)
		sys_child_fail(sfd, "bind /usr read-only");
	/* Merged /usr: the loader and libraries are found through these. */
	if (sys_symlinkat("usr/lib", AT_FDCWD, "lib") < 0 ||
	    sys_symlinkat("usr/lib64", AT_FDCWD, "lib64") < 0 ||
	    sys_symlinkat("usr/bin", AT_FDCWD, "bin") < 0)
		sys_child_fail(sfd, "make the jail's links");
	if (bind_file(AT_FDCWD, "vmlinux", j->vmlinux, 0) < 0 ||
	    bind_file(AT_FDCWD, "initramfs.cpio", j->initrd, 0) < 0)
		sys_child_fail(sfd, "bind the guest kernel");
	if (bind_file(AT_FDCWD, "root.img", j->root, 0) < 0)
		sys_child_fail(sfd, "bind the root image");
	if (bind_file(AT_FDCWD, "work.img", j->work, 1) < 0)
		sys_child_fail(sfd, "bind the workspace disk");
	if (bind_file(AT_FDCWD, "console.log", j->console, 1) < 0)
		sys_child_fail(sfd, "bind the console log");
	/* QEMU's user-mode network sends the guest's DNS (to its 10.0.2.3) to
	 * the nameserver of this file: the sandbox's DNS listener, on the
	 * network namespace's loopback (vm-net.c). */
	static const char resolv[] = "nameserver 127.0.0.1\n";
	int rfd;
	if (sys_mkdirat(AT_FDCWD, "etc", 0755) < 0 ||
	    (rfd = sys_openat(AT_FDCWD, "etc/resolv.conf", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0 ||
	    sys_write(rfd, resolv, sizeof(resolv) - 1) != (ssize_t)(sizeof(resolv) - 1))
		sys_child_fail(sfd, "write the jail's /etc/resolv.conf");
	sys_close(rfd);
	/* (chmod: mknod's mode went through the caller's umask.) */
	if (sys_mknodat(AT_FDCWD, "dev/null", S_IFCHR | 0666, makedev(1, 3)) < 0 ||
	    sys_fchmodat(AT_FDCWD, "dev/null", 0666) < 0 ||
	    sys_mknodat(AT_FDCWD, "dev/urandom", S_IFCHR | 0444, makedev(1, 9)) < 0 ||
	    sys_fchmodat(AT_FDCWD, "dev/urandom", 0444) < 0)
		sys_child_fail(sfd, "make /dev/null and /dev/urandom");
	if (j->kvm && (sys_mknodat(AT_FDCWD, "dev/kvm", S_IFCHR | 0600, makedev(10, 232)) < 0 ||
		       sys_fchownat(AT_FDCWD, "dev/kvm", j->uid, j->uid, 0) < 0))
		sys_child_fail(sfd, "make /dev/kvm");
	/* The jail becomes the root; the host's tree is let go of. */
	if (sys_pivot_root(".", ".") < 0)
		sys_child_fail(sfd, "pivot_root into the jail");
	if (sys_umount2(".", MNT_DETACH) < 0)
		sys_child_fail(sfd, "detach the host's root");
	if (sys_chdir("/") < 0)
		sys_child_fail(sfd, "chdir /");
	if (sys_mount(NULL, "/", NULL, MS_REMOUNT | MS_NOSUID | MS_RDONLY, JAIL_TMPFS_OPTS) < 0)
		sys_child_fail(sfd, "make the jail read-only");

	/* fd 3: the protocol's socket; stdout and stderr: the console log
	 * (QEMU's own complaints land beside the guest's). */
	int devnull = sys_openat(AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC, 0);
	int sock = sys_dupfd_cloexec(j->sock, 100);
	int qmp = sys_dupfd_cloexec(j->qmp, 100);
	int con = sys_dupfd_cloexec(j->console_fd, 100);
	int status = sys_dupfd_cloexec(sfd, 100);
	int sync = sys_dupfd_cloexec(j->sync_rd, 100);
	int incoming = j->incoming_fd >= 0 ? sys_dupfd_cloexec(j->incoming_fd, 100) : -1;
	if (devnull < 0 || sock < 0 || qmp < 0 || con < 0 || status < 0 || sync < 0 ||
	    (j->incoming_fd >= 0 && incoming < 0))
		sys_child_fail(sfd, "dup");
	sfd = status;
	/* fd 4: QEMU's QMP monitor (vm-pause.c). */
	if (sys_dup2(devnull, 0) < 0 || sys_dup2(con, 1) < 0 || sys_dup2(con, 2) < 0 ||
	    sys_dup2(sock, 3) < 0 || sys_dup2(qmp, 4) < 0)
		sys_child_fail(sfd, "dup2");
	/* Everything else goes at exec, whether the caller marked it
	 * close-on-exec or not (Linux 5.11+; older kernels: the caller's
	 * flags). */
	sys_close_range_flags(5, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	/* fd 5: a template's state QEMU restores (-incoming fd:5, vm-template.c). */
	if (incoming >= 0 && sys_dup2(incoming, 5) < 0)
		sys_child_fail(sfd, "dup2");
	struct rlimit nofile = { 256, 256 };
	sys_setrlimit(RLIMIT_NOFILE, &nofile);

	if (sys_setgroups0() < 0 || sys_setresgid(j->uid, j->uid, j->uid) < 0 ||
	    sys_setresuid(j->uid, j->uid, j->uid) < 0)
		sys_child_fail(sfd, "drop to the VM's uid");
	/* After the uid change, which clears it. */
	if (sys_prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
	    sys_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		sys_child_fail(sfd, "prctl");
	/* The parent holds the sync pipe's write end until we exec: a hang-up
	 * means it died before the death signal was armed. */
	struct pollfd p = { .fd = sync, .events = POLLIN };
	struct timespec zero = { 0, 0 };
	if (sys_ppoll(&p, 1, &zero) != 0 && (p.revents & POLLHUP))
		sys_exit_group(1);
	char *const envp[] = { NULL };
	sys_execve(QEMU_PATH, j->argv, envp);
	sys_child_fail(sfd, "exec " QEMU_PATH);
}

/* The launcher thread: forks every jail, so that the jails' parent-death
 * signal fires when this process dies and not when some worker thread of
 * the caller's exits. */
struct launch {
	const struct jail *j;
	unsigned long flags;
	int cgroup_fd;
	pid_t pid;
	int into_cgroup;            /* born in the cgroup (clone3) */
	int err;
	int done;
};

static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t launch_cond = PTHREAD_COND_INITIALIZER;
static struct launch *launch_slot;
static int launcher_running;

static pid_t clone_jail(const struct jail *j, unsigned long flags, int cgroup_fd, int *err,
			int *into_cgroup)
{
	pid_t pid = -1;
	*into_cgroup = 0;
	if (cgroup_fd >= 0) {
		pid = sys_clone3_fork(flags, cgroup_fd);
		if (pid < 0 && errno != ENOSYS && errno != E2BIG && errno != EINVAL) {
			*err = errno;
			return -1;
		}
		*into_cgroup = pid >= 0;
	}
	if (pid < 0)
		pid = sys_clone_fork(flags | SIGCHLD);
	if (pid == 0)
		jail_main(j);
	*err = pid < 0 ? errno : 0;
	return pid;
}

static void *launcher_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&launch_lock);
	for (;;) {
		while (!launch_slot || launch_slot->done)
			pthread_cond_wait(&launch_cond, &launch_lock);
		struct launch *l = launch_slot;
		pthread_mutex_unlock(&launch_lock);
		l->pid = clone_jail(l->j, l->flags, l->cgroup_fd, &l->err, &l->into_cgroup);
		pthread_mutex_lock(&launch_lock);
		l->done = 1;
		pthread_cond_broadcast(&launch_cond);
	}
	return NULL;
}

/* Fork a jail from the launcher thread (started on first use).  The pid,
 * or -1 with errno; *into_cgroup: it was born in the cgroup. */
static pid_t launch_jail(const struct jail *j, unsigned long flags, int cgroup_fd,
			 int *into_cgroup)
{
	struct launch l = { .j = j, .flags = flags, .cgroup_fd = cgroup_fd, .pid = -1 };
	pthread_mutex_lock(&launch_lock);
	if (!launcher_running) {
		pthread_t t;
		pthread_attr_t a;
		sigset_t all, old;
		sigfillset(&all);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		int rc = pthread_create(&t, &a, launcher_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
		if (rc != 0) {
			pthread_mutex_unlock(&launch_lock);
			errno = rc;
			return -1;
		}
		launcher_running = 1;
	}
	while (launch_slot)
		pthread_cond_wait(&launch_cond, &launch_lock);
	launch_slot = &l;
	pthread_cond_broadcast(&launch_cond);
	while (!l.done)
		pthread_cond_wait(&launch_cond, &launch_lock);
	launch_slot = NULL;
	pthread_cond_broadcast(&launch_cond);
	pthread_mutex_unlock(&launch_lock);
	*into_cgroup = l.into_cgroup;
	errno = l.err;
	return l.pid;
}

/* The jail's report: EOF with no data once QEMU was executed. */
static int read_jail_status(int fd, sandlot_error_t **err)
{
	char buf[300];
	size_t len = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sandlot__error(err, r == 0 ? ETIMEDOUT : errno,
					      "the VM's jail did not start QEMU in 10 s");
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf) - 1)
			break;
	}
	if (len == 0)
		return 0;
	buf[len] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = '\0';
	char *end;
	long e = strtol(buf, &end, 10);
	if (end == buf || e <= 0 || e > 4095)
		e = EIO;
	while (*end == ' ')
		end++;
	return sandlot__error(err, (int)e, "jail QEMU: %s: %s", *end ? end : buf,
			      strerror((int)e));
}

/* ---- start, ready, kill, release --------------------------------------------------- */

static void vm_kill_qemu(struct vm_state *vm)
{
	if (vm->pid > 0) {
		if (vm->pidfd >= 0)
			sys_pidfd_send_signal(vm->pidfd, SIGKILL, NULL, 0);
		else
			kill(vm->pid, SIGKILL);
		while (waitpid(vm->pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		vm->pid = 0;
	}
}

static void vm_free(struct vm_state *vm)
{
	vm_kill_qemu(vm);
	sandlot__vm_monitor_close(&vm->mon);
	sandlot__vm_kept_release(&vm->kept);
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	vm->pidfd = -1;
	sandlot__vm_net_release(&vm->net);
	sandlot__cgroup_destroy(vm->cg);
	vm->cg = NULL;
	if (vm->dir) {
		const char *id = strrchr(vm->dir, '/') + 1;
		char link[128];
		snprintf(link, sizeof(link), RUN_DIR "/%s", id);
		sandlot__vm_remove_dir(vm->dir);
		unlink(link);
	}
	if (vm->lock_fd >= 0)
		close(vm->lock_fd);
	sandlot__uid_slot_release(&vm->slot);
	free(vm->dir);
	free(vm->vm_root);
	free(vm->template_key);
	free(vm);
}

/* The kernel command line: quiet, no reboot (QEMU exits instead), an early
 * TSC frequency (TCG hangs in calibration without), sandlot-init's guest
 * mode. */
#define KERNEL_CMDLINE \
	"console=hvc0 quiet panic=-1 reboot=t tsc_early_khz=2600000 sandlot.vm=1"

/* The guest's vCPUs: the sandbox's cpus rounded up, at most the host's. */
static unsigned vm_cpus(const struct sandlot *sb)
{
	unsigned cpus = sb->opts.cpus_milli ? (sb->opts.cpus_milli + 999) / 1000 : 1;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	if (online > 0 && cpus > (unsigned)online)
		cpus = (unsigned)online;
	return cpus;
}

int sandlot__vm_machine_key(const struct sandlot *sb, char *key, size_t n, sandlot_error_t **err)
{
	cleanup_free char *vm_dir = find_vm_dir(err);
	if (!vm_dir)
		return -1;
	char vmlinux[PATH_MAX + 16], initrd[PATH_MAX + 32], root[PATH_MAX];
	snprintf(vmlinux, sizeof(vmlinux), "%s/vmlinux", vm_dir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", vm_dir);
	if (root_image_path(sb, root, sizeof(root), err) < 0)
		return -1;
	int kvm = strcmp(sandlot__vm_accel(NULL), "kvm") == 0;
	if (sandlot__vm_template_key(vmlinux, initrd, root, sb->opts.memory_bytes, vm_cpus(sb),
				     sb->opts.disk_bytes, kvm, key, n) < 0)
		return sandlot__error_errno(err, errno, "look at the VM's files");
	return 0;
}

static void console_summary(const struct vm_state *vm, char *out, size_t n);

/* start, or with `resume` resume: the same on a kept workspace that must
 * exist, loading the running state a memory pause saved there, if any. */
/* With making_template, the VM is a template's (vm-template.c): its run
 * state is left out of what it saves; else a start that is no resume
 * restores the template of its machine, when one is saved. */
static int vm_boot(struct sandlot *sb, int resume, int making_template, sandlot_error_t **err)
{
	/* Nothing to resume is said first, whatever else is missing. */
	uint64_t kept_bytes;
	if (resume && sandlot__vm_workspace_size(sb->data_dir, sb->opts.workspace, &kept_bytes,
						 err) < 0)
		return sandlot__error_wrap(err, "the vm backend");
	if (strlen(sb->data_dir) > PATH_MAX - 200)
		return sandlot__error(err, ENAMETOOLONG, "the data directory's path is too long");
	if (sb->opts.memory_bytes < MIN_GUEST_MEMORY)
		return sandlot__error(err, EINVAL, "a vm sandbox needs at least 128M of memory (its "
				      "kernel's), not %llu bytes",
				      (unsigned long long)sb->opts.memory_bytes);
	if (!sandlot__vm_accel_usable()) {
		const char *why;
		sandlot__vm_accel(&why);
		return sandlot__error(err, ENODEV, "SANDLOT_VM_ACCEL=kvm, but KVM cannot be used: %s",
				      why);
	}
	struct vm_state *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return sandlot__error(err, ENOMEM, "out of memory");
	vm->pidfd = vm->lock_fd = -1;
	vm->slot.lock_fd = -1;
	vm->mon.fd = -1;
	vm->kept = (struct vm_kept)VM_KEPT_INIT;
	int incoming = 0;
	sandlot__vm_net_init(&vm->net);
	vm->kvm = strcmp(sandlot__vm_accel(NULL), "kvm") == 0;
	cleanup_free char *vm_dir = NULL;
	cleanup_free struct jail *j = calloc(1, sizeof(*j));
	cleanup_close int sync_rd = -1, sync_wr = -1, status_rd = -1, status_wr = -1;
	cleanup_close int sock_host = -1, sock_child = -1, console_fd = -1, state_fd = -1;
	cleanup_close int qmp_host = -1, qmp_child = -1;
	char vm_root[PATH_MAX], empty[PATH_MAX + 64], path[PATH_MAX + 64];
	int fds[2];
	if (!j) {
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	j->incoming_fd = -1;
	if (!(vm_dir = find_vm_dir(err)))
		goto fail;
	snprintf(j->vmlinux, sizeof(j->vmlinux), "%s/vmlinux", vm_dir);
	snprintf(j->initrd, sizeof(j->initrd), "%s/initramfs.cpio", vm_dir);
	if (root_image_path(sb, j->root, sizeof(j->root), err) < 0)
		goto fail;

	/* Files of this sandbox, and the link that finds them by id. */
	snprintf(vm_root, sizeof(vm_root), "%s/vm", sb->data_dir);
	if (sandlot__mkdir_p(vm_root, 0700) < 0 || sandlot__mkdir_p(RUN_DIR, 0700) < 0) {
		sandlot__error_errno(err, errno, "create %s", vm_root);
		goto fail;
	}
	sweep_stale();
	if (asprintf(&vm->dir, "%s/%s", vm_root, sb->id) < 0) {
		vm->dir = NULL;
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	if (mkdir(vm->dir, 0700) < 0) {
		sandlot__error_errno(err, errno, "create %s", vm->dir);
		free(vm->dir);
		vm->dir = NULL;
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/lock", vm->dir);
	vm->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (vm->lock_fd < 0 || flock(vm->lock_fd, LOCK_EX) < 0) {
		sandlot__error_errno(err, errno, "lock %s", path);
		goto fail;
	}
	snprintf(path, sizeof(path), RUN_DIR "/%s", sb->id);
	unlink(path);
	if (symlink(vm->dir, path) < 0) {
		sandlot__error_errno(err, errno, "link %s", path);
		goto fail;
	}
	if (sandlot__uid_slot_acquire(sb->data_dir, &vm->slot, err) < 0)
		goto fail;
	j->uid = vm->slot.base;
	sandlot__trace("vm files");

	/* The workspace disk: a sparse copy of an empty ext4, larger than the
	 * sandbox's disk size by ext4's own metadata (vm.h; `fallocate -l
	 * 1000M` failed on a disk of exactly 1 GiB). */
	uint64_t disk_file = sandlot__vm_disk_file_bytes(sb->opts.disk_bytes);
	/* A new disk is admitted and reserved (sandlot__vm_disk_admit); one
	 * a kept workspace already has was when it was made. */
	double overcommit = sandlot__overcommit(&sb->opts);
	if ((!sb->opts.workspace || !sandlot__vm_kept_exists(sb->data_dir, sb->opts.workspace)) &&
	    sandlot__vm_disk_admit(vm_root, disk_file, overcommit, err) < 0)
		goto fail;
	if (empty_ext4(vm_root, disk_file, empty, sizeof(empty), err) < 0)
		goto fail;
	if (sb->opts.workspace) {
		/* A kept workspace (vm-pause.h): its disk, made or found. */
		if (sandlot__vm_kept_take(sb->data_dir, sb->opts.workspace, resume,
					  sb->opts.disk_bytes, empty, j->uid, overcommit <= 1,
					  &vm->kept, err) < 0)
			goto fail;
		snprintf(j->work, sizeof(j->work), "%s", vm->kept.disk);
		incoming = resume && vm->kept.has_state;
	} else {
		snprintf(j->work, sizeof(j->work), "%s/work.img", vm->dir);
		if (sandlot__vm_sparse_copy(empty, j->work, j->uid, overcommit <= 1, err) < 0)
			goto fail;
	}
	sandlot__trace("vm disk");
	if (sandlot__vm_net_create(&vm->net, err) < 0)
		goto fail;
	sandlot__vm_net_config(&sb->init_cfg);
	sandlot__trace("vm netns");
	/* init's part of CONFIG that only this backend knows: the root is
	 * always an image (the root disk), the workspace is the disk's size.
	 * RLIMIT_FSIZE a little above the disk file, so that a full disk's
	 * ENOSPC (a clean write error) comes before the rlimit's SIGXFSZ (a
	 * kill). */
	sb->init_cfg.flags |= SL_CONFIG_IMAGE;
	sb->init_cfg.fsize = disk_file + (1ull << 20);
	/* tmpfs storage: the guest mounts a tmpfs of the disk's size (in the
	 * guest's memory, charged to the sandbox's cgroup there, as for ns)
	 * and leaves the disk, which it still expects to find, unused. */
	if (sb->opts.storage == SANDLOT_STORAGE_TMPFS) {
		sb->init_cfg.flags |= SL_CONFIG_TMPFS;
		sb->init_cfg.disk = sb->opts.disk_bytes;
	}
	/* The guest's clock and its RNG's seed (spec/protocol.md, TIME and
	 * SEED): a restored guest's are the saved one's, and two restored
	 * from one state must not draw the same numbers. */
	sb->init_cfg.send_time = 1;
	if (getrandom(sb->init_cfg.seed, sizeof(sb->init_cfg.seed), 0) !=
	    (ssize_t)sizeof(sb->init_cfg.seed)) {
		sandlot__error_errno(err, errno, "getrandom");
		goto fail;
	}
	sb->init_cfg.seed_len = sizeof(sb->init_cfg.seed);
	snprintf(path, sizeof(path), "%s/console.log", vm->dir);
	snprintf(j->console, sizeof(j->console), "%s", path);
	console_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (console_fd < 0 || fchown(console_fd, j->uid, j->uid) < 0) {
		sandlot__error_errno(err, errno, "create %s", path);
		goto fail;
	}
	snprintf(j->mnt, sizeof(j->mnt), "%s/jail", vm_root);
	if (mkdir(j->mnt, 0700) < 0 && errno != EEXIST) {
		sandlot__error_errno(err, errno, "create %s", j->mnt);
		goto fail;
	}

	/* The cgroup covers QEMU and the guest. */
	struct sandlot_cgroup_limits lim = {
		.memory_bytes = sb->opts.memory_bytes + TB_CACHE_BYTES + QEMU_OVERHEAD_BYTES,
		.cpus_milli = sb->opts.cpus_milli,
		.pids = QEMU_PIDS,
	};
	if (vm->kvm)
		lim.memory_bytes -= TB_CACHE_BYTES;
	vm->cg = sandlot__cgroup_create(sb->id, &lim, err);
	if (!vm->cg)
		goto fail;

	if (pipe2(fds, O_CLOEXEC) < 0)
		goto fail_errno;
	sync_rd = fds[0], sync_wr = fds[1];
	if (pipe2(fds, O_CLOEXEC) < 0)
		goto fail_errno;
	status_rd = fds[0], status_wr = fds[1];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
		goto fail_errno;
	sock_host = fds[0], sock_child = fds[1];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
		goto fail_errno;
	qmp_host = fds[0], qmp_child = fds[1];

	/* QEMU's arguments (docs/vm.md). */
	char mem[32], smp[16], name[64], accel[64], netdev[256];
	sandlot__vm_net_netdev(netdev, sizeof(netdev));
	snprintf(mem, sizeof(mem), "%lluM", (unsigned long long)(sb->opts.memory_bytes >> 20));
	unsigned cpus = vm_cpus(sb);
	snprintf(smp, sizeof(smp), "%u", cpus);
	/* (vm_cpus() must give the same: templates are keyed on it.) */
	snprintf(name, sizeof(name), "guest=%s", sb->id);
	snprintf(accel, sizeof(accel), "%s", vm->kvm ? "kvm" : "tcg,tb-size=128");
	sandlot__vm_ident(vm->ident, sizeof(vm->ident), sb->opts.memory_bytes, cpus,
			  vm->kvm ? "kvm" : "tcg", j->vmlinux, j->initrd, j->root);
	if (incoming && sandlot__vm_state_check(&vm->kept, vm->ident, err) < 0)
		goto fail;
	/* A saved template of this machine, when one was prepared
	 * (vm-template.c): restored instead of booted. */
	char tkey[SANDLOT_VM_TEMPLATE_KEY_MAX];
	if (!resume && !making_template &&
	    sandlot__vm_template_key(j->vmlinux, j->initrd, j->root, sb->opts.memory_bytes, cpus,
				     sb->opts.disk_bytes, vm->kvm, tkey, sizeof(tkey)) == 0)
		state_fd = sandlot__vm_template_open(vm_root, tkey);
	sandlot__trace(state_fd >= 0 ? "vm template" : "vm no template");
	char *argv[64] = {
		(char *)"qemu-system-x86_64", (char *)"-name", name,
		(char *)"-M", (char *)"microvm,x-option-roms=off,isa-serial=off",
		(char *)"-accel", accel, (char *)"-cpu", (char *)(vm->kvm ? "host" : "max"),
		(char *)"-m", mem, (char *)"-smp", smp,
		(char *)"-nodefaults", (char *)"-no-user-config", (char *)"-nographic",
		(char *)"-no-reboot",
		(char *)"-sandbox",
		(char *)"on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		(char *)"-kernel", (char *)"/vmlinux", (char *)"-initrd", (char *)"/initramfs.cpio",
		(char *)"-append", (char *)KERNEL_CMDLINE,
		(char *)"-device", (char *)"virtio-serial-device",
		(char *)"-chardev", (char *)"file,id=con,path=/console.log,append=on",
		(char *)"-device", (char *)"virtconsole,chardev=con",
		(char *)"-chardev", (char *)"socket,id=ctl,fd=3",
		(char *)"-device", (char *)"virtserialport,chardev=ctl,name=org.sandlot.ctl",
		(char *)"-drive",
		(char *)"id=root,file=/root.img,format=raw,if=none,readonly=on,file.locking=off",
		(char *)"-device", (char *)"virtio-blk-device,drive=root,serial=root",
		(char *)"-drive", (char *)"id=work,file=/work.img,format=raw,if=none,cache=unsafe",
		(char *)"-device", (char *)"virtio-blk-device,drive=work,serial=work",
		(char *)"-device", (char *)"virtio-rng-device",
		(char *)"-chardev", (char *)"socket,id=qmp,fd=4",
		(char *)"-mon", (char *)"chardev=qmp,mode=control",
		(char *)"-netdev", netdev,
		(char *)"-device", (char *)"virtio-net-device,netdev=net",
		NULL,
	};
	size_t argc = 0;
	while (argv[argc])
		argc++;
	if (incoming) {
		/* A resume of a memory pause: the same machine, loaded. */
		argv[argc++] = (char *)"-incoming";
		argv[argc++] = (char *)"defer";
	}
	if (making_template) {
		/* A template is saved stopped; without its run state in the
		 * stream, QEMU lets a restored copy run at once (no monitor
		 * call needed to say `cont`). */
		argv[argc++] = (char *)"-global";
		argv[argc++] = (char *)"migration.store-global-state=off";
	}
	if (state_fd >= 0) {
		/* QEMU loads the state and lets the guest run on: its init,
		 * which sent HELLO to the template's host, waits for CONFIG. */
		argv[argc++] = (char *)"-incoming";
		argv[argc++] = (char *)"fd:5";
		j->incoming_fd = state_fd;
		sb->init_cfg.hello_before = 1;
		vm->restored = 1;
		vm->vm_root = strdup(vm_root);
		vm->template_key = strdup(tkey);
	}
	j->argv = argv;
	j->sync_rd = sync_rd;
	j->sync_wr = sync_wr;
	j->status_wr = status_wr;
	j->sock = sock_child;
	j->qmp = qmp_child;
	j->console_fd = console_fd;
	j->netns_fd = vm->net.ns_fd;
	j->kvm = vm->kvm;

	struct sandlot_cgroup_join join;
	if (sandlot__cgroup_join_prepare(vm->cg, &join, err) < 0)
		goto fail;
	j->join = &join;
	/* No CLONE_NEWNET: the jail joins the sandbox's (jail_main). */
	const unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
	int into_cgroup = 0;
	pid_t pid = launch_jail(j, flags, join.dir_fd, &into_cgroup);
	int clone_errno = errno;
	/* v1: the child joins by itself (join.ntasks); v2 without clone3:
	 * from here, below, before it is let go. */
	int added = into_cgroup || join.ntasks > 0;
	sandlot__cgroup_join_close(&join);
	if (pid < 0) {
		sandlot__error_errno(err, clone_errno, "clone the VM's jail");
		goto fail;
	}
	vm->pid = pid;
	vm->pidfd = sys_pidfd_open(pid, 0);
	close(status_wr), status_wr = -1;
	close(sock_child), sock_child = -1;
	close(qmp_child), qmp_child = -1;
	close(sync_rd), sync_rd = -1;
	if (!added && sandlot__cgroup_add_pid(vm->cg, pid, err) < 0)
		goto fail;
	char go = 'g';
	if (write(sync_wr, &go, 1) != 1)
		goto fail_errno;
	int rc = read_jail_status(status_rd, err);
	if (rc < 0)
		goto fail;
	sandlot__trace("vm jail");
	vm->mon.fd = steal_fd(&qmp_host);
	if (incoming && sandlot__vm_restore(&vm->mon, &vm->kept, err) < 0) {
		/* QEMU says why on its stderr: the console log. */
		char tail[1600];
		console_summary(vm, tail, sizeof(tail));
		sandlot__error_wrap(err, "resume the saved vm sandbox (console: %s)", tail);
		goto fail;
	}
	if (incoming)
		sandlot__trace("vm restored");
	sb->conn_fd = steal_fd(&sock_host);
	sb->backend = vm;
	return 0;

fail_errno:
	sandlot__error_errno(err, errno, "create sandbox");
fail:
	vm_free(vm);
	return -1;
}

/* The console log's last 16 KiB, summarized for an error (vm-console.c). */
static void console_summary(const struct vm_state *vm, char *out, size_t n)
{
	snprintf(out, n, "(empty)");
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/console.log", vm->dir);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	enum { TAIL = 16384 };
	cleanup_free char *buf = malloc(TAIL);
	if (!buf)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > TAIL ? end - TAIL : 0;
	ssize_t k = pread(fd, buf, TAIL, from);
	if (k > 0)
		sandlot__vm_console_summary(buf, (size_t)k, from > 0, out, n);
}

static int vm_ended_state(const struct vm_state *vm, int *status)
{
	if (!vm || vm->pid <= 0)
		return 1;
	siginfo_t si = { 0 };
	if (waitid(P_PID, (id_t)vm->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD;
	if (si.si_pid == vm->pid && status)
		*status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
	return si.si_pid == vm->pid;
}

static int vm_ready(struct sandlot *sb, sandlot_error_t **err)
{
	struct vm_state *vm = sb->backend;
	pthread_mutex_lock(&sb->conn.lock);
	int hello = sb->conn.hello, dead = sb->conn.dead, configured = sb->conn.configured;
	pthread_mutex_unlock(&sb->conn.lock);
	/* Ready, or init refused its configuration (the connection's error
	 * says why, better than the console could). */
	if (hello == 1 && configured != 0)
		return 0;
	/* Not yet: a boot the host slowed down goes on (vm-boot.c). */
	long long cpu_ms = -1;
	if (!dead && hello >= 0 && !vm_ended_state(vm, NULL)) {
		sandlot__vm_boot_wait(sb, vm->pid, sb->ops->ready_timeout_ms, &cpu_ms);
		pthread_mutex_lock(&sb->conn.lock);
		hello = sb->conn.hello, dead = sb->conn.dead, configured = sb->conn.configured;
		pthread_mutex_unlock(&sb->conn.lock);
		if (hello == 1 && configured != 0)
			return 0;
	}
	/* The connection ends when QEMU closes its descriptors on the way
	 * out, a moment before it can be waited for: give it that moment
	 * (bounded), so that the error says it exited. */
	if (dead && vm->pidfd >= 0) {
		struct pollfd p = { .fd = vm->pidfd, .events = POLLIN };
		while (poll(&p, 1, 2000) < 0 && errno == EINTR)
			;
	}
	char tail[1600];
	int status = 0;
	int ended = vm_ended_state(vm, &status);
	console_summary(vm, tail, sizeof(tail));
	if (vm->restored && vm->vm_root && vm->template_key) {
		/* A template that does not restore is dropped: the next create
		 * boots (and a preparer makes a new one). */
		sandlot__vm_template_drop(vm->vm_root, vm->template_key);
		if (ended)
			return sandlot__error(err, EIO, "the VM stopped (QEMU exit status %d) while "
					      "restoring its template, which is dropped; console: %s",
					      status, tail);
	}
	if (ended)
		return sandlot__error(err, EIO, "the VM stopped (QEMU exit status %d) before its "
				      "sandlot-init was ready; console: %s", status, tail);
	if (hello < 0)
		return sandlot__error(err, EPROTO, "the guest's sandlot-init speaks another protocol "
				      "version; console: %s", tail);
	if (dead)
		return sandlot__error(err, EPIPE, "the VM's control port closed before its "
				      "sandlot-init was ready; console: %s", tail);
	if (cpu_ms < 0)
		return sandlot__error(err, ETIMEDOUT, "the VM did not boot; console: %s", tail);
	return sandlot__error(err, ETIMEDOUT, "the VM did not boot (QEMU had %lld.%llu s of CPU "
			      "time; a boot takes about 3 under TCG); console: %s",
			      cpu_ms / 1000, (unsigned long long)(cpu_ms % 1000) / 100, tail);
}

static void vm_kill(struct sandlot *sb)
{
	if (sb->backend)
		vm_kill_qemu(sb->backend);
}

static void vm_stop(struct sandlot *sb)
{
	const struct vm_state *vm = sb->backend;
	if (!vm || vm->pid <= 0)
		return;
	if (vm->pidfd < 0 || sys_pidfd_send_signal(vm->pidfd, SIGKILL, NULL, 0) < 0)
		kill(vm->pid, SIGKILL);
}

static int vm_ended(const struct sandlot *sb)
{
	return vm_ended_state(sb->backend, NULL);
}

static int vm_start(struct sandlot *sb, sandlot_error_t **err)
{
	return vm_boot(sb, 0, 0, err);
}

static int vm_resume(struct sandlot *sb, sandlot_error_t **err)
{
	return vm_boot(sb, 1, 0, err);
}

int sandlot__vm_launch_template(struct sandlot *sb, sandlot_error_t **err)
{
	return vm_boot(sb, 0, 1, err);
}

int sandlot__vm_take_monitor(struct sandlot *sb)
{
	struct vm_state *vm = sb->backend;
	return vm ? steal_fd(&vm->mon.fd) : -1;
}

/* The guest detaches (its files synced), with SANDLOT_PAUSE_MEMORY QEMU
 * saves it into the kept workspace, then QEMU is killed and the disk made
 * durable (vm-pause.h). */
static int vm_pause(struct sandlot *sb, unsigned flags, sandlot_error_t **err)
{
	struct vm_state *vm = sb->backend;
	if (!vm || vm->pid <= 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	if (!vm->kept.dir)
		return sandlot__error(err, EINVAL, "the sandbox has no kept workspace");
	sandlot__trace(NULL);
	int rc = sandlot__vm_pause_save(sb, &vm->mon, &vm->kept, vm->ident, flags, err);
	vm_stop(sb);
	/* Until QEMU is gone: nothing writes the disk any more.  WNOWAIT:
	 * release reaps it. */
	siginfo_t si;
	while (waitid(P_PID, (id_t)vm->pid, &si, WEXITED | WNOWAIT) < 0)
		if (errno != EINTR)
			return rc < 0 ? rc : sandlot__error_errno(err, errno, "wait for QEMU to end");
	sandlot__trace("pause: ended");
	if (rc == 0)
		rc = sandlot__vm_kept_sync_disk(&vm->kept, err);
	sandlot__trace("pause: sync");
	return rc;
}

static void vm_release(struct sandlot *sb)
{
	if (sb->backend)
		vm_free(sb->backend);
	sb->backend = NULL;
}

static int vm_usage(struct sandlot *sb, sandlot_usage_t *out, sandlot_error_t **err)
{
	struct vm_state *vm = sb->backend;
	if (!vm)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	/* QEMU's cgroup: the guest's memory as the host sees it, and QEMU's
	 * CPU time.  OOM kills and refused forks happen inside the guest and
	 * come in each command's EXIT. */
	if (sandlot__cgroup_usage(vm->cg, out, err) < 0)
		return -1;
	out->oom_kills = 0;
	out->pids_limit_hits = 0;
	return 0;
}

static pid_t vm_init_pid(const struct sandlot *sb)
{
	(void)sb;
	return 0; /* init runs in the guest */
}

static int vm_port_connect(struct sandlot *sb, uint16_t port, unsigned timeout_ms,
			   sandlot_error_t **err)
{
	const struct vm_state *vm = sb->backend;
	if (!vm || vm->pid <= 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	return sandlot__vm_net_port_connect(&vm->net, port, timeout_ms, err);
}

static int vm_netns_fd(const struct sandlot *sb)
{
	const struct vm_state *vm = sb->backend;
	return vm ? vm->net.ns_fd : -1;
}

const char *sandlot__accel(const sandlot_t *sb)
{
	if (sb->ops != &sandlot__backend_vm)
		return NULL;
	const struct vm_state *vm = sb->backend;
	return vm && vm->kvm ? "kvm" : "tcg";
}

const struct sandlot_backend_ops sandlot__backend_vm = {
	.name = "vm",
	.start = vm_start,
	.ready = vm_ready,
	.kill = vm_kill,
	.stop = vm_stop,
	.ended = vm_ended,
	.release = vm_release,
	.usage = vm_usage,
	.init_pid = vm_init_pid,
	.port_connect = vm_port_connect,
	.netns_fd = vm_netns_fd,
	.remove_leftovers = vm_remove_leftovers,
	.prepare = sandlot__vm_prepare,
	.ready_timeout_ms = BOOT_TIMEOUT_MS,
	/* Kept workspaces are disks of their own, and a pause may keep the
	 * running VM beside them (vm-pause.h). */
	.pause = vm_pause,
	.resume = vm_resume,
	.snapshot = sandlot__vm_snapshot,
	.workspace_size = sandlot__vm_workspace_size,
	.workspace_remove = sandlot__vm_workspace_remove,
	.workspace_list = sandlot__vm_workspace_list,
	.workspace_sync = sandlot__vm_workspace_sync,
};
