/* sandlotd's domain layer: sandboxes and their state machine, execs,
 * files, changes, code contexts and kept workspaces, with nothing of HTTP.
 *
 * Every surface of the daemon — the /v1 routes, the E2B-compatible API,
 * MCP — parses its own requests, calls these functions and turns their
 * errors into its own answers.  They never take a request and never
 * answer one.  They follow the error contract of docs/errors.md: 0 (or a
 * pointer) on success, -1 (or NULL) with a new sandlot_error_t in *err.
 *
 * Error statuses (sandlot_error_status()), and what the /v1 API answers for
 * them (http_error_from() in http.c, the one place that maps them):
 *
 *   ENOENT          no such sandbox (or file, context, exec)   404 not_found
 *   EINVAL          the input is wrong; the message names what  400 bad_request
 *   EBUSY, EEXIST   the state is in the way (a pause or resume  409 conflict
 *                   in progress, a running snapshot source...)
 *   DOMAIN_EPAUSED  paused, and without auto_resume             409 sandbox_paused
 *   DOMAIN_EENDED   the sandbox has ended                       410 sandbox_ended
 *   EPIPE           it ended while the call was in progress     410 sandbox_gone
 *   DOMAIN_ECTXBUSY a code context is running a cell            409 context_busy
 *   EAGAIN          --max-sandboxes (without --node-id), or     429 too_many_sandboxes
 *                   the host's capacity
 *   ESHUTDOWN       sandlotd is shutting down                   503 shutting_down
 *   DOMAIN_ENODEFULL the node is full (node.h): nothing was     503 node_full
 *                   allocated, another node may take it         + Retry-After
 *   DOMAIN_EINTERP  an interpreter host could not start         500 interpreter_failed
 *   ENOSPC, EDQUOT  disk                                        507 insufficient_storage
 *   anything else   (ENOMEM, EIO...)                            500 internal
 *
 * Errors about a sandbox carry details (sandlot__error_detail()): "state"
 * (DOMAIN_EPAUSED, DOMAIN_EENDED) and "end_reason" (DOMAIN_EENDED, NULL
 * when none was recorded), which the /v1 API adds to its error object.
 *
 * References.  A sandbox (struct dsb, daemon.h) is handed out either
 *   - "got" (domain_sandbox_get): running, marked busy (not idle); release
 *     with dsb_put().  Calls on a running sandbox take one of these.
 *   - "found" (domain_sandbox_find): any state, not busy; release with
 *     dsb_release().
 */
#ifndef SANDLOT_DAEMON_DOMAIN_H
#define SANDLOT_DAEMON_DOMAIN_H

#include <errno.h>

#include "daemon/daemon.h"

#define DOMAIN_EPAUSED EHOSTDOWN /* the sandbox is paused (no auto_resume) */
#define DOMAIN_EENDED EIDRM      /* the sandbox has ended */
#define DOMAIN_ECTXBUSY EALREADY /* the code context is running a cell */
#define DOMAIN_EINTERP ECHILD    /* the interpreter host failed to start */

/* ---- sandboxes: lookup (sandboxes.c) ------------------------------------ */

/* Sandbox `id` in any state, "found" (dsb_release()).  NULL with ENOENT
 * ("invalid sandbox id ..." or "no sandbox ..."). */
struct dsb *domain_sandbox_find(struct daemon *d, const char *id, sandlot_error_t **err);
/* Sandbox `id`, running, "got" (dsb_put()).  A paused one created with
 * auto_resume is resumed first (the errors of domain_sandbox_resume());
 * without, DOMAIN_EPAUSED.  NULL with ENOENT, DOMAIN_EPAUSED,
 * DOMAIN_EENDED or a resume's error. */
struct dsb *domain_sandbox_get(struct daemon *d, const char *id, sandlot_error_t **err);
/* The live handle of a "got" sandbox, or NULL with DOMAIN_EENDED when it
 * ended since (takes s->lock). */
sandlot_t *domain_sandbox_handle(struct dsb *s, sandlot_error_t **err);
/* Store the DOMAIN_EENDED error of s ("sandbox ID has ended: STATE
 * (REASON)", details state and end_reason).  Takes s->lock.  Returns -1. */
int domain_error_ended(struct dsb *s, sandlot_error_t **err);

/* ---- sandboxes: create (sandboxes.c) ------------------------------------ */

/* A create request, parsed and validated (domain_create_parse), as given
 * by any surface.  Strings point into the JSON it was parsed from, which
 * must outlive it. */
struct domain_create {
	sandlot_options_t opts;
	char **env;              /* "K=V", NULL-terminated */
	size_t nenv;
	uint32_t ttl, idle;
	json_t *norm;            /* normalised options, for the record */
	json_t *metadata;
	int auto_resume, disk_given;
	int wait_ready;          /* answer only once the sandbox has set itself up */
	uint32_t retention;      /* paused_retention_seconds */
	const char *from_snapshot; /* a sandbox id */
	uint16_t ports[PORTS_MAX];
	unsigned nports;
	struct network_req net;
	struct packages_req packages;
};

/* Parse a create body (a JSON object, or NULL for all defaults: the
 * daemon's --default-image, TTL, idle timeout, retention) into *c; c is
 * zeroed first and must be freed with domain_create_free() either way.
 * 0, or -1 with EINVAL naming the field (ENOMEM). */
int domain_create_parse(struct daemon *d, json_t *body, struct domain_create *c,
			sandlot_error_t **err);
void domain_create_free(struct domain_create *c);

/* What a create did besides the sandbox. */
struct domain_created {
	const char *pool;        /* NULL: no pool for its image; "hit" or "miss" */
	json_t *installed;       /* the installers' report (options "packages"), or NULL; owned */
	/* The installers failed (the sandbox is gone): install_status is the
	 * answer's status (400, 410, 422) and install_error its error object
	 * {"code", "message", "output"}, owned.  Returned with -1/NULL and an
	 * err of the same message. */
	int install_status;
	json_t *install_error;
};
void domain_created_free(struct domain_created *out);

/* Create and start a sandbox from c (consumed: free it after all the same):
 * from the warm pool when it can, else cold (from_snapshot: a copy of that
 * sandbox's kept workspace), packages installed, ports exposed, in the
 * table and registry, running.  Returns it "found" (dsb_release()), or
 * NULL with EAGAIN (limits), ESHUTDOWN, ENOENT/EBUSY/EINVAL (from_snapshot),
 * ENOSPC, or libsandlot's error; *out is filled either way. */
struct dsb *domain_create(struct daemon *d, struct domain_create *c, struct domain_created *out,
			  sandlot_error_t **err);

/* ---- sandboxes: the rest of the lifecycle ------------------------------- */

/* The records of the sandboxes, oldest first, as a new JSON array.  state:
 * NULL (running), "all", or a state name; labels: "KEY=VALUE" metadata
 * filters, all of which must match.  NULL with EINVAL (a bad filter) or
 * ENOMEM. */
json_t *domain_sandbox_list(struct daemon *d, const char *state, const char *const *labels,
			    size_t nlabels, sandlot_error_t **err);
/* End sandbox `id` for good (state deleted): a running one is stopped, a
 * paused one deleted, an ended one loses its kept workspace.  0, or -1
 * with ENOENT, EBUSY (a pause or resume in progress), DOMAIN_EENDED
 * (ended, nothing kept). */
int domain_sandbox_delete(struct daemon *d, const char *id, sandlot_error_t **err);
/* A number of seconds (ttl_seconds and the like: an integer from 0 to ten
 * years) in field `name`: 0, or -1 with EINVAL naming it. */
int domain_parse_seconds(const char *name, json_t *v, uint32_t *out, sandlot_error_t **err);
/* Mark activity; with ttl, a new ttl_seconds counted from now.  The
 * sandbox record, or NULL with domain_sandbox_get()'s errors. */
json_t *domain_sandbox_keepalive(struct daemon *d, const char *id, const uint32_t *ttl,
				 sandlot_error_t **err);

/* ---- the state machine: pause and resume (workspaces.c) ------------------
 *
 *   starting → running ⇄ paused
 *   running  → expired (ttl, idle) | deleted | failed | lost
 *   paused   → expired (paused_retention) | deleted | lost (workspace gone)
 *
 * A pause of a paused sandbox and a resume of a running one succeed
 * (idempotent); both refuse an ended one. */

/* Pause sandbox `id`.  Its record, or NULL with ENOENT, EBUSY (a pause or
 * resume in progress; no kept workspace), DOMAIN_EENDED. */
json_t *domain_sandbox_pause(struct daemon *d, const char *id, sandlot_error_t **err);
/* The same with sandlot_pause() flags (SANDLOT_PAUSE_MEMORY: keep the
 * running state too, vm sandboxes only; ns ones refuse it with ENOTSUP). */
json_t *domain_sandbox_pause_with(struct daemon *d, const char *id, unsigned flags,
				  sandlot_error_t **err);
/* Resume sandbox `id` (ttl: a new ttl_seconds, or NULL to keep its own).
 * Its record, or NULL with ENOENT, EBUSY, DOMAIN_EENDED (also when its
 * workspace is gone: it is then lost), EAGAIN, ESHUTDOWN, ENOSPC/EDQUOT,
 * EIO; on failure it stays paused. */
json_t *domain_sandbox_resume(struct daemon *d, const char *id, const uint32_t *ttl,
			      sandlot_error_t **err);

/* ---- changes (changes.c) -------------------------------------------------- */

struct domain_changes_query {
	uint64_t since;          /* the base: changes after this cursor */
	uint64_t after;          /* continue a page: entries after this (>= since) */
	int net;                 /* one entry per path, its net effect since `since` */
	int exclude_hidden;      /* leave out dot-directories and __pycache__ */
};
/* A page of s's changes log ("got" or "found"): {"cursor", "changes",
 * "more"?, "hidden"?, "truncated"?} as GET .../changes answers it.  NULL
 * with ENOMEM. */
json_t *domain_changes_get(struct daemon *d, struct dsb *s, const struct domain_changes_query *q,
			   sandlot_error_t **err);
/* Scan the workspace of s ("got") now, logging what changed under source
 * "scan".  *cursor: the log's latest; *truncated: the scan left changes
 * out.  0, or -1 with the scan's error. */
int domain_changes_scan(struct daemon *d, struct dsb *s, uint64_t *cursor, int *truncated,
			sandlot_error_t **err);

/* ---- files (files.c), on a "got" sandbox ----------------------------------
 * Paths are inside the sandbox; relative ones are under /home/user.  Calls
 * that change the workspace log it (source "api"). */

/* {"name", "path", "type", "size", "allocated", "mode", "modified_at"}. */
json_t *domain_file_stat(struct daemon *d, struct dsb *s, const char *path, sandlot_error_t **err);
/* {"path", "entries": [stat objects, by name]}. */
json_t *domain_file_list(struct daemon *d, struct dsb *s, const char *path, sandlot_error_t **err);
/* mkdir -p with mode.  The absolute path made, to free; NULL with err. */
char *domain_file_mkdir(struct daemon *d, struct dsb *s, const char *path, uint32_t mode,
			sandlot_error_t **err);
/* Remove a file or (recursive) a tree.  ENOTEMPTY without recursive. */
int domain_file_remove(struct daemon *d, struct dsb *s, const char *path, int recursive,
		       sandlot_error_t **err);
/* Read a whole file into *data (malloc'd, NUL-terminated past *len) with
 * at most max bytes (0: --max-download alone); EFBIG when larger. */
int domain_file_read(struct daemon *d, struct dsb *s, const char *path, uint64_t max, char **data,
		     size_t *len, sandlot_error_t **err);
/* Write a whole file atomically (parents created) with mode. */
int domain_file_write(struct daemon *d, struct dsb *s, const char *path, const void *data,
		      size_t len, uint32_t mode, sandlot_error_t **err);

/* ---- execs (execs.c), on a "got" sandbox ---------------------------------- */

/* An exec request, parsed (domain_exec_parse; the body of POST .../exec:
 * "command" or "argv", "env", "cwd", "stdin"/"stdin_base64", "timeout_ms",
 * "background", "output", "output_limit").  Strings point into the JSON
 * it was parsed from. */
struct domain_exec_req {
	const char **argv;          /* NULL-terminated */
	char **env;                 /* "K=V", owned */
	const char *cwd;
	unsigned char *stdin_data;  /* owned */
	size_t stdin_len;
	int has_stdin;
	uint64_t timeout_ms;
	int background, base64;
	size_t limit;               /* output bytes kept per stream */
	json_t *command;            /* the argv as a JSON array, for status */
};
/* 0, or -1 with EINVAL naming the field; free r either way. */
int domain_exec_parse(json_t *body, struct domain_exec_req *r, sandlot_error_t **err);
void domain_exec_req_free(struct domain_exec_req *r);

/* Start r's command in s as a background exec (whatever r->background
 * says): it runs on its own, its output kept (r->limit per stream), listed
 * in s's history until pushed out.  Its status {"exec_id", "state", "pid",
 * "command", ...}, or NULL with ESHUTDOWN, DOMAIN_EENDED, libsandlot's
 * error (ENOENT: no such command...). */
json_t *domain_exec_start(struct daemon *d, struct dsb *s, struct domain_exec_req *r,
			  sandlot_error_t **err);
/* The status of exec id with its kept "stdout" and "stderr", and "result"
 * ({"exit_code", "signal", "timed_out", "changes", ...}) once it finished.
 * NULL with EINVAL (malformed id), ENOENT. */
json_t *domain_exec_get(struct daemon *d, struct dsb *s, const char *id, sandlot_error_t **err);
/* As domain_exec_get() once the exec has finished, waiting up to
 * timeout_ms (0: no limit); ETIMEDOUT if it still runs then. */
json_t *domain_exec_wait(struct daemon *d, struct dsb *s, const char *id, uint64_t timeout_ms,
			 sandlot_error_t **err);
/* The execs of s, running first, then newest first (statuses, no output). */
json_t *domain_exec_list(struct daemon *d, struct dsb *s, sandlot_error_t **err);
/* Signal the exec's process group.  EBUSY when it has ended. */
int domain_exec_kill(struct daemon *d, struct dsb *s, const char *id, int sig,
		     sandlot_error_t **err);
/* Feed data to the exec's stdin (and close it with eof).  EBUSY when it
 * has none (not started in the background), has ended, has its stdin
 * closed, or another feeder is at it. */
int domain_exec_stdin(struct daemon *d, struct dsb *s, const char *id, const void *data,
		      size_t len, int eof, sandlot_error_t **err);

/* ---- code cells (code.c), on a "got" sandbox ------------------------------ */

/* A cell to run (domain_code_parse; the body of POST .../code). */
struct domain_code_req {
	const char *language;    /* python, javascript, bash; NULL: the context's */
	const char *context;     /* a context id; NULL: the default of language */
	json_t *code;            /* a JSON string, borrowed */
	uint64_t timeout_ms;     /* 0: none */
};
/* 0, or -1 with EINVAL naming what is wrong. */
int domain_code_parse(json_t *body, struct domain_code_req *r, sandlot_error_t **err);
/* Run a cell and wait for its end.  Each event before the result —
 * {"type": "stdout"|"stderr", "data"} or {"type": "display", ...} — goes
 * to on_event (if not NULL; borrowed), which returns nonzero to give up:
 * the cell is then interrupted and finished quietly.  The result {"status",
 * "stdout", "stderr", "displays", "value", "data", "error", "changes",
 * ...} as POST .../code answers it, or NULL with ENOENT (no such context),
 * EINVAL, DOMAIN_ECTXBUSY, DOMAIN_EINTERP.  Blocks the calling thread. */
json_t *domain_code_run(struct daemon *d, struct dsb *s, const struct domain_code_req *r,
			int (*on_event)(void *ud, json_t *event), void *ud, sandlot_error_t **err);

/* ---- code contexts (code.c), on a "got" sandbox -------------------------- */

/* Whether lang is a language of contexts: python, javascript, bash. */
int domain_context_lang_ok(const char *lang);
/* A new context of lang with its interpreter host started: {"id",
 * "language"}, or NULL with EINVAL (lang), DOMAIN_EINTERP. */
json_t *domain_context_create(struct daemon *d, struct dsb *s, const char *lang,
			      sandlot_error_t **err);
/* The contexts of s, oldest first: [{"id", "language", "busy", "alive"}]. */
json_t *domain_context_list(struct daemon *d, struct dsb *s, sandlot_error_t **err);
/* Delete context id (its host is killed; a cell running ends as
 * InterpreterDied).  ENOENT when there is none. */
int domain_context_delete(struct daemon *d, struct dsb *s, const char *id, sandlot_error_t **err);
/* Interrupt (SIGINT) the cell running in context id (NULL: the default
 * context of lang, python when NULL): {"context", "interrupted"}, or NULL
 * with ENOENT. */
json_t *domain_context_interrupt(struct daemon *d, struct dsb *s, const char *id,
				 const char *lang, sandlot_error_t **err);

#endif
