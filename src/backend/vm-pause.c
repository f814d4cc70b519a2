/* Pause, resume and kept workspaces of vm sandboxes (vm-pause.h). */
#include "backend/vm-pause.h"

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
#include <time.h>
#include <unistd.h>

#include "backend/vm-qmp.h"
#include "backend/vm.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "core/internal.h"

/* How long init may take to sync and detach, and QEMU to save or load a
 * guest (a 256 MiB guest takes about a second under TCG: bench/vm-pause.py). */
#define DETACH_TIMEOUT_MS 30000
#define SAVE_TIMEOUT_MS 120000
#define QMP_OPEN_TIMEOUT_MS 10000

/* ---- paths --------------------------------------------------------------------------- */

static int kept_root(const char *data_dir, char *out, size_t n)
{
	return snprintf(out, n, "%s/vm/kept", data_dir) >= (int)n ? -1 : 0;
}

static int kept_path(const char *data_dir, const char *name, const char *file, char *out,
		     size_t n)
{
	int k = file ? snprintf(out, n, "%s/vm/kept/%s/%s", data_dir, name, file)
		     : snprintf(out, n, "%s/vm/kept/%s", data_dir, name);
	return k < 0 || k >= (int)n ? -1 : 0;
}

/* flock dir/lock without waiting: the fd, or -1 with EBUSY while another
 * holds it (ENOENT: no such workspace). */
static int lock_kept(const char *dir, const char *name, sandlot_error_t **err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return sandlot__error_errno(err, errno == ENOENT ? ENOENT : errno,
					    "no kept workspace %s", name);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		return sandlot__error(err, e == EWOULDBLOCK ? EBUSY : e,
				      "kept workspace %s is in use by a sandbox", name);
	}
	return fd;
}

/* ---- taking one ---------------------------------------------------------------------- */

/* Make kept workspace `name` from the empty disk: in a directory of a
 * temporary name, renamed into place (EEXIST: another process made it
 * meanwhile; the caller then takes that one). */
static int kept_make(const char *data_dir, const char *name, const char *empty, uid_t owner,
		     int reserve, sandlot_error_t **err)
{
	char root[PATH_MAX], tmp[PATH_MAX + 128], dst[PATH_MAX], path[PATH_MAX + 160];
	if (kept_root(data_dir, root, sizeof(root)) < 0 ||
	    kept_path(data_dir, name, NULL, dst, sizeof(dst)) < 0)
		return sandlot__error(err, ENAMETOOLONG, "the data directory's path is too long");
	if (sandlot__mkdir_p(root, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", root);
	snprintf(tmp, sizeof(tmp), "%s/.new-%s-%d", root, name, (int)getpid());
	sandlot__vm_remove_dir(tmp);
	if (mkdir(tmp, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	snprintf(path, sizeof(path), "%s/lock", tmp);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		sandlot__error_errno(err, errno, "create %s", path);
		goto fail;
	}
	close(fd);
	snprintf(path, sizeof(path), "%s/disk.img", tmp);
	if (sandlot__vm_sparse_copy(empty, path, owner, reserve, err) < 0)
		goto fail;
	if (rename(tmp, dst) < 0) {
		int e = errno;
		sandlot__vm_remove_dir(tmp);
		if (e == EEXIST || e == ENOTEMPTY)
			return 0;
		return sandlot__error_errno(err, e, "rename %s", tmp);
	}
	return 0;
fail:
	sandlot__vm_remove_dir(tmp);
	return -1;
}

int sandlot__vm_kept_exists(const char *data_dir, const char *name)
{
	char dir[PATH_MAX];
	return kept_path(data_dir, name, NULL, dir, sizeof(dir)) == 0 && access(dir, F_OK) == 0;
}

int sandlot__vm_kept_take(const char *data_dir, const char *name, int resume, uint64_t bytes,
			  const char *empty, uid_t owner, int reserve, struct vm_kept *k,
			  sandlot_error_t **err)
{
	*k = (struct vm_kept)VM_KEPT_INIT;
	char dir[PATH_MAX], path[PATH_MAX + 16];
	if (kept_path(data_dir, name, NULL, dir, sizeof(dir)) < 0)
		return sandlot__error(err, ENAMETOOLONG, "the data directory's path is too long");
	if (access(dir, F_OK) < 0) {
		if (resume)
			return sandlot__error(err, ENOENT, "no kept workspace %s of a vm sandbox "
					      "(nothing was paused under that name)", name);
		if (kept_make(data_dir, name, empty, owner, reserve, err) < 0)
			return -1;
	}
	int fd = lock_kept(dir, name, err);
	if (fd < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/disk.img", dir);
	struct stat st;
	if (stat(path, &st) < 0) {
		close(fd);
		return sandlot__error_errno(err, errno, "kept workspace %s has no disk (%s)", name,
					    path);
	}
	if ((uint64_t)st.st_size != sandlot__vm_disk_file_bytes(bytes)) {
		uint64_t had = 0;
		sandlot__vm_disk_bytes_of_file((uint64_t)st.st_size, &had);
		close(fd);
		return sandlot__error(err, EINVAL, "kept workspace %s is a disk of %llu bytes, not "
				      "the %llu asked for (give the disk size it was made with)",
				      name, (unsigned long long)had, (unsigned long long)bytes);
	}
	/* QEMU of this sandbox runs as a uid of its own. */
	if (chown(path, owner, owner) < 0) {
		int e = errno;
		close(fd);
		return sandlot__error_errno(err, e, "chown %s", path);
	}
	k->dir = strdup(dir);
	k->disk = strdup(path);
	k->lock_fd = fd;
	snprintf(path, sizeof(path), "%s/state", dir);
	k->has_state = access(path, F_OK) == 0;
	if (k->has_state && !resume) {
		/* A fresh boot on the disk: the saved state no longer fits it. */
		unlink(path);
		snprintf(path, sizeof(path), "%s/state.meta", dir);
		unlink(path);
		k->has_state = 0;
	}
	if (!k->dir || !k->disk) {
		sandlot__vm_kept_release(k);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	return 0;
}

void sandlot__vm_kept_release(struct vm_kept *k)
{
	if (k->lock_fd >= 0)
		close(k->lock_fd);
	free(k->dir);
	free(k->disk);
	*k = (struct vm_kept)VM_KEPT_INIT;
}

/* ---- the state and what it needs ---------------------------------------------------- */

/* size:mtime of a file, which identifies a build of it well enough here. */
static void file_id(const char *path, char *out, size_t n)
{
	struct stat st;
	if (stat(path, &st) < 0)
		snprintf(out, n, "missing");
	else
		snprintf(out, n, "%lld:%lld.%09ld", (long long)st.st_size,
			 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

void sandlot__vm_ident(char *out, size_t n, uint64_t memory, unsigned cpus, const char *accel,
		       const char *vmlinux, const char *initrd, const char *root)
{
	char k[64], i[64];
	file_id(vmlinux, k, sizeof(k));
	file_id(initrd, i, sizeof(i));
	snprintf(out, n, "memory=%llu cpus=%u accel=%s kernel=%s initramfs=%s root=%s",
		 (unsigned long long)memory, cpus, accel, k, i, root);
}

int sandlot__vm_state_check(const struct vm_kept *k, const char *ident, sandlot_error_t **err)
{
	char path[PATH_MAX + 16], saved[1024];
	snprintf(path, sizeof(path), "%s/state.meta", k->dir);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t len = fd < 0 ? -1 : read(fd, saved, sizeof(saved) - 1);
	if (len < 0)
		return sandlot__error_errno(err, errno, "read %s", path);
	saved[len] = '\0';
	if (len > 0 && saved[len - 1] == '\n')
		saved[len - 1] = '\0';
	if (strcmp(saved, ident) == 0)
		return 0;
	return sandlot__error(err, EINVAL, "the paused vm sandbox's running state was saved by "
			      "another VM (saved: %s; now: %s): resume it with the memory and CPUs "
			      "it had, on the same vm guest and image", saved, ident);
}

/* ---- the monitor ------------------------------------------------------------------- */

static struct sandlot_qmp *monitor(struct vm_monitor *m, sandlot_error_t **err)
{
	if (m->q)
		return m->q;
	if (m->fd < 0)
		return sandlot__error(err, EPIPE, "the VM has no monitor"), NULL;
	int fd = m->fd;
	m->fd = -1; /* the session owns it now, or closed it */
	m->q = sandlot__qmp_open(fd, QMP_OPEN_TIMEOUT_MS, err);
	return m->q;
}

void sandlot__vm_monitor_close(struct vm_monitor *m)
{
	sandlot__qmp_close(m->q);
	m->q = NULL;
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
}

/* ---- pause ------------------------------------------------------------------------- */

struct detach_wait {
	struct sl_stream s;
	int answered;     /* 1 OK, -1 ERROR (err_msg) */
	int lost;
	int status;
	char msg[200];
};

static void detach_frame(struct sl_stream *s, const struct sl_frame_header *h,
			 const uint8_t *payload)
{
	struct detach_wait *w = (struct detach_wait *)s;
	if (h->type == SL_MSG_OK) {
		w->answered = 1;
	} else if (h->type == SL_MSG_ERROR) {
		sandlot_error_t *e = NULL;
		sandlot__error_from_frame(&e, payload, h->length, "detach");
		w->status = sandlot_error_status(e);
		snprintf(w->msg, sizeof(w->msg), "%s", sandlot_error_message(e));
		sandlot_error_free(e);
		w->answered = -1;
	} else {
		return;
	}
	sandlot__stream_unregister_locked(s);
}

static void detach_lost(struct sl_stream *s)
{
	((struct detach_wait *)s)->lost = 1;
}

/* DETACH, and wait for init's OK: everything it sent before has arrived. */
static int detach(struct sandlot *sb, sandlot_error_t **err)
{
	struct sl_conn *c = &sb->conn;
	struct detach_wait w;
	memset(&w, 0, sizeof(w));
	if (sandlot__stream_register(c, &w.s, detach_frame, detach_lost) < 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_DETACH, 0, w.s.id);
	if (sandlot__conn_send(c, &m, err) < 0) {
		pthread_mutex_lock(&c->lock);
		sandlot__stream_unregister_locked(&w.s);
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += DETACH_TIMEOUT_MS / 1000;
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	while (!w.answered && !w.lost && rc == 0)
		rc = pthread_cond_timedwait(&c->cond, &c->lock, &dl);
	sandlot__stream_unregister_locked(&w.s);
	pthread_mutex_unlock(&c->lock);
	if (w.answered == 1)
		return 0;
	if (w.answered < 0)
		return sandlot__error(err, w.status ? w.status : EIO, "%s", w.msg);
	if (w.lost)
		return sandlot__error(err, EPIPE, "the sandbox ended before its init detached");
	return sandlot__error(err, ETIMEDOUT, "the guest's init did not detach within %d s",
			      DETACH_TIMEOUT_MS / 1000);
}

static int fsync_path(const char *path, int flags, sandlot_error_t **err)
{
	cleanup_close int fd = open(path, flags | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return sandlot__error_errno(err, errno, "sync %s", path);
	return 0;
}

/* Write the ident line to dir/state.meta (via a temporary file). */
static int write_meta(const char *dir, const char *ident, sandlot_error_t **err)
{
	char tmp[PATH_MAX + 32], path[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s/state.meta.tmp", dir);
	snprintf(path, sizeof(path), "%s/state.meta", dir);
	cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	size_t n = strlen(ident);
	if (write(fd, ident, n) != (ssize_t)n || write(fd, "\n", 1) != 1 || fsync(fd) < 0 ||
	    rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "write %s", path);
	}
	return 0;
}

int sandlot__vm_pause_save(struct sandlot *sb, struct vm_monitor *mon, const struct vm_kept *k,
			   const char *ident, unsigned flags, sandlot_error_t **err)
{
	char state[PATH_MAX + 16], tmp[PATH_MAX + 16], meta[PATH_MAX + 16];
	snprintf(state, sizeof(state), "%s/state", k->dir);
	snprintf(tmp, sizeof(tmp), "%s/state.tmp", k->dir);
	snprintf(meta, sizeof(meta), "%s/state.meta", k->dir);
	/* A state left from before could be loaded over a disk that moved on. */
	unlink(state);
	unlink(meta);
	if (detach(sb, err) < 0)
		return sandlot__error_wrap(err, "detach the guest");
	sandlot__trace("pause: detached");
	if (!(flags & SANDLOT_PAUSE_MEMORY))
		return 0;
	struct sandlot_qmp *q = monitor(mon, err);
	if (!q)
		return -1;
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	int rc = sandlot__qmp_save(q, out, SAVE_TIMEOUT_MS, err);
	sandlot__trace("pause: saved");
	if (rc == 0 && fsync(out) < 0)
		rc = sandlot__error_errno(err, errno, "sync %s", tmp);
	close(out);
	if (rc == 0)
		rc = write_meta(k->dir, ident, err);
	if (rc == 0 && rename(tmp, state) < 0)
		rc = sandlot__error_errno(err, errno, "rename %s", tmp);
	if (rc == 0)
		rc = fsync_path(k->dir, O_RDONLY | O_DIRECTORY, err);
	if (rc < 0) {
		unlink(tmp);
		unlink(state);
		unlink(meta);
	}
	return rc;
}

int sandlot__vm_kept_sync_disk(const struct vm_kept *k, sandlot_error_t **err)
{
	return fsync_path(k->disk, O_RDONLY, err);
}

int sandlot__vm_restore(struct vm_monitor *mon, struct vm_kept *k, sandlot_error_t **err)
{
	char state[PATH_MAX + 16], meta[PATH_MAX + 16];
	snprintf(state, sizeof(state), "%s/state", k->dir);
	snprintf(meta, sizeof(meta), "%s/state.meta", k->dir);
	cleanup_close int in = open(state, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return sandlot__error_errno(err, errno, "open %s", state);
	struct sandlot_qmp *q = monitor(mon, err);
	if (!q || sandlot__qmp_restore(q, in, SAVE_TIMEOUT_MS, err) < 0)
		return -1;
	/* Consumed: the guest runs on, and its disk with it. */
	unlink(state);
	unlink(meta);
	k->has_state = 0;
	return 0;
}

/* ---- kept workspaces by name -------------------------------------------------------- */

int sandlot__vm_workspace_size(const char *data_dir, const char *name, uint64_t *bytes,
			       sandlot_error_t **err)
{
	char path[PATH_MAX];
	struct stat st;
	if (kept_path(data_dir, name, "disk.img", path, sizeof(path)) < 0 || stat(path, &st) < 0)
		return sandlot__error(err, ENOENT, "no kept workspace %s", name);
	if (sandlot__vm_disk_bytes_of_file((uint64_t)st.st_size, bytes) < 0)
		return sandlot__error(err, EIO, "kept workspace %s: its disk (%s) has a size no vm "
				      "workspace has (%llu bytes)", name, path,
				      (unsigned long long)st.st_size);
	return 0;
}

int sandlot__vm_workspace_remove(const char *data_dir, const char *name, sandlot_error_t **err)
{
	char dir[PATH_MAX];
	if (kept_path(data_dir, name, NULL, dir, sizeof(dir)) < 0 || access(dir, F_OK) < 0)
		return sandlot__error(err, ENOENT, "no kept workspace %s", name);
	int fd = lock_kept(dir, name, err);
	if (fd < 0)
		return -1;
	sandlot__vm_remove_dir(dir);
	close(fd);
	return 0;
}

int sandlot__vm_workspace_list(const char *data_dir, char ***names, sandlot_error_t **err)
{
	char root[PATH_MAX];
	size_t n = 0, cap = 8;
	char **v = calloc(cap, sizeof(char *));
	if (!v)
		return sandlot__error(err, ENOMEM, "out of memory");
	cleanup_closedir DIR *d = kept_root(data_dir, root, sizeof(root)) == 0 ? opendir(root) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue; /* ., .. and ones being made */
		if (n + 2 > cap) {
			char **g = realloc(v, (cap *= 2) * sizeof(char *));
			if (!g)
				goto oom;
			v = g;
		}
		if (!(v[n] = strdup(e->d_name)))
			goto oom;
		v[++n] = NULL;
	}
	*names = v;
	return 0;
oom:
	sandlot__strv_free(v);
	return sandlot__error(err, ENOMEM, "out of memory");
}

int sandlot__vm_workspace_sync(const char *data_dir, sandlot_error_t **err)
{
	char root[PATH_MAX];
	if (kept_root(data_dir, root, sizeof(root)) < 0)
		return 0;
	cleanup_close int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : sandlot__error_errno(err, errno, "open %s", root);
	if (syncfs(fd) < 0)
		return sandlot__error_errno(err, errno, "sync %s", root);
	return 0;
}

int sandlot__vm_snapshot(const char *data_dir, const char *src, const char *dst,
			 double overcommit, sandlot_error_t **err)
{
	char sdir[PATH_MAX], ddir[PATH_MAX], tmp[PATH_MAX + 128], root[PATH_MAX];
	char a_disk[PATH_MAX + 16];
	if (kept_path(data_dir, src, NULL, sdir, sizeof(sdir)) < 0 ||
	    kept_path(data_dir, dst, NULL, ddir, sizeof(ddir)) < 0 ||
	    kept_root(data_dir, root, sizeof(root)) < 0)
		return sandlot__error(err, ENAMETOOLONG, "the data directory's path is too long");
	if (access(ddir, F_OK) == 0)
		return sandlot__error(err, EEXIST, "kept workspace %s exists", dst);
	cleanup_close int lock = lock_kept(sdir, src, err);
	if (lock < 0)
		return -1;
	/* The copy's disk is a new one: admitted and reserved like a
	 * create's (vm.c); its saved memory, if any, is not reserved (QEMU
	 * wrote it sparse, and a resume only reads it). */
	struct stat dst_st;
	snprintf(a_disk, sizeof(a_disk), "%s/disk.img", sdir);
	if (stat(a_disk, &dst_st) < 0)
		return sandlot__error_errno(err, errno, "kept workspace %s has no disk", src);
	if (sandlot__vm_disk_admit(root, (uint64_t)dst_st.st_size, overcommit, err) < 0)
		return sandlot__error_wrap(err, "copy kept workspace %s to %s", src, dst);
	snprintf(tmp, sizeof(tmp), "%s/.new-%s-%d", root, dst, (int)getpid());
	sandlot__vm_remove_dir(tmp);
	if (mkdir(tmp, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", tmp);
	static const char *const files[] = { "disk.img", "state", "state.meta" };
	char a[PATH_MAX + 16], b[PATH_MAX + 160];
	snprintf(b, sizeof(b), "%s/lock", tmp);
	int lfd = open(b, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0) {
		sandlot__error_errno(err, errno, "create %s", b);
		goto fail;
	}
	close(lfd);
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(files); i++) {
		snprintf(a, sizeof(a), "%s/%s", sdir, files[i]);
		snprintf(b, sizeof(b), "%s/%s", tmp, files[i]);
		struct stat st;
		if (i > 0 && stat(a, &st) < 0)
			continue; /* no running state: a files-only pause or an ended sandbox */
		if (stat(a, &st) < 0) {
			sandlot__error_errno(err, errno, "kept workspace %s has no disk", src);
			goto fail;
		}
		if (sandlot__vm_sparse_copy(a, b, st.st_uid, i == 0 && overcommit <= 1, err) < 0)
			goto fail;
		if (fsync_path(b, O_RDONLY, err) < 0)
			goto fail;
	}
	if (rename(tmp, ddir) < 0) {
		int e = errno;
		sandlot__vm_remove_dir(tmp);
		return sandlot__error_errno(err, e == ENOTEMPTY ? EEXIST : e,
					    "kept workspace %s", dst);
	}
	return fsync_path(root, O_RDONLY | O_DIRECTORY, err);
fail:
	sandlot__vm_remove_dir(tmp);
	return sandlot__error_wrap(err, "copy kept workspace %s to %s", src, dst);
}
