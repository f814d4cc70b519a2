/* The changes log: what each workspace scan found, kept per sandbox for
 * GET /v1/sandboxes/{id}/changes, bounded in bytes at every level; the
 * views of it clients ask for (net effects per path, tool caches left
 * out: so that no client folds the log itself) and POST .../changes/scan.
 *
 * The sandbox's code chooses what a scan finds (50,000 files with 3.7 KB
 * paths once grew the daemon by a gigabyte, an exec answer to 183 MiB and
 * the registry to 446 MiB), so every copy of the changes has a limit in
 * bytes, and going past one truncates instead of growing:
 *
 *   per scan     --changes-scan-bytes (8 MiB): what sandlot-init may report
 *                (each change counts its path plus 34 bytes); the scan
 *                says truncated past it.  The walk inside the sandbox is
 *                bounded too, by libsandlot (a sixteenth of the sandbox's
 *                memory), so a big tree never costs init its life.
 *   per answer   --changes-answer-bytes (8 MiB): the changes array of an
 *                exec or code result, and one page of GET .../changes, as
 *                serialised JSON.  A result cut short says
 *                changes_truncated; a page cut short says "more" and its
 *                cursor continues it.
 *   per sandbox  --changes-log-bytes (16 MiB): the log is a window of the
 *                newest entries (each counts its path, its source and
 *                about 100 bytes); older ones are forgotten, from memory
 *                and from the registry, and GET .../changes says
 *                "truncated" to a client whose cursor is older than the
 *                window.
 *   per daemon   --changes-total-bytes (256 MiB): every sandbox's log plus
 *                what scans in progress may bring (each scan reserves its
 *                report's size before it starts).  When it is full, room
 *                is made by trimming the *largest* logs first, oldest
 *                entries first; a scan that still finds no room reports
 *                less (down to 64 KiB, its floor) and says truncated.  So
 *                a sandbox that floods its own log loses its own history
 *                first, and another sandbox's scans are never refused.
 *
 * When a sandbox ends for good its log goes at once: memory, budget and
 * registry rows (the registry then gives the file space back: registry.c).
 * A paused sandbox keeps its log; it is restored at start-up.
 *
 * Locks: s->scan_lock (one scan per sandbox, also taken to drop the log)
 * → s->lock → d->db_lock; d->changes_lock is a leaf.  Eviction of other
 * sandboxes' logs runs with no s->lock held.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"

/* What an entry costs besides its strings: the struct in the array and
 * the allocator's headers of its two strings. */
#define ENTRY_OVERHEAD (sizeof(struct dchange) + 32)
/* A scan always gets this much of the budget, full or not. */
#define SCAN_FLOOR ((uint64_t)64 << 10)
/* After freeing this much, hand the memory back to the system. */
#define TRIM_AFTER ((uint64_t)4 << 20)

static uint64_t entry_cost(const char *path, const char *source)
{
	return strlen(path) + 1 + strlen(source) + 1 + ENTRY_OVERHEAD;
}

static json_t *change_json(const struct dchange *c)
{
	json_t *o = json_object();
	json_object_set_new(o, "cursor", json_integer((json_int_t)c->cursor));
	json_object_set_new(o, "path", json_text(c->path, strlen(c->path)));
	json_object_set_new(o, "kind", json_string(json_change_kind(c->kind)));
	json_object_set_new(o, "type", json_string(json_file_type(c->type)));
	json_object_set_new(o, "size", json_integer((json_int_t)c->size));
	json_object_set_new(o, "source", json_string(c->source ? c->source : ""));
	return o;
}

/* Serialised size of one entry in an array (the comma included). */
static size_t json_size(const json_t *o)
{
	return json_dumpb(o, NULL, 0, JSON_COMPACT) + 1;
}

/* ---- the daemon-wide budget --------------------------------------------- */

static void budget_add(struct daemon *d, int64_t delta)
{
	pthread_mutex_lock(&d->changes_lock);
	if (delta < 0 && (uint64_t)-delta > d->changes_used)
		d->changes_used = 0;
	else
		d->changes_used += (uint64_t)delta;
	pthread_mutex_unlock(&d->changes_lock);
}

static uint64_t budget_used(struct daemon *d)
{
	pthread_mutex_lock(&d->changes_lock);
	uint64_t u = d->changes_used;
	pthread_mutex_unlock(&d->changes_lock);
	return u;
}

static uint64_t freed_since_trim; /* atomic: bytes freed since malloc_trim */

/* glibc keeps freed memory in its arenas: give it back once a good amount
 * was freed, so that the daemon's RSS comes down after a big log goes. */
static void note_freed(uint64_t n)
{
	if (__atomic_add_fetch(&freed_since_trim, n, __ATOMIC_RELAXED) >= TRIM_AFTER) {
		__atomic_store_n(&freed_since_trim, 0, __ATOMIC_RELAXED);
		malloc_trim(0);
	}
}

/* Forget the oldest entries of s's log until `amount` bytes are freed or it
 * is empty.  s->lock held.  Returns the bytes freed (the caller gives them
 * back to the budget); the registry rows go too. */
static uint64_t trim_locked(struct daemon *d, struct dsb *s, uint64_t amount)
{
	uint64_t freed = 0;
	size_t k = 0;
	while (k < s->nchanges && freed < amount) {
		struct dchange *c = &s->changes[k++];
		freed += entry_cost(c->path, c->source ? c->source : "");
		free(c->path);
		free(c->source);
	}
	if (!k)
		return 0;
	memmove(s->changes, s->changes + k, (s->nchanges - k) * sizeof(*s->changes));
	s->nchanges -= k;
	__atomic_sub_fetch(&s->changes_bytes, freed, __ATOMIC_RELAXED);
	registry_drop_changes(d, s->id, s->nchanges ? s->changes[0].cursor : s->next_cursor);
	/* A small array again: give the slots back too. */
	if (s->capchanges > 1024 && s->nchanges < s->capchanges / 4) {
		size_t cap = s->nchanges > 512 ? s->nchanges * 2 : 1024;
		struct dchange *n = realloc(s->changes, cap * sizeof(*n));
		if (n) {
			s->changes = n;
			s->capchanges = cap;
		}
	}
	return freed;
}

/* Make room for `need` more bytes: while the budget would overflow, trim
 * the largest log (its oldest entries) down towards the next largest.
 * Call with no s->lock held. */
static void budget_make_room(struct daemon *d, uint64_t need)
{
	for (int round = 0; round < 100000; round++) {
		uint64_t used = budget_used(d), total = d->cfg.changes_total_bytes;
		if (used + need <= total)
			return;
		uint64_t over = used + need - total;
		struct dsb *big = NULL;
		uint64_t first = 0, second = 0;
		pthread_mutex_lock(&d->lock);
		for (size_t i = 0; i < d->nsbs; i++) {
			uint64_t b = __atomic_load_n(&d->sbs[i]->changes_bytes, __ATOMIC_RELAXED);
			if (b > first) {
				second = first;
				first = b;
				big = d->sbs[i];
			} else if (b > second) {
				second = b;
			}
		}
		if (big)
			dsb_hold(big);
		pthread_mutex_unlock(&d->lock);
		if (!big)
			return; /* only reservations left: nothing to trim */
		/* Down to the next largest at most, so that equals share. */
		uint64_t amount = first - second;
		if (amount > over)
			amount = over;
		if (amount < SCAN_FLOOR)
			amount = over < SCAN_FLOOR ? over : SCAN_FLOOR;
		pthread_mutex_lock(&big->lock);
		uint64_t freed = trim_locked(d, big, amount);
		pthread_mutex_unlock(&big->lock);
		budget_add(d, -(int64_t)freed);
		if (freed) {
			daemon_log("changes_trimmed", "sandbox=%s bytes=%llu reason=daemon_budget", big->id,
				   (unsigned long long)freed);
			note_freed(freed);
		}
		dsb_release(d, big);
		if (!freed)
			return;
	}
}

/* Reserve what a scan may bring: --changes-scan-bytes if the budget has
 * room (made by trimming), less if not, never under SCAN_FLOOR. */
static uint64_t budget_reserve(struct daemon *d)
{
	uint64_t want = d->cfg.changes_scan_bytes;
	budget_make_room(d, want);
	pthread_mutex_lock(&d->changes_lock);
	uint64_t total = d->cfg.changes_total_bytes, used = d->changes_used;
	uint64_t grant = used + want <= total ? want : total > used ? total - used : 0;
	if (grant < SCAN_FLOOR)
		grant = SCAN_FLOOR;
	d->changes_used += grant;
	pthread_mutex_unlock(&d->changes_lock);
	return grant;
}

/* ---- scanning ----------------------------------------------------------- */

int dsb_scan_changes(struct daemon *d, struct dsb *s, const char *source, json_t **out,
		     int *truncated, sandlot_error_t **err)
{
	if (out)
		*out = NULL;
	if (truncated)
		*truncated = 0;
	if (!source)
		source = "";
	pthread_mutex_lock(&s->scan_lock);
	/* Not once it is ending: its log is being dropped (or kept, paused). */
	pthread_mutex_lock(&s->lock);
	int live = s->sb && s->state == DSB_RUNNING;
	pthread_mutex_unlock(&s->lock);
	if (!live) {
		pthread_mutex_unlock(&s->scan_lock);
		return sandlot__error(err, EPIPE, "sandbox %s has ended", s->id);
	}
	uint64_t grant = budget_reserve(d);
	/* The scan's report is bounded in init's payload bytes (grant); the
	 * log counts entries a little more generously (entry_cost), and that
	 * difference is settled below. */
	sandlot_changes_t ch = { .size = sizeof(ch) };
	if (sandlot_changes_scan_max(s->sb, grant, &ch, err) < 0) {
		budget_add(d, -(int64_t)grant);
		pthread_mutex_unlock(&s->scan_lock);
		return -1;
	}
	int64_t now = daemon_now_ms();
	json_t *arr = out ? json_array() : NULL;
	uint64_t answer = 2, added = 0, trimmed = 0;
	int cut = 0;
	pthread_mutex_lock(&s->lock);
	if (s->nchanges + ch.count > s->capchanges) {
		size_t cap = s->capchanges ? s->capchanges : 64;
		while (cap < s->nchanges + ch.count)
			cap *= 2;
		struct dchange *n = realloc(s->changes, cap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&s->lock);
			pthread_mutex_unlock(&s->scan_lock);
			budget_add(d, -(int64_t)grant);
			sandlot_changes_free(&ch);
			json_decref(arr);
			return sandlot__error(err, ENOMEM, "out of memory");
		}
		s->changes = n;
		s->capchanges = cap;
	}
	size_t first = s->nchanges;
	for (size_t i = 0; i < ch.count; i++) {
		struct dchange *c = &s->changes[s->nchanges];
		c->cursor = s->next_cursor++;
		c->kind = (char)ch.items[i].kind;
		c->type = (char)ch.items[i].type;
		c->size = ch.items[i].size;
		c->path = ch.items[i].path; /* taken over */
		ch.items[i].path = NULL;
		c->source = strdup(source);
		c->at_ms = now;
		if (!c->source) {
			free(c->path);
			s->next_cursor--;
			cut = 1;
			continue;
		}
		s->nchanges++;
		added += entry_cost(c->path, c->source);
		if (arr && !cut) {
			json_t *o = change_json(c);
			size_t n = o ? json_size(o) : 0;
			if (!o || answer + n > d->cfg.changes_answer_bytes) {
				json_decref(o);
				cut = 1;
			} else {
				json_array_append_new(arr, o);
				answer += n;
			}
		}
	}
	__atomic_add_fetch(&s->changes_bytes, added, __ATOMIC_RELAXED);
	/* Persist the new entries while they are still where we put them. */
	if (s->nchanges > first)
		registry_add_changes(d, s, s->changes + first, s->nchanges - first);
	uint64_t bytes = __atomic_load_n(&s->changes_bytes, __ATOMIC_RELAXED);
	if (bytes > d->cfg.changes_log_bytes)
		trimmed = trim_locked(d, s, bytes - d->cfg.changes_log_bytes);
	pthread_mutex_unlock(&s->lock);
	/* The reservation becomes what the log really grew by. */
	budget_add(d, (int64_t)added - (int64_t)trimmed - (int64_t)grant);
	if (trimmed)
		note_freed(trimmed);
	budget_make_room(d, 0);
	pthread_mutex_unlock(&s->scan_lock);
	if (truncated)
		*truncated = ch.truncated || cut;
	sandlot_changes_free(&ch);
	if (out)
		*out = arr;
	return 0;
}

/* ---- ending ------------------------------------------------------------- */

/* Free the entries (s->lock held or s unreachable); the bytes they held. */
static uint64_t free_entries(struct dsb *s)
{
	for (size_t i = 0; i < s->nchanges; i++) {
		free(s->changes[i].path);
		free(s->changes[i].source);
	}
	free(s->changes);
	s->changes = NULL;
	s->nchanges = s->capchanges = 0;
	return __atomic_exchange_n(&s->changes_bytes, 0, __ATOMIC_RELAXED);
}

void dsb_changes_release(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&s->scan_lock);
	pthread_mutex_lock(&s->lock);
	int had = s->nchanges > 0;
	uint64_t freed = free_entries(s);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&s->scan_lock);
	registry_drop_changes(d, s->id, UINT64_MAX);
	budget_add(d, -(int64_t)freed);
	if (had)
		note_freed(freed);
}

void dsb_changes_free(struct daemon *d, struct dsb *s)
{
	uint64_t freed = free_entries(s);
	if (d)
		budget_add(d, -(int64_t)freed);
}

int dsb_changes_restore(struct daemon *d, struct dsb *s, struct dchange *c)
{
	if (s->nchanges == s->capchanges) {
		size_t cap = s->capchanges ? s->capchanges * 2 : 64;
		struct dchange *n = realloc(s->changes, cap * sizeof(*n));
		if (!n)
			return -1;
		s->changes = n;
		s->capchanges = cap;
	}
	uint64_t cost = entry_cost(c->path, c->source ? c->source : "");
	s->changes[s->nchanges++] = *c;
	__atomic_add_fetch(&s->changes_bytes, cost, __ATOMIC_RELAXED);
	budget_add(d, (int64_t)cost);
	return 0;
}

void changes_budget_enforce(struct daemon *d)
{
	budget_make_room(d, 0);
}

uint64_t changes_budget_in_use(struct daemon *d)
{
	return budget_used(d);
}

/* ---- GET /v1/sandboxes/{id}/changes --------------------------------------- */

int daemon_query_flag(struct http_req *req, const char *name)
{
	const char *v = http_query(req, name);
	if (!v || !strcmp(v, "0") || !strcmp(v, "false"))
		return 0;
	if (!strcmp(v, "1") || !strcmp(v, "true"))
		return 1;
	http_error(req, 400, "bad_request", "%s must be 0 or 1", name);
	return -1;
}

/* A cursor query parameter into *out (left alone when absent): 0, or -1
 * after answering 400 naming it. */
static int cursor_param(struct http_req *req, const char *name, uint64_t *out)
{
	const char *v = http_query(req, name);
	if (!v)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (!*v || *end || errno || v[0] == '-') {
		http_error(req, 400, "bad_request", "invalid %s \"%.64s\": expected a whole number (a cursor)",
			   name, v);
		return -1;
	}
	*out = n;
	return 0;
}

/* Whether a path has a component starting with "." or named __pycache__:
 * caches and settings tools write (~/.cache/fontconfig, ~/.cache/matplotlib,
 * ~/.config, pip's and Python's caches), not results. */
static int hidden_path(const char *path)
{
	for (const char *p = path; (p = strchr(p, '/')); p++) {
		if (p[1] == '.')
			return 1;
		if (!strncmp(p + 1, "__pycache__", 11) && (p[12] == '/' || !p[12]))
			return 1;
	}
	return 0;
}

/* One entry of an answer: a log entry, shown with `kind` (its own, or its
 * path's net kind). */
struct shown {
	const struct dchange *c;
	char kind;
};

/* The net kind of a path whose first entry after the base had kind
 * `first` and whose last entry had kind `last`: what it is now compared
 * with what it was at the base.  0 when nothing is different (created,
 * then deleted again). */
static char net_kind(char first, char last)
{
	if (first == 'c')
		return last == 'd' ? 0 : 'c';
	if (last == 'd')
		return 'd';
	return 'm'; /* modified; or deleted, then made again */
}

static int by_path(const void *a, const void *b)
{
	const struct dchange *x = *(const struct dchange *const *)a;
	const struct dchange *y = *(const struct dchange *const *)b;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->cursor < y->cursor ? -1 : x->cursor > y->cursor;
}

static int by_cursor(const void *a, const void *b)
{
	const struct shown *x = a, *y = b;
	return x->c->cursor < y->c->cursor ? -1 : x->c->cursor > y->c->cursor;
}

/* The net view of v[0..n) (oldest first) since cursor `base`: one entry per
 * path changed after it, with its net kind and its last entry, for the
 * paths whose last entry is after `after`, in the order of those last
 * entries.  *out (free() it; NULL when empty) and *count; -1 on ENOMEM.
 * The caller holds the sandbox's lock while it uses them. */
static int net_view(const struct dchange *v, size_t n, uint64_t base, uint64_t after,
		    struct shown **view, size_t *count)
{
	*view = NULL;
	*count = 0;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		m += v[i].cursor > base;
	if (!m)
		return 0;
	const struct dchange **sorted = malloc(m * sizeof(*sorted));
	struct shown *out = malloc(m * sizeof(*out));
	if (!sorted || !out) {
		free(sorted);
		free(out);
		return -1;
	}
	m = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i].cursor > base)
			sorted[m++] = &v[i];
	qsort(sorted, m, sizeof(*sorted), by_path);
	size_t k = 0;
	for (size_t i = 0; i < m;) {
		size_t j = i;
		while (j + 1 < m && !strcmp(sorted[j + 1]->path, sorted[i]->path))
			j++;
		char kind = net_kind(sorted[i]->kind, sorted[j]->kind);
		if (kind && sorted[j]->cursor > after)
			out[k++] = (struct shown){ sorted[j], kind };
		i = j + 1;
	}
	free(sorted);
	qsort(out, k, sizeof(*out), by_cursor);
	*view = out;
	*count = k;
	return 0;
}

/* A page of the log, oldest first, at most --changes-answer-bytes of JSON
 * (domain.h; the parameters are those of GET .../changes, below). */
json_t *domain_changes_get(struct daemon *d, struct dsb *s, const struct domain_changes_query *q,
			   sandlot_error_t **err)
{
	uint64_t since = q->since, after = q->after < q->since ? q->since : q->after;
	int net = q->net, exclude_hidden = q->exclude_hidden;
	json_t *arr = json_array();
	uint64_t answer = 96, last = 0;
	size_t hidden = 0;
	int more = 0, oom = !arr;
	pthread_mutex_lock(&s->lock);
	uint64_t cursor = s->next_cursor - 1;
	uint64_t oldest = s->nchanges ? s->changes[0].cursor : s->next_cursor;
	if (since > cursor)
		since = cursor;
	if (after > cursor)
		after = cursor;
	/* The net view folds from `since`: forgotten entries after it make its
	 * kinds wrong, not only its list short. */
	int truncated = (net ? since : after) + 1 < oldest;
	struct shown *view = NULL;
	size_t nview = 0;
	if (net && !oom)
		oom = net_view(s->changes, s->nchanges, since, after, &view, &nview) < 0;
	size_t n = oom ? 0 : net ? nview : s->nchanges;
	for (size_t i = 0; i < n; i++) {
		struct shown e = net ? view[i] : (struct shown){ &s->changes[i], s->changes[i].kind };
		if (e.c->cursor <= after)
			continue;
		if (exclude_hidden && hidden_path(e.c->path)) {
			hidden++;
			last = e.c->cursor;
			continue;
		}
		json_t *o = change_json(e.c);
		if (o)
			json_object_set_new(o, "kind", json_string(json_change_kind(e.kind)));
		size_t sz = o ? json_size(o) : 0;
		if (!o || (json_array_size(arr) > 0 && answer + sz > d->cfg.changes_answer_bytes)) {
			json_decref(o);
			more = 1;
			break;
		}
		json_array_append_new(arr, o);
		answer += sz;
		last = e.c->cursor;
	}
	pthread_mutex_unlock(&s->lock);
	free(view);
	if (oom) {
		json_decref(arr);
		sandlot__error(err, ENOMEM, "out of memory folding the changes log");
		return NULL;
	}
	json_t *o = json_object();
	json_object_set_new(o, "cursor", json_integer((json_int_t)(more ? last : cursor)));
	json_object_set_new(o, "changes", arr);
	if (more)
		json_object_set_new(o, "more", json_true());
	if (exclude_hidden)
		json_object_set_new(o, "hidden", json_integer((json_int_t)hidden));
	if (truncated)
		json_object_set_new(o, "truncated", json_true());
	return o;
}

int domain_changes_scan(struct daemon *d, struct dsb *s, uint64_t *cursor, int *truncated,
			sandlot_error_t **err)
{
	*truncated = 0;
	if (dsb_scan_changes(d, s, "scan", NULL, truncated, err) < 0)
		return -1;
	pthread_mutex_lock(&s->lock);
	*cursor = s->next_cursor - 1;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- routes ------------------------------------------------------------------ */

/* GET .../changes: see domain_changes_get() for the paging rules.
 *
 *   since           the base: changes after this cursor (0: from the start).
 *   after           continues a page cut short (default: since): only
 *                   entries after this cursor.
 *   net=1           one entry per path with its net effect since `since`
 *                   (created, modified, deleted; created-then-deleted left
 *                   out) and the fields of its last entry, ordered by
 *                   those last entries; `after` then keeps the paths whose
 *                   last entry is after it, so that pages of one net view
 *                   fold from the same base.
 *   exclude_hidden=1  leaves out hidden paths (hidden_path()), counted in
 *                   "hidden" (those the page covers).
 *
 * "more" says the page was cut, and its "cursor" (that of its last entry)
 * is the next page's `after`; otherwise "cursor" is the log's latest, the
 * next `since`.  "truncated" says entries the answer depends on were
 * forgotten (the window moved past them). */
static int get_changes(struct http_req *req)
{
	struct daemon *d = req->d;
	struct domain_changes_query q = { 0 };
	if (cursor_param(req, "since", &q.since) < 0)
		return 0;
	q.after = q.since;
	if (cursor_param(req, "after", &q.after) < 0)
		return 0;
	if ((q.net = daemon_query_flag(req, "net")) < 0)
		return 0;
	if ((q.exclude_hidden = daemon_query_flag(req, "exclude_hidden")) < 0)
		return 0;
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *o = domain_changes_get(d, s, &q, &err);
	dsb_put(d, s);
	if (!o) {
		http_error_from(req, err);
		sandlot_error_free(err);
		return 0;
	}
	return http_json(req, 200, o);
}

/* POST /v1/sandboxes/{id}/changes/scan: look at the workspace now and log
 * what changed since the last scan (source "scan"): what processes still
 * running in the background wrote, which is otherwise logged only when an
 * exec, a file call or a code cell ends.  Answers {"cursor"} (the log's
 * latest) and "changes_truncated" when the scan could not report all it
 * found (its bounds). */
static int scan_changes(struct http_req *req)
{
	struct daemon *d = req->d;
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	int truncated = 0;
	uint64_t cursor = 0;
	int rc = domain_changes_scan(d, s, &cursor, &truncated, &err);
	dsb_put(d, s);
	if (rc < 0) {
		int r = http_error_from(req, err);
		sandlot_error_free(err);
		return r;
	}
	json_t *o = json_object();
	json_object_set_new(o, "cursor", json_integer((json_int_t)cursor));
	if (truncated)
		json_object_set_new(o, "changes_truncated", json_true());
	return http_json(req, 200, o);
}

const struct http_route changes_routes[] = {
	{ "GET", "/v1/sandboxes/{}/changes", HTTP_NOBODY, get_changes, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/changes/scan", HTTP_JSON, scan_changes, NULL, NULL, NULL },
	{ 0 },
};
