/* Templates: fast cold creates of vm sandboxes (docs/vm.md, "Fast creates").
 *
 * Booting a guest kernel under TCG takes seconds.  A template is a guest
 * booted once, up to the point where its sandlot-init has said HELLO and
 * waits for CONFIG, and saved there (QEMU's migration to a file through an
 * fd: vm-qmp.c's sandlot__qmp_save()).  A cold create of the same machine
 * starts QEMU with the same devices plus `-incoming fd:5` on that file
 * (vm.c): QEMU loads the state and the guest runs on from where it was
 * saved, with what is its own from then on:
 *
 *   - a new control connection: the jail's fd 3 is a fresh socketpair; the
 *     guest's init still waits for its first frame, so the host sends
 *     CONFIG and counts the template's HELLO as read (its version was
 *     checked when the template was made: hello_before);
 *   - a fresh workspace disk: the guest mounts it only once CONFIG came
 *     (src/init/vm.c), after dropping the blocks its kernel cached from the
 *     template's disk;
 *   - its own clock and random state: CONFIG's CLOCK and SEED, which init
 *     applies (clock_settime, RNDADDENTROPY + RNDRESEEDCRNG) before any
 *     command runs.  Every copy of a template would otherwise share the
 *     kernel's random generator state and the template's time.
 *
 * A template matches a machine, not a sandbox: its key (the identities of
 * the guest kernel, the initramfs with sandlot-init in it, the root image
 * and QEMU's program, and the memory, vCPUs, disk size and accelerator) is
 * kept beside the state, and a template whose key differs from what a
 * create computes is not used: rebuilding the kernel, the initramfs or the
 * image, or upgrading QEMU, invalidates it.  Files, under <data_dir>/vm/
 * templates/: <hash>.state and <hash>.key, hash being FNV-1a of the key
 * (the key itself is compared), each written to a temporary name and
 * renamed, the state first.
 *
 * Templates are made by sandlot_prepare() (a background thread) for the
 * likely options: sandlotd does it at start when vm sandboxes are its
 * default or pooled.  A template is made by a VM started like any vm
 * sandbox (an id, jail, cgroup and files of its own: the same leftover
 * handling), through the QMP monitor every vm sandbox has (vm-pause.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "backend/vm.h"
#include "backend/vm-qmp.h"
#include "common/cleanup.h"
#include "common/proto.h"
#include "common/util.h"
#include "core/images.h"
#include "core/internal.h"
#include "core/private.h"

#define QEMU_PATH "/usr/bin/qemu-system-x86_64"
/* Bounds of a template's making: the boot (as a create's, doubled for a
 * loaded host: nobody waits on it), the monitor, the save. */
#define TEMPLATE_BOOT_MS 90000
#define TEMPLATE_QMP_MS 10000
#define TEMPLATE_SAVE_MS 120000

/* "path dev:ino size mtime" of path into out; -1 (errno) if it cannot be
 * looked at. */
static int identity(const char *path, char *out, size_t n)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -1;
	snprintf(out, n, "%s %llu:%llu %lld %lld.%09ld", path, (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec);
	return 0;
}

int sandlot__vm_template_key(const char *vmlinux, const char *initrd, const char *root,
			     uint64_t memory, unsigned cpus, uint64_t disk, int kvm, char *out,
			     size_t n)
{
	char k[PATH_MAX + 128], i[PATH_MAX + 128], r[PATH_MAX + 128], q[PATH_MAX + 128];
	if (identity(vmlinux, k, sizeof(k)) < 0 || identity(initrd, i, sizeof(i)) < 0 ||
	    identity(root, r, sizeof(r)) < 0 || identity(QEMU_PATH, q, sizeof(q)) < 0)
		return -1;
	int len = snprintf(out, n,
			   "sandlot vm template 1\nprotocol %u\nkernel %s\ninitramfs %s\nroot %s\n"
			   "qemu %s\nmemory %llu\ncpus %u\ndisk %llu\naccel %s\n",
			   (unsigned)SANDLOT_PROTO_VERSION, k, i, r, q, (unsigned long long)memory,
			   cpus, (unsigned long long)disk, kvm ? "kvm" : "tcg");
	if (len < 0 || (size_t)len >= n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* <vm_root>/templates/<hash of key><suffix>. */
static void template_path(const char *vm_root, const char *key, const char *suffix, char *out,
			  size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
		h ^= *p;
		h *= 1099511628211ull;
	}
	snprintf(out, n, "%s/templates/%016" PRIx64 "%s", vm_root, h, suffix);
}

int sandlot__vm_template_open(const char *vm_root, const char *key)
{
	char path[PATH_MAX + 64];
	template_path(vm_root, key, ".key", path, sizeof(path));
	cleanup_free char *have = sandlot__read_file(path, SANDLOT_VM_TEMPLATE_KEY_MAX);
	if (!have || strcmp(have, key) != 0)
		return -1;
	template_path(vm_root, key, ".state", path, sizeof(path));
	return open(path, O_RDONLY | O_CLOEXEC);
}

void sandlot__vm_template_drop(const char *vm_root, const char *key)
{
	char path[PATH_MAX + 64];
	template_path(vm_root, key, ".key", path, sizeof(path));
	unlink(path);
	template_path(vm_root, key, ".state", path, sizeof(path));
	unlink(path);
}

/* Read init's HELLO from the template's control connection (nothing else
 * comes before CONFIG) and check its version. */
static int read_hello(int fd, sandlot_error_t **err)
{
	struct sl_reader rd;
	sl_reader_init(&rd);
	uint64_t deadline = sandlot__now_ms() + TEMPLATE_BOOT_MS;
	int rc = -1;
	for (;;) {
		struct sl_frame_header h;
		const uint8_t *payload;
		int r = sl_reader_next(&rd, &h, &payload);
		if (r < 0) {
			sandlot__error(err, EPROTO, "the template's sandlot-init sent no frame");
			break;
		}
		if (r > 0) {
			uint32_t version = 0;
			struct sl_rec_iter it;
			struct sl_rec rec;
			sl_rec_iter_init(&it, payload, h.length);
			while (h.type == SL_MSG_HELLO && sl_rec_next(&it, &rec) == 1)
				if (rec.tag == SL_TAG_VERSION)
					sl_rec_u32(&rec, &version);
			if (h.type != SL_MSG_HELLO || h.stream != 0)
				sandlot__error(err, EPROTO, "the template's sandlot-init sent frame "
					       "0x%02x before HELLO", h.type);
			else if (version != SANDLOT_PROTO_VERSION)
				sandlot__error(err, EPROTO, "the template's sandlot-init speaks protocol "
					       "version %u, not %u", version, SANDLOT_PROTO_VERSION);
			else
				rc = 0;
			break;
		}
		uint64_t now = sandlot__now_ms();
		if (now >= deadline) {
			sandlot__error(err, ETIMEDOUT, "the template's guest did not boot within %u s",
				       TEMPLATE_BOOT_MS / 1000);
			break;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int k = poll(&p, 1, (int)(deadline - now));
		if (k < 0 && errno != EINTR) {
			sandlot__error_errno(err, errno, "wait for the template's guest");
			break;
		}
		if (k <= 0)
			continue;
		size_t avail;
		uint8_t *space = sl_reader_space(&rd, &avail);
		if (!space) {
			sandlot__error(err, ENOMEM, "out of memory");
			break;
		}
		ssize_t got = read(fd, space, avail);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			sandlot__error(err, EPIPE, "the template's guest stopped before its "
				       "sandlot-init said HELLO");
			break;
		}
		sl_reader_commit(&rd, (size_t)got);
	}
	sl_reader_free(&rd);
	return rc;
}

/* A sandbox handle for the template's VM: what vm.c's start reads. */
static struct sandlot *template_sandbox(const sandlot_options_t *opts, sandlot_error_t **err)
{
	struct sandlot *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	sb->conn_fd = -1;
	sb->img.lock_fd = -1;
	sb->opts = *opts;
	sb->opts.id = sb->opts.workspace = NULL;
	sb->opts.env = NULL;
	sb->opts.net_allow = sb->opts.net_deny = NULL;
	sb->ops = &sandlot__backend_vm;
	sandlot__new_id("sb-", sb->id);
	sb->data_dir = strdup(sandlot__data_dir(opts->data_dir));
	sb->image = strdup(opts->image ? opts->image : "host");
	if (!sb->data_dir || !sb->image) {
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	sb->opts.data_dir = sb->data_dir;
	sb->opts.image = sb->image;
	if (strcmp(sb->image, "host") != 0 &&
	    sandlot__image_open(sb->data_dir, sb->image, &sb->img, err) < 0)
		goto fail;
	return sb;
fail:
	free(sb->data_dir);
	free(sb->image);
	free(sb);
	return NULL;
}

static void template_sandbox_free(struct sandlot *sb)
{
	if (!sb)
		return;
	sandlot__image_release(&sb->img);
	free(sb->data_dir);
	free(sb->image);
	free(sb);
}

/* Temporary files of templates whose maker died (killed while saving):
 * <hash>.<state|key>.<sandbox id>.tmp with no live sandbox of that id (its
 * link in /run/sandlot/vm, which the launch's sweep just removed if its
 * owner died). */
static void remove_stale_tmp(const char *vm_root)
{
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/templates", vm_root);
	cleanup_closedir DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n < 4 || strcmp(e->d_name + n - 4, ".tmp") != 0)
			continue;
		char id[64];
		const char *start = strstr(e->d_name, ".sb-");
		if (!start || (size_t)(e->d_name + n - 4 - (start + 1)) >= sizeof(id))
			continue;
		snprintf(id, sizeof(id), "%.*s", (int)(e->d_name + n - 4 - (start + 1)), start + 1);
		char link[128];
		snprintf(link, sizeof(link), "/run/sandlot/vm/%s", id);
		if (sandlot__sandbox_id_valid(id) && access(link, F_OK) < 0 && errno == ENOENT)
			unlinkat(dirfd(d), e->d_name, 0);
	}
}

/* Boot sb's VM with a monitor, wait for HELLO, save it to the template of
 * key.  The VM is gone afterwards, whatever happened. */
static int make_from(struct sandlot *sb, const char *vm_root, const char *key,
		     sandlot_error_t **err)
{
	int pair[2];
	int rc = sandlot__vm_launch_template(sb, err);
	if (rc < 0)
		return -1;
	pair[0] = sandlot__vm_take_monitor(sb);
	remove_stale_tmp(vm_root);
	char tmp_state[PATH_MAX + 128], tmp_key[PATH_MAX + 128], state[PATH_MAX + 64],
		keyp[PATH_MAX + 64];
	template_path(vm_root, key, ".state", state, sizeof(state));
	template_path(vm_root, key, ".key", keyp, sizeof(keyp));
	snprintf(tmp_state, sizeof(tmp_state), "%s.%s.tmp", state, sb->id);
	snprintf(tmp_key, sizeof(tmp_key), "%s.%s.tmp", keyp, sb->id);
	struct sandlot_qmp *q = NULL;
	int out = -1;
	rc = -1;
	if (read_hello(sb->conn_fd, err) < 0)
		goto done;
	q = sandlot__qmp_open(pair[0], TEMPLATE_QMP_MS, err);
	pair[0] = -1; /* the handle's (closed on failure too) */
	if (!q)
		goto done;
	out = open(tmp_state, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0) {
		sandlot__error_errno(err, errno, "create %s", tmp_state);
		goto done;
	}
	if (sandlot__qmp_save(q, out, TEMPLATE_SAVE_MS, err) < 0)
		goto done;
	if (fsync(out) < 0 || sandlot__write_file(tmp_key, key, 1) < 0) {
		sandlot__error_errno(err, errno, "write %s", tmp_key);
		goto done;
	}
	if (rename(tmp_state, state) < 0 || rename(tmp_key, keyp) < 0) {
		sandlot__error_errno(err, errno, "rename %s", tmp_state);
		goto done;
	}
	rc = 0;
done:
	if (out >= 0)
		close(out);
	if (rc < 0) {
		unlink(tmp_state);
		unlink(tmp_key);
	}
	sandlot__qmp_close(q);
	if (pair[0] >= 0)
		close(pair[0]);
	sandlot__backend_vm.kill(sb);
	close(sb->conn_fd);
	sb->conn_fd = -1;
	sandlot__backend_vm.release(sb);
	return rc < 0 ? sandlot__error_wrap(err, "make the vm template") : 0;
}

int sandlot__vm_template_make(const sandlot_options_t *opts, sandlot_error_t **err)
{
	struct sandlot *sb = template_sandbox(opts, err);
	if (!sb)
		return -1;
	char key[SANDLOT_VM_TEMPLATE_KEY_MAX], vm_root[PATH_MAX];
	snprintf(vm_root, sizeof(vm_root), "%s/vm", sb->data_dir);
	int rc = sandlot__vm_machine_key(sb, key, sizeof(key), err);
	if (rc == 0) {
		int fd = sandlot__vm_template_open(vm_root, key);
		if (fd >= 0) {
			close(fd); /* there already */
		} else {
			char dir[PATH_MAX + 16];
			snprintf(dir, sizeof(dir), "%s/templates", vm_root);
			if (sandlot__mkdir_p(dir, 0700) < 0)
				rc = sandlot__error_errno(err, errno, "create %s", dir);
			else
				rc = make_from(sb, vm_root, key, err);
		}
	}
	template_sandbox_free(sb);
	return rc;
}

/* ---- sandlot_prepare() -------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int running, wanted;
static sandlot_options_t want_opts;
static char *want_image, *want_data_dir;

static void *prepare_main(void *arg)
{
	pthread_mutex_lock(&lock);
	while (wanted) {
		wanted = 0;
		sandlot_options_t o = want_opts;
		char *image = want_image ? strdup(want_image) : NULL;
		char *dd = want_data_dir ? strdup(want_data_dir) : NULL;
		pthread_mutex_unlock(&lock);
		o.image = image;
		o.data_dir = dd;
		sandlot_error_t *e = NULL;
		/* A failure leaves creates booting as without a template; the
		 * next sandlot_prepare() tries again. */
		if (sandlot__vm_template_make(&o, &e) < 0 && getenv("SANDLOT_TRACE"))
			fprintf(stderr, "sandlot-trace: %s\n", sandlot_error_message(e));
		sandlot_error_free(e);
		free(image);
		free(dd);
		pthread_mutex_lock(&lock);
	}
	running = 0;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return arg;
}

int sandlot__vm_prepare(const sandlot_options_t *likely, unsigned count, sandlot_error_t **err)
{
	pthread_mutex_lock(&lock);
	if (!count) {
		/* Stop: a template under way is finished first (its VM must
		 * not outlive the call). */
		wanted = 0;
		while (running)
			pthread_cond_wait(&cond, &lock);
		pthread_mutex_unlock(&lock);
		return 0;
	}
	char *image = likely->image ? strdup(likely->image) : NULL;
	char *dd = likely->data_dir ? strdup(likely->data_dir) : NULL;
	if ((likely->image && !image) || (likely->data_dir && !dd)) {
		pthread_mutex_unlock(&lock);
		free(image);
		free(dd);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	free(want_image);
	free(want_data_dir);
	want_image = image;
	want_data_dir = dd;
	want_opts = *likely;
	want_opts.id = want_opts.workspace = want_opts.hostname = want_opts.init_path = NULL;
	want_opts.env = NULL;
	want_opts.net_allow = want_opts.net_deny = NULL;
	wanted = 1;
	if (!running) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &a, prepare_main, NULL);
		pthread_attr_destroy(&a);
		if (rc != 0) {
			wanted = 0;
			pthread_mutex_unlock(&lock);
			return sandlot__error_errno(err, rc, "start the vm template thread");
		}
		running = 1;
	}
	pthread_mutex_unlock(&lock);
	return 0;
}
