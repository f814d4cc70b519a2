/* The registry: sandboxes and their changes logs in SQLite, so that state
 * survives a restart of sandlotd (<data-dir>/sandlot.db).
 *
 * One connection, used under d->db_lock.  WAL journal with
 * synchronous=NORMAL: a crash of sandlotd (even kill -9) loses nothing that
 * was committed; only a power loss may lose the last few commits, which at
 * worst forgets that a sandbox existed whose processes died with the host
 * anyway.
 *
 * Space: the changes rows of a sandbox mirror its log (changes.c: a window
 * bounded in bytes, dropped when the sandbox ends), and deleted rows give
 * their space back to the filesystem — auto_vacuum=INCREMENTAL, and
 * registry_reclaim() (the reaper, every second) runs incremental_vacuum
 * and truncates the WAL once a megabyte or more is free; the WAL is also
 * truncated to journal_size_limit after each checkpoint.  Without this
 * SQLite keeps freed pages in the file for reuse, and a file grown by one
 * burst of changes stayed that big.
 *
 * Schema (user_version 2):
 *   sandboxes(id PRIMARY KEY, state, created_ms, ended_ms, expires_ms,
 *             ttl_seconds, idle_timeout_seconds, last_active_ms, end_reason,
 *             options JSON, metadata JSON, next_cursor,
 *             auto_resume, paused_retention_seconds, paused_ms,
 *             workspace_kept)                     (the last four: version 2)
 *   changes(sandbox, cursor, kind, type, size, path, source, at_ms)
 *             PRIMARY KEY (sandbox, cursor)
 *   settings(key PRIMARY KEY, value)       reserved for daemon settings
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/daemon.h"

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS sandboxes ("
	" id TEXT PRIMARY KEY,"
	" state TEXT NOT NULL,"
	" created_ms INTEGER NOT NULL,"
	" ended_ms INTEGER NOT NULL DEFAULT 0,"
	" expires_ms INTEGER NOT NULL DEFAULT 0,"
	" ttl_seconds INTEGER NOT NULL DEFAULT 0,"
	" idle_timeout_seconds INTEGER NOT NULL DEFAULT 0,"
	" last_active_ms INTEGER NOT NULL DEFAULT 0,"
	" end_reason TEXT,"
	" options TEXT NOT NULL DEFAULT '{}',"
	" metadata TEXT NOT NULL DEFAULT '{}',"
	" next_cursor INTEGER NOT NULL DEFAULT 1,"
	" auto_resume INTEGER NOT NULL DEFAULT 0,"
	" paused_retention_seconds INTEGER NOT NULL DEFAULT 0,"
	" paused_ms INTEGER NOT NULL DEFAULT 0,"
	" workspace_kept INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE IF NOT EXISTS changes ("
	" sandbox TEXT NOT NULL,"
	" cursor INTEGER NOT NULL,"
	" kind TEXT NOT NULL,"
	" type TEXT NOT NULL,"
	" size INTEGER NOT NULL,"
	" path TEXT NOT NULL,"
	" source TEXT,"
	" at_ms INTEGER NOT NULL,"
	" PRIMARY KEY (sandbox, cursor)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT);";

/* From version 1 (before pause/resume): the kept-workspace columns. */
static const char migrate_1_2[] =
	"ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN paused_retention_seconds INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN paused_ms INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN workspace_kept INTEGER NOT NULL DEFAULT 0;";

/* The integer a PRAGMA answers, or -1. */
static int64_t pragma_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t v = -1;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static int user_version(sqlite3 *db)
{
	return (int)pragma_int(db, "PRAGMA user_version");
}

static int db_fail(sandlot_error_t **err, sqlite3 *db, const char *what)
{
	return sandlot__error(err, EIO, "%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

int registry_open(struct daemon *d, sandlot_error_t **err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/sandlot.db", d->cfg.data_dir);
	sqlite3 *db = NULL;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				  SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		db_fail(err, db, "open");
		sqlite3_close(db);
		return sandlot__error_wrap(err, "registry %s", path);
	}
	sqlite3_busy_timeout(db, 5000);
	char *msg = NULL;
	int version = -1;
	/* auto_vacuum must be chosen before the first table exists; a registry
	 * made without it is converted once (VACUUM rewrites the file). */
	if (sqlite3_exec(db, "PRAGMA auto_vacuum=INCREMENTAL;", NULL, NULL, &msg) != SQLITE_OK ||
	    (pragma_int(db, "PRAGMA auto_vacuum") != 2 &&
	     sqlite3_exec(db, "VACUUM;", NULL, NULL, &msg) != SQLITE_OK) ||
	    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
			     " PRAGMA journal_size_limit=4194304;", NULL, NULL, &msg) != SQLITE_OK ||
	    (version = user_version(db)) < 0 ||
	    sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK ||
	    (version == 1 && sqlite3_exec(db, migrate_1_2, NULL, NULL, &msg) != SQLITE_OK) ||
	    sqlite3_exec(db, "PRAGMA user_version = 2", NULL, NULL, &msg) != SQLITE_OK) {
		sandlot__error(err, EIO, "registry %s: %s", path, msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		sqlite3_close(db);
		return -1;
	}
	d->db = db;
	return 0;
}

void registry_close(struct daemon *d)
{
	if (d->db) {
		sqlite3_close(d->db);
		d->db = NULL;
	}
}

static void log_db_error(struct daemon *d, const char *what)
{
	const char *m = sqlite3_errmsg(d->db);
	char clean[256];
	snprintf(clean, sizeof(clean), "%s", m ? m : "?");
	for (char *p = clean; *p; p++)
		if (*p == '"')
			*p = '\'';
	daemon_log("registry_error", "level=error op=%s msg=\"%s\"", what, clean);
}

/* Call with s->lock held (reads its fields) — and d->db_lock free: taken
 * here (order dsb->lock → db_lock). */
int registry_save(struct daemon *d, struct dsb *s)
{
	char *opts = s->options ? json_dumps(s->options, JSON_COMPACT) : NULL;
	char *meta = s->metadata ? json_dumps(s->metadata, JSON_COMPACT) : NULL;
	static const char sql[] =
		"INSERT INTO sandboxes (id, state, created_ms, ended_ms, expires_ms, ttl_seconds,"
		" idle_timeout_seconds, last_active_ms, end_reason, options, metadata, next_cursor,"
		" auto_resume, paused_retention_seconds, paused_ms, workspace_kept)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
		" ON CONFLICT(id) DO UPDATE SET state = ?2, ended_ms = ?4, expires_ms = ?5,"
		" ttl_seconds = ?6, idle_timeout_seconds = ?7, last_active_ms = ?8,"
		" end_reason = ?9, next_cursor = ?12, paused_ms = ?15, workspace_kept = ?16";
	int rc = -1;
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db, sql, -1, &st, NULL) != SQLITE_OK) {
		log_db_error(d, "save");
		goto out;
	}
	sqlite3_bind_text(st, 1, s->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, dsb_state_name(s->state), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, s->created_ms);
	sqlite3_bind_int64(st, 4, s->ended_ms);
	sqlite3_bind_int64(st, 5, s->expires_ms);
	sqlite3_bind_int64(st, 6, s->ttl_seconds);
	sqlite3_bind_int64(st, 7, s->idle_timeout_seconds);
	sqlite3_bind_int64(st, 8, s->last_active_ms);
	if (s->end_reason)
		sqlite3_bind_text(st, 9, s->end_reason, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 9);
	sqlite3_bind_text(st, 10, opts ? opts : "{}", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 11, meta ? meta : "{}", -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 12, (sqlite3_int64)s->next_cursor);
	sqlite3_bind_int(st, 13, s->auto_resume);
	sqlite3_bind_int64(st, 14, s->paused_retention_seconds);
	sqlite3_bind_int64(st, 15, s->paused_ms);
	sqlite3_bind_int(st, 16, s->workspace_kept);
	if (sqlite3_step(st) != SQLITE_DONE)
		log_db_error(d, "save");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	free(opts);
	free(meta);
	return rc;
}

int registry_add_changes(struct daemon *d, struct dsb *s, const struct dchange *c, size_t n)
{
	if (n == 0)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&d->db_lock);
	sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db,
			       "INSERT OR REPLACE INTO changes (sandbox, cursor, kind, type, size, path,"
			       " source, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK) {
		log_db_error(d, "add_changes");
		rc = -1;
	}
	for (size_t i = 0; st && i < n; i++) {
		char kind[2] = { c[i].kind, 0 }, type[2] = { c[i].type, 0 };
		sqlite3_bind_text(st, 1, s->id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)c[i].cursor);
		sqlite3_bind_text(st, 3, kind, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 4, type, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)c[i].size);
		sqlite3_bind_text(st, 6, c[i].path, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 7, c[i].source ? c[i].source : "", -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 8, c[i].at_ms);
		if (sqlite3_step(st) != SQLITE_DONE) {
			log_db_error(d, "add_changes");
			rc = -1;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

int registry_drop_changes(struct daemon *d, const char *id, uint64_t below)
{
	pthread_mutex_lock(&d->db_lock);
	int rc = 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db, "DELETE FROM changes WHERE sandbox = ? AND cursor < ?", -1,
			       &st, NULL) != SQLITE_OK) {
		log_db_error(d, "drop_changes");
		rc = -1;
	} else {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, below > INT64_MAX ? INT64_MAX : (sqlite3_int64)below);
		if (sqlite3_step(st) != SQLITE_DONE) {
			log_db_error(d, "drop_changes");
			rc = -1;
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

/* Free pages worth giving back: 256 of 4 KiB. */
#define RECLAIM_PAGES 256

void registry_reclaim(struct daemon *d)
{
	pthread_mutex_lock(&d->db_lock);
	if (d->db && pragma_int(d->db, "PRAGMA freelist_count") >= RECLAIM_PAGES) {
		char *msg = NULL;
		/* incremental_vacuum answers a row per page: run it to the end. */
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(d->db, "PRAGMA incremental_vacuum", -1, &st, NULL) == SQLITE_OK)
			while (sqlite3_step(st) == SQLITE_ROW)
				;
		sqlite3_finalize(st);
		if (sqlite3_exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE);", NULL, NULL, &msg) != SQLITE_OK)
			log_db_error(d, "reclaim");
		sqlite3_free(msg);
	}
	pthread_mutex_unlock(&d->db_lock);
}

int registry_forget(struct daemon *d, const char *id)
{
	pthread_mutex_lock(&d->db_lock);
	int rc = 0;
	static const char *const sql[] = { "DELETE FROM changes WHERE sandbox = ?",
					   "DELETE FROM sandboxes WHERE id = ?" };
	sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL);
	for (int i = 0; i < 2; i++) {
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(d->db, sql[i], -1, &st, NULL) != SQLITE_OK) {
			log_db_error(d, "forget");
			rc = -1;
			continue;
		}
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) != SQLITE_DONE) {
			log_db_error(d, "forget");
			rc = -1;
		}
		sqlite3_finalize(st);
	}
	sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

static enum dsb_state state_from_name(const char *n)
{
	for (int s = 0; s < DSB_NSTATES; s++)
		if (n && strcmp(n, dsb_state_name((enum dsb_state)s)) == 0)
			return (enum dsb_state)s;
	return DSB_LOST;
}

static json_t *load_json(const unsigned char *text)
{
	json_t *j = text ? json_loads((const char *)text, 0, NULL) : NULL;
	return j && json_is_object(j) ? j : (json_decref(j), json_object());
}

/* Start-up only (no other thread runs yet, so no db_lock: the table
 * insertions take d->lock, which comes before db_lock in the lock order). */
int registry_load(struct daemon *d, sandlot_error_t **err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db,
			       "SELECT id, state, created_ms, ended_ms, expires_ms, ttl_seconds,"
			       " idle_timeout_seconds, last_active_ms, end_reason, options, metadata,"
			       " next_cursor, auto_resume, paused_retention_seconds, paused_ms,"
			       " workspace_kept FROM sandboxes ORDER BY created_ms",
			       -1, &st, NULL) != SQLITE_OK) {
		return db_fail(err, d->db, "load registry");
	}
	int rc = 0;
	for (;;) {
		int step = sqlite3_step(st);
		if (step == SQLITE_DONE)
			break;
		if (step != SQLITE_ROW) {
			rc = db_fail(err, d->db, "load registry");
			break;
		}
		const char *id = (const char *)sqlite3_column_text(st, 0);
		if (!id || strlen(id) >= sizeof(((struct dsb *)0)->id))
			continue;
		struct dsb *s = dsb_alloc(id);
		if (!s) {
			rc = sandlot__error(err, ENOMEM, "out of memory");
			break;
		}
		s->state = state_from_name((const char *)sqlite3_column_text(st, 1));
		s->created_ms = sqlite3_column_int64(st, 2);
		s->ended_ms = sqlite3_column_int64(st, 3);
		s->expires_ms = sqlite3_column_int64(st, 4);
		s->ttl_seconds = (uint32_t)sqlite3_column_int64(st, 5);
		s->idle_timeout_seconds = (uint32_t)sqlite3_column_int64(st, 6);
		s->last_active_ms = sqlite3_column_int64(st, 7);
		const char *reason = (const char *)sqlite3_column_text(st, 8);
		s->end_reason = reason ? strdup(reason) : NULL;
		json_decref(s->options); /* dsb_alloc's empty ones */
		json_decref(s->metadata);
		s->options = load_json(sqlite3_column_text(st, 9));
		s->metadata = load_json(sqlite3_column_text(st, 10));
		s->next_cursor = (uint64_t)sqlite3_column_int64(st, 11);
		if (s->next_cursor == 0)
			s->next_cursor = 1;
		s->auto_resume = sqlite3_column_int(st, 12) != 0;
		s->paused_retention_seconds = (uint32_t)sqlite3_column_int64(st, 13);
		s->paused_ms = sqlite3_column_int64(st, 14);
		s->workspace_kept = sqlite3_column_int(st, 15) != 0;
		s->has_workspace = s->workspace_kept;
		dsb_table_add(d, s);
	}
	sqlite3_finalize(st);
	return rc;
}

/* Start-up only (as registry_load).  Rows of sandboxes that are not
 * paused are deleted first: they ended (a log is dropped when its sandbox
 * ends; rows of a daemon that died meanwhile may remain) or were running
 * when the daemon died. */
int registry_load_changes(struct daemon *d, sandlot_error_t **err)
{
	char *msg = NULL;
	if (sqlite3_exec(d->db,
			 "DELETE FROM changes WHERE sandbox NOT IN"
			 " (SELECT id FROM sandboxes WHERE state = 'paused')",
			 NULL, NULL, &msg) != SQLITE_OK) {
		sandlot__error(err, EIO, "registry: %s", msg ? msg : sqlite3_errmsg(d->db));
		sqlite3_free(msg);
		return -1;
	}
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db,
			       "SELECT cursor, kind, type, size, path, source, at_ms FROM changes"
			       " WHERE sandbox = ? ORDER BY cursor",
			       -1, &st, NULL) != SQLITE_OK)
		return db_fail(err, d->db, "load changes");
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	size_t n = d->nsbs;
	struct dsb **v = malloc((n ? n : 1) * sizeof(*v));
	if (v && n)
		memcpy(v, d->sbs, n * sizeof(*v));
	pthread_mutex_unlock(&d->lock);
	if (!v) {
		sqlite3_finalize(st);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct dsb *s = v[i];
		if (s->state != DSB_PAUSED)
			continue;
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, s->id, -1, SQLITE_TRANSIENT);
		int step;
		while ((step = sqlite3_step(st)) == SQLITE_ROW) {
			const char *kind = (const char *)sqlite3_column_text(st, 1);
			const char *type = (const char *)sqlite3_column_text(st, 2);
			const char *path = (const char *)sqlite3_column_text(st, 4);
			const char *source = (const char *)sqlite3_column_text(st, 5);
			struct dchange c = {
				.cursor = (uint64_t)sqlite3_column_int64(st, 0),
				.kind = kind ? kind[0] : 'm',
				.type = type ? type[0] : 'o',
				.size = (uint64_t)sqlite3_column_int64(st, 3),
				.path = path ? strdup(path) : NULL,
				.source = strdup(source ? source : ""),
				.at_ms = sqlite3_column_int64(st, 6),
			};
			if (!c.path || !c.source || c.cursor >= s->next_cursor ||
			    dsb_changes_restore(d, s, &c) < 0) {
				free(c.path);
				free(c.source);
			}
		}
		if (step != SQLITE_DONE)
			rc = db_fail(err, d->db, "load changes");
	}
	free(v);
	sqlite3_finalize(st);
	return rc;
}
