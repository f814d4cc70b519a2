/* Workspace storage, set-up and tear-down alone: the former design (an
 * ext4 image per sandbox, copied from a template, on its own loop device,
 * mounted) against the storage pool's (a btrfs subvolume under a quota in
 * one pool mounted once), the same operations each does per sandbox, in
 * one run.  Driven by bench/storage.py, which prints the table.
 *
 *   storage-ops DIR N
 *
 * DIR: an empty scratch directory on the data filesystem (it makes
 * DIR/tpl.img, DIR/pool.img, DIR/mnt; removes them at the end).  Prints
 * one line per measure: "name median_us p90_us" over N rounds, the
 * designs interleaved round by round so load on the machine hits both.
 *
 * Rows:
 *   image_setup      create the image file, copy the template's allocated
 *                    ranges, attach a loop device, mount ext4 (detached),
 *                    make home/ and tmp/  (the former sandlot__storage_create)
 *   image_teardown   close the mount (unmount), the loop device clears
 *                    itself, unlink; with 8 MiB written, which the unmount
 *                    writes back
 *   resv_setup       image_setup plus fallocate of the whole image: what a
 *                    per-sandbox image must do to be safe on a full host
 *   pool_setup       subvolume, quota, lock file, home/ and tmp/, detached
 *                    clone of it  (sandlot__storage_create)
 *   pool_teardown    close, delete the subvolume (8 MiB written, dropped)
 *   image_copy64     from_snapshot of a workspace holding 64 MiB, former
 *                    design: copy the image's allocated ranges
 *   pool_copy64      the same as a btrfs snapshot
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/loop.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IMG_SIZE (256ull << 20)
#define WRITE_BYTES (8u << 20)

static const char *dir;

static void die(const char *what)
{
	fprintf(stderr, "storage-ops: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static void run(const char *const argv[])
{
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		die(argv[0]);
}

static void copy_sparse(int src, int dst, uint64_t bytes)
{
	if (ftruncate(dst, (off_t)bytes) < 0)
		die("ftruncate");
	off_t off = 0;
	for (;;) {
		off_t data = lseek(src, off, SEEK_DATA);
		if (data < 0)
			return;
		off_t hole = lseek(src, data, SEEK_HOLE);
		off_t in = data, out = data;
		while (in < hole)
			if (copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0) <= 0)
				die("copy_file_range");
		off = hole;
	}
}

static int attach(int fd, char *dev, size_t n)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	for (;;) {
		int k = ioctl(ctl, LOOP_CTL_GET_FREE);
		snprintf(dev, n, "/dev/loop%d", k);
		int l = open(dev, O_RDWR | O_CLOEXEC);
		if (l < 0) {
			usleep(200);
			continue;
		}
		struct loop_config c;
		memset(&c, 0, sizeof(c));
		c.fd = (unsigned)fd;
		c.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		if (ioctl(l, LOOP_CONFIGURE, &c) == 0) {
			close(ctl);
			return l;
		}
		close(l);
		if (errno != EBUSY)
			die("LOOP_CONFIGURE");
	}
}

static void write_file(int dirfd, const char *name, size_t bytes)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	static char buf[1 << 20];
	memset(buf, 'x', sizeof(buf));
	for (size_t done = 0; done < bytes; done += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			die("write");
	close(fd);
}

/* ---- the former design ---------------------------------------------------------- */

struct image {
	char path[512];
	int mount_fd;
};

static void image_setup(struct image *im, int n, int reserve)
{
	char tpl[512];
	snprintf(tpl, sizeof(tpl), "%s/tpl.img", dir);
	snprintf(im->path, sizeof(im->path), "%s/img-%d", dir, n);
	int src = open(tpl, O_RDONLY | O_CLOEXEC);
	int fd = open(im->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (src < 0 || fd < 0)
		die("open image");
	if (reserve && fallocate(fd, 0, 0, (off_t)IMG_SIZE) < 0)
		die("fallocate");
	copy_sparse(src, fd, IMG_SIZE);
	close(src);
	char dev[64];
	int l = attach(fd, dev, sizeof(dev));
	close(fd);
	int fs = fsopen("ext4", FSOPEN_CLOEXEC);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		die("mount ext4");
	im->mount_fd = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	close(fs);
	close(l);
	mkdirat(im->mount_fd, "home", 0755);
	mkdirat(im->mount_fd, "tmp", 01777);
}

static void image_teardown(struct image *im)
{
	close(im->mount_fd); /* the last reference: unmount, loop device clears */
	unlink(im->path);
}

/* ---- the pool ---------------------------------------------------------------------- */

struct ws {
	char name[64];
	int mount_fd, lock_fd;
};

static int pool_ws_dir;

static void pool_setup(struct ws *w, int n)
{
	snprintf(w->name, sizeof(w->name), "ws-%d", n);
	struct btrfs_ioctl_vol_args va;
	memset(&va, 0, sizeof(va));
	snprintf(va.name, sizeof(va.name), "%s", w->name);
	if (ioctl(pool_ws_dir, BTRFS_IOC_SUBVOL_CREATE, &va) < 0)
		die("subvolume create");
	int fd = openat(pool_ws_dir, w->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_qgroup_limit_args l;
	memset(&l, 0, sizeof(l));
	l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	l.lim.max_rfer = IMG_SIZE;
	if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l) < 0)
		die("qgroup limit");
	w->lock_fd = openat(fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	flock(w->lock_fd, LOCK_EX);
	mkdirat(fd, "home", 0755);
	if (fchownat(fd, "home", 1000, 1000, 0) < 0)
		die("chown home");
	mkdirat(fd, "tmp", 01777);
	w->mount_fd = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	struct mount_attr a = { .attr_clr = MOUNT_ATTR_NOEXEC };
	if (w->mount_fd < 0 || mount_setattr(w->mount_fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
		die("open_tree");
	close(fd);
}

static void pool_teardown(struct ws *w)
{
	close(w->mount_fd);
	close(w->lock_fd);
	struct btrfs_ioctl_vol_args va;
	memset(&va, 0, sizeof(va));
	snprintf(va.name, sizeof(va.name), "%s", w->name);
	if (ioctl(pool_ws_dir, BTRFS_IOC_SNAP_DESTROY, &va) < 0)
		die("subvolume delete");
}

/* ---- statistics ---------------------------------------------------------------------- */

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *name, uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	printf("%s %llu %llu\n", name, (unsigned long long)v[n / 2],
	       (unsigned long long)v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1]);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: storage-ops DIR N\n");
		return 2;
	}
	dir = argv[1];
	int n = atoi(argv[2]);
	if (n < 1)
		n = 1;
	char tpl[512], pool[512], mnt[512];
	snprintf(tpl, sizeof(tpl), "%s/tpl.img", dir);
	snprintf(pool, sizeof(pool), "%s/pool.img", dir);
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);

	/* The former template, made as sandlot made it. */
	int t = open(tpl, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (t < 0 || ftruncate(t, (off_t)IMG_SIZE) < 0)
		die("template");
	close(t);
	const char *mk4[] = { "/usr/sbin/mkfs.ext4", "-q", "-F", "-t", "ext4", "-O",
			      "^has_journal,^resize_inode", "-m", "0", "-i", "8192", "-E",
			      "lazy_itable_init=1,nodiscard", tpl, NULL };
	run(mk4);
	/* The pool, as sandlot makes it (2 GiB: every round's quota fits). */
	int p = open(pool, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (p < 0 || fallocate(p, 0, 0, 2ll << 30) < 0)
		die("pool");
	const char *mkb[] = { "/usr/sbin/mkfs.btrfs", "-q", "-f", pool, NULL };
	run(mkb);
	char dev[64];
	int l = attach(p, dev, sizeof(dev));
	close(p);
	mkdir(mnt, 0700);
	int fs = fsopen("btrfs", FSOPEN_CLOEXEC);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "nodiscard", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		die("mount btrfs");
	int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	close(l);
	int root = openat(m, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_quota_ctl_args q = { .cmd = BTRFS_QUOTA_CTL_ENABLE };
	if (ioctl(root, BTRFS_IOC_QUOTA_CTL, &q) < 0)
		die("quota enable");
	mkdirat(root, "ws", 0700);
	pool_ws_dir = openat(root, "ws", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	uint64_t *v[7];
	for (int i = 0; i < 7; i++)
		v[i] = calloc((size_t)n, sizeof(uint64_t));
	for (int i = 0; i < n; i++) {
		struct image im;
		struct ws w;
		uint64_t t0 = now_us();
		image_setup(&im, i, 0);
		uint64_t t1 = now_us();
		write_file(im.mount_fd, "home/data", WRITE_BYTES);
		uint64_t t2 = now_us();
		image_teardown(&im);
		uint64_t t3 = now_us();
		v[0][i] = t1 - t0, v[1][i] = t3 - t2;

		t0 = now_us();
		image_setup(&im, i, 1);
		t1 = now_us();
		image_teardown(&im);
		v[2][i] = t1 - t0;

		t0 = now_us();
		pool_setup(&w, i);
		t1 = now_us();
		write_file(w.mount_fd, "home/data", WRITE_BYTES);
		t2 = now_us();
		pool_teardown(&w);
		t3 = now_us();
		v[3][i] = t1 - t0, v[4][i] = t3 - t2;
	}
	/* from_snapshot of a workspace holding 64 MiB (fewer rounds: each
	 * copy of the former design writes 64 MiB). */
	int nc = n < 10 ? n : 10;
	struct image src;
	image_setup(&src, 1000000, 0);
	write_file(src.mount_fd, "home/data", 64u << 20);
	close(src.mount_fd); /* unmounted: as a paused sandbox's image */
	struct ws wsrc;
	pool_setup(&wsrc, 1000000);
	write_file(wsrc.mount_fd, "home/data", 64u << 20);
	syncfs(root);
	for (int i = 0; i < nc; i++) {
		char dst[600];
		snprintf(dst, sizeof(dst), "%s/copy-%d", dir, i);
		uint64_t t0 = now_us();
		int a = open(src.path, O_RDONLY | O_CLOEXEC);
		int b = open(dst, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		copy_sparse(a, b, IMG_SIZE);
		close(a);
		close(b);
		uint64_t t1 = now_us();
		unlink(dst);
		v[5][i] = t1 - t0;

		int wfd = openat(pool_ws_dir, wsrc.name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct btrfs_ioctl_vol_args_v2 va;
		memset(&va, 0, sizeof(va));
		va.fd = wfd;
		snprintf(va.name, sizeof(va.name), "snap-%d", i);
		t0 = now_us();
		if (ioctl(pool_ws_dir, BTRFS_IOC_SNAP_CREATE_V2, &va) < 0)
			die("snapshot");
		t1 = now_us();
		close(wfd);
		v[6][i] = t1 - t0;
		struct btrfs_ioctl_vol_args d;
		memset(&d, 0, sizeof(d));
		snprintf(d.name, sizeof(d.name), "snap-%d", i);
		ioctl(pool_ws_dir, BTRFS_IOC_SNAP_DESTROY, &d);
	}
	unlink(src.path);
	pool_teardown(&wsrc);

	report("image_setup", v[0], n);
	report("image_teardown", v[1], n);
	report("resv_setup", v[2], n);
	report("pool_setup", v[3], n);
	report("pool_teardown", v[4], n);
	report("image_copy64", v[5], nc);
	report("pool_copy64", v[6], nc);

	close(pool_ws_dir);
	close(root);
	close(m); /* unmounts the pool; its loop device clears itself */
	unlink(tpl);
	unlink(pool);
	rmdir(mnt);
	return 0;
}
