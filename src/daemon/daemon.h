/* sandlotd internals shared by its modules.
 *
 *   main.c        options, start-up (recovery), signals, shutdown
 *   http.c        libmicrohttpd server and route dispatch (http.h)
 *   registry.c    SQLite: sandboxes and their changes survive restarts
 *   sandboxes.c   the sandbox table, lifecycle routes, reaper, changes log
 *   execs.c       exec routes: buffered, NDJSON streaming, background
 *   files.c       file routes, archives (libarchive)
 *   misc.c        health, metrics, request log
 *
 * Locking: d->lock guards the table of sandboxes; each dsb has its own lock
 * for its fields.  Order: d->lock → dsb->lock → d->db_lock.  Never call
 * into libsandlot (which may block) while holding d->lock.
 */
#ifndef SANDLOT_DAEMON_H
#define SANDLOT_DAEMON_H

#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#include "sandlot.h"
#include "common/error.h"
#include "common/json.h"
#include "daemon/http.h"

struct dexec;

enum dsb_state {
	DSB_STARTING,  /* being created */
	DSB_RUNNING,
	DSB_EXPIRED,   /* ended by TTL or idle timeout */
	DSB_DELETED,   /* ended by DELETE */
	DSB_LOST,      /* was running when sandlotd died; cleaned up at restart */
	DSB_FAILED,    /* its init died unexpectedly */
	DSB_NSTATES
};
const char *dsb_state_name(enum dsb_state s);

/* One change under /home/user, as kept in the log. */
struct dchange {
	uint64_t cursor;     /* position in the sandbox's log, from 1 */
	char kind;           /* 'c' created, 'm' modified, 'd' deleted */
	char type;           /* 'f', 'd', 'l', 'o' */
	uint64_t size;
	char *path;
	char *source;        /* exec id, or "api" for file routes */
	int64_t at_ms;       /* wall clock */
};

struct dsb {
	char id[32];
	pthread_mutex_t lock;
	enum dsb_state state;
	sandlot_t *sb;              /* NULL once ended */
	int64_t created_ms;         /* wall clock, ms since the epoch */
	int64_t ended_ms;
	int64_t expires_ms;         /* absolute TTL deadline, 0 = none */
	uint32_t ttl_seconds, idle_timeout_seconds;
	int64_t last_active_ms;     /* last API call for it */
	int busy;                   /* API calls in progress + running execs */
	char *end_reason;           /* "ttl", "idle", "deleted", "lost", ... */
	json_t *options;            /* as given (normalised), for GET */
	json_t *metadata;           /* {"label": "value"} */
	/* changes log */
	pthread_mutex_t scan_lock;  /* one workspace scan at a time */
	struct dchange *changes;
	size_t nchanges, capchanges;
	uint64_t next_cursor;
	/* execs, newest first; bounded history (the oldest finished go) */
	struct dexec *execs;
	unsigned nexecs;
	int refs;                   /* lifetime: table + borrowers */
	/* sandboxes.c private */
	pthread_cond_t cond;        /* busy dropped to 0 */
	pid_t init_pid;             /* host pid of its init (our child) */
	int destroy_pending;        /* ended, but borrowers still used sb */
	int in_table;
};

struct daemon_config {
	const char *listen_unix;    /* default /run/sandlot/sandlot.sock */
	const char *listen_tcp;     /* "HOST:PORT" or NULL */
	const char *token;          /* for TCP; loaded from --token-file */
	const char *data_dir;       /* default /var/lib/sandlot */
	unsigned default_ttl_s;     /* when the request gives none; 0 = none */
	unsigned default_idle_s;
	unsigned max_sandboxes;
};

struct daemon_metrics {
	uint64_t sandboxes_created, sandboxes_ended, create_failures;
	uint64_t execs_started, execs_finished, exec_failures, exec_timeouts;
	uint64_t requests, request_errors;   /* errors: 5xx */
	uint64_t exec_ms_sum;                /* durations of finished execs */
	uint64_t exec_ms_bucket[8];          /* <=10,50,100,500,1000,5000,30000,+Inf */
	uint64_t bytes_uploaded, bytes_downloaded;
};

struct daemon {
	struct daemon_config cfg;
	pthread_mutex_t lock;
	struct dsb **sbs;           /* live and recently ended sandboxes */
	size_t nsbs, capsbs;
	sqlite3 *db;
	pthread_mutex_t db_lock;
	struct daemon_metrics m;    /* updated with __atomic builtins */
	volatile int stopping;
	int64_t started_ms;
	/* sandboxes.c private */
	unsigned nrunning;          /* running sandboxes (atomic) */
	unsigned ncreating;         /* creations in progress (under lock) */
	pthread_t reaper;
	int reaper_started;
	pthread_cond_t reaper_cond; /* with d->lock: wake the reaper */
};

int64_t daemon_now_ms(void);    /* wall clock */

/* ---- sandboxes.c -------------------------------------------------------- */

/* Look up a sandbox for an API call and take a reference that also marks it
 * busy (not idle).  On failure it answers the request itself (404
 * not_found, 410 sandbox_ended with the state and reason) and returns NULL.
 * Every successful get must be paired with dsb_put(). */
struct dsb *dsb_get(struct daemon *d, struct http_req *req, const char *id);
void dsb_put(struct daemon *d, struct dsb *s);

/* Mark activity (resets the idle clock). */
void dsb_touch(struct dsb *s);

/* Work that outlives one request (a background exec): dsb_busy(s, +1)
 * keeps the sandbox from being idle until dsb_busy(s, -1); dsb_hold() keeps
 * the struct itself alive (even after the sandbox ended) until
 * dsb_release().  Both are cheap and never fail. */
void dsb_busy(struct dsb *s, int delta);
void dsb_hold(struct dsb *s);
void dsb_release(struct daemon *d, struct dsb *s);

/* Scan the workspace and append what changed to the log under `source`.
 * If out is not NULL it receives a new JSON array of the appended entries
 * (each {"cursor", "path", "kind", "type", "size", "source"}).  0 or -1. */
int dsb_scan_changes(struct daemon *d, struct dsb *s, const char *source, json_t **out,
		     sandlot_error_t **err);

/* JSON object for a sandbox (GET /v1/sandboxes/{id}). */
json_t *dsb_to_json(struct dsb *s);

/* End a sandbox (destroy it, record state and reason, persist).  A no-op
 * if it has ended already.  Kills its init first, so every call still in
 * progress on it fails quickly (EPIPE), waits (up to a few seconds) for
 * those calls to dsb_put(), then destroys it; if some borrower is still
 * busy then, the destroy happens on the reaper thread once it lets go.
 * So do not call it while holding a busy reference of s yourself. */
void dsb_end(struct daemon *d, struct dsb *s, enum dsb_state state, const char *reason);

/* A new table entry (refs 1, state STARTING, empty options/metadata) and
 * its insertion into d->sbs (the table owns that first reference). */
struct dsb *dsb_alloc(const char *id);
void dsb_table_add(struct daemon *d, struct dsb *s);

/* Number of sandboxes in each state (for metrics). */
void dsb_count_states(struct daemon *d, unsigned counts[DSB_NSTATES]);

extern const struct http_route sandbox_routes[];
/* Start-up: mark sandboxes of a previous run that were running as lost and
 * clean up what they left (cgroups, storage images). */
void sandboxes_recover(struct daemon *d);
void reaper_start(struct daemon *d);
/* Shutdown: stop the reaper, then end every running sandbox ("deleted",
 * reason "sandlotd stopped"), several at a time. */
void sandboxes_shutdown(struct daemon *d);
/* After the HTTP servers stopped: destroy what is left, free the table. */
void sandboxes_free(struct daemon *d);

/* ---- execs.c ------------------------------------------------------------ */

extern const struct http_route exec_routes[];
/* Kill every running exec of s and free the history (sandbox ending). */
void execs_release(struct dsb *s);

/* ---- files.c ------------------------------------------------------------ */

extern const struct http_route file_routes[];

/* ---- registry.c --------------------------------------------------------- */

int registry_open(struct daemon *d, sandlot_error_t **err);
void registry_close(struct daemon *d);
/* Insert or update the sandbox row (state, times, options, metadata). */
int registry_save(struct daemon *d, struct dsb *s);
int registry_add_changes(struct daemon *d, struct dsb *s, const struct dchange *c, size_t n);
/* Delete the sandbox and its changes from the registry. */
int registry_forget(struct daemon *d, const char *id);
/* Load every sandbox (all states) into d->sbs with sb == NULL; the caller
 * then marks those that were running as lost and cleans them up. */
int registry_load(struct daemon *d, sandlot_error_t **err);

/* ---- misc.c ------------------------------------------------------------- */

extern const struct http_route misc_routes[];
/* One structured log line (logfmt) to stderr. */
void daemon_log(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
