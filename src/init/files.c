/* File operations inside the sandbox: FWRITE/DATA, FREAD, STAT, LIST,
 * MKDIR, REMOVE.
 *
 * Init resolves every path itself, after pivot_root, so no path can name a
 * host file; openat2(RESOLVE_NO_MAGICLINKS) additionally refuses the
 * /proc magic links that could lead out of the sandbox's mount namespace.
 * Everything here runs with the sandbox user's filesystem credentials and
 * no effective capability (the loop switches around each request and each
 * stream callback: creds.c), so the kernel's permission checks are the
 * user's: the API can read and write only what the user's code can.
 * Sandboxed code shares these directories and may race with us, so
 * everything past the first lookup works on directory descriptors
 * (openat/unlinkat/renameat) and never follows a symlink it did not mean
 * to; and a file is only ever opened non-blocking and checked with fstat
 * before use, so a FIFO planted by sandboxed code cannot block init.
 */
#include "loop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "linux/syscalls.h"

#define FLAG_PARENTS 0x1   /* FWRITE, MKDIR: create missing parents */
#define FLAG_RECURSIVE 0x1 /* REMOVE */
#define RM_DEPTH_MAX 512
#define TMP_PREFIX ".sandlot-tmp-"
/* ENTRIES frames are cut at about this size. */
#define ENTRIES_FRAME (64 * 1024)

/* --- shared helpers ----------------------------------------------------- */

uint8_t init__ftype(unsigned mode)
{
	if (S_ISREG(mode))
		return 'f';
	if (S_ISDIR(mode))
		return 'd';
	if (S_ISLNK(mode))
		return 'l';
	return 'o';
}

int64_t init__ns(long sec, long nsec)
{
	int64_t v;
	if (__builtin_mul_overflow((int64_t)sec, (int64_t)1000000000, &v) ||
	    __builtin_add_overflow(v, (int64_t)nsec, &v))
		return sec < 0 ? INT64_MIN : INT64_MAX;
	return v;
}

static int open_at(int dirfd, const char *path, int flags, unsigned mode, uint64_t resolve)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = resolve | RESOLVE_NO_MAGICLINKS,
	};
	int fd;
	do
		fd = sys_openat2(dirfd, path, &how);
	while (fd < 0 && errno == EINTR);
	return fd;
}

/* Whether fd is an entry of init's own /proc/<pid> (reached as /proc/1,
 * /proc/self, /proc/thread-self or through a planted symlink).  The kernel
 * lets a process read its own /proc entries whatever its credentials
 * (ptrace_may_access() allows its own thread group first of all), so the
 * sandbox user's credentials (creds.c) do not keep the API out of init's
 * memory map, environment or descriptors: this check does.  The path the
 * kernel shows for the open file tells where it is; anything on procfs
 * that does not look like /proc/<pid>/... or /proc/<name> counts as init's
 * (there is no other proc mount in a sandbox). */
static int own_proc_entry(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return 1;
	if (sf.f_type != PROC_SUPER_MAGIC)
		return 0;
	char link[64], where[INIT_PATH_MAX + 1];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, where, sizeof(where) - 1);
	if (n < 0)
		return 1;
	where[n] = '\0';
	if (strncmp(where, "/proc/", 6) != 0)
		return strcmp(where, "/proc") != 0;
	const char *p = where + 6;
	if (*p < '0' || *p > '9')
		return 0; /* /proc/cpuinfo, /proc/sys/...: nobody's own */
	char *end;
	unsigned long pid = strtoul(p, &end, 10);
	return (*end == '/' || *end == '\0') && pid == (unsigned long)getpid();
}

int init__open(const struct loop *l, const char *path, int flags, unsigned mode, uint64_t resolve)
{
	cleanup_free char *abs = init__abs_path(l, path);
	if (!abs)
		return -1;
	int fd = open_at(AT_FDCWD, abs, flags, mode, resolve);
	/* O_PATH opens (STAT) only show metadata, which the user may see too. */
	if (fd >= 0 && !(flags & O_PATH) && own_proc_entry(fd)) {
		close(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

/* The request records shared by the file operations. */
struct args {
	char *path;
	uint32_t mode, flags;
	int has_mode;
	uint64_t max_bytes; /* MAX_BYTES (FREAD), 0 = none */
};

/* Parse PATH (required), MODE and FLAGS.  On failure ERROR has been queued
 * and -1 is returned; the caller frees a->path either way. */
static int parse_args(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload,
		      const char *op, uint32_t allowed_flags, struct args *a)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	int rc;
	memset(a, 0, sizeof(*a));
	sl_rec_iter_init(&it, payload, h->length);
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		switch (r.tag) {
		case SL_TAG_PATH:
			free(a->path);
			if (!(a->path = init__rec_string(&r, 1))) {
				init__send_error(l, h->stream, errno, "%s: bad PATH: %s", op,
						 init__strerror(errno));
				return -1;
			}
			break;
		case SL_TAG_MODE:
			if (sl_rec_u32(&r, &a->mode) < 0 || (a->mode & ~07777u)) {
				init__send_error(l, h->stream, EINVAL, "%s: bad MODE", op);
				return -1;
			}
			a->has_mode = 1;
			break;
		case SL_TAG_FLAGS:
			if (sl_rec_u32(&r, &a->flags) < 0 || (a->flags & ~allowed_flags)) {
				init__send_error(l, h->stream, EINVAL, "%s: bad FLAGS", op);
				return -1;
			}
			break;
		case SL_TAG_MAX_BYTES:
			if (sl_rec_u64(&r, &a->max_bytes) < 0) {
				init__send_error(l, h->stream, EPROTO, "%s: bad MAX_BYTES", op);
				return -1;
			}
			break;
		default:
			break;
		}
	}
	if (rc < 0) {
		init__send_error(l, h->stream, EPROTO, "%s: malformed records", op);
		return -1;
	}
	if (!a->path) {
		init__send_error(l, h->stream, EINVAL, "%s: PATH is required", op);
		return -1;
	}
	return 0;
}

/* A path split into its directory and last component. */
struct target {
	char *abs;        /* absolute, trailing slashes removed */
	char *parent;     /* the directory holding it */
	const char *name; /* last component: "" for "/", may be "." or ".." */
	int slash;        /* the path ended with a slash */
};

static int target_init(const struct loop *l, const char *path, struct target *t)
{
	memset(t, 0, sizeof(*t));
	if (!(t->abs = init__abs_path(l, path)))
		return -1;
	size_t n = strlen(t->abs);
	while (n > 1 && t->abs[n - 1] == '/') {
		t->abs[--n] = '\0';
		t->slash = 1;
	}
	char *last = strrchr(t->abs, '/');
	t->name = last + 1;
	t->parent = strndup(t->abs, last == t->abs ? 1 : (size_t)(last - t->abs));
	return t->parent ? 0 : -1;
}

static void target_free(struct target *t)
{
	free(t->abs);
	free(t->parent);
}

/* "", "." and ".." name a directory that cannot be created or removed. */
static int is_dot(const char *name)
{
	return !name[0] || !strcmp(name, ".") || !strcmp(name, "..");
}

static int open_dir(const char *abs)
{
	return open_at(AT_FDCWD, abs, O_PATH | O_DIRECTORY, 0, 0);
}

/* Give a directory we just created to the sandbox user, with exactly
 * `mode` (no umask).  O_NOFOLLOW|O_DIRECTORY: if sandboxed code swapped it
 * for a symlink meanwhile, we refuse rather than chown the target. */
static int own_dir(const struct loop *l, int dirfd, const char *name, mode_t mode)
{
	cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchown(fd, l->cfg->uid, l->cfg->gid) < 0 || fchmod(fd, mode) < 0)
		return -1;
	return 0;
}

/* Open (O_PATH) the directory `abs`, creating missing components (0755,
 * owned by the sandbox user) one at a time, like mkdir -p. */
static int open_dirs(const struct loop *l, const char *abs)
{
	cleanup_free char *copy = strdup(abs);
	if (!copy)
		return -1;
	cleanup_close int cur = open_dir("/");
	if (cur < 0)
		return -1;
	char *save = NULL;
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int fd = open_at(cur, c, O_PATH | O_DIRECTORY, 0, 0);
		if (fd < 0 && errno == ENOENT) {
			if (mkdirat(cur, c, 0755) == 0) {
				if (own_dir(l, cur, c, 0755) < 0)
					return -1;
			} else if (errno != EEXIST) {
				return -1;
			}
			fd = open_at(cur, c, O_PATH | O_DIRECTORY, 0, 0);
		}
		if (fd < 0)
			return -1;
		close(cur);
		cur = fd;
	}
	return steal_fd(&cur);
}

/* --- FWRITE ------------------------------------------------------------- */

struct fwrite {
	int dirfd;      /* O_PATH of the target's directory */
	int fd;         /* the temporary file */
	char *tmp;      /* its name in dirfd; NULL once renamed */
	char *name;     /* the target's name in dirfd */
	char *path;     /* as requested, for messages */
	uint64_t size;
};

static void fwrite_destroy(struct stream *s)
{
	struct fwrite *w = s->data;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp)
		unlinkat(w->dirfd, w->tmp, 0);
	close(w->dirfd);
	free(w->tmp);
	free(w->name);
	free(w->path);
	free(w);
}

/* ERROR ends the stream; the destroy hook removes the temporary file and
 * the host's remaining DATA frames are dropped as frames of a closed
 * stream. */
static void fwrite_abort(struct loop *l, struct stream *s, int err)
{
	struct fwrite *w = s->data;
	init__send_error(l, s->id, err, "write %s: %s", w->path,
			 err == ECANCELED ? "cancelled by the host" : init__strerror(err));
	init__stream_close(l, s);
}

static void fwrite_commit(struct loop *l, struct stream *s)
{
	struct fwrite *w = s->data;
	/* No fsync: it would stall this event loop (every other stream of the
	 * sandbox) for as long as the file takes to reach the disk, and buys
	 * nothing here.  Sandbox storage does not outlive a host crash, and
	 * ENOSPC still shows at write(): ext4's delayed allocation reserves the
	 * blocks then, and tmpfs allocates them. */
	int fd = w->fd;
	w->fd = -1;
	if (close(fd) < 0 || renameat(w->dirfd, w->tmp, w->dirfd, w->name) < 0) {
		fwrite_abort(l, s, errno);
		return;
	}
	free(w->tmp);
	w->tmp = NULL;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, s->id);
	sl_msg_put_u64(&m, SL_TAG_SIZE, w->size);
	init__queue(l, &m);
	init__stream_close(l, s);
}

static void fwrite_frame(struct loop *l, struct stream *s, const struct sl_frame_header *h,
			 const uint8_t *payload)
{
	struct fwrite *w = s->data;
	if (h->type == SL_MSG_KILL) {
		fwrite_abort(l, s, ECANCELED);
		return;
	}
	if (h->type != SL_MSG_DATA)
		return;
	size_t done = 0;
	while (done < h->length) {
		ssize_t n = write(w->fd, payload + done, h->length - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fwrite_abort(l, s, n < 0 ? errno : ENOSPC);
			return;
		}
		done += (size_t)n;
	}
	w->size += h->length;
	if (h->flags & SANDLOT_PROTO_FLAG_END)
		fwrite_commit(l, s);
}

static const struct stream_ops fwrite_ops = {
	.frame = fwrite_frame,
	.destroy = fwrite_destroy,
	.as_user = 1,
};

/* Create a uniquely named temporary file in dirfd (never following or
 * reusing anything sandboxed code may have planted: O_EXCL). */
static int create_tmp(int dirfd, char **name)
{
	for (int tries = 0; tries < 100; tries++) {
		uint64_t r;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r = (uint64_t)time(NULL) * 2654435761u + (uint64_t)tries;
		char buf[sizeof(TMP_PREFIX) + 16];
		snprintf(buf, sizeof(buf), TMP_PREFIX "%016llx", (unsigned long long)r);
		int fd = openat(dirfd, buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				0600);
		if (fd >= 0) {
			if (!(*name = strdup(buf))) {
				unlinkat(dirfd, buf, 0);
				close(fd);
				return -1;
			}
			return fd;
		}
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

void init__fwrite_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	struct target t = { 0 };
	struct fwrite *w = NULL;
	int err = 0;
	if (parse_args(l, h, payload, "write", FLAG_PARENTS, &a) < 0)
		goto out;
	if (target_init(l, a.path, &t) < 0) {
		err = errno;
		goto out;
	}
	if (is_dot(t.name) || t.slash) {
		err = EISDIR;
		goto out;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		err = ENOMEM;
		goto out;
	}
	w->fd = -1;
	w->dirfd = (a.flags & FLAG_PARENTS) ? open_dirs(l, t.parent) : open_dir(t.parent);
	if (w->dirfd < 0) {
		err = errno;
		goto out;
	}
	/* Regular files only; a symlink is replaced, not followed. */
	struct stat st;
	if (fstatat(w->dirfd, t.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			err = EISDIR;
		else if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
			err = EINVAL;
	} else if (errno != ENOENT) {
		err = errno;
	}
	if (err)
		goto out;
	w->fd = create_tmp(w->dirfd, &w->tmp);
	if (w->fd < 0 || fchown(w->fd, l->cfg->uid, l->cfg->gid) < 0 ||
	    fchmod(w->fd, a.has_mode ? a.mode : 0644) < 0) {
		err = errno;
		goto out;
	}
	if (!(w->name = strdup(t.name)) || !(w->path = strdup(a.path))) {
		err = ENOMEM;
		goto out;
	}
	struct stream *s = init__stream_new(l, h->stream, &fwrite_ops, w);
	if (!s) {
		err = ENOMEM;
		goto out;
	}
	w = NULL;
	/* An FWRITE that carries END itself writes an empty file. */
	if (h->flags & SANDLOT_PROTO_FLAG_END)
		fwrite_commit(l, s);
out:
	if (err)
		init__send_error(l, h->stream, err, "write %s: %s", a.path, init__strerror(err));
	if (w) {
		if (w->dirfd >= 0)
			fwrite_destroy(&(struct stream){ .data = w });
		else
			free(w);
	}
	target_free(&t);
	free(a.path);
}

/* --- FREAD -------------------------------------------------------------- */

struct fread {
	int fd;
	uint64_t off; /* bytes sent so far */
	uint64_t max; /* MAX_BYTES, 0 = none */
	char *path;
};

static void fread_destroy(struct stream *s)
{
	struct fread *r = s->data;
	close(r->fd);
	free(r->path);
	free(r);
}

static void fread_error(struct loop *l, struct stream *s, int err)
{
	struct fread *r = s->data;
	if (err == EFBIG)
		init__send_error(l, s->id, err, "read %s: the file grew past the limit of %llu bytes",
				 r->path, (unsigned long long)r->max);
	else
		init__send_error(l, s->id, err, "read %s: %s", r->path,
				 err == ECANCELED ? "cancelled by the host" : init__strerror(err));
	init__stream_close(l, s);
}

static void fread_done(struct loop *l, struct stream *s)
{
	struct fread *r = s->data;
	init__send_data(l, SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, s->id, NULL, 0);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, s->id);
	sl_msg_put_u64(&m, SL_TAG_SIZE, r->off);
	init__queue(l, &m);
	init__stream_close(l, s);
}

static void fread_pump(struct loop *l, struct stream *s)
{
	struct fread *r = s->data;
	while (s->credit > 0 && l->qbytes < INIT_QUEUE_HIGH) {
		size_t want = SANDLOT_PROTO_MAX_DATA;
		if (want > s->credit)
			want = (size_t)s->credit;
		/* With a limit, read at most one byte past it: enough to tell a
		 * file that grew past the limit since it was opened. */
		if (r->max && want > r->max - r->off + 1)
			want = (size_t)(r->max - r->off + 1);
		ssize_t n = pread(r->fd, l->scratch, want, (off_t)r->off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fread_error(l, s, errno);
			return;
		}
		if (r->max && r->off + (uint64_t)n > r->max) {
			fread_error(l, s, EFBIG);
			return;
		}
		if (n == 0) {
			fread_done(l, s);
			return;
		}
		init__send_data(l, SL_MSG_DATA, 0, s->id, l->scratch, (size_t)n);
		s->credit -= (size_t)n;
		r->off += (size_t)n;
	}
	if (s->credit == 0) {
		/* Out of credit exactly at the end of the file: finish now
		 * rather than wait for credit the host need not send. */
		char c;
		if (pread(r->fd, &c, 1, (off_t)r->off) == 0) {
			fread_done(l, s);
			return;
		}
		s->ready = 0;
	}
}

static void fread_frame(struct loop *l, struct stream *s, const struct sl_frame_header *h,
			const uint8_t *payload)
{
	if (h->type == SL_MSG_KILL) {
		fread_error(l, s, ECANCELED);
		return;
	}
	if (h->type != SL_MSG_CREDIT)
		return;
	init__add_credit(s, h, payload);
	s->ready = s->credit > 0;
}

static const struct stream_ops fread_ops = {
	.frame = fread_frame,
	.pump = fread_pump,
	.destroy = fread_destroy,
	.as_user = 1,
};

void init__fread_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	int err = 0;
	cleanup_close int fd = -1;
	if (parse_args(l, h, payload, "read", 0, &a) < 0)
		goto out;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = init__open(l, a.path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, 0);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		err = errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		err = EISDIR;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		err = EINVAL;
		goto out;
	}
	if (a.max_bytes && (uint64_t)st.st_size > a.max_bytes) {
		init__send_error(l, h->stream, EFBIG,
				 "read %s: the file is %llu bytes, over the limit of %llu bytes", a.path,
				 (unsigned long long)st.st_size, (unsigned long long)a.max_bytes);
		goto out;
	}
	struct fread *r = calloc(1, sizeof(*r));
	if (!r || !(r->path = strdup(a.path))) {
		free(r);
		err = ENOMEM;
		goto out;
	}
	r->fd = fd;
	r->max = a.max_bytes;
	struct stream *s = init__stream_new(l, h->stream, &fread_ops, r);
	if (!s) {
		free(r->path);
		free(r);
		err = ENOMEM;
		goto out;
	}
	fd = -1;
	s->ready = 1;
out:
	if (err)
		init__send_error(l, h->stream, err, "read %s: %s", a.path,
				 err == EINVAL ? "not a regular file" : init__strerror(err));
	free(a.path);
}

/* --- STAT, LIST --------------------------------------------------------- */

void init__stat_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	if (parse_args(l, h, payload, "stat", 0, &a) < 0) {
		free(a.path);
		return;
	}
	/* O_PATH|O_NOFOLLOW opens a final symlink itself: lstat semantics. */
	cleanup_close int fd = init__open(l, a.path, O_PATH | O_NOFOLLOW, 0, 0);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		init__send_error(l, h->stream, errno, "stat %s: %s", a.path, init__strerror(errno));
		free(a.path);
		return;
	}
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, h->stream);
	sl_msg_put_u8(&m, SL_TAG_FTYPE, init__ftype(st.st_mode));
	sl_msg_put_u32(&m, SL_TAG_MODE, st.st_mode & 07777);
	sl_msg_put_u64(&m, SL_TAG_SIZE, (uint64_t)st.st_size);
	sl_msg_put_i64(&m, SL_TAG_MTIME_NS, init__ns(st.st_mtim.tv_sec, st.st_mtim.tv_nsec));
	sl_msg_put_u64(&m, SL_TAG_ALLOCATED, (uint64_t)st.st_blocks * 512);
	init__queue(l, &m);
	free(a.path);
}

struct list {
	DIR *dir;
	char *path;
};

static void list_destroy(struct stream *s)
{
	struct list *li = s->data;
	closedir(li->dir);
	free(li->path);
	free(li);
}

/* Queue ENTRIES frames of about ENTRIES_FRAME bytes while the queue is
 * short; at the end of the directory, the last one and OK. */
static void list_pump(struct loop *l, struct stream *s)
{
	struct list *li = s->data;
	while (l->qbytes < INIT_QUEUE_HIGH) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_ENTRIES, 0, s->id);
		size_t count = 0;
		int end = 0;
		while (m.len < ENTRIES_FRAME) {
			errno = 0;
			struct dirent *de = readdir(li->dir);
			if (!de) {
				if (errno) {
					int err = errno;
					sl_msg_free(&m);
					init__send_error(l, s->id, err, "list %s: %s", li->path,
							 init__strerror(err));
					init__stream_close(l, s);
					return;
				}
				end = 1;
				break;
			}
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			struct stat st;
			if (fstatat(dirfd(li->dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* removed meanwhile */
			sl_msg_put_str(&m, SL_TAG_NAME, de->d_name);
			sl_msg_put_u8(&m, SL_TAG_FTYPE, init__ftype(st.st_mode));
			sl_msg_put_u32(&m, SL_TAG_MODE, st.st_mode & 07777);
			sl_msg_put_u64(&m, SL_TAG_SIZE, (uint64_t)st.st_size);
			sl_msg_put_i64(&m, SL_TAG_MTIME_NS,
				       init__ns(st.st_mtim.tv_sec, st.st_mtim.tv_nsec));
			sl_msg_put_u64(&m, SL_TAG_ALLOCATED, (uint64_t)st.st_blocks * 512);
			count++;
		}
		if (count)
			init__queue(l, &m);
		else
			sl_msg_free(&m);
		if (end) {
			init__send_ok(l, s->id);
			init__stream_close(l, s);
			return;
		}
	}
}

static const struct stream_ops list_ops = {
	.pump = list_pump,
	.destroy = list_destroy,
	.as_user = 1,
};

void init__list_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	int err = 0;
	if (parse_args(l, h, payload, "list", 0, &a) < 0)
		goto out;
	int fd = init__open(l, a.path, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0, 0);
	if (fd < 0) {
		err = errno;
		goto out;
	}
	struct list *li = calloc(1, sizeof(*li));
	if (!li || !(li->path = strdup(a.path)) || !(li->dir = fdopendir(fd))) {
		err = errno;
		close(fd);
		if (li)
			free(li->path);
		free(li);
		goto out;
	}
	struct stream *s = init__stream_new(l, h->stream, &list_ops, li);
	if (!s) {
		list_destroy(&(struct stream){ .data = li });
		err = ENOMEM;
		goto out;
	}
	s->ready = 1;
out:
	if (err)
		init__send_error(l, h->stream, err, "list %s: %s", a.path, init__strerror(err));
	free(a.path);
}

/* --- MKDIR, REMOVE ------------------------------------------------------ */

void init__mkdir_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	struct target t = { 0 };
	int err = 0;
	cleanup_close int dirfd = -1;
	if (parse_args(l, h, payload, "mkdir", FLAG_PARENTS, &a) < 0) {
		free(a.path);
		return;
	}
	mode_t mode = a.has_mode ? a.mode : 0755;
	int parents = a.flags & FLAG_PARENTS;
	if (target_init(l, a.path, &t) < 0) {
		err = errno;
		goto out;
	}
	if (is_dot(t.name)) { /* names an existing directory, if anything */
		cleanup_close int fd = open_dir(t.abs);
		err = fd < 0 ? errno : parents ? 0 : EEXIST;
		goto out;
	}
	dirfd = parents ? open_dirs(l, t.parent) : open_dir(t.parent);
	if (dirfd < 0) {
		err = errno;
		goto out;
	}
	if (mkdirat(dirfd, t.name, mode) == 0) {
		if (own_dir(l, dirfd, t.name, mode) < 0)
			err = errno;
	} else {
		err = errno;
		struct stat st;
		if (err == EEXIST && parents && fstatat(dirfd, t.name, &st, 0) == 0 &&
		    S_ISDIR(st.st_mode))
			err = 0;
	}
out:
	if (err)
		init__send_error(l, h->stream, err, "mkdir %s: %s", a.path, init__strerror(err));
	else
		init__send_ok(l, h->stream);
	target_free(&t);
	free(a.path);
}

static int open_child_dir(int parent, const char *name)
{
	/* A single component: NO_SYMLINKS refuses a symlink swapped in after
	 * we looked, NO_XDEV refuses to enter another mount. */
	return open_at(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW,
		       0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV);
}

/* rm -r of parent/name without following symlinks or entering another
 * mount.  Entries that vanish meanwhile are fine. */
static int rm_tree(int parent, const char *name, int depth)
{
	if (depth > RM_DEPTH_MAX) {
		errno = ELOOP;
		return -1;
	}
	/* Readdir while unlinking may miss entries on some filesystems: a
	 * couple of extra passes before giving up with ENOTEMPTY. */
	for (int pass = 0;; pass++) {
		int fd = open_child_dir(parent, name);
		if (fd < 0)
			return errno == ENOENT ? 0 : -1;
		cleanup_closedir DIR *d = fdopendir(fd);
		if (!d) {
			close(fd);
			return -1;
		}
		struct dirent *de;
		for (errno = 0; (de = readdir(d)); errno = 0) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			int isdir = de->d_type == DT_DIR;
			if (de->d_type == DT_UNKNOWN) {
				struct stat st;
				if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
					if (errno == ENOENT)
						continue;
					return -1;
				}
				isdir = S_ISDIR(st.st_mode);
			}
			int r = isdir ? rm_tree(dirfd(d), de->d_name, depth + 1)
				      : unlinkat(dirfd(d), de->d_name, 0);
			if (r < 0 && errno == EISDIR) /* replaced by a directory */
				r = rm_tree(dirfd(d), de->d_name, depth + 1);
			if (r < 0 && errno != ENOENT)
				return -1;
		}
		if (errno)
			return -1;
		if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != ENOTEMPTY || pass >= 2)
			return -1;
	}
}

void init__remove_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct args a;
	struct target t = { 0 };
	int err = 0;
	cleanup_close int dirfd = -1;
	if (parse_args(l, h, payload, "remove", FLAG_RECURSIVE, &a) < 0) {
		free(a.path);
		return;
	}
	if (target_init(l, a.path, &t) < 0) {
		err = errno;
		goto out;
	}
	if (is_dot(t.name)) {
		err = EINVAL;
		goto out;
	}
	dirfd = open_dir(t.parent);
	struct stat st;
	if (dirfd < 0 || fstatat(dirfd, t.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err = errno;
		goto out;
	}
	int r;
	if (!S_ISDIR(st.st_mode))
		r = t.slash ? (errno = ENOTDIR, -1) : unlinkat(dirfd, t.name, 0);
	else if (a.flags & FLAG_RECURSIVE)
		r = rm_tree(dirfd, t.name, 0);
	else
		r = unlinkat(dirfd, t.name, AT_REMOVEDIR);
	if (r < 0)
		err = errno;
out:
	if (err == EXDEV)
		init__send_error(l, h->stream, err, "remove %s: a mount point is in the way", a.path);
	else if (err)
		init__send_error(l, h->stream, err, "remove %s: %s", a.path, init__strerror(err));
	else
		init__send_ok(l, h->stream);
	target_free(&t);
	free(a.path);
}
