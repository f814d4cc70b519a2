/* sandlotd internals shared by its modules.
 *
 *   main.c        options, start-up (recovery), signals, shutdown
 *   http.c        libmicrohttpd server and route dispatch (http.h)
 *   domain.h      the domain layer: what every surface (the /v1 routes, others)
 *                 calls; no HTTP in it, errors as sandlot_error_t
 *   errmap.c      the one mapping of those errors to HTTP answers
 *   registry.c    SQLite: sandboxes and their changes survive restarts
 *   sandboxes.c   the sandbox table, create/list/keepalive, reaper, recovery
 *   lifecycle.c   the state machine: pause, resume, end, delete, retention
 *   sandbox_routes.c  the lifecycle routes (create ... pause, resume, snapshot)
 *   changes.c     the changes log, bounded in bytes, and its routes
 *   execs.c       execs and their routes: buffered, NDJSON streaming, background
 *   files.c       file calls and routes, archives (libarchive)
 *   misc.c        health, metrics, request log
 *   workspaces.c  kept workspaces' files: name, copy (from_snapshot), flush,
 *                 remove, recover
 *   pool.c        the warm pool (--pool) and its refill thread
 *   ports.c       exposed ports: host listeners, the relay thread, routes
 *   proxy.c       the HTTP (and WebSocket) proxy to exposed ports
 *   network.c     network policies over the API, the network log, egress metrics
 *   packages.c    package installs (on create and later)
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
struct pools;
struct psb;

#define PORTS_MAX 32 /* exposed ports per sandbox */

/* An exposed port (ports.c). */
struct dport {
	uint16_t port;              /* inside the sandbox */
	uint16_t host_port;         /* its listener on the host's 127.0.0.1; 0 when none */
	uint16_t hint;              /* the last host_port, tried first on resume */
};

enum dsb_state {
	DSB_STARTING,  /* being created */
	DSB_RUNNING,
	DSB_EXPIRED,   /* ended by TTL or idle timeout */
	DSB_DELETED,   /* ended by DELETE */
	DSB_LOST,      /* was running when sandlotd died; cleaned up at restart */
	DSB_FAILED,    /* its init died unexpectedly */
	DSB_PAUSED,    /* processes gone, workspace kept on disk (workspaces.c) */
	DSB_NSTATES
};
const char *dsb_state_name(enum dsb_state s);
/* Running or being created. */
static inline int dsb_state_live(enum dsb_state s)
{
	return s == DSB_STARTING || s == DSB_RUNNING;
}
/* Ended for good: neither live nor paused. */
static inline int dsb_state_ended(enum dsb_state s)
{
	return s != DSB_STARTING && s != DSB_RUNNING && s != DSB_PAUSED;
}

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
	/* sb was made with start_nowait and its set-up's outcome is not known
	 * yet: every use of it waits for that first (dsb_setup_wait). */
	int setting_up;
	struct dsb *setup_next;     /* lifecycle.c's set-up sweep queue */
	uint64_t setup_due_ms;      /* monotonic: when the sweep looks at it */
	int64_t created_ms;         /* wall clock, ms since the epoch */
	int64_t ended_ms;
	int64_t expires_ms;         /* absolute TTL deadline, 0 = none */
	uint32_t ttl_seconds, idle_timeout_seconds;
	int64_t last_active_ms;     /* last API call for it */
	int busy;                   /* API calls in progress + running execs */
	char *end_reason;           /* "ttl", "idle", "deleted", "lost", ... */
	json_t *options;            /* as given (normalised), for GET; its env
	                             * is in the registry only sealed */
	json_t *metadata;           /* {"label": "value"} */
	/* changes log: a window of the newest entries, bounded in bytes
	 * (changes.c) */
	pthread_mutex_t scan_lock;  /* one workspace scan at a time */
	struct dchange *changes;
	size_t nchanges, capchanges;
	uint64_t next_cursor;
	uint64_t changes_bytes;     /* what the log holds, as the budget counts it (atomic reads) */
	/* execs, newest first; bounded history (the oldest finished go) */
	struct dexec *execs;
	unsigned nexecs;
	int refs;                   /* lifetime: table + borrowers */
	/* sandboxes.c private */
	pthread_cond_t cond;        /* busy dropped to 0 */
	int destroy_pending;        /* ended, but borrowers still used sb */
	struct dsb *teardown_next;  /* lifecycle.c's teardown queue */
	int in_table;
	/* kept workspace (workspaces.c), under s->lock */
	int has_workspace;          /* its storage is the kept workspace named by its id */
	int workspace_kept;         /* paused, or ended with its workspace kept */
	int auto_resume;            /* calls on it while paused resume it */
	uint32_t paused_retention_seconds; /* 0 = keep the paused workspace for good */
	int64_t paused_ms;          /* when it was paused (state paused) */
	int transition;             /* pause or resume in progress; s->cond on change */
	int copying;                /* from_snapshot copies of its image in progress */
	/* exposed ports (ports.c): the list under s->lock (also in
	 * options.ports), the runtime under ports.c's lock */
	struct dport ports[PORTS_MAX];
	unsigned nports;
	struct psb *psb;
};

struct daemon_config {
	const char *listen_unix;    /* default /run/sandlot/sandlot.sock */
	const char *listen_tcp;     /* "HOST:PORT" or NULL */
	const char *token;          /* for TCP; loaded from --token-file */
	const char *data_dir;       /* default /var/lib/sandlot */
	unsigned default_ttl_s;     /* when the request gives none; 0 = none */
	unsigned default_idle_s;
	unsigned max_sandboxes;
	unsigned paused_retention_s; /* default paused_retention_seconds; 0 = forever */
	double disk_overcommit;     /* --disk-overcommit; 1 = every quota reserved */
	uint64_t storage_size;      /* --storage-size: grow the pool to it at start-up */
	const char *node_id;        /* --node-id / --node-id-file (node.c); NULL: single node */
	const char *default_image;  /* --default-image; "host" unless set */
	sandlot_isolation_t default_isolation; /* --default-isolation; ns unless set */
	const char *e2b_domain;     /* what E2B's create answers as "domain"
	                             * (--e2b-domain, else localhost:PORT of the
	                             * first TCP listener; NULL: none) */
	uint64_t max_download;      /* --max-download: file bytes a download may send; 0 = any */
	/* Change tracking, bounded in bytes (changes.c). */
	uint64_t changes_scan_bytes;   /* --changes-scan-bytes: what one scan may report */
	uint64_t changes_answer_bytes; /* --changes-answer-bytes: changes in one answer (JSON) */
	uint64_t changes_log_bytes;    /* --changes-log-bytes: one sandbox's log */
	uint64_t changes_total_bytes;  /* --changes-total-bytes: every log + scans in progress */
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
	struct sqlite3_stmt *db_save; /* registry_save()'s statement, made once (registry.c) */
	unsigned char seal_key[32]; /* registry.c: <data-dir>/registry.key */
	struct daemon_metrics m;    /* updated with __atomic builtins */
	volatile int stopping;
	int64_t started_ms;
	/* sandboxes.c private */
	unsigned nrunning;          /* running sandboxes (atomic) */
	unsigned ncreating;         /* creations in progress (under lock) */
	pthread_t reaper;
	int reaper_started;
	pthread_cond_t reaper_cond; /* with d->lock: wake the reaper */
	struct pools *pools;        /* pool.c private; NULL without --pool */
	/* The daemon-wide changes budget: the bytes of every sandbox's log
	 * plus those reserved by scans in progress.  changes_lock is a leaf. */
	pthread_mutex_t changes_lock;
	uint64_t changes_used;
	struct http_server *http;   /* http.c, while it serves */
	struct archives *archives;  /* archives.c; NULL without --archive */
};

int64_t daemon_now_ms(void);    /* wall clock */

/* How many sandboxes' cgroups libsandlot keeps prepared (sandlot_prepare):
 * enough for a burst of creations, each taking one while the background
 * refills. */
#define PREPARED_SANDBOXES 16

/* Fault-injection points, for tests that must reach both sides of a race
 * (tests/README.md).  Only a build configured with -Dfault_injection=true
 * has them; in any other (the default, the Makefile's build/, a package)
 * daemon_fault() is an empty inline function and no environment can reach
 * it.  Where compiled in, SANDLOT_FAULT=NAME in sandlotd's environment makes
 * the point NAME log "fault_point point=NAME" and stop the whole daemon
 * (SIGSTOP), so that a test can kill -9 it exactly there; sandlotd logs
 * "fault_injection point=NAME" at start when one is armed. */
#ifdef SANDLOT_FAULT_INJECTION
void daemon_fault(const char *name);
#else
static inline void daemon_fault(const char *name)
{
	(void)name;
}
#endif

/* ---- sandboxes.c -------------------------------------------------------- */

/* Route helper (sandbox_routes.c): domain_sandbox_get() (domain.h), whose
 * error it answers (404, 409 sandbox_paused, 410 sandbox_ended...) before
 * returning NULL.  Every successful get must be paired with dsb_put(). */
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
 * (each {"cursor", "path", "kind", "type", "size", "source"}), at most
 * --changes-answer-bytes of them serialised; *truncated (if not NULL) is
 * then 1 when the array is incomplete: the scan left changes out (its
 * limits) or the answer limit cut the array (the log has the rest, while
 * its window keeps them).  0 or -1 (callers then report the changes as
 * unknown: an empty list with changes_truncated). */
int dsb_scan_changes(struct daemon *d, struct dsb *s, const char *source, json_t **out,
		     int *truncated, sandlot_error_t **err);
/* Drop s's changes log: memory, budget and registry rows (the sandbox
 * ended for good; a paused one keeps its log).  Takes s->scan_lock. */
void dsb_changes_release(struct daemon *d, struct dsb *s);

/* ---- changes.c (the rest of the changes log) -------------------------------- */

extern const struct http_route changes_routes[];
/* Free s's log without touching the registry (s is being freed); its
 * bytes go back to d's budget. */
void dsb_changes_free(struct daemon *d, struct dsb *s);
/* Start-up: append an entry read from the registry to s's log (taking
 * its strings) and count it.  0, or -1 on ENOMEM. */
int dsb_changes_restore(struct daemon *d, struct dsb *s, struct dchange *c);
/* Bring the budget within --changes-total-bytes (after restores). */
void changes_budget_enforce(struct daemon *d);
/* The bytes of the daemon-wide budget in use: every log plus what scans in
 * progress reserved (the sandlot_changes_bytes gauge). */
uint64_t changes_budget_in_use(struct daemon *d);

/* JSON object for a sandbox (GET /v1/sandboxes/{id}). */
json_t *dsb_to_json(struct dsb *s);

/* ---- lifecycle.c: the state machine (and domain.h's lifecycle calls) ------- */

/* End a sandbox (record state and reason, persist, destroy it).  A no-op
 * if it has ended already.  Kills its init first, so every call still in
 * progress on it fails quickly (EPIPE); the rest — waiting for those calls
 * to dsb_put(), destroying it, removing its workspace — is queued for a
 * teardown thread, which leaves the destroy to the reaper while a borrower
 * still holds it.  When the queue is full or closed (sandlotd stops) the
 * caller does that part itself, waiting up to a few seconds for the
 * borrowers.  So do not call it while holding a busy reference of s
 * yourself. */
void dsb_end(struct daemon *d, struct dsb *s, enum dsb_state state, const char *reason);

/* The outcome of the set-up of s->sb when s->setting_up (a create that
 * answered before it, domain_create): waits for it the first time (a
 * fraction of a millisecond after the create's answer), at once after.
 * 0 when it is set up (or s is not running: the caller's own check says
 * so); -1 when its set-up failed: s has then ended as failed, the
 * set-up's error its end reason, and err is the ended sandbox's error
 * (DOMAIN_EENDED: 410 sandbox_ended) with that reason.  The caller holds
 * one busy reference of s (dsb_busy), so that s->sb stays; -1 has given
 * it back (the failed sandbox is torn down once nobody holds it). */
int dsb_setup_wait(struct daemon *d, struct dsb *s, sandlot_error_t **err);

/* A sandbox answered before its set-up finished (domain_create): unless a
 * request has waited for the set-up by then, a background thread does so
 * SETUP_SWEEP_MS later, so that a sandbox nobody uses yet lets go of what
 * its set-up needed (a status pipe, storage and image handles: a few
 * descriptors each) and a failed set-up is recorded at once.  s is held
 * (dsb_hold) until then.  dsb_setup_sweep_stop(): the queue is dropped and
 * the thread stopped (sandboxes_shutdown(), before it ends the sandboxes). */
void dsb_setup_sweep_add(struct daemon *d, struct dsb *s);
void dsb_setup_sweep_stop(void);

/* The teardowns dsb_end() queued.  dsb_teardowns_wait(): wait up to
 * timeout_ms until none is queued or running; 1 if there was one to wait
 * for.  dsb_teardowns_pending(): how many are queued or running now.
 * dsb_teardowns_drain(): queue no more (dsb_end() then tears down itself),
 * finish those queued, and stop the threads — sandboxes_shutdown()'s last
 * step. */
int dsb_teardowns_wait(unsigned timeout_ms);
unsigned dsb_teardowns_pending(void);
void dsb_teardowns_drain(void);

/* Wait (s->lock held) until no pause or resume — and with `copies`, no
 * from_snapshot copy of its workspace — is in progress.  0, or -1 after
 * 30 s. */
int dsb_settle_locked(struct dsb *s, int copies);
/* After s->sb was destroyed (state already final, or paused): the kept
 * workspace is flushed or removed (workspace_destroyed) and a pause in
 * progress is complete. */
void dsb_destroyed(struct daemon *d, struct dsb *s);
/* Reaper, once a second per sandbox: a paused sandbox past its
 * paused_retention_seconds expires and its workspace goes. */
void dsb_reap_paused(struct daemon *d, struct dsb *s, int64_t now_ms);

/* ---- sandboxes.c (continued) ------------------------------------------------ */

/* A new table entry (refs 1, state STARTING, empty options/metadata) and
 * its insertion into d->sbs (the table owns that first reference). */
struct dsb *dsb_alloc(const char *id);
void dsb_table_add(struct daemon *d, struct dsb *s);

/* Number of sandboxes in each state (for metrics). */
void dsb_count_states(struct daemon *d, unsigned counts[DSB_NSTATES]);

/* After sandlot_destroy() of sandbox `id`: if something of it is still on
 * the host (the kernel was slow to let go of its cgroup), retry removing it
 * in the background (the reaper, and sandboxes_free() at the end). */
void leftovers_check_after_destroy(const char *id);
/* The kept workspace of sandbox `id` was still in use when removed
 * (workspace_destroyed()): retry its removal there too
 * (workspace_try_remove()).  0, or -1 out of memory. */
int leftovers_retry_workspace(const char *id);

/* Without busy marking: a reference to sandbox `id` (release with
 * dsb_release), or NULL if the id is malformed or unknown. */
struct dsb *dsb_find(struct daemon *d, const char *id);
/* Route helpers (sandbox_routes.c): answer 404 for an id dsb_find() did
 * not know; 410 sandbox_ended with the state and reason of s (takes
 * s->lock). */
void dsb_answer_missing(struct http_req *req, const char *id);
void dsb_answer_ended(struct http_req *req, struct dsb *s);
/* The second half of ending or pausing s (lifecycle.c), after its state
 * changed under s->lock (so that no new borrower gets it) and nrunning
 * went down: kill its execs and init, wait (bounded) for borrowers, destroy
 * the handle — or leave that to the reaper if a borrower holds on — and
 * tell dsb_destroyed().  `sb` is its handle from before the change (or
 * NULL): only dsb_stop() and the reaper destroy it, so it is still there. */
void dsb_stop(struct daemon *d, struct dsb *s, sandlot_t *sb);

extern const struct http_route sandbox_routes[];

/* A 0/1 query flag: absent, "0" or "false" → 0; "1" or "true" → 1; else
 * answers 400 naming it and returns -1 (changes.c). */
int daemon_query_flag(struct http_req *req, const char *name);
/* Start-up: mark sandboxes of a previous run that were running as lost and
 * clean up what they left (cgroups, storage images). */
void sandboxes_recover(struct daemon *d);
void reaper_start(struct daemon *d);
/* Shutdown: stop the reaper, finish the queued teardowns, then end every
 * running sandbox ("deleted", reason "sandlotd stopped"), several at a
 * time, each torn down before this returns. */
void sandboxes_shutdown(struct daemon *d);
/* After the HTTP servers stopped: destroy what is left, free the table. */
void sandboxes_free(struct daemon *d);

/* ---- execs.c ------------------------------------------------------------ */

extern const struct http_route exec_routes[];
/* Kill every running exec of s and free the history (sandbox ending). */
void execs_release(struct dsb *s);

/* ---- code.c (code contexts, for other surfaces: e2b_interp.c) ------------- */

/* A cell running in a code context of s: in context ctx_id, or (NULL) in
 * the default context of lang.  The cell holds s (busy, held) until
 * code_cell_end().  NULL with *status (400, 404, 409, 500) and msg. */
struct code_cell;
struct code_cell *code_cell_start(struct daemon *d, struct dsb *s, const char *lang,
				  const char *ctx_id, const char *code, int *status, char *msg,
				  size_t msglen);
/* The cell's next event, as the NDJSON stream of POST .../code gives them
 * ({"type": "stdout"|"stderr"|"display"|"result", ...}, the "result" last);
 * NULL when there is none now: wait for *fd to be readable or *wait_ms. */
json_t *code_cell_next(struct code_cell *k, int *fd, int *wait_ms);
int code_cell_done(struct code_cell *k);
const char *code_cell_context(struct code_cell *k);
/* Free the cell; one not done is interrupted and finished quietly. */
void code_cell_end(struct code_cell *k);
/* A new context of lang in s with its host started: 0 with id, or -1
 * with msg. */
int code_ctx_create(struct daemon *d, struct dsb *s, const char *lang, char id[48], char *msg,
		    size_t msglen);
/* [{"id", "language"}] of s's contexts, oldest first. */
json_t *code_ctx_list(struct daemon *d, struct dsb *s);
/* Kill the host of context id and start a fresh one (remove = 0), or
 * delete the context (remove = 1).  0, -ENOENT (no such context) or -EIO
 * (the new host failed), with msg. */
int code_ctx_restart(struct daemon *d, struct dsb *s, const char *id, int remove, char *msg,
		     size_t msglen);

/* ---- files.c ------------------------------------------------------------ */

extern const struct http_route file_routes[];
/* The query parameters the file routes check (path, mode, recursive,
 * max_bytes), on their own: 0, or -1 having answered 400.  The routes check
 * them once they hold the sandbox; tests/fuzz/fuzz_requests.c, which has
 * none, here. */
int files_check_query(struct http_req *req);

/* ---- registry.c --------------------------------------------------------- */

int registry_open(struct daemon *d, sandlot_error_t **err);
void registry_close(struct daemon *d);
/* Insert or update the sandbox row (state, times, options, metadata). */
int registry_save(struct daemon *d, struct dsb *s);
int registry_add_changes(struct daemon *d, struct dsb *s, const struct dchange *c, size_t n);
/* Delete the changes of sandbox id with a cursor below `below` (all of
 * them with UINT64_MAX). */
int registry_drop_changes(struct daemon *d, const char *id, uint64_t below);
/* Delete the sandbox and its changes from the registry. */
int registry_forget(struct daemon *d, const char *id);
/* Code contexts (code.c): the pid of a context's interpreter host, kept so
 * that a restarted sandlotd can re-attach to it.  load: 1 found (lang and
 * pid set), 0 not found, -1 database error. */
int registry_save_context(struct daemon *d, const char *sbid, const char *id, const char *lang,
			  long pid);
int registry_forget_context(struct daemon *d, const char *sbid, const char *id);
int registry_load_context(struct daemon *d, const char *sbid, const char *id, char *lang,
			  size_t langsz, long *pid);
/* Give the space of deleted rows back to the filesystem when enough has
 * accumulated (incremental vacuum, WAL truncated).  Cheap when there is
 * nothing to do: the reaper calls it every second. */
void registry_reclaim(struct daemon *d);
/* Start-up, after registry_load(): the changes logs of paused sandboxes
 * into memory (entries from `first` on); the rows of every other
 * sandbox are deleted (they ended, or were lost with the daemon). */
int registry_load_changes(struct daemon *d, sandlot_error_t **err);
/* Load every sandbox (all states) into d->sbs with sb == NULL; the caller
 * then marks those that were running as lost and cleans them up. */
int registry_load(struct daemon *d, sandlot_error_t **err);

/* ---- pool.c ------------------------------------------------------------- */

/* One --pool argument: "N" (the default image) or "IMAGE=N", N from 0 to 1000,
 * optionally after "vm:" or "ns:" (else the default isolation); a later one
 * for the same image and isolation replaces an earlier one.  0, or -1 with
 * a message for the user in msg. */
int pool_configure(struct daemon *d, const char *arg, char *msg, size_t msglen);
/* 1 when a pool of vm sandboxes is configured. */
int pool_wants_vm(struct daemon *d);
/* Start filling the pools (after recovery, before serving): removes what
 * a previous run's pools left (in the background) and starts the refill
 * thread.  A no-op without --pool.  0, or -1 with err. */
int pool_start(struct daemon *d, sandlot_error_t **err);
/* For a create request whose options are opts (validated, as the request
 * gave them: before workspace_assign(), since an id or a workspace image
 * of its own is an option no pooled sandbox has): a ready sandbox of the
 * pool, with opts->env applied and its own kept workspace image, now owned
 * by the caller — or NULL, and the caller creates one.  *outcome: "hit",
 * "empty" (the pool had none ready), "options" (the pool cannot serve
 * these options) or NULL (no pool for this image: the answer should not
 * mention the pool). */
sandlot_t *pool_take(struct daemon *d, const sandlot_options_t *opts, const char **outcome);
/* Shutdown: stop the refill thread (waiting for a creation in progress)
 * and destroy every ready sandbox.  pool_take() answers NULL afterwards. */
void pool_stop(struct daemon *d);
void pool_free(struct daemon *d);
/* {"IMAGE": {"size": N, "ready": n}, ...} ("vm:IMAGE" for vm pools), or
 * NULL without pools. */
json_t *pool_health(struct daemon *d);
/* The pool's Prometheus lines (sandlot_pool_*), to be freed; NULL without
 * pools. */
char *pool_metrics(struct daemon *d);

/* ---- workspaces.c ------------------------------------------------------- */

extern const struct http_route workspace_routes[];
/* Whether sandbox `id` has a kept workspace in the storage pool. */
int workspace_exists(struct daemon *d, const char *id);
/* Give a sandbox about to be created a new id (written to id[32]) and the
 * kept workspace of that name; opts points at both.  Every sandbox of the
 * daemon has one (pool.c's too), so any can be paused. */
void workspace_assign(struct daemon *d, sandlot_options_t *opts, char id[32]);
/* Remove the kept workspace of sandbox `id` (a no-op if there is none). */
void workspace_remove(struct daemon *d, const char *id);
/* After s->sb was destroyed (dsb_destroyed): flush a kept workspace to
 * disk (paused, expired with its files kept) or remove it (deleted,
 * failed, lost). */
void workspace_destroyed(struct daemon *d, struct dsb *s);
/* Remove the kept workspace `id`: 0 when it is gone (or was not there),
 * 1 when it is in use (EBUSY; logged only with log_busy), -1 on any other
 * failure (logged). */
int workspace_try_remove(struct daemon *d, const char *id, int log_busy);
/* Make the pool's files durable (syncfs), as after a pause. */
void workspace_flush(struct daemon *d, const char *id);
/* Reaper, once a second per sandbox: the kept workspace of an ended
 * sandbox past its retention goes. */
void workspace_reap(struct daemon *d, struct dsb *s, int64_t now_ms);
/* Whether the reaper may forget the ended s (nothing kept; s->lock held). */
int workspace_forgettable_locked(struct dsb *s);
/* Create request with "from_snapshot": snapshot the kept workspace of
 * sandbox `from` as the workspace of the sandbox being created (id as
 * workspace_assign()), and set opts->disk_bytes to its size.  0, or -1
 * with ENOENT, EBUSY, EINVAL (disk_given differs), ENOSPC (cannot be
 * admitted). */
int workspace_from_snapshot(struct daemon *d, const char *from, int disk_given,
			    sandlot_options_t *opts, char id[32], sandlot_error_t **err);
/* Start-up, after the registry is loaded: paused sandboxes stay paused
 * (cgroups a killed daemon left are removed); owned workspace images of
 * the former layout are brought into the storage pool; workspaces nothing
 * owns (lost sandboxes, warm-pool leftovers) are removed. */
void workspace_recover(struct daemon *d);

/* ---- files.c (used by sandbox_routes.c: GET .../snapshot) ----------------- */

/* GET .../files/archive: the tree at ?path= (default /home/user) as tar. */
int files_archive_get(struct http_req *req);

/* ---- ports.c ------------------------------------------------------------ */

extern const struct http_route port_routes[];
/* Start and stop the relay thread (before serving; after the sandboxes
 * were ended).  0, or -1 with err. */
int ports_start(struct daemon *d, sandlot_error_t **err);
void ports_stop(void);
/* A "ports" value: a JSON array of distinct ports 1-65535, at most
 * PORTS_MAX.  0, or -1 with a message for the user in msg. */
int ports_parse(json_t *v, uint16_t *out, unsigned *count, char *msg, size_t n);
int ports_parse_one(json_t *v, uint16_t *out, char *msg, size_t n);
/* s->ports from a list / from options.ports (registry load); s->lock held. */
void ports_set_locked(struct dsb *s, const uint16_t *list, unsigned n);
void ports_load_locked(struct dsb *s);
/* s runs (create, resume): listen on the host for each exposed port that
 * has no listener yet.  0, or -1 with err (the ports opened stay open). */
int ports_open(struct dsb *s, sandlot_error_t **err);
/* s stops (pause, end): close its listeners and every connection into it.
 * Takes s->lock: call without it. */
void ports_close(struct dsb *s);
/* The record's "ports": [{"port": 8000, "url": "http://127.0.0.1:N"}]
 * (url null while nothing listens: paused, ended).  s->lock held. */
json_t *ports_json_locked(struct dsb *s);
/* Whether `port` is exposed in s. */
int ports_exposed(struct dsb *s, unsigned port);
/* Proxied requests (proxy.c): register the upstream socket fd of a request
 * to `port`, so that removing the port or ending s cuts it (shutdown; the
 * owner closes it, after ports_untrack()).  A handle, or NULL if the port
 * is not exposed (or s not running).  any: a port that is not exposed is
 * reachable too while s runs (a sandbox created through /e2b, by its host:
 * proxy.c); unexposing a port does not cut those. */
struct ptrack;
struct ptrack *ports_track(struct dsb *s, unsigned port, int any, int fd);
void ports_untrack(struct ptrack *t);
/* Relay an upgraded HTTP connection (a WebSocket): client_fd is closed with
 * close_client(close_ud), sb_fd with close(); the bytes given are sent
 * first each way.  Both are closed on failure too.  0 or -1. */
int ports_adopt(struct dsb *s, unsigned port, int any, int client_fd,
		void (*close_client)(void *), void *close_ud, const void *to_sandbox,
		size_t to_sandbox_len, int sb_fd, const void *to_client, size_t to_client_len);
/* The relay's Prometheus lines, to be freed. */
char *ports_metrics(void);

/* ---- proxy.c ------------------------------------------------------------ */

extern const struct http_route proxy_routes[];
/* The requests to a sandbox's host (e2b.h), which http.c routes by Host. */
extern const struct http_route proxy_host_route;
/* ---- network.c ---------------------------------------------------------- */

/* A network policy as a request gave it; the strings point into the
 * request's JSON. */
struct network_req {
	sandlot_net_policy_t policy;
	const char **allow, **deny;
};
void network_req_free(struct network_req *n);
/* Parse "network" (an object {"mode", "allow", "deny"}, or a mode string)
 * and check its rules.  0, or -1 with EINVAL (ENOMEM). */
int network_parse(json_t *v, struct network_req *out, sandlot_error_t **err);
/* {"mode", "allow", "deny"} of a sandbox now (normalised rules). */
json_t *network_json(sandlot_t *sb);
/* The policy of a sandbox's normalised options (resume): into o, with the
 * lists in out (free with network_req_free). 0, or -1 out of memory. */
int network_from_json(json_t *opts, sandlot_options_t *o, struct network_req *out);
extern const struct http_route network_routes[];
/* The sandlot_egress_* lines of /metrics (to be freed). */
char *network_metrics(void);

/* ---- packages.c ---------------------------------------------------------- */

/* "packages" of a request; the strings point into the request's JSON. */
struct packages_req {
	const char **pip, **npm;
	int any;                     /* at least one package */
};
void packages_req_free(struct packages_req *p);
/* Parse and check {"pip": [...], "npm": [...]}.  0, or -1 with EINVAL (ENOMEM). */
int packages_parse(json_t *v, struct packages_req *out, sandlot_error_t **err);
/* Install into sb (the sandbox s, recorded in its options.packages, or
 * NULL while it is being created).  Returns the HTTP status: 200 with
 * *result ({"output", "from_cache", "duration_ms", "packages"}), else the
 * error status with *error ({"code", "message", "output"}). */
int packages_install(struct daemon *d, struct dsb *s, sandlot_t *sb, const struct packages_req *p,
		     json_t **result, json_t **error);
extern const struct http_route package_routes[];

/* ---- misc.c ------------------------------------------------------------- */

extern const struct http_route misc_routes[];
/* Make s fit between the quotes of a log value: '"', '\\' and control
 * characters become '\''. */
void daemon_log_quote(char *s);
/* One structured log line (logfmt) to stderr. */
void daemon_log(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
