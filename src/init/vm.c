/* sandlot-init as PID 1 of a microVM (the vm backend, docs/vm.md).
 *
 * The kernel starts /init from the initramfs (scripts/vm-build.sh) with no
 * arguments and nothing open but, maybe, the console.  Before the ordinary
 * setup and loop can run, the guest's devices must be made and turned into
 * what the ns backend's host would hand init:
 *
 *   1. devtmpfs, proc and sysfs; the modules of /modules, in the order
 *      of their names (dependencies first), with finit_module:
 *      virtio-mmio finds the devices through microvm's ACPI tables, then
 *      virtio-blk, virtio-console, virtio-rng and erofs;
 *   2. wait, woken by the kernel's uevents, until hvc0 is the kernel's
 *      console: from then on what init says reaches the host's console
 *      file; the kernel command line must say sandlot.vm=1 (anything
 *      else is not a sandlot VM: refuse to run);
 *   3. the disks BY SERIAL (/sys/block/vd* /serial: "root" is the image's
 *      erofs, "work" the ext4 workspace; never by vdX order), and, once it
 *      is there, the control port by NAME (/sys/class/virtio-ports/vport*
 *      /name is org.sandlot.ctl; there is no udev to make
 *      /dev/virtio-ports links);
 *   4. leave the initramfs: pivot_root cannot move away from the kernel's
 *      rootfs, so a small tmpfs becomes the root the way switch_root
 *      does it (MS_MOVE onto /, chroot), with /dev, /proc and /sys moved
 *      into it; the initramfs's files are deleted first (memory);
 *   5. the mounts init_setup() takes from the ns host, as detached mounts
 *      made here: the image (erofs, read-only) on INIT_FD_IMAGE, and, only
 *      once CONFIG came (init_vm_configure(): a VM restored from a
 *      template has a disk of its own from then on), the workspace (ext4)
 *      on INIT_FD_STORAGE, with its home/ and tmp/ made if the disk is
 *      fresh; CONFIG's CLOCK and SEED set the clock and reseed the
 *      random generator first; the control port on INIT_FD_PROTO; the kernel log on
 *      stdout and stderr, so that what init logs lands on the console,
 *      which the host keeps;
 *   6. a cgroup for the guest's processes (sandbox_cgroup()), loopback
 *      up, and wait until the host has connected to the port.
 *
 * init_setup() then builds the same root as for an ns sandbox from the
 * image, the same /home/user and /tmp from the workspace, and pivots into
 * it: commands see the same tree, user and limits as in an ns sandbox.
 *
 * The control port while the host is not connected: read() returns 0 and
 * poll() says POLLHUP (Linux's virtio_console), writes block or return
 * EAGAIN.  That is not the host going away for good (it may be restarting,
 * or restoring a saved VM): init waits.  The port is O_ASYNC, so the
 * kernel sends SIGIO whenever the host connects or disconnects; the loop
 * waits for it on its signalfd (init__vm_host_away()).
 */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/random.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "linux/syscalls.h"

#ifndef BLKFLSBUF
#define BLKFLSBUF _IO(0x12, 97)
#endif


/* The root the guest switches to out of the initramfs (step 4). */
#define VM_ROOT "/vm"
/* How long the devices may take to appear after their modules loaded
 * (under TCG they take tens of milliseconds; this only bounds a broken VM). */
#define VM_DEVICE_WAIT_MS 30000
#define VM_PORT_NAME "org.sandlot.ctl"
/* The cgroup of the guest's processes (sandbox_cgroup()). */
#define VM_CGROUP "/sys/fs/cgroup/sandbox"

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A fatal message on the console: through the kernel log at "critical",
 * which the kernel prints on hvc0 itself even with `quiet` (and
 * synchronously, so that it is there before the VM stops), or on stderr
 * before devtmpfs is there. */
static void say(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* One write: each write to /dev/kmsg is one record (musl's dprintf
	 * writes in pieces of 80 bytes). */
	char line[600];
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
	int n = snprintf(line, sizeof(line), "%ssandlot-init: %s\n", fd >= 0 ? "<2>" : "", msg);
	if (n > (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 1;
	if (write(fd >= 0 ? fd : 2, line, (size_t)n) < 0) {
		/* nowhere else to say it */
	}
	if (fd >= 0)
		close(fd);
}

/* Whether the kernel prints its log on hvc0 yet (/proc/consoles).  Its
 * device node comes first: virtio-console makes hvc's nodes, then
 * registers the console; a VM that stopped in between would say
 * nothing at all. */
static int console_registered(void)
{
	char buf[1024];
	cleanup_close int fd = open("/proc/consoles", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strncmp(buf, "hvc0 ", 5) == 0 || strstr(buf, "\nhvc0 ") != NULL;
}

#define FAIL(...)                                  \
	do {                                       \
		int e_ = errno;                    \
		char m_[400];                      \
		snprintf(m_, sizeof(m_), __VA_ARGS__); \
		say("%s: %s", m_, init__strerror(e_)); \
		errno = e_;                        \
		return -1;                         \
	} while (0)

int init_vm_guest(int argc)
{
	/* The kernel runs /init with no arguments and, unlike the ns host,
	 * without the protocol connection open on INIT_FD_PROTO. */
	return getpid() == 1 && argc == 1 && fcntl(INIT_FD_PROTO, F_GETFD) < 0 && errno == EBADF;
}

static int mount_kernel_fs(void)
{
	static const struct {
		const char *dir, *type;
		unsigned long flags;
	} fs[] = {
		{ "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC },
		{ "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC },
		{ "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC },
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(fs); i++) {
		if (mkdir(fs[i].dir, 0755) < 0 && errno != EEXIST)
			FAIL("mkdir %s", fs[i].dir);
		if (mount(fs[i].type, fs[i].dir, fs[i].type, fs[i].flags, NULL) < 0)
			FAIL("mount %s on %s", fs[i].type, fs[i].dir);
	}
	return 0;
}

/* Whether the kernel command line holds the word `word`. */
static int cmdline_has(const char *word)
{
	char buf[4096];
	cleanup_close int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	size_t wl = strlen(word);
	for (char *p = buf; (p = strstr(p, word)); p += wl)
		if ((p == buf || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\n' || !p[wl]))
			return 1;
	return 0;
}

static int is_module_name(const struct dirent *de)
{
	size_t n = strlen(de->d_name);
	return n > 3 && strcmp(de->d_name + n - 3, ".ko") == 0;
}

/* Load /modules/ *.ko in name order, deleting each (the initramfs is memory). */
static int load_modules(void)
{
	struct dirent **names;
	int n = scandir("/modules", &names, is_module_name, alphasort);
	if (n < 0)
		FAIL("read /modules of the initramfs");
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char path[300];
		snprintf(path, sizeof(path), "/modules/%s", names[i]->d_name);
		if (rc == 0) {
			cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0 || (sys_finit_module(fd, "", 0) < 0 && errno != EEXIST)) {
				int e = errno;
				say("load module %s: %s", names[i]->d_name, init__strerror(e));
				rc = -1;
			}
		}
		unlink(path);
		free(names[i]);
	}
	free(names);
	return rc;
}

/* Read a small sysfs attribute into buf without its final newline; -1 if
 * it cannot be read. */
static int read_attr(const char *path, char *buf, size_t len)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	if (n < 0)
		return -1;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return 0;
}

struct devices {
	char root[32], work[32], port[32]; /* names in /dev, "" until found */
	int console;                        /* hvc0 is there, the kernel's console */
};

/* The entries of a sysfs directory whose attribute `attr` reads `want`:
 * the first one's name into out. */
static void find_by_attr(const char *dir, const char *prefix, const char *attr, const char *want,
			 char *out, size_t len)
{
	cleanup_closedir DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 || strlen(de->d_name) >= len)
			continue;
		char path[512], val[128];
		snprintf(path, sizeof(path), "%s/%s/%s", dir, de->d_name, attr);
		if (read_attr(path, val, sizeof(val)) == 0 && strcmp(val, want) == 0) {
			snprintf(out, len, "%s", de->d_name);
			return;
		}
	}
}

/* Whether every device is there (only the console when console_only). */
static int devices_scan(struct devices *dv, int console_only)
{
	if (!dv->root[0])
		find_by_attr("/sys/block", "vd", "serial", "root", dv->root, sizeof(dv->root));
	if (!dv->work[0])
		find_by_attr("/sys/block", "vd", "serial", "work", dv->work, sizeof(dv->work));
	if (!dv->port[0])
		find_by_attr("/sys/class/virtio-ports", "vport", "name", VM_PORT_NAME, dv->port,
			     sizeof(dv->port));
	/* devtmpfs makes the nodes as the devices register: a device is there
	 * once its node is. */
	char node[64];
	const char *names[] = { dv->root, dv->work, dv->port, "hvc0" };
	int all = 1;
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(names); i++) {
		snprintf(node, sizeof(node), "/dev/%s", names[i]);
		if (!names[i][0] || access(node, F_OK) < 0)
			all = 0;
		else if (i == 3)
			dv->console = console_registered();
	}
	return console_only ? dv->console : all;
}

/* The disks are there once their modules are loaded: virtio-blk probes the
 * devices virtio-mmio found as it registers, before finit_module returns.
 * A missing one is a host's mistake, said at once. */
static int disks_find(struct devices *dv)
{
	devices_scan(dv, 0);
	if (dv->root[0] && dv->work[0])
		return 0;
	errno = ENODEV;
	FAIL("no disk with serial \"%s\" (%s)", dv->root[0] ? "work" : "root",
	     dv->root[0] ? "the workspace" : "the image");
}

/* Wait until every device is there (the console and the control port come
 * after their modules, once the host has described the ports); each kernel
 * uevent (the socket was opened before the modules were loaded, so none is
 * missed) is a cue to look again.  The events' contents are not read: sysfs is the truth. */
static int devices_wait(int uev, struct devices *dv, int console_only)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!devices_scan(dv, console_only)) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long waited = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (waited >= VM_DEVICE_WAIT_MS) {
			errno = ETIMEDOUT;
			FAIL("devices missing after %d s:%s%s%s%s", VM_DEVICE_WAIT_MS / 1000,
			     dv->root[0] ? "" : " disk with serial \"root\" (the image),",
			     dv->work[0] ? "" : " disk with serial \"work\" (the workspace),",
			     dv->port[0] ? "" : " virtio-serial port " VM_PORT_NAME ",",
			     dv->console ? "" : " console hvc0,");
		}
		/* No uevent says that the console was registered once its node
		 * is there: look again every 10 ms meanwhile. */
		int timeout = (int)(VM_DEVICE_WAIT_MS - waited);
		if (!dv->console && access("/dev/hvc0", F_OK) == 0 && timeout > 10)
			timeout = 10;
		struct pollfd p = { .fd = uev, .events = POLLIN };
		int r = poll(&p, 1, timeout);
		if (r < 0 && errno != EINTR)
			FAIL("wait for devices");
		char drain[8192];
		while (recv(uev, drain, sizeof(drain), MSG_DONTWAIT) > 0)
			;
	}
	return 0;
}

static int uevent_socket(void)
{
	int s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT);
	if (s < 0)
		FAIL("uevent socket");
	struct sockaddr_nl a = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(s);
		errno = e;
		FAIL("bind the uevent socket");
	}
	return s;
}

/* 0 from /dev/null, 1 and 2 to the kernel log: what init logs reaches the
 * host's console file.  Not hvc0 itself: a write there may still be in
 * flight when the VM stops, while the kernel prints its log on the console
 * synchronously. */
static int std_fds(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	int con = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
	if (null < 0 || con < 0)
		FAIL("open the console");
	if (dup2(null, 0) < 0 || dup2(con, 1) < 0 || dup2(con, 2) < 0)
		FAIL("console on 0-2");
	if (null > 2)
		close(null);
	if (con > 2)
		close(con);
	return 0;
}

/* Delete what is left of the initramfs (only /init, empty /modules and the
 * mount points): its pages are freed once nothing refers to them. */
static void free_initramfs(void)
{
	unlink("/init");
	rmdir("/modules");
}

/* Step 4: a tmpfs becomes the root, with /dev, /proc and /sys moved into it. */
static int switch_root(void)
{
	static const char *const moved[] = { "/dev", "/proc", "/sys" };
	if (mkdir(VM_ROOT, 0755) < 0 && errno != EEXIST)
		FAIL("mkdir %s", VM_ROOT);
	if (mount("tmpfs", VM_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=0755") < 0)
		FAIL("mount the root tmpfs");
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(moved); i++) {
		char dst[64];
		snprintf(dst, sizeof(dst), VM_ROOT "%s", moved[i]);
		if (mkdir(dst, 0755) < 0 || mount(moved[i], dst, NULL, MS_MOVE, NULL) < 0)
			FAIL("move %s", moved[i]);
	}
	/* init_setup() mounts the sandbox's root on /tmp and its workspace's
	 * staging mount on /tmp/run (setup.c's NEWROOT and STORAGE). */
	if (mkdir(VM_ROOT "/tmp", 0755) < 0)
		FAIL("mkdir /tmp");
	free_initramfs();
	if (chdir(VM_ROOT) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0)
		FAIL("switch to the root tmpfs");
	return 0;
}

/* A detached mount of the block device /dev/dev, of type type. */
static int mount_disk(const char *type, const char *dev, int rdonly)
{
	char src[64];
	snprintf(src, sizeof(src), "/dev/%s", dev);
	cleanup_close int fs = sys_fsopen(type, FSOPEN_CLOEXEC);
	if (fs < 0)
		FAIL("%s filesystem", type);
	if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", src, 0) < 0 ||
	    (rdonly && sys_fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0) ||
	    sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		FAIL("mount %s as %s", src, type);
	unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (rdonly ? MOUNT_ATTR_RDONLY : 0);
	int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	if (m < 0)
		FAIL("mount %s as %s", src, type);
	return m;
}

/* The workspace disk's home/ (the sandbox user's) and tmp/, as the ns
 * host's storage has them; made on a fresh disk.  0 or an errno value. */
static int workspace_dirs(int m, const struct init_config *cfg, char *why, size_t len)
{
	const char *what = NULL;
	if (mkdirat(m, "home", 0755) == 0) {
		if (fchownat(m, "home", cfg->uid, cfg->gid, 0) < 0)
			what = "chown home";
	} else if (errno != EEXIST) {
		what = "mkdir home";
	}
	if (!what && mkdirat(m, "tmp", 01777) == 0) {
		if (fchmodat(m, "tmp", 01777, 0) < 0)
			what = "chmod tmp";
	} else if (!what && errno != EEXIST) {
		what = "mkdir tmp";
	}
	if (!what)
		return 0;
	int e = errno;
	snprintf(why, len, "the workspace disk: %s", what);
	return e;
}

/* The workspace disk's name in /dev: found at boot, mounted only once
 * CONFIG came (a VM restored from a template gets its own fresh disk in
 * place of its template's, docs/vm.md "Fast creates"). */
static char work_dev[32];

static int place(int fd, int to, const char *what);

/* The workspace disk as a detached mount on INIT_FD_STORAGE.  0 or an
 * errno value with why. */
static int mount_workspace(char *why, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/dev/%s", work_dev);
	/* The kernel's partition scan at boot read the disk's first blocks
	 * into its cache; in a VM restored from a template they are the
	 * template's disk's.  The disks are copies of one empty filesystem,
	 * but nothing read before this one was attached may be trusted:
	 * drop the cache first. */
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, BLKFLSBUF, 0) < 0) {
		int e = errno;
		snprintf(why, len, "flush the cache of the workspace disk %s", path);
		return e;
	}
	int m = mount_disk("ext4", work_dev, 0);
	if (m < 0 || place(m, INIT_FD_STORAGE, "the workspace") < 0) {
		int e = errno ? errno : EIO;
		snprintf(why, len, "mount the workspace disk %s as ext4", path);
		return e;
	}
	return 0;
}

int init_vm_clock_and_seed(const struct init_config *cfg, char *why, size_t len)
{
	if (cfg->time_ns) {
		struct timespec ts = { .tv_sec = (time_t)(cfg->time_ns / 1000000000u),
				       .tv_nsec = (long)(cfg->time_ns % 1000000000u) };
		if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
			snprintf(why, len, "set the clock from CONFIG's TIME");
			return errno;
		}
	}
	if (cfg->seed_len) {
		/* Credited entropy (init is the guest's root), then a reseed of
		 * the kernel's CRNG now rather than at its next interval: what
		 * the guest draws after this differs from what a copy of the
		 * same saved state draws. */
		struct {
			struct rand_pool_info info;
			uint8_t bytes[sizeof(cfg->seed)];
		} p;
		p.info.entropy_count = (int)(cfg->seed_len * 8);
		p.info.buf_size = (int)cfg->seed_len;
		memcpy(p.bytes, cfg->seed, cfg->seed_len);
		cleanup_close int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
		int rc = fd < 0 ? -1 : ioctl(fd, RNDADDENTROPY, &p);
		if (rc == 0)
			rc = ioctl(fd, RNDRESEEDCRNG);
		explicit_bzero(&p, sizeof(p));
		if (rc < 0) {
			snprintf(why, len, "seed the guest's random number generator from CONFIG's SEED");
			return errno;
		}
	}
	return 0;
}

int init_vm_configure(const struct init_config *cfg, char *why, size_t len)
{
	int e = init_vm_clock_and_seed(cfg, why, len);
	if (e)
		return e;
	if (!cfg->image) {
		snprintf(why, len, "a vm sandbox's root is its image: CONFIG must have the IMAGE flag");
		return EINVAL;
	}
	if (cfg->pids) {
		char n[32];
		int l = snprintf(n, sizeof(n), "%llu", (unsigned long long)cfg->pids);
		cleanup_close int fd = open(VM_CGROUP "/pids.max", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, n, (size_t)l) != l) {
			snprintf(why, len, "set the pids limit");
			return errno;
		}
	}
	e = init_vm_net(cfg, why, len);
	if (e)
		return e;
	if (cfg->tmpfs_storage)
		return 0; /* init makes a tmpfs; the disk stays unused */
	e = mount_workspace(why, len);
	if (e)
		return e;
	return workspace_dirs(INIT_FD_STORAGE, cfg, why, len);
}

/* fd moved to exactly `to` (left open without close-on-exec: init never
 * execs, commands close everything). */
static int place(int fd, int to, const char *what)
{
	if (fd == to)
		return 0;
	if (dup2(fd, to) < 0)
		FAIL("%s on fd %d", what, to);
	close(fd);
	return 0;
}

/* The guest's processes, init's and the commands', in a cgroup of their
 * own, as in an ns sandbox: its memory.events and pids.events count OOM
 * kills (by any OOM killer: the guest's memory is the limit) and refused
 * forks for EXIT (events.c, on INIT_FD_OOM_EVENTS and INIT_FD_PIDS_EVENTS),
 * and CONFIG's PIDS becomes its pids.max (init_vm_configure()). */
/* What the guest's processes may use: memory.max of their cgroup, the
 * memory available when init starts (the kernel's own is taken already)
 * less a reserve for the kernel's and init's growth, 1/16 of the total and
 * at least 16 MiB.  At the limit the cgroup's OOM killer acts at once,
 * on the command.  Without it a guest out of memory first evicts the page
 * cache it runs from and can crawl for minutes under TCG before the
 * kernel's global OOM killer acts (seen with two processes filling 150 MiB
 * each in a 256 MiB guest).  0 when there is too little to divide. */
static unsigned long long guest_memory_limit(void)
{
	unsigned long long total = 0, avail = 0, kb;
	cleanup_fclose FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			total = kb * 1024;
		else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			avail = kb * 1024;
	}
	unsigned long long reserve = total / 16;
	if (reserve < (16ULL << 20))
		reserve = 16ULL << 20;
	return avail > 2 * reserve ? avail - reserve : 0;
}

static int sandbox_cgroup(void)
{
	if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		FAIL("mount cgroup2");
	cleanup_close int ctl = open("/sys/fs/cgroup/cgroup.subtree_control", O_WRONLY | O_CLOEXEC);
	if (ctl < 0 || write(ctl, "+memory +pids", 13) != 13)
		FAIL("enable the memory and pids controllers");
	if (mkdir(VM_CGROUP, 0755) < 0)
		FAIL("mkdir %s", VM_CGROUP);
	unsigned long long limit = guest_memory_limit();
	if (limit) {
		char n[32];
		int l = snprintf(n, sizeof(n), "%llu", limit);
		cleanup_close int max = open(VM_CGROUP "/memory.max", O_WRONLY | O_CLOEXEC);
		if (max < 0 || write(max, n, (size_t)l) != l)
			FAIL("set %s/memory.max", VM_CGROUP);
	}
	/* Allocations as on the host: the kernel's default heuristic refuses
	 * one larger than the machine's memory, which for a guest is the
	 * sandbox's limit, so `bytearray(300 << 20)` in a 256M vm sandbox
	 * failed with MemoryError where an ns sandbox's command is OOM-killed
	 * (and says so) once it touches more than its limit.  Always
	 * overcommitting leaves the limit to the cgroup, as on the host. */
	cleanup_close int oc = open("/proc/sys/vm/overcommit_memory", O_WRONLY | O_CLOEXEC);
	if (oc < 0 || write(oc, "1", 1) != 1)
		FAIL("set vm.overcommit_memory");
	cleanup_close int procs = open(VM_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC);
	if (procs < 0 || write(procs, "1", 1) != 1)
		FAIL("move init into %s", VM_CGROUP);
	int oom = open(VM_CGROUP "/memory.events", O_RDONLY | O_CLOEXEC);
	if (oom < 0 || place(oom, INIT_FD_OOM_EVENTS, "memory.events") < 0)
		FAIL("open %s/memory.events", VM_CGROUP);
	int pids = open(VM_CGROUP "/pids.events", O_RDONLY | O_CLOEXEC);
	if (pids < 0 || place(pids, INIT_FD_PIDS_EVENTS, "pids.events") < 0)
		FAIL("open %s/pids.events", VM_CGROUP);
	return 0;
}

static int loopback_up(void)
{
	cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		FAIL("loopback");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		FAIL("bring loopback up");
	return 0;
}

int init__vm_host_away(int fd)
{
	if (!init__vm_mode)
		return 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
}

/* The control port, O_ASYNC: SIGIO (blocked, so that it waits for a
 * signalfd or sigwaitinfo) whenever the host connects or disconnects. */
static int open_port(const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "/dev/%s", name);
	sigset_t io;
	sigemptyset(&io);
	sigaddset(&io, SIGIO);
	if (sigprocmask(SIG_BLOCK, &io, NULL) < 0)
		FAIL("block SIGIO");
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		FAIL("open the control port %s (%s)", path, VM_PORT_NAME);
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETOWN, getpid()) < 0 || fcntl(fd, F_SETFL, fl | O_ASYNC) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		FAIL("watch the control port");
	}
	return fd;
}

/* Until the host has connected: configuration comes from it first. */
static int wait_for_host(int fd)
{
	sigset_t io;
	sigemptyset(&io);
	sigaddset(&io, SIGIO);
	while (init__vm_host_away(fd)) {
		/* A connection made between the check and here left SIGIO
		 * pending: sigwaitinfo returns at once. */
		if (sigwaitinfo(&io, NULL) < 0 && errno != EINTR)
			FAIL("wait for the host");
	}
	return 0;
}

int init_vm_boot(void)
{
	init__vm_mode = 1;
	struct devices dv;
	memset(&dv, 0, sizeof(dv));
	if (mount_kernel_fs() < 0)
		return -1;
	/* Warnings and worse reach the console from now on: what init logs
	 * (stderr, below) is written there at the default level, 4. */
	klogctl(8 /* SYSLOG_ACTION_CONSOLE_LEVEL */, NULL, 5);
	/* The console first: until hvc0 is there, nothing said reaches the
	 * host, and a VM that stops before it says nothing at all. */
	cleanup_close int uev = uevent_socket();
	if (uev < 0 || load_modules() < 0 || devices_wait(uev, &dv, 1) < 0 || std_fds() < 0)
		return -1;
	if (!cmdline_has("sandlot.vm=1")) {
		errno = EINVAL;
		FAIL("started as /init without sandlot.vm=1 on the kernel command line");
	}
	if (disks_find(&dv) < 0 || devices_wait(uev, &dv, 0) < 0)
		return -1;
	if (switch_root() < 0)
		return -1;

	int image = mount_disk("erofs", dv.root, 1);
	if (image < 0 || place(image, INIT_FD_IMAGE, "the image") < 0)
		return -1;
	/* The workspace disk waits for CONFIG (init_vm_configure()). */
	snprintf(work_dev, sizeof(work_dev), "%s", dv.work);
	if (sandbox_cgroup() < 0 || loopback_up() < 0)
		return -1;
	int port = open_port(dv.port);
	if (port < 0 || place(port, INIT_FD_PROTO, "the control port") < 0)
		return -1;
	return wait_for_host(INIT_FD_PROTO);
}
