/* Change tracking: SCAN walks the home directory and reports what was
 * created, modified or deleted since the previous SCAN.
 *
 * The walk never follows a symlink and never enters another mount.  It
 * visits each directory's entries sorted by name, depth first, which is
 * exactly the order of path_cmp() below; so a snapshot is a sorted array,
 * two snapshots compare in one merge pass, and a walk cut short by the
 * entry limit covers a well-defined prefix of that order (entries past the
 * cut are neither reported nor remembered, and TRUNCATED tells the host).
 */
#include "loop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "linux/syscalls.h"

#define SCAN_DEPTH_MAX 256
#define SCAN_BASELINE 0x1
#define CHANGES_FRAME (64 * 1024)
#define TMP_PREFIX ".sandlot-tmp-" /* FWRITE's temporary files (files.c) */

struct entry {
	char *path; /* relative to home */
	uint64_t size, ino;
	int64_t mtime, ctime;
	uint8_t type;
};

struct snapshot {
	struct entry *v;
	size_t n, cap;
	int limited;   /* the entry limit cut the walk short after v[n-1] */
	int truncated; /* something was left out (limit or depth) */
};

struct change {
	char *path; /* absolute */
	uint64_t size;
	uint8_t kind, type;
};

struct scan {
	struct change *v;
	size_t n, next;
	int truncated;
};

void init__snapshot_free(struct snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].path);
	free(s->v);
	free(s);
}

/* Path order of a depth-first walk with sorted names: '/' sorts before
 * every other byte, so "a/x" comes right after "a" and before "a-b". */
static int path_cmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned ka = *a == '/' ? 1 : *a ? (unsigned char)*a + 1u : 0;
		unsigned kb = *b == '/' ? 1 : *b ? (unsigned char)*b + 1u : 0;
		if (ka != kb)
			return ka < kb ? -1 : 1;
		if (!ka)
			return 0;
	}
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory fd (without . and .. and our temporary files),
 * sorted.  NULL-terminated array, or NULL with errno (ENOMEM only when
 * memory ran out: the caller skips unreadable directories). */
static char **read_names(int fd)
{
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return NULL;
	cleanup_closedir DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return NULL;
	}
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int err = 0;
	for (errno = 0; (de = readdir(d)); errno = 0) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strncmp(de->d_name, TMP_PREFIX, sizeof(TMP_PREFIX) - 1))
			continue;
		if (n + 2 > cap) {
			cap = cap ? cap * 2 : 64;
			char **nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				err = ENOMEM;
				break;
			}
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name))) {
			err = ENOMEM;
			break;
		}
		n++;
	}
	if (!err && errno)
		err = errno;
	if (!err && !v && !(v = calloc(1, sizeof(*v))))
		err = ENOMEM;
	if (err) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		errno = err;
		return NULL;
	}
	v[n] = NULL;
	qsort(v, n, sizeof(*v), name_cmp);
	return v;
}

static void names_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static int snap_push(struct snapshot *s, char *path, const struct stat *st)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct entry *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct entry){
		.path = path,
		.size = (uint64_t)st->st_size,
		.ino = (uint64_t)st->st_ino,
		.mtime = init__ns(st->st_mtim.tv_sec, st->st_mtim.tv_nsec),
		.ctime = init__ns(st->st_ctim.tv_sec, st->st_ctim.tv_nsec),
		.type = init__ftype(st->st_mode),
	};
	return 0;
}

/* Add the entries below directory fd (whose path relative to home is
 * prefix, "" for home itself).  Returns 0, 1 when the entry limit stopped
 * the walk, or -1 on ENOMEM.  Unreadable directories are skipped. */
static int walk(struct snapshot *s, int fd, const char *prefix, int depth)
{
	char **names = read_names(fd);
	if (!names)
		return errno == ENOMEM ? -1 : 0;
	int rc = 0;
	size_t pl = strlen(prefix);
	for (char **name = names; *name && rc == 0; name++) {
		if (s->n >= INIT_SCAN_LIMIT) {
			s->limited = s->truncated = 1;
			rc = 1;
			break;
		}
		struct stat st;
		if (fstatat(fd, *name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* removed meanwhile */
		size_t nl = strlen(*name);
		char *path = malloc(pl + 1 + nl + 1);
		if (!path) {
			rc = -1;
			break;
		}
		if (pl) {
			memcpy(path, prefix, pl);
			path[pl] = '/';
			memcpy(path + pl + 1, *name, nl + 1);
		} else {
			memcpy(path, *name, nl + 1);
		}
		if (snap_push(s, path, &st) < 0) {
			free(path);
			rc = -1;
			break;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		if (depth >= SCAN_DEPTH_MAX) {
			s->truncated = 1;
			continue;
		}
		/* One component, no symlinks, no mount crossing (EXDEV). */
		struct open_how how = {
			.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
			.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS,
		};
		int child = sys_openat2(fd, *name, &how);
		if (child < 0)
			continue;
		rc = walk(s, child, path, depth + 1);
		close(child);
	}
	names_free(names);
	return rc;
}

static struct snapshot *take_snapshot(const struct loop *l)
{
	struct open_how how = {
		.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_MAGICLINKS,
	};
	cleanup_close int fd = sys_openat2(AT_FDCWD, l->cfg->home, &how);
	if (fd < 0)
		return NULL;
	struct snapshot *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (walk(s, fd, "", 0) < 0) {
		init__snapshot_free(s);
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

/* --- comparing ---------------------------------------------------------- */

static void scan_free(struct scan *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		free(sc->v[i].path);
	free(sc->v);
	free(sc);
}

static int add_change(const struct loop *l, struct scan *sc, size_t *cap, uint8_t kind,
		      const struct entry *e, int deleted)
{
	if (sc->n == *cap) {
		size_t c = *cap ? *cap * 2 : 256;
		struct change *v = realloc(sc->v, c * sizeof(*v));
		if (!v)
			return -1;
		sc->v = v;
		*cap = c;
	}
	const char *home = l->cfg->home;
	size_t hl = strlen(home);
	if (hl == 1) /* home is "/" */
		hl = 0;
	size_t pl = strlen(e->path);
	char *p = malloc(hl + 1 + pl + 1);
	if (!p)
		return -1;
	memcpy(p, home, hl);
	p[hl] = '/';
	memcpy(p + hl + 1, e->path, pl + 1);
	sc->v[sc->n++] = (struct change){
		.path = p, .size = deleted ? 0 : e->size, .kind = kind, .type = e->type
	};
	return 0;
}

/* Whether a path lies within what both snapshots saw. */
static int comparable(const char *path, const struct snapshot *a, const struct snapshot *b)
{
	if (a->limited && a->n && path_cmp(path, a->v[a->n - 1].path) > 0)
		return 0;
	if (b->limited && b->n && path_cmp(path, b->v[b->n - 1].path) > 0)
		return 0;
	return 1;
}

/* Created, modified and deleted entries between old and new, in path
 * order.  Directories count as modified only when they changed type: their
 * contents are reported instead. */
static struct scan *compare(const struct loop *l, const struct snapshot *old,
			    const struct snapshot *new)
{
	struct scan *sc = calloc(1, sizeof(*sc));
	if (!sc)
		return NULL;
	size_t cap = 0, i = 0, j = 0;
	while (i < old->n || j < new->n) {
		int c = i == old->n ? 1 : j == new->n ? -1 : path_cmp(old->v[i].path, new->v[j].path);
		const struct entry *o = c <= 0 ? &old->v[i] : NULL;
		const struct entry *n = c >= 0 ? &new->v[j] : NULL;
		const struct entry *e = n ? n : o;
		int r = 0;
		if (comparable(e->path, old, new)) {
			if (!n)
				r = add_change(l, sc, &cap, 'd', o, 1);
			else if (!o)
				r = add_change(l, sc, &cap, 'c', n, 0);
			else if (o->type != n->type ||
				 (n->type != 'd' && (o->size != n->size || o->mtime != n->mtime ||
						     o->ctime != n->ctime || o->ino != n->ino)))
				r = add_change(l, sc, &cap, 'm', n, 0);
		}
		if (r < 0) {
			scan_free(sc);
			return NULL;
		}
		i += o != NULL;
		j += n != NULL;
	}
	return sc;
}

/* --- the stream --------------------------------------------------------- */

static void send_ok(struct loop *l, uint32_t id, int truncated)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, id);
	if (truncated)
		sl_msg_put_u8(&m, SL_TAG_TRUNCATED, 1);
	init__queue(l, &m);
}

static void scan_pump(struct loop *l, struct stream *s)
{
	struct scan *sc = s->data;
	while (l->qbytes < INIT_QUEUE_HIGH) {
		if (sc->next == sc->n) {
			send_ok(l, s->id, sc->truncated);
			init__stream_close(l, s);
			return;
		}
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_CHANGES, 0, s->id);
		while (sc->next < sc->n && m.len < CHANGES_FRAME) {
			const struct change *c = &sc->v[sc->next++];
			sl_msg_put_u8(&m, SL_TAG_KIND, c->kind);
			sl_msg_put_str(&m, SL_TAG_PATH, c->path);
			sl_msg_put_u8(&m, SL_TAG_FTYPE, c->type);
			sl_msg_put_u64(&m, SL_TAG_SIZE, c->size);
		}
		init__queue(l, &m);
	}
}

static void scan_destroy(struct stream *s)
{
	scan_free(s->data);
}

static const struct stream_ops scan_ops = {
	.pump = scan_pump,
	.destroy = scan_destroy,
};

void init__scan_baseline(struct loop *l)
{
	struct snapshot *snap = take_snapshot(l);
	if (!snap)
		return; /* the first SCAN then reports everything as created */
	init__snapshot_free(l->baseline);
	l->baseline = snap;
}

void init__scan_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	uint32_t flags = 0;
	struct sl_rec_iter it;
	struct sl_rec r;
	int rc;
	sl_rec_iter_init(&it, payload, h->length);
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		if (r.tag == SL_TAG_FLAGS && (sl_rec_u32(&r, &flags) < 0 || (flags & ~SCAN_BASELINE))) {
			init__send_error(l, h->stream, EINVAL, "scan: bad FLAGS");
			return;
		}
	}
	if (rc < 0) {
		init__send_error(l, h->stream, EPROTO, "scan: malformed records");
		return;
	}

	struct snapshot *snap = take_snapshot(l);
	if (!snap) {
		init__send_error(l, h->stream, errno, "scan %s: %s", l->cfg->home, strerror(errno));
		return;
	}
	struct scan *sc = NULL;
	if (!(flags & SCAN_BASELINE)) {
		static const struct snapshot empty;
		sc = compare(l, l->baseline ? l->baseline : &empty, snap);
		if (!sc) {
			init__snapshot_free(snap);
			init__send_error(l, h->stream, ENOMEM, "scan: out of memory");
			return;
		}
		sc->truncated = snap->truncated;
	}
	init__snapshot_free(l->baseline);
	l->baseline = snap;
	if (!sc) {
		send_ok(l, h->stream, snap->truncated);
		return;
	}
	struct stream *s = init__stream_new(l, h->stream, &scan_ops, sc);
	if (!s) {
		scan_free(sc);
		init__send_error(l, h->stream, ENOMEM, "scan: out of memory");
		return;
	}
	s->ready = 1;
}
