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
 * Schema (user_version 3):
 *   sandboxes(id PRIMARY KEY, state, created_ms, ended_ms, expires_ms,
 *             ttl_seconds, idle_timeout_seconds, last_active_ms, end_reason,
 *             options JSON, metadata JSON, next_cursor,
 *             auto_resume, paused_retention_seconds, paused_ms,
 *             workspace_kept,                     (the last four: version 2)
 *             env_sealed)                         (version 3)
 *   changes(sandbox, cursor, kind, type, size, path, source, at_ms)
 *             PRIMARY KEY (sandbox, cursor)
 *   settings(key PRIMARY KEY, value)       reserved for daemon settings
 *   contexts(sandbox, id, language, pid)   a code context's interpreter host
 *             PRIMARY KEY (sandbox, id)    (its pid in the sandbox), so that
 *             a restarted sandlotd can re-attach to it after a vm sandbox's
 *             pause with memory (code.c); made by CREATE IF NOT EXISTS, so
 *             older registries gain it without a version change
 *
 * Secrets.  The files are 0600 in a 0700 data directory owned by root
 * (fixed at start-up if they were made looser).  A sandbox's env is not in
 * `options` (that JSON is the rest of its options): while a restart needs
 * it — the sandbox runs (a crash leaves it lost, but its row is written
 * before that is known) or is paused (resume recreates it with its env) —
 * it is in env_sealed, ChaCha20-Poly1305 (nettle) under the 32-byte key of
 * <data-dir>/registry.key (0600, made at the first start) with the sandbox
 * id as associated data; once the sandbox has ended env_sealed is NULL.
 * secure_delete zeroes what SQLite frees, so an old sealed value or a
 * scrubbed one leaves no copy in the file.  A registry of version 2 or
 * earlier (env in clear in `options`) is rewritten at start-up, then
 * vacuumed and its WAL truncated.  Env values never go to the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <nettle/chacha-poly1305.h>
#include <nettle/memops.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
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
	" workspace_kept INTEGER NOT NULL DEFAULT 0,"
	" env_sealed BLOB);"
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
	"CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT);"
	"CREATE TABLE IF NOT EXISTS contexts ("
	" sandbox TEXT NOT NULL,"
	" id TEXT NOT NULL,"
	" language TEXT NOT NULL,"
	" pid INTEGER NOT NULL,"
	" PRIMARY KEY (sandbox, id)) WITHOUT ROWID;";

/* From version 1 (before pause/resume): the kept-workspace columns. */
static const char migrate_1_2[] =
	"ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN paused_retention_seconds INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN paused_ms INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sandboxes ADD COLUMN workspace_kept INTEGER NOT NULL DEFAULT 0;";

/* From version 2: env leaves `options` for a sealed column of its own
 * (scrub_env() moves the values). */
static const char migrate_2_3[] = "ALTER TABLE sandboxes ADD COLUMN env_sealed BLOB;";

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

/* ---- the data directory's privacy --------------------------------------------- */

/* The data directory must be sandlotd's own and closed to others: it
 * holds the registry, the key, every workspace.  Looser modes (an operator
 * made it 0755) are tightened with a warning; another owner is refused. */
static int secure_data_dir(const char *dir, sandlot_error_t **err)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return sandlot__error_errno(err, errno, "data directory %s", dir);
	if (!S_ISDIR(st.st_mode))
		return sandlot__error(err, ENOTDIR, "data directory %s is not a directory", dir);
	if (st.st_uid != geteuid())
		return sandlot__error(err, EPERM,
				      "data directory %s belongs to uid %u, not to sandlotd (uid %u): "
				      "its owner could read or replace the registry and every "
				      "workspace", dir, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 077) {
		mode_t m = st.st_mode & 07700;
		if (chmod(dir, m) < 0)
			return sandlot__error_errno(err, errno, "chmod %04o data directory %s",
						    (unsigned)m, dir);
		daemon_log("data_dir_mode", "level=warn dir=\"%s\" was=%04o now=%04o "
			   "msg=\"others could read the registry and the workspaces\"", dir,
			   (unsigned)(st.st_mode & 07777), (unsigned)m);
	}
	return 0;
}

/* A registry file made readable by others (by a version before, or by
 * hand) becomes 0600 again. */
static void private_file(const char *path)
{
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077)) {
		if (chmod(path, 0600) == 0)
			daemon_log("registry_mode", "level=warn file=\"%s\" was=%04o now=0600", path,
				   (unsigned)(st.st_mode & 07777));
	}
}

/* <data-dir>/registry.key: 32 random bytes, 0600, made at the first start.
 * A registry whose key is gone cannot give its sealed env back (those
 * sandboxes resume without it: registry_load logs env_unreadable). */
static int load_key(struct daemon *d, sandlot_error_t **err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/registry.key", d->cfg.data_dir);
	cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		struct stat st;
		if (fstat(fd, &st) < 0)
			return sandlot__error_errno(err, errno, "%s", path);
		if (!S_ISREG(st.st_mode) || st.st_size != (off_t)sizeof(d->seal_key) ||
		    st.st_uid != geteuid())
			return sandlot__error(err, EINVAL, "%s is not a %zu-byte file of sandlotd's "
					      "(remove it to make a new key; the env of paused sandboxes "
					      "is then lost)", path, sizeof(d->seal_key));
		if ((st.st_mode & 077) && fchmod(fd, 0600) == 0)
			daemon_log("registry_mode", "level=warn file=\"%s\" was=%04o now=0600", path,
				   (unsigned)(st.st_mode & 07777));
		if (read(fd, d->seal_key, sizeof(d->seal_key)) != (ssize_t)sizeof(d->seal_key))
			return sandlot__error_errno(err, errno ? errno : EIO, "read %s", path);
		return 0;
	}
	if (errno != ENOENT)
		return sandlot__error_errno(err, errno, "open %s", path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create %s", path);
	if (fchmod(fd, 0600) < 0 ||
	    getrandom(d->seal_key, sizeof(d->seal_key), 0) != (ssize_t)sizeof(d->seal_key) ||
	    write(fd, d->seal_key, sizeof(d->seal_key)) != (ssize_t)sizeof(d->seal_key) ||
	    fsync(fd) < 0) {
		int e = errno ? errno : EIO;
		unlink(path);
		return sandlot__error_errno(err, e, "write %s", path);
	}
	daemon_log("registry_key", "file=\"%s\" created=1", path);
	return 0;
}

/* ---- sealing env ------------------------------------------------------------------ */

#define SEAL_MAGIC "SLE1"
#define SEAL_HEAD (4 + CHACHA_POLY1305_NONCE_SIZE)
#define SEAL_TAIL CHACHA_POLY1305_DIGEST_SIZE

/* "SLE1" | nonce | ciphertext | tag, the sandbox id as associated data (a
 * value moved to another row does not open).  A new buffer in *out, or
 * -1. */
static int seal(const struct daemon *d, const char *id, const char *plain, size_t n,
		unsigned char **out, size_t *outlen)
{
	size_t len = SEAL_HEAD + n + SEAL_TAIL;
	unsigned char *b = malloc(len);
	if (!b)
		return -1;
	memcpy(b, SEAL_MAGIC, 4);
	if (getrandom(b + 4, CHACHA_POLY1305_NONCE_SIZE, 0) != CHACHA_POLY1305_NONCE_SIZE) {
		free(b);
		return -1;
	}
	struct chacha_poly1305_ctx ctx;
	chacha_poly1305_set_key(&ctx, d->seal_key);
	chacha_poly1305_set_nonce(&ctx, b + 4);
	chacha_poly1305_update(&ctx, strlen(id), (const uint8_t *)id);
	chacha_poly1305_encrypt(&ctx, n, b + SEAL_HEAD, (const uint8_t *)plain);
	chacha_poly1305_digest(&ctx, SEAL_TAIL, b + SEAL_HEAD + n);
	*out = b;
	*outlen = len;
	return 0;
}

/* The plaintext of a sealed value (NUL-terminated, new), or NULL if it
 * does not open with our key (another key, another row, damaged). */
static char *unseal(const struct daemon *d, const char *id, const unsigned char *b, size_t len)
{
	if (!b || len < SEAL_HEAD + SEAL_TAIL || memcmp(b, SEAL_MAGIC, 4) != 0)
		return NULL;
	size_t n = len - SEAL_HEAD - SEAL_TAIL;
	char *plain = malloc(n + 1);
	if (!plain)
		return NULL;
	struct chacha_poly1305_ctx ctx;
	uint8_t tag[SEAL_TAIL];
	chacha_poly1305_set_key(&ctx, d->seal_key);
	chacha_poly1305_set_nonce(&ctx, b + 4);
	chacha_poly1305_update(&ctx, strlen(id), (const uint8_t *)id);
	chacha_poly1305_decrypt(&ctx, n, (uint8_t *)plain, b + SEAL_HEAD);
	chacha_poly1305_digest(&ctx, SEAL_TAIL, tag);
	if (!memeql_sec(tag, b + SEAL_HEAD + n, SEAL_TAIL)) {
		explicit_bzero(plain, n);
		free(plain);
		return NULL;
	}
	plain[n] = '\0';
	return plain;
}

/* Whether a sandbox in this state can come back after a restart (so its
 * env is kept, sealed). */
static int needs_env(const char *state)
{
	return state && (strcmp(state, dsb_state_name(DSB_RUNNING)) == 0 ||
			 strcmp(state, dsb_state_name(DSB_STARTING)) == 0 ||
			 strcmp(state, dsb_state_name(DSB_PAUSED)) == 0);
}

/* Split options into what the row keeps in clear (a new JSON text, env
 * left out) and, if wanted and there is any, the sealed env.  0 or -1. */
static int split_options(struct daemon *d, const char *id, json_t *options, int keep_env,
			 char **clear, unsigned char **sealed, size_t *sealed_len)
{
	*clear = NULL;
	*sealed = NULL;
	*sealed_len = 0;
	json_t *o = options ? json_deep_copy(options) : json_object();
	if (!o)
		return -1;
	json_t *env = json_object_get(o, "env");
	int rc = 0;
	if (keep_env && json_is_object(env) && json_object_size(env) > 0) {
		char *text = json_dumps(env, JSON_COMPACT);
		rc = text ? seal(d, id, text, strlen(text), sealed, sealed_len) : -1;
		if (text) {
			explicit_bzero(text, strlen(text));
			free(text);
		}
	}
	json_object_del(o, "env");
	*clear = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (rc < 0 || !*clear) {
		free(*clear);
		free(*sealed);
		*clear = NULL;
		*sealed = NULL;
		return -1;
	}
	return 0;
}

/* A registry of before version 3 kept env in clear in `options`: move it
 * out (sealed where a restart needs it, dropped elsewhere), then rebuild
 * the file and empty the WAL so that no page with the old text is left. */
static int scrub_env(struct daemon *d, char **msg)
{
	sqlite3 *db = d->db;
	sqlite3_stmt *sel = NULL, *upd = NULL;
	int rc = -1, n = 0;
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, msg) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(db, "SELECT id, state, options FROM sandboxes", -1, &sel, NULL) !=
	    SQLITE_OK ||
	    sqlite3_prepare_v2(db, "UPDATE sandboxes SET options = ?2, env_sealed = ?3 WHERE id = ?1",
			       -1, &upd, NULL) != SQLITE_OK)
		goto out;
	int step;
	while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(sel, 0);
		const char *state = (const char *)sqlite3_column_text(sel, 1);
		const char *text = (const char *)sqlite3_column_text(sel, 2);
		json_t *o = text ? json_loads(text, 0, NULL) : NULL;
		if (!id || !json_is_object(o) || !json_object_get(o, "env")) {
			json_decref(o);
			continue;
		}
		char *clear;
		unsigned char *sealed;
		size_t sealed_len;
		int split = split_options(d, id, o, needs_env(state), &clear, &sealed, &sealed_len);
		json_decref(o);
		if (split < 0)
			goto out;
		sqlite3_bind_text(upd, 1, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(upd, 2, clear, -1, SQLITE_TRANSIENT);
		if (sealed)
			sqlite3_bind_blob(upd, 3, sealed, (int)sealed_len, SQLITE_TRANSIENT);
		else
			sqlite3_bind_null(upd, 3);
		int done = sqlite3_step(upd) == SQLITE_DONE;
		sqlite3_reset(upd);
		free(clear);
		free(sealed);
		if (!done)
			goto out;
		n++;
	}
	if (step != SQLITE_DONE)
		goto out;
	rc = 0;
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(upd);
	if (rc < 0) {
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, msg) != SQLITE_OK ||
	    sqlite3_exec(db, "VACUUM", NULL, NULL, msg) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, msg) != SQLITE_OK)
		return -1;
	daemon_log("registry_scrubbed", "sandboxes=%d msg=\"env moved out of the options in "
		   "clear\"", n);
	return 0;
}

int registry_open(struct daemon *d, sandlot_error_t **err)
{
	if (secure_data_dir(d->cfg.data_dir, err) < 0 || load_key(d, err) < 0)
		return -1;
	char path[4200], side[4300];
	snprintf(path, sizeof(path), "%s/sandlot.db", d->cfg.data_dir);
	/* Made 0600 before SQLite opens it: SQLite gives its -wal and -shm the
	 * database file's mode. */
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "registry %s", path);
	close(fd);
	private_file(path);
	static const char *const sides[] = { "-wal", "-shm", "-journal" };
	for (size_t i = 0; i < sizeof(sides) / sizeof(sides[0]); i++) {
		snprintf(side, sizeof(side), "%s%s", path, sides[i]);
		private_file(side);
	}
	sqlite3 *db = NULL;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				  SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		db_fail(err, db, "open");
		sqlite3_close(db);
		return sandlot__error_wrap(err, "registry %s", path);
	}
	d->db = db;
	sqlite3_busy_timeout(db, 5000);
	char *msg = NULL;
	int version = -1;
	/* auto_vacuum must be chosen before the first table exists; a registry
	 * made without it is converted once (VACUUM rewrites the file). */
	if (sqlite3_exec(db, "PRAGMA auto_vacuum=INCREMENTAL;", NULL, NULL, &msg) != SQLITE_OK ||
	    (pragma_int(db, "PRAGMA auto_vacuum") != 2 &&
	     sqlite3_exec(db, "VACUUM;", NULL, NULL, &msg) != SQLITE_OK) ||
	    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
			     " PRAGMA journal_size_limit=4194304; PRAGMA secure_delete=ON;", NULL, NULL, &msg) != SQLITE_OK ||
	    (version = user_version(db)) < 0 ||
	    sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK ||
	    (version == 1 && sqlite3_exec(db, migrate_1_2, NULL, NULL, &msg) != SQLITE_OK) ||
	    ((version == 1 || version == 2) &&
	     sqlite3_exec(db, migrate_2_3, NULL, NULL, &msg) != SQLITE_OK) ||
	    (version >= 1 && version < 3 && scrub_env(d, &msg) < 0) ||
	    sqlite3_exec(db, "PRAGMA user_version = 3", NULL, NULL, &msg) != SQLITE_OK) {
		sandlot__error(err, EIO, "registry %s: %s", path, msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		sqlite3_close(db);
		d->db = NULL;
		return -1;
	}
	for (size_t i = 0; i < 2; i++) {
		snprintf(side, sizeof(side), "%s%s", path, sides[i]);
		private_file(side);
	}
	return 0;
}

void registry_close(struct daemon *d)
{
	sqlite3_finalize(d->db_save);
	d->db_save = NULL;
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
	char *opts = NULL;
	unsigned char *sealed = NULL;
	size_t sealed_len = 0;
	if (split_options(d, s->id, s->options, needs_env(dsb_state_name(s->state)), &opts, &sealed,
			  &sealed_len) < 0) {
		daemon_log("registry_error", "level=error op=save sandbox=%s msg=\"cannot seal the "
			   "options (out of memory or no randomness)\"", s->id);
		return -1;
	}
	char *meta = s->metadata ? json_dumps(s->metadata, JSON_COMPACT) : NULL;
	static const char sql[] =
		"INSERT INTO sandboxes (id, state, created_ms, ended_ms, expires_ms, ttl_seconds,"
		" idle_timeout_seconds, last_active_ms, end_reason, options, metadata, next_cursor,"
		" auto_resume, paused_retention_seconds, paused_ms, workspace_kept, env_sealed)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
		" ON CONFLICT(id) DO UPDATE SET state = ?2, ended_ms = ?4, expires_ms = ?5,"
		" ttl_seconds = ?6, idle_timeout_seconds = ?7, last_active_ms = ?8,"
		" end_reason = ?9, next_cursor = ?12, paused_ms = ?15, workspace_kept = ?16,"
		" env_sealed = ?17";
	int rc = -1;
	pthread_mutex_lock(&d->db_lock);
	/* Compiled once and kept (it runs at every create and end; compiling
	 * it each time was about a third of the call). */
	if (!d->db_save &&
	    sqlite3_prepare_v3(d->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &d->db_save, NULL) !=
		    SQLITE_OK) {
		d->db_save = NULL;
		log_db_error(d, "save");
		goto out;
	}
	sqlite3_stmt *st = d->db_save;
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
	if (sealed)
		sqlite3_bind_blob(st, 17, sealed, (int)sealed_len, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 17);
	if (sqlite3_step(st) != SQLITE_DONE)
		log_db_error(d, "save");
	else
		rc = 0;
	/* Ready for the next call, holding none of this one's values. */
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
out:
	pthread_mutex_unlock(&d->db_lock);
	free(opts);
	free(sealed);
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
					   "DELETE FROM contexts WHERE sandbox = ?",
					   "DELETE FROM sandboxes WHERE id = ?" };
	sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL);
	for (int i = 0; i < 3; i++) {
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
			       " workspace_kept, env_sealed FROM sandboxes ORDER BY created_ms",
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
		if (sqlite3_column_type(st, 16) == SQLITE_BLOB) {
			char *text = unseal(d, s->id, sqlite3_column_blob(st, 16),
					    (size_t)sqlite3_column_bytes(st, 16));
			json_t *env = text ? json_loads(text, 0, NULL) : NULL;
			if (text) {
				explicit_bzero(text, strlen(text));
				free(text);
			}
			if (json_is_object(env))
				json_object_set_new(s->options, "env", env);
			else {
				json_decref(env);
				daemon_log("env_unreadable", "level=error sandbox=%s msg=\"its env does "
					   "not open with registry.key (replaced or removed?): it "
					   "resumes without it\"", s->id);
			}
		}
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

/* ---- code contexts ----------------------------------------------------- */

int registry_save_context(struct daemon *d, const char *sbid, const char *id, const char *lang,
			  long pid)
{
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(d->db,
			       "INSERT OR REPLACE INTO contexts (sandbox, id, language, pid)"
			       " VALUES (?, ?, ?, ?)", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, sbid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 3, lang, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 4, pid);
		if (sqlite3_step(st) == SQLITE_DONE)
			rc = 0;
	}
	if (rc < 0)
		log_db_error(d, "save context");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

int registry_forget_context(struct daemon *d, const char *sbid, const char *id)
{
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(d->db, "DELETE FROM contexts WHERE sandbox = ? AND id = ?", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, sbid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) == SQLITE_DONE)
			rc = 0;
	}
	if (rc < 0)
		log_db_error(d, "forget context");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

int registry_load_context(struct daemon *d, const char *sbid, const char *id, char *lang,
			  size_t langsz, long *pid)
{
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(d->db,
			       "SELECT language, pid FROM contexts WHERE sandbox = ? AND id = ?", -1,
			       &st, NULL) != SQLITE_OK) {
		log_db_error(d, "load context");
		rc = -1;
	} else {
		sqlite3_bind_text(st, 1, sbid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) == SQLITE_ROW) {
			const unsigned char *l = sqlite3_column_text(st, 0);
			snprintf(lang, langsz, "%s", l ? (const char *)l : "");
			*pid = (long)sqlite3_column_int64(st, 1);
			rc = 1;
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}
