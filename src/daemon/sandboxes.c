/* The sandbox table, creating and listing sandboxes, the reaper and the
 * start-up's recovery: the domain layer's side of them (domain.h; the
 * routes are sandbox_routes.c, the state changes lifecycle.c, the changes
 * log changes.c).
 *
 * The table (d->sbs, under d->lock) holds every live sandbox and the ended
 * ones of the last hour (at most MAX_ENDED of them), so that GET on an
 * expired id says why it ended.  Each entry is reference counted: the
 * table holds one reference, every borrower (domain_sandbox_get,
 * domain_sandbox_find, dsb_hold) another.
 *
 * Using a sandbox's libsandlot handle (s->sb) safely: a borrower marks the
 * sandbox busy (domain_sandbox_get, dsb_busy) for as long as it may touch
 * s->sb.  An ending sandbox (dsb_end, lifecycle.c) first stops new
 * borrowers (its state changes under s->lock, after which
 * domain_sandbox_get fails with DOMAIN_EENDED), kills its init — so
 * every library call still running on it fails promptly with EPIPE — and
 * destroys the handle only once busy has dropped to 0.  If that takes
 * longer than END_WAIT_MS (say, an upload whose client sends slowly), the
 * destroy is left to the reaper thread, which does it as soon as the last
 * borrower lets go.  Destroying is never done on libsandlot's I/O thread
 * (where exec callbacks, and so dsb_busy(-1), may run).
 *
 * "Idle" is busy == 0 since last_active_ms: no API call on the sandbox in
 * progress and no command running.  Reads of the sandbox's own record
 * (GET /v1/sandboxes/{id}, the list) are not activity: they would otherwise
 * keep every watched sandbox alive.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/parse.h"
#include "common/sbid.h"
#include "daemon/node.h"
#include "common/util.h"
#include "core/private.h"
#include "daemon/archives.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "core/teardown.h"

#define RETAIN_ENDED_MS (3600ll * 1000)
#define MAX_ENDED 10000
#define MAX_TTL_S (10u * 365 * 24 * 3600)
#define MAX_ENV 1024
#define MAX_ENV_ENTRY (32u * 1024)
#define MAX_META 64
#define MAX_META_KEY 128
#define MAX_META_VALUE 1024
#define MAX_LABELS 16
#define SHUTDOWN_WORKERS 16
#define TEARDOWN_WAIT_MS 10000 /* longest wait of a create for pending teardowns */

static struct daemon *g_daemon;   /* for dsb_busy/dsb_put wake-ups */
/* Set once by sandboxes_shutdown(); the reaper reads it between sandboxes,
 * outside d->lock, hence atomic. */
static int reaper_quit;

static int reaper_quitting(void)
{
	return __atomic_load_n(&reaper_quit, __ATOMIC_ACQUIRE);
}

static const char *const state_names[DSB_NSTATES] = {
	[DSB_STARTING] = "starting", [DSB_RUNNING] = "running", [DSB_EXPIRED] = "expired",
	[DSB_DELETED] = "deleted",   [DSB_LOST] = "lost",       [DSB_FAILED] = "failed",
	[DSB_PAUSED] = "paused",
};

const char *dsb_state_name(enum dsb_state s)
{
	return (unsigned)s < DSB_NSTATES ? state_names[s] : "unknown";
}

/* Either shape of common/sbid.h, whatever node made it. */
static int valid_id(const char *id)
{
	return id && sandlot__sbid_parse(id, strlen(id), NULL);
}

/* ---- table and references ---------------------------------------------- */

struct dsb *dsb_alloc(const char *id)
{
	struct dsb *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	snprintf(s->id, sizeof(s->id), "%s", id);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->scan_lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->state = DSB_STARTING;
	s->options = json_object();
	s->metadata = json_object();
	s->next_cursor = 1;
	s->refs = 1;
	return s;
}

static void dsb_free(struct dsb *s)
{
	if (s->sb)
		sandlot_destroy(s->sb); /* not reached in practice: ended first */
	dsb_changes_free(g_daemon, s);
	free(s->end_reason);
	json_decref(s->options);
	json_decref(s->metadata);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->scan_lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

static void table_add_locked(struct daemon *d, struct dsb *s)
{
	if (d->nsbs == d->capsbs) {
		size_t cap = d->capsbs ? d->capsbs * 2 : 256;
		struct dsb **n = realloc(d->sbs, cap * sizeof(*n));
		if (!n)
			abort(); /* a few KiB; nothing sensible to do without them */
		d->sbs = n;
		d->capsbs = cap;
	}
	d->sbs[d->nsbs++] = s;
	s->in_table = 1;
}

void dsb_table_add(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&d->lock);
	table_add_locked(d, s);
	pthread_mutex_unlock(&d->lock);
}

/* Take a reference without marking the sandbox busy; NULL if unknown. */
static struct dsb *find_ref(struct daemon *d, const char *id)
{
	struct dsb *found = NULL;
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nsbs; i++) {
		if (strcmp(d->sbs[i]->id, id) == 0) {
			found = d->sbs[i];
			__atomic_add_fetch(&found->refs, 1, __ATOMIC_SEQ_CST);
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return found;
}

struct dsb *dsb_find(struct daemon *d, const char *id)
{
	return valid_id(id) ? find_ref(d, id) : NULL;
}

/* A reference on every entry (the caller releases each); *n entries. */
static struct dsb **snapshot(struct daemon *d, size_t *n)
{
	pthread_mutex_lock(&d->lock);
	struct dsb **v = malloc((d->nsbs ? d->nsbs : 1) * sizeof(*v));
	*n = 0;
	if (v) {
		for (size_t i = 0; i < d->nsbs; i++) {
			v[i] = d->sbs[i];
			__atomic_add_fetch(&v[i]->refs, 1, __ATOMIC_SEQ_CST);
		}
		*n = d->nsbs;
	}
	pthread_mutex_unlock(&d->lock);
	return v;
}

void dsb_hold(struct dsb *s)
{
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);
}

void dsb_release(struct daemon *d, struct dsb *s)
{
	if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST) == 0)
		dsb_free(s);
}

/* ENOENT for an id find_ref() did not know. */
static int error_not_found(const char *id, sandlot_error_t **err)
{
	if (!valid_id(id))
		return sandlot__error(err, ENOENT,
				      "invalid sandbox id \"%.64s\": " SANDLOT_SBID_EXPECTED,
				      id ? id : "");
	return sandlot__error(err, ENOENT, "no sandbox %s (unknown, or ended over an hour ago)", id);
}

struct dsb *domain_sandbox_find(struct daemon *d, const char *id, sandlot_error_t **err)
{
	struct dsb *s = valid_id(id) ? find_ref(d, id) : NULL;
	if (!s && !(valid_id(id) && archive_moved_error(d, id, err)))
		error_not_found(id, err);
	return s;
}

/* busy dropped by one (s->lock held). */
static void busy_down_locked(struct dsb *s)
{
	if (s->busy > 0)
		s->busy--;
	if (s->busy == 0) {
		s->last_active_ms = daemon_now_ms();
		pthread_cond_broadcast(&s->cond);
		if (s->destroy_pending && g_daemon)
			pthread_cond_signal(&g_daemon->reaper_cond); /* destroy it there */
	}
}

void dsb_put(struct daemon *d, struct dsb *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	busy_down_locked(s);
	pthread_mutex_unlock(&s->lock);
	dsb_release(d, s);
}

void dsb_touch(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	s->last_active_ms = daemon_now_ms();
	pthread_mutex_unlock(&s->lock);
}

void dsb_busy(struct dsb *s, int delta)
{
	pthread_mutex_lock(&s->lock);
	if (delta > 0) {
		s->busy += delta;
		s->last_active_ms = daemon_now_ms();
	} else {
		for (int i = 0; i < -delta; i++)
			busy_down_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
}

/* ---- JSON ------------------------------------------------------------------ */

static json_t *to_json_locked(struct dsb *s)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(s->id));
	json_object_set_new(o, "state", json_string(dsb_state_name(s->state)));
	json_object_set_new(o, "created_at", json_time(s->created_ms));
	/* No TTL runs while paused: the resume sets a new deadline. */
	json_object_set_new(o, "expires_at",
			    json_time(s->state == DSB_PAUSED ? 0 : s->expires_ms));
	json_object_set_new(o, "last_active_at", json_time(s->last_active_ms));
	json_object_set_new(o, "ended_at", json_time(s->ended_ms));
	json_object_set_new(o, "end_reason", s->end_reason ? json_string(s->end_reason) : json_null());
	json_object_set_new(o, "ttl_seconds", json_integer(s->ttl_seconds));
	json_object_set_new(o, "idle_timeout_seconds", json_integer(s->idle_timeout_seconds));
	json_object_set_new(o, "options", json_deep_copy(s->options));
	/* Which backend, and for vm the accelerator (records of older
	 * daemons: ns). */
	json_t *iso = json_object_get(s->options, "isolation");
	json_object_set_new(o, "isolation", json_is_string(iso) ? json_copy(iso) : json_string("ns"));
	json_t *accel = json_object_get(s->options, "accel");
	json_object_set_new(o, "accel", json_is_string(accel) ? json_copy(accel) : json_null());
	json_object_set_new(o, "metadata", json_deep_copy(s->metadata));
	json_object_set_new(o, "ports", ports_json_locked(s));
	json_object_set_new(o, "cursor", json_integer((json_int_t)(s->next_cursor - 1)));
	/* Kept workspace: while paused, or after expiry until retention ends. */
	json_object_set_new(o, "auto_resume", json_boolean(s->auto_resume));
	json_object_set_new(o, "paused_retention_seconds",
			    json_integer(s->paused_retention_seconds));
	json_object_set_new(o, "paused_at", json_time(s->state == DSB_PAUSED ? s->paused_ms : 0));
	json_object_set_new(o, "workspace_kept", json_boolean(s->workspace_kept));
	int64_t since = s->state == DSB_PAUSED ? s->paused_ms : s->ended_ms;
	json_object_set_new(o, "workspace_expires_at",
			    json_time(s->workspace_kept && s->paused_retention_seconds
					      ? since + (int64_t)s->paused_retention_seconds * 1000
					      : 0));
	return o;
}

json_t *dsb_to_json(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	json_t *o = to_json_locked(s);
	pthread_mutex_unlock(&s->lock);
	return o;
}

/* ---- ending ------------------------------------------------------------------ */

/* What a destroyed sandbox can leave on the host for a moment, retried here
 * (by the reaper, every second, for a minute; and at shutdown):
 * - its cgroups: libsandlot removes them when destroying it, retrying for
 *   about a second while the kernel finishes with the killed processes; on
 *   a loaded host that is sometimes not enough (sandlot__remove_leftovers());
 * - its kept workspace, still locked by a child that another creation
 *   cloned meanwhile (workspaces.c, workspace_destroyed()). */
#define LEFTOVER_RETRY_MS 60000
enum { LEFT_CGROUP = 1, LEFT_WORKSPACE = 2 };
struct leftover {
	char id[32];
	int64_t until_ms;
	int what; /* LEFT_CGROUP or LEFT_WORKSPACE */
};
static pthread_mutex_t leftover_lock = PTHREAD_MUTEX_INITIALIZER;
static struct leftover *leftovers;
static size_t nleftovers, capleftovers;

/* Append l (leftover_lock held): 0, or -1 out of memory. */
static int leftover_add_locked(const struct leftover *l)
{
	if (nleftovers == capleftovers) {
		size_t cap = capleftovers ? capleftovers * 2 : 16;
		struct leftover *n = realloc(leftovers, cap * sizeof(*n));
		if (!n)
			return -1;
		leftovers = n;
		capleftovers = cap;
	}
	leftovers[nleftovers++] = *l;
	return 0;
}

static int leftover_add(const char *id, int what)
{
	struct leftover l = { .until_ms = daemon_now_ms() + LEFTOVER_RETRY_MS, .what = what };
	snprintf(l.id, sizeof(l.id), "%s", id);
	pthread_mutex_lock(&leftover_lock);
	int rc = leftover_add_locked(&l);
	pthread_mutex_unlock(&leftover_lock);
	return rc;
}

/* sandlot__remove_leftovers() without kill: > 0 while something remains
 * (an id that is not a sandbox id has nothing to remove). */
static int leftovers_remain(const char *id, int kill)
{
	return sandlot__remove_leftovers(id, kill, NULL) > 0;
}

void leftovers_check_after_destroy(const char *id)
{
	if (leftovers_remain(id, 0))
		leftover_add(id, LEFT_CGROUP);
}

int leftovers_retry_workspace(const char *id)
{
	return leftover_add(id, LEFT_WORKSPACE);
}

/* Retry the pending removals; returns how many are still pending.  Outside
 * the lock (a workspace's removal takes the storage pool's locks); those
 * still there go back, after any added meanwhile.  Past its time, one is
 * logged and left to the next start's recovery. */
static size_t leftovers_retry_run(struct daemon *d)
{
	pthread_mutex_lock(&leftover_lock);
	struct leftover *v = leftovers;
	size_t n = nleftovers;
	leftovers = NULL;
	nleftovers = capleftovers = 0;
	pthread_mutex_unlock(&leftover_lock);
	int64_t now = daemon_now_ms();
	for (size_t i = 0; i < n; i++) {
		int late = now > v[i].until_ms, remains;
		if (v[i].what == LEFT_WORKSPACE) {
			remains = workspace_try_remove(d, v[i].id, late) == 1;
		} else {
			remains = leftovers_remain(v[i].id, 0);
			if (remains && late)
				daemon_log("cgroup_left", "level=warn sandbox=%s msg=\"could not remove "
					   "its cgroup\"", v[i].id);
		}
		if (!remains || late)
			continue;
		pthread_mutex_lock(&leftover_lock);
		int kept = leftover_add_locked(&v[i]) == 0;
		pthread_mutex_unlock(&leftover_lock);
		if (!kept && v[i].what == LEFT_WORKSPACE)
			daemon_log("workspace_remove_failed", "level=warn sandbox=%s error=\"out of "
				   "memory for a retry\"", v[i].id);
	}
	free(v);
	pthread_mutex_lock(&leftover_lock);
	size_t left = nleftovers;
	pthread_mutex_unlock(&leftover_lock);
	return left;
}

void dsb_count_states(struct daemon *d, unsigned counts[DSB_NSTATES])
{
	memset(counts, 0, sizeof(unsigned) * DSB_NSTATES);
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nsbs; i++) {
		enum dsb_state st = __atomic_load_n(&d->sbs[i]->state, __ATOMIC_RELAXED);
		if ((unsigned)st < DSB_NSTATES)
			counts[st]++;
	}
	pthread_mutex_unlock(&d->lock);
}

/* ---- create ------------------------------------------------------------------ */

void domain_create_free(struct domain_create *c)
{
	for (size_t i = 0; i < c->nenv; i++)
		free(c->env[i]);
	free(c->env);
	json_decref(c->norm);
	json_decref(c->metadata);
	network_req_free(&c->net);
	packages_req_free(&c->packages);
}

static const char *json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

static int bad(sandlot_error_t **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* EINVAL: what is wrong with the request. */
static int bad(sandlot_error_t **err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return sandlot__error(err, EINVAL, "%s", msg);
}

static int parse_size_field(const char *name, json_t *v, uint64_t *out, sandlot_error_t **err)
{
	if (json_is_integer(v)) {
		if (json_integer_value(v) <= 0)
			return bad(err, "field \"%s\" must be a positive number of bytes", name);
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		sandlot_error_t *e = NULL;
		if (sandlot__parse_size(json_string_value(v), 0, out, &e) < 0) {
			bad(err, "field \"%s\": %s", name, sandlot_error_message(e));
			sandlot_error_free(e);
			return -1;
		}
		return 0;
	}
	return bad(err, "field \"%s\" must be an integer (bytes) or a size string such as \"512M\", "
		   "not %s", name, json_type_name(v));
}

static int parse_seconds(const char *name, json_t *v, uint32_t *out, sandlot_error_t **err)
{
	if (!json_is_integer(v))
		return bad(err, "field \"%s\" must be an integer (seconds), not %s", name,
			   json_type_name(v));
	json_int_t n = json_integer_value(v);
	if (n < 0 || n > (json_int_t)MAX_TTL_S)
		return bad(err, "field \"%s\" must be between 0 and %u seconds", name, MAX_TTL_S);
	*out = (uint32_t)n;
	return 0;
}

static int parse_bool(const char *name, json_t *v, int *out, sandlot_error_t **err)
{
	if (!json_is_boolean(v))
		return bad(err, "field \"%s\" must be a boolean, not %s", name, json_type_name(v));
	*out = json_is_true(v);
	return 0;
}

/* A JSON string without embedded NUL bytes. */
static int plain_string(json_t *v)
{
	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static int meta_key_ok(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > MAX_META_KEY)
		return 0;
	for (const char *p = k; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("._-/:", *p)))
			return 0;
	return 1;
}

int domain_create_parse(struct daemon *d, json_t *body, struct domain_create *c,
			sandlot_error_t **err)
{
	memset(c, 0, sizeof(*c));
	sandlot_options_init(&c->opts);
	c->opts.data_dir = d->cfg.data_dir;
	c->opts.image = d->cfg.default_image ? d->cfg.default_image : "host";
	c->opts.isolation = d->cfg.default_isolation;
	c->ttl = d->cfg.default_ttl_s;
	c->idle = d->cfg.default_idle_s;
	c->retention = d->cfg.paused_retention_s;
	c->metadata = json_object();
	json_t *env_norm = json_object();
	double cpus = 0;
	if (body && !json_is_object(body)) {
		json_decref(env_norm);
		return bad(err, "the request body must be a JSON object, not %s", json_type_name(body));
	}
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		if (strcmp(key, "image") == 0) {
			if (!plain_string(v))
				goto wrong_type_string;
			c->opts.image = json_string_value(v);
		} else if (strcmp(key, "isolation") == 0) {
			if (!plain_string(v))
				goto wrong_type_string;
			if (strcmp(json_string_value(v), "ns") == 0) {
				c->opts.isolation = SANDLOT_ISOLATION_NS;
			} else if (strcmp(json_string_value(v), "vm") == 0) {
				c->opts.isolation = SANDLOT_ISOLATION_VM;
			} else {
				bad(err, "field \"isolation\" must be \"ns\" or \"vm\", not \"%.32s\"",
				    json_string_value(v));
				goto fail;
			}
		} else if (strcmp(key, "memory") == 0) {
			if (parse_size_field(key, v, &c->opts.memory_bytes, err) < 0)
				goto fail;
		} else if (strcmp(key, "disk") == 0) {
			if (parse_size_field(key, v, &c->opts.disk_bytes, err) < 0)
				goto fail;
			c->disk_given = 1;
		} else if (strcmp(key, "cpus") == 0) {
			if (!json_is_number(v)) {
				bad(err, "field \"cpus\" must be a number (e.g. 0.5 or 2), not %s",
				    json_type_name(v));
				goto fail;
			}
			cpus = json_number_value(v);
			if (!(cpus >= 0.001 && cpus <= 1024)) {
				bad(err, "field \"cpus\" must be between 0.001 and 1024");
				goto fail;
			}
			c->opts.cpus_milli = (uint32_t)(cpus * 1000.0 + 0.5);
		} else if (strcmp(key, "pids") == 0) {
			if (!json_is_integer(v)) {
				bad(err, "field \"pids\" must be an integer, not %s", json_type_name(v));
				goto fail;
			}
			json_int_t n = json_integer_value(v);
			if (n < 2 || n > 4194304) {
				bad(err, "field \"pids\" must be between 2 and 4194304");
				goto fail;
			}
			c->opts.pids = (uint32_t)n;
		} else if (strcmp(key, "env") == 0) {
			if (!json_is_object(v)) {
				bad(err, "field \"env\" must be an object of strings, not %s",
				    json_type_name(v));
				goto fail;
			}
			if (json_object_size(v) > MAX_ENV) {
				bad(err, "field \"env\" has more than %u entries", MAX_ENV);
				goto fail;
			}
			c->env = calloc(json_object_size(v) + 1, sizeof(char *));
			if (!c->env) {
				sandlot__error(err, ENOMEM, "out of memory");
				goto fail;
			}
			const char *ek;
			json_t *ev;
			json_object_foreach(v, ek, ev) {
				if (!plain_string(ev)) {
					bad(err, "field \"env\": the value of \"%.64s\" must be a string, not %s",
					    ek, json_type_name(ev));
					goto fail;
				}
				if (!*ek || strchr(ek, '=')) {
					bad(err, "field \"env\": invalid variable name \"%.64s\"", ek);
					goto fail;
				}
				size_t n = strlen(ek) + json_string_length(ev) + 2;
				if (n > MAX_ENV_ENTRY) {
					bad(err, "field \"env\": \"%.64s\" is longer than %u bytes", ek,
					    MAX_ENV_ENTRY);
					goto fail;
				}
				char *kv = malloc(n);
				if (!kv) {
					sandlot__error(err, ENOMEM, "out of memory");
					goto fail;
				}
				snprintf(kv, n, "%s=%s", ek, json_string_value(ev));
				c->env[c->nenv++] = kv;
				json_object_set(env_norm, ek, ev);
			}
			c->opts.env = (const char *const *)c->env;
		} else if (strcmp(key, "network") == 0) {
			network_req_free(&c->net);
			if (network_parse(v, &c->net, err) < 0)
				goto fail;
			c->opts.network = c->net.policy.mode;
			c->opts.net_allow = c->net.policy.allow;
			c->opts.net_deny = c->net.policy.deny;
		} else if (strcmp(key, "ports") == 0) {
			char msg[256];
			if (ports_parse(v, c->ports, &c->nports, msg, sizeof(msg)) < 0) {
				bad(err, "field \"ports\": %s", msg);
				goto fail;
			}
		} else if (strcmp(key, "packages") == 0) {
			packages_req_free(&c->packages);
			if (packages_parse(v, &c->packages, err) < 0)
				goto fail;
		} else if (strcmp(key, "ttl_seconds") == 0) {
			if (parse_seconds(key, v, &c->ttl, err) < 0)
				goto fail;
		} else if (strcmp(key, "idle_timeout_seconds") == 0) {
			if (parse_seconds(key, v, &c->idle, err) < 0)
				goto fail;
		} else if (strcmp(key, "paused_retention_seconds") == 0) {
			if (parse_seconds(key, v, &c->retention, err) < 0)
				goto fail;
		} else if (strcmp(key, "auto_resume") == 0) {
			if (parse_bool(key, v, &c->auto_resume, err) < 0)
				goto fail;
		} else if (strcmp(key, "wait_ready") == 0) {
			if (parse_bool(key, v, &c->wait_ready, err) < 0)
				goto fail;
		} else if (strcmp(key, "from_snapshot") == 0) {
			if (!plain_string(v))
				goto wrong_type_string;
			if (!valid_id(json_string_value(v))) {
				bad(err, "field \"from_snapshot\": invalid sandbox id \"%.64s\"",
				    json_string_value(v));
				goto fail;
			}
			c->from_snapshot = json_string_value(v);
		} else if (strcmp(key, "metadata") == 0) {
			if (!json_is_object(v)) {
				bad(err, "field \"metadata\" must be an object of strings, not %s",
				    json_type_name(v));
				goto fail;
			}
			if (json_object_size(v) > MAX_META) {
				bad(err, "field \"metadata\" has more than %u entries", MAX_META);
				goto fail;
			}
			const char *mk;
			json_t *mv;
			json_object_foreach(v, mk, mv) {
				if (!meta_key_ok(mk)) {
					bad(err, "field \"metadata\": invalid key \"%.64s\" (1 to %u characters "
					    "of A-Z a-z 0-9 . _ - / :)", mk, MAX_META_KEY);
					goto fail;
				}
				if (!plain_string(mv)) {
					bad(err, "field \"metadata\": the value of \"%s\" must be a string, "
					    "not %s", mk, json_type_name(mv));
					goto fail;
				}
				if (json_string_length(mv) > MAX_META_VALUE) {
					bad(err, "field \"metadata\": the value of \"%s\" is longer than %u "
					    "bytes", mk, MAX_META_VALUE);
					goto fail;
				}
			}
			json_decref(c->metadata);
			c->metadata = json_deep_copy(v);
		} else {
			bad(err, "unknown field \"%.64s\" (known: image, isolation, memory, cpus, pids, disk, env, "
			    "network, packages, ports, ttl_seconds, idle_timeout_seconds, metadata, "
			    "auto_resume, paused_retention_seconds, from_snapshot, wait_ready)", key);
			goto fail;
		}
		continue;
wrong_type_string:
		bad(err, "field \"%s\" must be a string, not %s", key, json_type_name(v));
		goto fail;
	}
	sandlot_error_t *e = NULL;
	if (sandlot_options_validate(&c->opts, &e) < 0) {
		bad(err, "%s", sandlot_error_message(e));
		sandlot_error_free(e);
		goto fail;
	}
	/* "network" is filled in from the sandbox once it exists (normalised). */
	c->norm = json_pack("{s:s, s:s, s:I, s:o, s:i, s:I, s:o}", "image", c->opts.image,
			    "isolation", c->opts.isolation == SANDLOT_ISOLATION_VM ? "vm" : "ns",
			    "memory", (json_int_t)c->opts.memory_bytes, "cpus",
			    c->opts.cpus_milli ? json_real(c->opts.cpus_milli / 1000.0) : json_null(),
			    "pids", (int)c->opts.pids, "disk", (json_int_t)c->opts.disk_bytes, "env",
			    env_norm);
	return c->norm ? 0 : sandlot__error(err, ENOMEM, "out of memory");
fail:
	json_decref(env_norm);
	return -1;
}

/* A cold create: the kept workspace of the new sandbox — a new one, or a
 * snapshot of from_snapshot's — with the id it goes with (into id).
 * 0, or -1 with err. */
static int create_workspace(struct daemon *d, struct domain_create *c, char id[32],
			    sandlot_error_t **err)
{
	/* (A vm sandbox's kept workspace is a disk of its own, vm-pause.h; a
	 * from_snapshot copy of one boots afresh on the copied disk, as a
	 * files-only resume does.) */
	if (!c->from_snapshot) {
		workspace_assign(d, &c->opts, id);
		return 0;
	}
	if (workspace_from_snapshot(d, c->from_snapshot, c->disk_given, &c->opts, id, err) < 0)
		return -1;
	json_object_set_new(c->norm, "disk", json_integer((json_int_t)c->opts.disk_bytes));
	json_object_set_new(c->norm, "from_snapshot", json_string(c->from_snapshot));
	return 0;
}

/* Hand e up to the caller's err (which may be NULL: then it goes). */
static void pass_error(sandlot_error_t **err, sandlot_error_t *e)
{
	if (err) {
		sandlot_error_free(*err);
		*err = e;
	} else {
		sandlot_error_free(e);
	}
}

void domain_created_free(struct domain_created *out)
{
	json_decref(out->installed);
	json_decref(out->install_error);
	out->installed = out->install_error = NULL;
}

/* A creation slot (d->ncreating) given back after a failed create. */
static void creating_done(struct daemon *d, int failed)
{
	pthread_mutex_lock(&d->lock);
	d->ncreating--;
	pthread_mutex_unlock(&d->lock);
	if (failed)
		__atomic_add_fetch(&d->m.create_failures, 1, __ATOMIC_RELAXED);
}

/* Destroy a new sandbox nobody saw, and its workspace. */
static void discard_new(struct daemon *d, sandlot_t *sb)
{
	char gone[32];
	snprintf(gone, sizeof(gone), "%s", sandlot_id(sb));
	sandlot_destroy(sb);
	workspace_remove(d, gone);
}

/* The installers' packages into the normalised options. */
static void record_packages(json_t *norm, const struct packages_req *p)
{
	json_object_set_new(norm, "packages",
			    json_pack("{s:o, s:o}", "pip", json_array(), "npm", json_array()));
	for (int m = 0; m < 2; m++) {
		const char **l = m ? p->npm : p->pip;
		json_t *a = json_object_get(json_object_get(norm, "packages"), m ? "npm" : "pip");
		for (size_t i = 0; l && l[i]; i++)
			json_array_append_new(a, json_string(l[i]));
	}
}

static struct dsb *create_admitted(struct daemon *d, struct domain_create *c,
				   struct domain_created *out, int *settled, sandlot_error_t **err);

struct dsb *domain_create(struct daemon *d, struct domain_create *c, struct domain_created *out,
			  sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&d->lock);
	unsigned live = __atomic_load_n(&d->nrunning, __ATOMIC_SEQ_CST) + d->ncreating;
	if (d->stopping) {
		pthread_mutex_unlock(&d->lock);
		sandlot__error(err, ESHUTDOWN, "sandlotd is shutting down");
		return NULL;
	}
	/* The node's capacity (node.c), before anything is allocated. */
	if (node_admit_locked(d, &c->opts, live, err) < 0) {
		pthread_mutex_unlock(&d->lock);
		return NULL;
	}
	d->ncreating++;
	pthread_mutex_unlock(&d->lock);
	int settled = 0;
	struct dsb *s = create_admitted(d, c, out, &settled, err);
	if (!settled)
		node_settle(d, &c->opts);
	return s;
}

/* domain_create() once admitted (d->ncreating counts it).  *settled: the
 * node's pending share was moved into the table (node_settle_locked). */
static struct dsb *create_admitted(struct daemon *d, struct domain_create *c,
				   struct domain_created *out, int *settled, sandlot_error_t **err)
{

	uint64_t t0 = sandlot__now_ns();
	const char *pooled = NULL; /* pool.c: a ready sandbox if it has one for these options */
	sandlot_t *sb = c->from_snapshot ? NULL : pool_take(d, &c->opts, &pooled);
	if (pooled)
		out->pool = sb ? "hit" : "miss";
	char wid[32] = "";
	sandlot_error_t *e = NULL;
	/* Answered as soon as the sandbox is started, while its init still
	 * sets itself up (start_nowait: about a third of a cold create): the
	 * caller's first request is on its way meanwhile and waits for the
	 * set-up's outcome, which it is told if the set-up failed
	 * (dsb_setup_wait).  Not when the create uses the sandbox itself
	 * (packages), nor when the caller asked to wait ("wait_ready"), nor
	 * for a vm sandbox, whose boot takes longer than any request should
	 * wait unasked. */
	int nowait = !sb && !c->packages.any && !c->wait_ready &&
		     c->opts.isolation != SANDLOT_ISOLATION_VM;
	c->opts.start_nowait = nowait;
	for (int attempt = 0; !sb && attempt < 2; attempt++) {
		if (create_workspace(d, c, wid, err) < 0) {
			creating_done(d, 0);
			return NULL;
		}
		sb = sandlot_create(&c->opts, &e);
		if (sb)
			break;
		workspace_remove(d, wid);
		/* Short of what ended sandboxes still hold until their teardown
		 * (lifecycle.c) is done — a uid range (EAGAIN), disk reserved in
		 * the storage pool (ENOSPC): wait for it, once. */
		int st = sandlot_error_status(e);
		if (attempt > 0 || (st != EAGAIN && st != ENOSPC) ||
		    !dsb_teardowns_wait(TEARDOWN_WAIT_MS))
			break;
		sandlot_error_free(e);
		e = NULL;
	}
	double ms = (double)(sandlot__now_ns() - t0) / 1e6;
	if (!sb) {
		creating_done(d, 1);
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(e));
		daemon_log_quote(msg);
		daemon_log("create_failed", "level=warn ms=%.1f error=\"%s\"", ms, msg);
		/* EAGAIN: host capacity, e.g. every uid range in use (429). */
		pass_error(err, e);
		return NULL;
	}
	if (c->packages.any) {
		/* Before anyone can use it: a failed install is a failed create. */
		out->install_status = packages_install(d, NULL, sb, &c->packages, &out->installed,
						       &out->install_error);
		if (out->install_error) {
			discard_new(d, sb);
			creating_done(d, 1);
			const char *m = json_string_value(json_object_get(out->install_error, "message"));
			sandlot__error(err, EIO, "%s", m ? m : "installing packages failed");
			return NULL;
		}
		record_packages(c->norm, &c->packages);
	}
	struct dsb *s = dsb_alloc(sandlot_id(sb));
	if (!s) {
		discard_new(d, sb);
		creating_done(d, 0);
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	int64_t now = daemon_now_ms();
	s->sb = sb;
	s->setting_up = nowait;
	s->created_ms = now;
	s->last_active_ms = now;
	s->ttl_seconds = c->ttl;
	s->idle_timeout_seconds = c->idle;
	s->expires_ms = c->ttl ? now + (int64_t)c->ttl * 1000 : 0;
	/* Every cold create has a kept workspace (sandlot_create() made it,
	 * wid names it: no need to look); a pooled one if the pool made it
	 * so. */
	s->has_workspace = wid[0] ? 1 : workspace_exists(d, s->id);
	s->auto_resume = c->auto_resume;
	s->paused_retention_seconds = c->retention;
	json_object_set_new(c->norm, "network", network_json(sb));
	if (sandlot__accel(sb))
		json_object_set_new(c->norm, "accel", json_string(sandlot__accel(sb)));
	json_decref(s->options);
	s->options = c->norm;
	c->norm = NULL;
	json_decref(s->metadata);
	s->metadata = c->metadata;
	c->metadata = NULL;
	pthread_mutex_lock(&s->lock);
	ports_set_locked(s, c->ports, c->nports);
	pthread_mutex_unlock(&s->lock);
	if (s->nports && ports_open(s, &e) < 0) {
		/* Not published, not running: nobody used it. */
		ports_close(s);
		sandlot_destroy(s->sb);
		s->sb = NULL;
		workspace_remove(d, s->id);
		dsb_release(d, s);
		creating_done(d, 1);
		sandlot__error_wrap(&e, "expose ports");
		pass_error(err, e);
		return NULL;
	}

	pthread_mutex_lock(&s->lock);
	/* Running only now: until here the port relay hands out no
	 * connection to it (its connectors want a running sandbox). */
	s->state = DSB_RUNNING;
	registry_save(d, s);
	/* What the log line says, read before the table makes s visible: from
	 * then on a DELETE, the reaper or the shutdown may change it. */
	int init_pid = (int)sandlot__init_pid(s->sb);
	unsigned ttl = s->ttl_seconds, idle = s->idle_timeout_seconds;
	pthread_mutex_unlock(&s->lock);

	pthread_mutex_lock(&d->lock);
	d->ncreating--;
	/* In the table from now on: no longer the node's pending share. */
	node_settle_locked(d, &c->opts);
	*settled = 1;
	int stopping = d->stopping;
	if (!stopping) {
		table_add_locked(d, s); /* the table takes dsb_alloc()'s reference */
		dsb_hold(s);            /* the caller's */
		__atomic_add_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&d->lock);
	__atomic_add_fetch(&d->m.sandboxes_created, 1, __ATOMIC_RELAXED);
	daemon_log("created", "sandbox=%s ms=%.1f init_pid=%d ttl=%u idle=%u%s%s", s->id, ms,
		   init_pid, ttl, idle, pooled ? " pool=" : "", pooled ? pooled : "");
	if (nowait && !stopping)
		dsb_setup_sweep_add(d, s);
	if (stopping) {
		/* Shutdown began while we created it: it must not outlive us. */
		__atomic_add_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
		dsb_end(d, s, DSB_DELETED, "sandlotd stopped");
		dsb_release(d, s);
		sandlot__error(err, ESHUTDOWN, "sandlotd is shutting down");
		return NULL;
	}
	return s;
}

/* ---- list, get, delete, keepalive, changes ------------------------------------ */

static int by_created(const void *a, const void *b)
{
	const struct dsb *x = *(struct dsb *const *)a, *y = *(struct dsb *const *)b;
	return x->created_ms < y->created_ms ? -1 : x->created_ms > y->created_ms;
}

json_t *domain_sandbox_list(struct daemon *d, const char *state, const char *const *labels,
			    size_t nl, sandlot_error_t **err)
{
	int want = -2; /* running */
	if (state && strcmp(state, "all") == 0) {
		want = -1;
	} else if (state) {
		want = -3;
		for (int st = 0; st < DSB_NSTATES; st++)
			if (strcmp(state, dsb_state_name((enum dsb_state)st)) == 0)
				want = st;
		if (want == -3) {
			sandlot__error(err, EINVAL,
				       "invalid state \"%.64s\": expected running, paused, expired, "
				       "deleted, lost, failed or all", state);
			return NULL;
		}
	}
	if (nl > MAX_LABELS) {
		sandlot__error(err, EINVAL, "at most %u label filters", MAX_LABELS);
		return NULL;
	}
	size_t klen[MAX_LABELS];
	for (size_t i = 0; i < nl; i++) {
		const char *eq = strchr(labels[i], '=');
		if (!eq || eq == labels[i]) {
			sandlot__error(err, EINVAL, "invalid label filter \"%.64s\": expected KEY=VALUE",
				       labels[i]);
			return NULL;
		}
		klen[i] = (size_t)(eq - labels[i]);
	}
	size_t n;
	struct dsb **v = snapshot(d, &n);
	json_t *arr = v ? json_array() : NULL;
	if (!arr) {
		free(v);
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	qsort(v, n, sizeof(*v), by_created);
	for (size_t i = 0; i < n; i++) {
		struct dsb *s = v[i];
		pthread_mutex_lock(&s->lock);
		int ok = want == -1 || (want == -2 ? s->state == DSB_RUNNING : (int)s->state == want);
		/* A sandbox that moved to another node is that node's to list
		 * (archives.h): a proxy's map of moved sandboxes is built from
		 * the lists. */
		ok = ok && !archive_moved_reason(s->id, s->end_reason, NULL);
		for (size_t k = 0; ok && k < nl; k++) {
			const char *mk, *mv;
			json_t *val;
			ok = 0;
			json_object_foreach(s->metadata, mk, val) {
				mv = json_string_value(val);
				if (strlen(mk) == klen[k] && !strncmp(mk, labels[k], klen[k]) && mv &&
				    !strcmp(mv, labels[k] + klen[k] + 1)) {
					ok = 1;
					break;
				}
			}
		}
		if (ok)
			json_array_append_new(arr, to_json_locked(s));
		pthread_mutex_unlock(&s->lock);
		dsb_release(d, s);
	}
	free(v);
	return arr;
}

int domain_parse_seconds(const char *name, json_t *v, uint32_t *out, sandlot_error_t **err)
{
	return parse_seconds(name, v, out, err);
}

json_t *domain_sandbox_keepalive(struct daemon *d, const char *id, const uint32_t *ttl,
				 sandlot_error_t **err)
{
	struct dsb *s = domain_sandbox_get(d, id, err);
	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	if (ttl) {
		s->ttl_seconds = *ttl;
		s->expires_ms = *ttl ? daemon_now_ms() + (int64_t)*ttl * 1000 : 0;
	}
	s->last_active_ms = daemon_now_ms();
	registry_save(d, s);
	json_t *o = to_json_locked(s);
	pthread_mutex_unlock(&s->lock);
	dsb_put(d, s);
	return o;
}

/* ---- reaper ------------------------------------------------------------------ */

static void forget(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&d->lock);
	int found = 0;
	for (size_t i = 0; i < d->nsbs; i++) {
		if (d->sbs[i] == s) {
			d->sbs[i] = d->sbs[--d->nsbs];
			found = 1;
			break;
		}
	}
	s->in_table = 0;
	pthread_mutex_unlock(&d->lock);
	if (!found)
		return;
	registry_forget(d, s->id);
	dsb_release(d, s); /* the table's reference */
}

/* A sandbox and when it ended, read once under its lock: qsort must not
 * read ended_ms itself, which dsb_end() writes under s->lock meanwhile (a
 * data race, and an order that changes while it sorts). */
struct ended_at {
	struct dsb *s;
	int64_t ms;
};

static int by_ended(const void *a, const void *b)
{
	const struct ended_at *x = a, *y = b;
	return x->ms < y->ms ? -1 : x->ms > y->ms;
}

static void reap_once(struct daemon *d)
{
	size_t n;
	struct dsb **v = snapshot(d, &n);
	if (!v)
		return;
	int64_t now = daemon_now_ms();
	size_t nended = 0;
	for (size_t i = 0; i < n && !reaper_quitting(); i++) {
		struct dsb *s = v[i];
		enum dsb_state end_as = DSB_RUNNING;
		const char *reason = NULL;
		sandlot_t *destroy = NULL;
		int drop_log = 0, setup_check = 0;
		pthread_mutex_lock(&s->lock);
		if (s->state == DSB_RUNNING) {
			if (s->expires_ms && now >= s->expires_ms) {
				end_as = DSB_EXPIRED, reason = "ttl";
			} else if (s->idle_timeout_seconds && s->busy == 0 &&
				   now - s->last_active_ms >= (int64_t)s->idle_timeout_seconds * 1000) {
				end_as = DSB_EXPIRED, reason = "idle";
			} else if (s->sb && sandlot__ended(s->sb)) {
				/* Running: only dsb_stop() (after a state change
				 * under s->lock, which we hold) destroys s->sb. */
				end_as = DSB_FAILED, reason = "failed: the sandbox's init exited unexpectedly";
				/* Before anyone asked whether it set itself up:
				 * the set-up's error, if that is what ended it, is
				 * the reason (dsb_setup_wait, which needs s busy). */
				setup_check = s->setting_up;
				s->busy += setup_check;
			}
		} else if (!dsb_state_live(s->state)) {
			if (workspace_forgettable_locked(s))
				nended++; /* kept workspaces are bounded by their retention */
			if (s->destroy_pending && s->busy == 0) {
				destroy = s->sb;
				s->destroy_pending = 0;
			}
			/* Ended for good with a log still there (every ending path
			 * drops it already; this makes sure). */
			drop_log = s->state != DSB_PAUSED && s->nchanges > 0;
		}
		pthread_mutex_unlock(&s->lock);
		if (drop_log)
			dsb_changes_release(d, s);
		if (setup_check) {
			if (dsb_setup_wait(d, s, NULL) < 0)
				end_as = DSB_RUNNING; /* ended, with the set-up's error */
			else
				dsb_busy(s, -1);
		}
		if (end_as != DSB_RUNNING)
			dsb_end(d, s, end_as, reason);
		if (destroy) {
			sandlot_destroy(destroy);
			pthread_mutex_lock(&s->lock);
			s->sb = NULL;
			pthread_mutex_unlock(&s->lock);
			daemon_log("destroyed", "sandbox=%s deferred=1", s->id);
			leftovers_check_after_destroy(s->id);
			dsb_destroyed(d, s);
		}
		dsb_reap_paused(d, s, now);
		workspace_reap(d, s, now);
	}
	leftovers_retry_run(d);
	registry_reclaim(d);
	/* Forget ended sandboxes after an hour, and the oldest beyond MAX_ENDED
	 * (out of memory for the order: at the next round). */
	struct ended_at *order = reaper_quitting() ? NULL : calloc(n ? n : 1, sizeof(*order));
	if (order) {
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&v[i]->lock);
			order[i] = (struct ended_at){ v[i], v[i]->ended_ms };
			pthread_mutex_unlock(&v[i]->lock);
		}
		qsort(order, n, sizeof(*order), by_ended);
		size_t excess = nended > MAX_ENDED ? nended - MAX_ENDED : 0;
		for (size_t i = 0; i < n; i++) {
			struct dsb *s = order[i].s;
			pthread_mutex_lock(&s->lock);
			int old = !dsb_state_live(s->state) && !s->sb && !s->destroy_pending &&
				  workspace_forgettable_locked(s) &&
				  (excess > 0 || now - s->ended_ms >= RETAIN_ENDED_MS);
			pthread_mutex_unlock(&s->lock);
			if (old) {
				if (excess > 0)
					excess--;
				forget(d, s);
			}
		}
		free(order);
	}
	for (size_t i = 0; i < n; i++)
		dsb_release(d, v[i]);
	free(v);
}

static void *reaper_main(void *arg)
{
	struct daemon *d = arg;
	pthread_mutex_lock(&d->lock);
	while (!reaper_quitting()) {
		pthread_mutex_unlock(&d->lock);
		reap_once(d);
		pthread_mutex_lock(&d->lock);
		if (reaper_quitting())
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&d->reaper_cond, &d->lock, &ts);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

void reaper_start(struct daemon *d)
{
	g_daemon = d;
	if (pthread_create(&d->reaper, NULL, reaper_main, d) == 0)
		d->reaper_started = 1;
	else
		daemon_log("reaper", "level=error msg=\"cannot start the reaper thread\"");
}

/* ---- start-up recovery and shutdown ------------------------------------------- */

/* Storage images left by a creation that sandlotd was killed in the middle
 * of (a live sandbox's image is unlinked milliseconds after it is made), and
 * those of lost sandboxes. */
static void sweep_storage(struct daemon *d)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/storage", d->cfg.data_dir);
	cleanup_closedir DIR *dd = opendir(dir);
	if (!dd)
		return;
	struct dirent *de;
	time_t now = time(NULL);
	while ((de = readdir(dd))) {
		size_t n = strlen(de->d_name);
		if (strncmp(de->d_name, "sb-", 3) != 0 || n < 5 || strcmp(de->d_name + n - 4, ".img"))
			continue;
		char path[4500];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		char id[40];
		snprintf(id, sizeof(id), "%.*s", (int)(n - 4), de->d_name);
		struct stat st;
		struct dsb *s = find_ref(d, id);
		int ours_lost = s && s->state == DSB_LOST;
		dsb_release(d, s);
		if (ours_lost || (stat(path, &st) == 0 && now - st.st_mtime > 60)) {
			if (unlink(path) == 0)
				daemon_log("storage_removed", "path=\"%s\"", path);
		}
	}
}

void sandboxes_recover(struct daemon *d)
{
	g_daemon = d;
	size_t n;
	struct dsb **v = snapshot(d, &n);
	if (!v)
		return;
	int64_t now = daemon_now_ms();
	size_t nlost = 0, npaused = 0;
	for (size_t i = 0; i < n; i++) {
		struct dsb *s = v[i];
		pthread_mutex_lock(&s->lock);
		ports_load_locked(s);
		pthread_mutex_unlock(&s->lock);
		npaused += s->state == DSB_PAUSED;
		if (!dsb_state_live(s->state))
			continue;
		s->state = DSB_LOST;
		s->ended_ms = now;
		free(s->end_reason);
		s->end_reason = strdup("lost: sandlotd restarted");
		registry_save(d, s);
		daemon_log("lost", "level=warn sandbox=%s reason=\"sandlotd restarted\"", s->id);
		nlost++;
	}
	/* Their inits died with our connection to them (kill -9 of the previous
	 * sandlotd); give the kernel a moment to finish, then remove what they
	 * left (their cgroups) — only of ids in our registry, never someone
	 * else's. */
	/* Paused ones too: a pause the previous daemon was killed in the middle
	 * of leaves its sandbox's cgroup like a running sandbox's. */
	if (nlost || npaused) {
		uint64_t deadline = sandlot__now_ms() + 3000;
		for (int round = 0;; round++) {
			size_t left = 0;
			for (size_t i = 0; i < n; i++) {
				struct dsb *s = v[i];
				if ((s->state != DSB_LOST || s->ended_ms != now) && s->state != DSB_PAUSED)
					continue;
				/* Kill what is left only after a grace period. */
				left += leftovers_remain(s->id, sandlot__now_ms() > deadline - 1500);
			}
			if (!left || sandlot__now_ms() > deadline) {
				if (left)
					daemon_log("recover", "level=warn msg=\"cgroups of lost sandboxes remain\" "
						   "count=%zu", left);
				break;
			}
			usleep(20000);
		}
	}
	sweep_storage(d);
	workspace_recover(d);
	for (size_t i = 0; i < n; i++)
		dsb_release(d, v[i]);
	free(v);
	if (nlost || npaused)
		daemon_log("recover", "lost=%zu paused=%zu", nlost, npaused);
}

struct shutdown_work {
	struct daemon *d;
	struct dsb **v;
	size_t n, next;
};

static void *shutdown_worker(void *arg)
{
	struct shutdown_work *w = arg;
	for (;;) {
		size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_SEQ_CST);
		if (i >= w->n)
			return NULL;
		dsb_end(w->d, w->v[i], DSB_DELETED, "sandlotd stopped");
	}
}

void sandboxes_shutdown(struct daemon *d)
{
	pthread_mutex_lock(&d->lock);
	__atomic_store_n(&d->stopping, 1, __ATOMIC_RELAXED); /* read unlocked by the HTTP layer */
	__atomic_store_n(&reaper_quit, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&d->reaper_cond);
	pthread_mutex_unlock(&d->lock);
	if (d->reaper_started) {
		pthread_join(d->reaper, NULL);
		d->reaper_started = 0;
	}
	dsb_setup_sweep_stop();
	/* The teardowns queued so far finish; the queue is closed, so the
	 * ends below tear down before they return. */
	dsb_teardowns_drain();
	size_t n;
	struct dsb **v = snapshot(d, &n);
	if (!v)
		return;
	struct dsb **live = malloc((n ? n : 1) * sizeof(*live));
	size_t nl = 0;
	for (size_t i = 0; live && i < n; i++) {
		pthread_mutex_lock(&v[i]->lock);
		if (dsb_state_live(v[i]->state))
			live[nl++] = v[i];
		pthread_mutex_unlock(&v[i]->lock);
	}
	struct shutdown_work w = { d, live, nl, 0 };
	pthread_t th[SHUTDOWN_WORKERS];
	int nth = 0;
	for (; nth < SHUTDOWN_WORKERS && (size_t)nth < nl; nth++)
		if (pthread_create(&th[nth], NULL, shutdown_worker, &w) != 0)
			break;
	shutdown_worker(&w);
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	free(live);
	for (size_t i = 0; i < n; i++)
		dsb_release(d, v[i]);
	free(v);
}

void sandboxes_free(struct daemon *d)
{
	pthread_mutex_lock(&d->lock);
	struct dsb **v = d->sbs;
	size_t n = d->nsbs;
	d->sbs = NULL;
	d->nsbs = d->capsbs = 0;
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		struct dsb *s = v[i];
		pthread_mutex_lock(&s->lock);
		sandlot_t *sb = s->sb;
		s->sb = NULL;
		s->destroy_pending = 0;
		pthread_mutex_unlock(&s->lock);
		if (sb) {
			sandlot_destroy(sb);
			daemon_log("destroyed", "sandbox=%s deferred=1", s->id);
			leftovers_check_after_destroy(s->id);
			dsb_destroyed(d, s);
		}
		s->in_table = 0;
		dsb_release(d, s);
	}
	free(v);
	/* Last chance for cgroups the kernel was slow to let go of, and
	 * workspaces still locked. */
	uint64_t deadline = sandlot__now_ms() + 3000;
	while (leftovers_retry_run(d) > 0 && sandlot__now_ms() < deadline)
		usleep(50000);
	pthread_mutex_lock(&leftover_lock);
	for (size_t i = 0; i < nleftovers; i++)
		if (leftovers[i].what == LEFT_WORKSPACE)
			daemon_log("workspace_remove_failed", "level=warn sandbox=%s error=\"still in "
				   "use at the stop: the next start removes it\"", leftovers[i].id);
	free(leftovers);
	leftovers = NULL;
	nleftovers = capleftovers = 0;
	pthread_mutex_unlock(&leftover_lock);
}
