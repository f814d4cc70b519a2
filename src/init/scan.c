/* Change tracking: SCAN walks the home directory and reports what was
 * created, modified or deleted since the previous SCAN.
 *
 * The walk never follows a symlink and never enters another mount.  It
 * visits each directory's entries sorted by name, depth first, which is
 * exactly the order of path_cmp() below; so a snapshot is a sorted array,
 * two snapshots compare in one merge pass, and a walk cut short covers a
 * well-defined prefix of that order (entries past the cut are neither
 * reported nor remembered, and TRUNCATED tells the host).
 *
 * Bounded in bytes, not only in entries.  Init's memory counts against the
 * sandbox's memory limit, and the sandbox's code chooses the tree: 50,000
 * files with 3.7 KB paths made a snapshot of 185 MB, the baseline and the
 * new snapshot and the list of changes three of them, and the OOM killer
 * took init — and with it the sandbox and its workspace.  So:
 *
 *   - a snapshot may use at most `memory` bytes (the SCAN's MEMORY record;
 *     the host derives it from the sandbox's memory limit), counting each
 *     entry's path and bookkeeping and the names of directories still to
 *     be walked; past that, or past INIT_SCAN_LIMIT entries, the walk stops
 *     (TRUNCATED) — reading a directory keeps only the names that can still
 *     fit, so a directory of millions of names costs no more;
 *   - the changes are not collected: the stream merges the two snapshots
 *     lazily, frame by frame, as the host reads them;
 *   - at most `max_bytes` of CHANGES payload are sent (the SCAN's MAX_BYTES
 *     record); past that the report stops (TRUNCATED) — the new snapshot is
 *     the baseline all the same, so the next SCAN reports only what changes
 *     after this one, and finds it.
 *
 * Init therefore holds at most two snapshots (the baseline and the new one,
 * while the report is being sent), each under `memory` bytes.
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
/* When the host sends no MAX_BYTES / MEMORY (an older host). */
#define SCAN_DEFAULT_MAX_BYTES ((uint64_t)8 << 20)
#define SCAN_DEFAULT_MEMORY ((uint64_t)16 << 20)
#define SCAN_MEMORY_MIN ((uint64_t)64 << 10)
/* What one entry or one pending name costs besides its string: the array
 * slot or pointer and the allocator's header. */
#define ENTRY_COST (sizeof(struct entry) + 16)
#define NAME_COST (sizeof(char *) + 16)
/* The payload bytes of one change group besides its path: the KIND, FTYPE
 * and SIZE records and the PATH record's header. */
#define CHANGE_RECORDS (7 + 6 + 7 + 14)

struct entry {
	char *path; /* relative to home */
	uint64_t size, ino;
	int64_t mtime, ctime;
	uint8_t type;
};

struct snapshot {
	int refs;      /* the loop's baseline and scan streams */
	struct entry *v;
	size_t n, cap;
	uint64_t memory;  /* the budget */
	uint64_t used;    /* entries, counted as their strings + ENTRY_COST */
	uint64_t pending; /* names read but not walked yet, + NAME_COST each */
	int limited;   /* a limit cut the walk short after v[n-1] */
	int truncated; /* something was left out (a limit or the depth) */
};

/* The report: a lazy merge of two snapshots. */
struct scan {
	struct snapshot *old, *new; /* one reference each */
	size_t i, j;
	uint64_t sent, max_bytes;   /* CHANGES payload so far / at most */
	int cut;                    /* max_bytes stopped the report */
	char *buf;                  /* room for one absolute path */
	size_t buf_cap;
};

static struct snapshot *snapshot_ref(struct snapshot *s)
{
	if (s)
		s->refs++;
	return s;
}

void init__snapshot_free(struct snapshot *s)
{
	if (!s || --s->refs > 0)
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

/* --- reading a directory within the budget ------------------------------- */

/* The names kept while reading a directory: a max-heap by strcmp, so that
 * when the budget is exceeded the largest name goes — what remains is the
 * longest prefix, in sorted order, that fits. */
struct names {
	char **v;
	size_t n, cap;
	uint64_t bytes;      /* sum of strlen + 1 + NAME_COST */
	size_t max_n;        /* at most this many */
	uint64_t max_bytes;  /* and this many bytes */
	int dropped;         /* some name did not fit */
};

static uint64_t name_cost(const char *name)
{
	return strlen(name) + 1 + NAME_COST;
}

static void heap_up(char **v, size_t k)
{
	while (k > 0) {
		size_t p = (k - 1) / 2;
		if (strcmp(v[p], v[k]) >= 0)
			break;
		char *t = v[p];
		v[p] = v[k];
		v[k] = t;
		k = p;
	}
}

static void heap_down(char **v, size_t n, size_t k)
{
	for (;;) {
		size_t l = 2 * k + 1, r = l + 1, m = k;
		if (l < n && strcmp(v[l], v[m]) > 0)
			m = l;
		if (r < n && strcmp(v[r], v[m]) > 0)
			m = r;
		if (m == k)
			return;
		char *t = v[m];
		v[m] = v[k];
		v[k] = t;
		k = m;
	}
}

static void names_pop_max(struct names *ns)
{
	ns->bytes -= name_cost(ns->v[0]);
	free(ns->v[0]);
	ns->v[0] = ns->v[--ns->n];
	heap_down(ns->v, ns->n, 0);
	ns->dropped = 1;
}

/* Offer one name.  0, or -1 on ENOMEM. */
static int names_offer(struct names *ns, const char *name)
{
	uint64_t cost = name_cost(name);
	int full = ns->n >= ns->max_n || ns->bytes + cost > ns->max_bytes;
	if (full && (ns->n == 0 || strcmp(name, ns->v[0]) >= 0)) {
		ns->dropped = 1; /* sorts after everything kept: cannot fit */
		return 0;
	}
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		char **v = realloc(ns->v, cap * sizeof(*v));
		if (!v)
			return -1;
		ns->v = v;
		ns->cap = cap;
	}
	if (!(ns->v[ns->n] = strdup(name)))
		return -1;
	ns->bytes += cost;
	heap_up(ns->v, ns->n++);
	while (ns->n > 0 && (ns->n > ns->max_n || ns->bytes > ns->max_bytes))
		names_pop_max(ns);
	return 0;
}

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory fd (without . and .. and our temporary files),
 * sorted, at most max_n of them and max_bytes of name_cost(): the smallest
 * ones.  0 (ns->dropped says if some did not fit), or -1 with errno
 * (ENOMEM only when memory ran out: the caller skips unreadable
 * directories). */
static int read_names(int fd, struct names *ns)
{
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -1;
	cleanup_closedir DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -1;
	}
	struct dirent *de;
	for (errno = 0; (de = readdir(d)); errno = 0) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strncmp(de->d_name, TMP_PREFIX, sizeof(TMP_PREFIX) - 1))
			continue;
		if (names_offer(ns, de->d_name) < 0) {
			errno = ENOMEM;
			break;
		}
	}
	if (errno) {
		int e = errno;
		names_free(ns);
		memset(ns, 0, sizeof(*ns));
		errno = e;
		return -1;
	}
	if (ns->n > 1)
		qsort(ns->v, ns->n, sizeof(*ns->v), name_cmp);
	return 0;
}

/* --- walking --------------------------------------------------------------- */

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
	s->used += strlen(path) + 1 + ENTRY_COST;
	return 0;
}

/* What may still be spent (entries and pending names). */
static uint64_t budget_left(const struct snapshot *s)
{
	uint64_t spent = s->used + s->pending;
	return spent < s->memory ? s->memory - spent : 0;
}

static void snap_limit(struct snapshot *s)
{
	s->limited = s->truncated = 1;
}

/* Add the entries below directory fd (whose path relative to home is
 * prefix, "" for home itself).  Returns 0, 1 when a limit stopped the
 * walk, or -1 on ENOMEM.  Unreadable directories are skipped. */
static int walk(struct snapshot *s, int fd, const char *prefix, int depth)
{
	if (s->n >= INIT_SCAN_LIMIT || budget_left(s) == 0) {
		snap_limit(s);
		return 1;
	}
	struct names ns = {
		.max_n = INIT_SCAN_LIMIT - s->n,
		.max_bytes = budget_left(s),
	};
	if (read_names(fd, &ns) < 0)
		return errno == ENOMEM ? -1 : 0;
	s->pending += ns.bytes;
	int rc = 0;
	size_t pl = strlen(prefix), k = 0;
	for (; k < ns.n && rc == 0; k++) {
		const char *name = ns.v[k];
		size_t nl = strlen(name);
		/* This name's pending cost becomes an entry's. */
		s->pending -= name_cost(name);
		if (s->n >= INIT_SCAN_LIMIT || pl + 1 + nl + 1 + ENTRY_COST > budget_left(s)) {
			snap_limit(s);
			rc = 1;
			k++;
			break;
		}
		struct stat st;
		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* removed meanwhile */
		char *path = malloc(pl + 1 + nl + 1);
		if (!path) {
			rc = -1;
			k++;
			break;
		}
		if (pl) {
			memcpy(path, prefix, pl);
			path[pl] = '/';
			memcpy(path + pl + 1, name, nl + 1);
		} else {
			memcpy(path, name, nl + 1);
		}
		if (snap_push(s, path, &st) < 0) {
			free(path);
			rc = -1;
			k++;
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
		int child = sys_openat2(fd, name, &how);
		if (child < 0)
			continue;
		rc = walk(s, child, path, depth + 1);
		close(child);
	}
	/* Names not walked give their pending bytes back. */
	for (; k < ns.n; k++)
		s->pending -= name_cost(ns.v[k]);
	/* Names that did not fit sort after every one walked: the walk ends
	 * here, as it would have at the first of them. */
	if (rc == 0 && ns.dropped) {
		snap_limit(s);
		rc = 1;
	}
	names_free(&ns);
	return rc;
}

static struct snapshot *take_snapshot(const struct loop *l, uint64_t memory)
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
	s->refs = 1;
	s->memory = memory;
	if (walk(s, fd, "", 0) < 0) {
		init__snapshot_free(s);
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

/* --- comparing, lazily ------------------------------------------------------ */

/* Whether a path lies within what both snapshots saw. */
static int comparable(const char *path, const struct snapshot *a, const struct snapshot *b)
{
	if (a->limited && a->n && path_cmp(path, a->v[a->n - 1].path) > 0)
		return 0;
	if (b->limited && b->n && path_cmp(path, b->v[b->n - 1].path) > 0)
		return 0;
	return 1;
}

/* The next change at or after (sc->i, sc->j), in path order; advances past
 * it.  Returns 0 at the end.  Directories count as modified only when they
 * changed type: their contents are reported instead. */
static int next_change(struct scan *sc, uint8_t *kind, const struct entry **e)
{
	const struct snapshot *old = sc->old, *new = sc->new;
	while (sc->i < old->n || sc->j < new->n) {
		int c = sc->i == old->n ? 1
			: sc->j == new->n ? -1
			: path_cmp(old->v[sc->i].path, new->v[sc->j].path);
		const struct entry *o = c <= 0 ? &old->v[sc->i] : NULL;
		const struct entry *n = c >= 0 ? &new->v[sc->j] : NULL;
		sc->i += o != NULL;
		sc->j += n != NULL;
		if (!comparable(n ? n->path : o->path, old, new))
			continue;
		if (!n) {
			*kind = 'd', *e = o;
			return 1;
		}
		if (!o) {
			*kind = 'c', *e = n;
			return 1;
		}
		if (o->type != n->type ||
		    (n->type != 'd' && (o->size != n->size || o->mtime != n->mtime ||
					o->ctime != n->ctime || o->ino != n->ino))) {
			*kind = 'm', *e = n;
			return 1;
		}
	}
	return 0;
}

/* home + "/" + rel in sc->buf; NULL on ENOMEM. */
static const char *abs_path(const struct loop *l, struct scan *sc, const char *rel)
{
	const char *home = l->cfg->home;
	size_t hl = strlen(home);
	if (hl == 1) /* home is "/" */
		hl = 0;
	size_t need = hl + 1 + strlen(rel) + 1;
	if (need > sc->buf_cap) {
		char *b = realloc(sc->buf, need);
		if (!b)
			return NULL;
		sc->buf = b;
		sc->buf_cap = need;
	}
	memcpy(sc->buf, home, hl);
	sc->buf[hl] = '/';
	memcpy(sc->buf + hl + 1, rel, need - hl - 1);
	return sc->buf;
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

static void scan_free(struct scan *sc)
{
	init__snapshot_free(sc->old);
	init__snapshot_free(sc->new);
	free(sc->buf);
	free(sc);
}

static void scan_pump(struct loop *l, struct stream *s)
{
	struct scan *sc = s->data;
	while (l->qbytes < INIT_QUEUE_HIGH) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_CHANGES, 0, s->id);
		size_t count = 0;
		int end = 0;
		while (m.len < CHANGES_FRAME) {
			uint8_t kind;
			const struct entry *e;
			/* The position before this change: where the report
			 * stands if it does not fit. */
			size_t i = sc->i, j = sc->j;
			if (!next_change(sc, &kind, &e)) {
				end = 1;
				break;
			}
			const char *path = abs_path(l, sc, e->path);
			if (!path) {
				sl_msg_free(&m);
				init__send_error(l, s->id, ENOMEM, "scan: out of memory");
				init__stream_close(l, s);
				return;
			}
			uint64_t cost = CHANGE_RECORDS + strlen(path);
			if (sc->sent + cost > sc->max_bytes) {
				sc->i = i, sc->j = j;
				sc->cut = 1;
				end = 1;
				break;
			}
			sc->sent += cost;
			sl_msg_put_u8(&m, SL_TAG_KIND, kind);
			sl_msg_put_str(&m, SL_TAG_PATH, path);
			sl_msg_put_u8(&m, SL_TAG_FTYPE, e->type);
			sl_msg_put_u64(&m, SL_TAG_SIZE, kind == 'd' ? 0 : e->size);
			count++;
		}
		if (count)
			init__queue(l, &m);
		else
			sl_msg_free(&m);
		if (end) {
			send_ok(l, s->id, sc->new->truncated || sc->cut);
			init__stream_close(l, s);
			return;
		}
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
	uint64_t memory = l->cfg->scan_memory ? l->cfg->scan_memory : SCAN_DEFAULT_MEMORY;
	if (memory < SCAN_MEMORY_MIN)
		memory = SCAN_MEMORY_MIN;
	struct snapshot *snap = take_snapshot(l, memory);
	if (!snap)
		return; /* the first SCAN then reports everything as created */
	init__snapshot_free(l->baseline);
	l->baseline = snap;
}

void init__scan_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	uint32_t flags = 0;
	uint64_t max_bytes = SCAN_DEFAULT_MAX_BYTES, memory = SCAN_DEFAULT_MEMORY;
	struct sl_rec_iter it;
	struct sl_rec r;
	int rc;
	sl_rec_iter_init(&it, payload, h->length);
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		if (r.tag == SL_TAG_FLAGS && (sl_rec_u32(&r, &flags) < 0 || (flags & ~SCAN_BASELINE))) {
			init__send_error(l, h->stream, EINVAL, "scan: bad FLAGS");
			return;
		}
		if ((r.tag == SL_TAG_MAX_BYTES && sl_rec_u64(&r, &max_bytes) < 0) ||
		    (r.tag == SL_TAG_MEMORY && sl_rec_u64(&r, &memory) < 0)) {
			init__send_error(l, h->stream, EPROTO, "scan: malformed records");
			return;
		}
	}
	if (rc < 0) {
		init__send_error(l, h->stream, EPROTO, "scan: malformed records");
		return;
	}
	if (memory < SCAN_MEMORY_MIN)
		memory = SCAN_MEMORY_MIN;

	struct snapshot *snap = take_snapshot(l, memory);
	if (!snap) {
		init__send_error(l, h->stream, errno, "scan %s: %s", l->cfg->home, init__strerror(errno));
		return;
	}
	static struct snapshot empty = { .refs = 1 }; /* never freed: one ref too many */
	struct snapshot *old = l->baseline ? l->baseline : snapshot_ref(&empty);
	l->baseline = snap; /* the loop's reference; `old`'s passes to the scan */
	if (flags & SCAN_BASELINE) {
		init__snapshot_free(old);
		send_ok(l, h->stream, snap->truncated);
		return;
	}
	struct scan *sc = calloc(1, sizeof(*sc));
	struct stream *s = sc ? init__stream_new(l, h->stream, &scan_ops, sc) : NULL;
	if (!s) {
		free(sc);
		init__snapshot_free(old);
		init__send_error(l, h->stream, ENOMEM, "scan: out of memory");
		return;
	}
	sc->old = old;
	sc->new = snapshot_ref(snap);
	sc->max_bytes = max_bytes;
	s->ready = 1;
}
