/* Views of a sandbox's changes log for clients (GET .../changes?net=1&
 * exclude_hidden=1) and the scan route (POST .../changes/scan).
 *
 * The log itself (struct dchange entries, one per created, modified or
 * deleted path per scan) lives in sandboxes.c.  Clients that want "what is
 * different now from then" — generated files for an agent, the MCP
 * server's generated_files — used to fold the log themselves; the folding
 * and the filter of tool caches are here, once.
 */
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "daemon/daemon.h"

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

json_t *changes_entry_json(const struct dchange *c, char kind)
{
	json_t *o = json_object();
	json_object_set_new(o, "cursor", json_integer((json_int_t)c->cursor));
	json_object_set_new(o, "path", json_text(c->path, strlen(c->path)));
	json_object_set_new(o, "kind", json_string(json_change_kind(kind)));
	json_object_set_new(o, "type", json_string(json_file_type(c->type)));
	json_object_set_new(o, "size", json_integer((json_int_t)c->size));
	json_object_set_new(o, "source", json_string(c->source ? c->source : ""));
	return o;
}

/* One path's fold: its first kind after the cursor and its last entry. */
struct net_entry {
	char first;
	const struct dchange *last;
};

/* The net kind of a path: what it is now compared with what it was at the
 * cursor.  0 when nothing is different (created, then deleted). */
static char net_kind(const struct net_entry *e)
{
	char first = e->first, last = e->last->kind;
	if (first == 'c')
		return last == 'd' ? 0 : 'c';
	if (last == 'd')
		return 'd';
	return 'm';   /* modified; or deleted, then made again */
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
	const struct net_entry *x = a, *y = b;
	return x->last->cursor < y->last->cursor ? -1 : x->last->cursor > y->last->cursor;
}

json_t *changes_view(const struct dchange *v, size_t n, uint64_t since, unsigned flags,
		     size_t *hidden)
{
	json_t *arr = json_array();
	size_t nhidden = 0;
	if (!arr)
		return NULL;
	if (!(flags & CHANGES_NET)) {
		for (size_t i = 0; i < n; i++) {
			if (v[i].cursor <= since)
				continue;
			if ((flags & CHANGES_EXCLUDE_HIDDEN) && hidden_path(v[i].path)) {
				nhidden++;
				continue;
			}
			json_array_append_new(arr, changes_entry_json(&v[i], v[i].kind));
		}
		if (hidden)
			*hidden = nhidden;
		return arr;
	}
	/* Net: sort the entries after the cursor by path (then cursor), fold
	 * each path's run, and answer in the order of each path's last change. */
	size_t m = 0;
	const struct dchange **sorted = malloc((n ? n : 1) * sizeof(*sorted));
	struct net_entry *nets = malloc((n ? n : 1) * sizeof(*nets));
	if (!sorted || !nets) {
		free(sorted);
		free(nets);
		json_decref(arr);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (v[i].cursor > since)
			sorted[m++] = &v[i];
	qsort(sorted, m, sizeof(*sorted), by_path);
	size_t nn = 0;
	for (size_t i = 0; i < m;) {
		size_t j = i;
		while (j + 1 < m && !strcmp(sorted[j + 1]->path, sorted[i]->path))
			j++;
		struct net_entry e = { .first = sorted[i]->kind, .last = sorted[j] };
		if (net_kind(&e)) {
			if ((flags & CHANGES_EXCLUDE_HIDDEN) && hidden_path(e.last->path))
				nhidden++;
			else
				nets[nn++] = e;
		}
		i = j + 1;
	}
	qsort(nets, nn, sizeof(*nets), by_cursor);
	for (size_t i = 0; i < nn; i++)
		json_array_append_new(arr, changes_entry_json(nets[i].last, net_kind(&nets[i])));
	free(sorted);
	free(nets);
	if (hidden)
		*hidden = nhidden;
	return arr;
}

/* POST /v1/sandboxes/{id}/changes/scan: look at the workspace now and log
 * what changed since the last scan (source "scan"): what processes still
 * running in the background wrote, which is otherwise logged only when an
 * exec, a file call or a code cell ends.  Answers {"cursor"}. */
static int scan_changes(struct http_req *req)
{
	struct daemon *d = req->d;
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	int rc = dsb_scan_changes(d, s, "scan", NULL, &err);
	uint64_t cursor = 0;
	if (rc == 0) {
		pthread_mutex_lock(&s->lock);
		cursor = s->next_cursor - 1;
		pthread_mutex_unlock(&s->lock);
	}
	dsb_put(d, s);
	if (rc < 0) {
		int r = http_error_from(req, err);
		sandlot_error_free(err);
		return r;
	}
	json_t *o = json_object();
	json_object_set_new(o, "cursor", json_integer((json_int_t)cursor));
	return http_json(req, 200, o);
}

const struct http_route changes_routes[] = {
	{ "POST", "/v1/sandboxes/{}/changes/scan", HTTP_JSON, scan_changes, NULL, NULL, NULL },
	{ 0 },
};
