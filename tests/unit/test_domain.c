/* sandlotd's domain layer (src/daemon/domain.h) on its own: no HTTP
 * server, no request, real sandboxes.
 *
 * The daemon's route modules are linked as sandlotd links them, with the
 * HTTP stand-in of tests/fuzz/http_stub.c in place of http.c (nothing here
 * sends a request: the stand-in only satisfies the routes' references).
 * Each case sets up a struct daemon as main() does — registry, recovery —
 * over one data directory of the run, calls the domain functions and
 * checks states, records and errors (status, message, details); then it
 * shuts the daemon down as sandlotd does, which ends what is left running.
 *
 * Needs root and a sandlot-init binary (SANDLOT_INIT from meson, or
 * SANDLOT_TEST_INIT_FALLBACK in the sanitizer build), like test_workspace.c;
 * the sandbox cases say why and skip where those are missing.  The cases
 * without a sandbox (parsing, the error table) run anywhere.
 */
#include <errno.h>
#include <signal.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif

static char tmp_root[64];
static char data_dir[128];
static const char *init_skip;
static struct daemon D;

static void bail(const char *why, int line)
{
	printf("#   giving up on this case: %s (%s:%d)\n", why, __FILE__, line);
	fflush(stdout);
	_exit(1);
}

#define REQUIRE(expr)                                      \
	do {                                               \
		if (!(expr))                               \
			bail("required: " #expr, __LINE__); \
	} while (0)

static void need_sandbox(void)
{
	if (geteuid() != 0)
		tap_skip("needs root: sandboxes take a host uid range, cgroups and a loop device");
	if (init_skip)
		tap_skip(init_skip);
	if (access("/dev/loop-control", F_OK) < 0)
		tap_skip("the host has no loop devices: the storage pool (kept workspaces) needs one");
}

/* A daemon as main() makes it, without the HTTP server, the pool and the
 * port relay. */
static void daemon_up(unsigned max_sandboxes)
{
	memset(&D, 0, sizeof(D));
	D.cfg.data_dir = data_dir;
	D.cfg.default_image = "host";
	D.cfg.max_sandboxes = max_sandboxes;
	D.cfg.paused_retention_s = 3600;
	D.cfg.max_download = (uint64_t)8 << 30;
	D.cfg.changes_scan_bytes = (uint64_t)8 << 20;
	D.cfg.changes_answer_bytes = (uint64_t)8 << 20;
	D.cfg.changes_log_bytes = (uint64_t)16 << 20;
	D.cfg.changes_total_bytes = (uint64_t)256 << 20;
	D.cfg.disk_overcommit = 1;
	pthread_mutex_init(&D.lock, NULL);
	pthread_mutex_init(&D.db_lock, NULL);
	pthread_mutex_init(&D.changes_lock, NULL);
	pthread_cond_init(&D.reaper_cond, NULL);
	D.started_ms = daemon_now_ms();
	sandlot_error_t *err = NULL;
	if (registry_open(&D, &err) < 0 || registry_load(&D, &err) < 0 ||
	    registry_load_changes(&D, &err) < 0) {
		printf("#   registry: %s\n", sandlot_error_message(err));
		bail("cannot open the registry", __LINE__);
	}
	sandboxes_recover(&D);
}

/* As sandlotd stops: running sandboxes end (deleted), the table goes. */
static void daemon_down(void)
{
	sandboxes_shutdown(&D);
	sandboxes_free(&D);
	registry_close(&D);
}

/* Create from a JSON body; the sandbox ("found"), or a failed case. */
static struct dsb *create(const char *body_text)
{
	json_error_t je;
	json_t *body = body_text ? json_loads(body_text, 0, &je) : NULL;
	REQUIRE(!body_text || body);
	struct domain_create c;
	struct domain_created out;
	sandlot_error_t *err = NULL;
	struct dsb *s = NULL;
	if (domain_create_parse(&D, body, &c, &err) == 0)
		s = domain_create(&D, &c, &out, &err);
	domain_create_free(&c);
	if (!s) {
		printf("#   create %s: [%d] %s\n", body_text ? body_text : "{}",
		       sandlot_error_status(err), sandlot_error_message(err));
		bail("cannot create a sandbox", __LINE__);
	}
	domain_created_free(&out);
	json_decref(body);
	return s;
}

static const char *state_of(const char *id)
{
	static char buf[32];
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_find(&D, id, &err);
	if (!s) {
		sandlot_error_free(err);
		return "(unknown)";
	}
	json_t *o = dsb_to_json(s);
	snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(o, "state")));
	json_decref(o);
	dsb_release(&D, s);
	return buf;
}

static const char *detail(const sandlot_error_t *err, const char *key)
{
	const char *k, *v;
	for (unsigned i = 0; (k = sandlot__error_detail_at(err, i, &v)); i++)
		if (strcmp(k, key) == 0)
			return v ? v : "(null)";
	return "(absent)";
}

/* Expect err with status st (and the message containing `part`); frees it. */
#define CHECK_ERR(err, st, part)                                                        \
	do {                                                                            \
		CHECK(err != NULL);                                                     \
		CHECK_EQ_INT(sandlot_error_status(err), st);                            \
		CHECK(strstr(sandlot_error_message(err), part) != NULL);                \
		printf("#   [%d] %s\n", sandlot_error_status(err), sandlot_error_message(err)); \
		sandlot_error_free(err);                                                \
		err = NULL;                                                             \
	} while (0)

/* ---- cases ------------------------------------------------------------------ */

/* create → pause → resume → delete, with the refusals of each state. */
static void test_state_machine(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	CHECK_STR(state_of(id), "running");

	/* Files written while running survive a pause. */
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);
	CHECK_EQ_INT(domain_file_write(&D, g, "notes/kept.txt", "kept\n", 5, 0644, &err), 0);
	dsb_put(&D, g);

	/* Resuming a running sandbox is a no-op that succeeds. */
	json_t *rec = domain_sandbox_resume(&D, id, NULL, &err);
	CHECK(rec && !strcmp(json_string_value(json_object_get(rec, "state")), "running"));
	json_decref(rec);

	rec = domain_sandbox_pause(&D, id, &err);
	REQUIRE(rec);
	CHECK_STR(json_string_value(json_object_get(rec, "state")), "paused");
	CHECK(json_is_true(json_object_get(rec, "workspace_kept")));
	json_decref(rec);
	CHECK_STR(state_of(id), "paused");
	/* Pausing again: still paused, no error. */
	rec = domain_sandbox_pause(&D, id, &err);
	CHECK(rec && !strcmp(json_string_value(json_object_get(rec, "state")), "paused"));
	json_decref(rec);

	/* Paused without auto_resume: calls on it are refused, saying so. */
	CHECK(domain_sandbox_get(&D, id, &err) == NULL);
	CHECK_STR(detail(err, "state"), "paused");
	CHECK_ERR(err, DOMAIN_EPAUSED, "is paused");
	CHECK(domain_sandbox_keepalive(&D, id, NULL, &err) == NULL);
	CHECK_ERR(err, DOMAIN_EPAUSED, "resume first");

	uint32_t ttl = 600;
	rec = domain_sandbox_resume(&D, id, &ttl, &err);
	REQUIRE(rec);
	CHECK_STR(json_string_value(json_object_get(rec, "state")), "running");
	CHECK_EQ_INT(json_integer_value(json_object_get(rec, "ttl_seconds")), 600);
	json_decref(rec);
	g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);
	char *data = NULL;
	size_t len = 0;
	CHECK_EQ_INT(domain_file_read(&D, g, "/home/user/notes/kept.txt", 0, &data, &len, &err), 0);
	CHECK(data && len == 5 && !memcmp(data, "kept\n", 5));
	free(data);
	dsb_put(&D, g);

	/* Deleted: every call says it ended, with state and reason. */
	CHECK_EQ_INT(domain_sandbox_delete(&D, id, &err), 0);
	CHECK_STR(state_of(id), "deleted");
	CHECK(domain_sandbox_get(&D, id, &err) == NULL);
	CHECK_STR(detail(err, "state"), "deleted");
	CHECK_STR(detail(err, "end_reason"), "deleted");
	CHECK_ERR(err, DOMAIN_EENDED, "has ended: deleted (deleted)");
	CHECK(domain_sandbox_pause(&D, id, &err) == NULL);
	CHECK_ERR(err, DOMAIN_EENDED, "has ended");
	CHECK(domain_sandbox_resume(&D, id, NULL, &err) == NULL);
	CHECK_ERR(err, DOMAIN_EENDED, "has ended");
	CHECK_EQ_INT(domain_sandbox_delete(&D, id, &err), -1);
	CHECK_ERR(err, DOMAIN_EENDED, "has ended");
	daemon_down();
}

/* A paused sandbox is deleted at once, and its workspace with it. */
static void test_delete_paused(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	json_decref(domain_sandbox_pause(&D, id, &err));
	CHECK_STR(state_of(id), "paused");
	CHECK(workspace_exists(&D, id));
	CHECK_EQ_INT(domain_sandbox_delete(&D, id, &err), 0);
	CHECK_STR(state_of(id), "deleted");
	CHECK(!workspace_exists(&D, id));
	daemon_down();
}

/* auto_resume: the first call on a paused sandbox resumes it. */
static void test_auto_resume(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create("{\"auto_resume\": true, \"metadata\": {\"case\": \"auto\"}}");
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	json_decref(domain_sandbox_pause(&D, id, &err));
	CHECK_STR(state_of(id), "paused");
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	CHECK(g != NULL);
	if (g) {
		CHECK(domain_sandbox_handle(g, &err) != NULL);
		dsb_put(&D, g);
	}
	CHECK_STR(state_of(id), "running");
	/* The list filters by state and by metadata. */
	const char *labels[] = { "case=auto" };
	json_t *arr = domain_sandbox_list(&D, "running", labels, 1, &err);
	CHECK(arr && json_array_size(arr) == 1);
	json_decref(arr);
	const char *other[] = { "case=other" };
	arr = domain_sandbox_list(&D, NULL, other, 1, &err);
	CHECK(arr && json_array_size(arr) == 0);
	json_decref(arr);
	CHECK(domain_sandbox_list(&D, "sleeping", NULL, 0, &err) == NULL);
	CHECK_ERR(err, EINVAL, "invalid state \"sleeping\"");
	const char *bad[] = { "=x" };
	CHECK(domain_sandbox_list(&D, NULL, bad, 1, &err) == NULL);
	CHECK_ERR(err, EINVAL, "expected KEY=VALUE");
	daemon_down();
}

/* --max-sandboxes: a create and a resume past it are refused (EAGAIN) and
 * the paused sandbox stays paused. */
static void test_capacity(void)
{
	need_sandbox();
	daemon_up(1);
	sandlot_error_t *err = NULL;
	struct dsb *a = create(NULL);
	char ida[32];
	snprintf(ida, sizeof(ida), "%s", a->id);
	dsb_release(&D, a);
	json_decref(domain_sandbox_pause(&D, ida, &err));
	struct dsb *b = create(NULL); /* a paused one takes no slot */
	char idb[32];
	snprintf(idb, sizeof(idb), "%s", b->id);
	dsb_release(&D, b);

	struct domain_create c;
	struct domain_created out;
	CHECK_EQ_INT(domain_create_parse(&D, NULL, &c, &err), 0);
	CHECK(domain_create(&D, &c, &out, &err) == NULL);
	domain_create_free(&c);
	domain_created_free(&out);
	CHECK_ERR(err, EAGAIN, "--max-sandboxes");
	CHECK(domain_sandbox_resume(&D, ida, NULL, &err) == NULL);
	CHECK_ERR(err, EAGAIN, "stays paused");
	CHECK_STR(state_of(ida), "paused");
	CHECK_EQ_INT(domain_sandbox_delete(&D, idb, &err), 0);
	json_t *rec = domain_sandbox_resume(&D, ida, NULL, &err);
	CHECK(rec != NULL);
	json_decref(rec);
	CHECK_STR(state_of(ida), "running");
	daemon_down();
}

/* from_snapshot: refused from a running or unknown sandbox; from a paused
 * one the new sandbox has its files. */
static void test_from_snapshot(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *src = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", src->id);
	dsb_release(&D, src);
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);
	CHECK_EQ_INT(domain_file_write(&D, g, "from.txt", "snap", 4, 0600, &err), 0);
	dsb_put(&D, g);

	char body[128];
	snprintf(body, sizeof(body), "{\"from_snapshot\": \"%s\"}", id);
	json_t *j = json_loads(body, 0, NULL);
	struct domain_create c;
	struct domain_created out;
	CHECK_EQ_INT(domain_create_parse(&D, j, &c, &err), 0);
	CHECK(domain_create(&D, &c, &out, &err) == NULL);
	domain_create_free(&c);
	domain_created_free(&out);
	CHECK_ERR(err, EBUSY, "is running; pause it first");

	json_decref(domain_sandbox_pause(&D, id, &err));
	struct dsb *copy = create(body);
	g = domain_sandbox_get(&D, copy->id, &err);
	REQUIRE(g);
	char *data = NULL;
	size_t len = 0;
	CHECK_EQ_INT(domain_file_read(&D, g, "from.txt", 0, &data, &len, &err), 0);
	CHECK(data && len == 4 && !memcmp(data, "snap", 4));
	free(data);
	json_t *st = domain_file_stat(&D, g, "from.txt", &err);
	CHECK(st && !strcmp(json_string_value(json_object_get(st, "mode")), "0600"));
	json_decref(st);
	dsb_put(&D, g);
	dsb_release(&D, copy);
	json_decref(j);

	json_t *k = json_loads("{\"from_snapshot\": \"sb-aaaaaaaaaaaaaaaaaaaaaaaaaa\"}", 0, NULL);
	CHECK_EQ_INT(domain_create_parse(&D, k, &c, &err), 0);
	CHECK(domain_create(&D, &c, &out, &err) == NULL);
	domain_create_free(&c);
	domain_created_free(&out);
	CHECK_ERR(err, ENOENT, "field \"from_snapshot\": no sandbox");
	json_decref(k);
	CHECK_EQ_INT(domain_sandbox_delete(&D, id, &err), 0);
	daemon_down();
}

/* File calls and the changes log: net view, the hidden filter, a scan. */
static void test_files_and_changes(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);
	char *made = domain_file_mkdir(&D, g, "out/deep", 0755, &err);
	CHECK_STR(made, "/home/user/out/deep");
	free(made);
	CHECK_EQ_INT(domain_file_write(&D, g, "out/a.txt", "a", 1, 0644, &err), 0);
	CHECK_EQ_INT(domain_file_write(&D, g, ".cache/x", "x", 1, 0644, &err), 0);
	CHECK_EQ_INT(domain_file_write(&D, g, "out/tmp.txt", "t", 1, 0644, &err), 0);
	CHECK_EQ_INT(domain_file_remove(&D, g, "out/tmp.txt", 0, &err), 0);
	CHECK_EQ_INT(domain_file_remove(&D, g, "out", 0, &err), -1);
	CHECK_ERR(err, ENOTEMPTY, "use recursive=1");
	CHECK(domain_file_stat(&D, g, "nope.txt", &err) == NULL);
	CHECK_ERR(err, ENOENT, "nope.txt");

	json_t *ls = domain_file_list(&D, g, "out", &err);
	REQUIRE(ls);
	json_t *ents = json_object_get(ls, "entries");
	CHECK_EQ_INT(json_array_size(ents), 2); /* a.txt, deep */
	CHECK_STR(json_string_value(json_object_get(json_array_get(ents, 0), "name")), "a.txt");
	json_decref(ls);

	struct domain_changes_query q = { .net = 1, .exclude_hidden = 1 };
	json_t *page = domain_changes_get(&D, g, &q, &err);
	REQUIRE(page);
	int saw_a = 0, saw_tmp = 0, saw_hidden = 0;
	json_t *e;
	size_t i;
	json_array_foreach(json_object_get(page, "changes"), i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		saw_a |= !strcmp(p, "/home/user/out/a.txt") &&
			 !strcmp(json_string_value(json_object_get(e, "kind")), "created");
		saw_tmp |= strstr(p, "tmp.txt") != NULL;
		saw_hidden |= strstr(p, ".cache") != NULL;
	}
	CHECK(saw_a);
	CHECK(!saw_tmp);    /* created, then deleted: no net change */
	CHECK(!saw_hidden); /* exclude_hidden */
	CHECK(json_integer_value(json_object_get(page, "hidden")) >= 1);
	uint64_t cursor0 = (uint64_t)json_integer_value(json_object_get(page, "cursor"));
	json_decref(page);

	/* A scan logs what changed behind the API's back. */
	const char *argv[] = { "sh", "-c", "echo b > /home/user/out/b.txt", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .timeout_ms = 30000 };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb) };
	sandlot_proc_t *p = sandlot_exec(domain_sandbox_handle(g, NULL), &spec, &cb, &err);
	REQUIRE(p);
	sandlot_exit_t ex = { .size = sizeof(ex) };
	REQUIRE(sandlot_proc_wait(p, &ex, &err) == 0 && ex.exit_code == 0);
	sandlot_proc_free(p);
	uint64_t cursor = 0;
	int truncated = -1;
	CHECK_EQ_INT(domain_changes_scan(&D, g, &cursor, &truncated, &err), 0);
	CHECK(cursor > cursor0);
	CHECK_EQ_INT(truncated, 0);
	q = (struct domain_changes_query){ .since = cursor0, .after = cursor0 };
	page = domain_changes_get(&D, g, &q, &err);
	REQUIRE(page);
	json_t *ch = json_object_get(page, "changes");
	CHECK_EQ_INT(json_array_size(ch), 1);
	CHECK_STR(json_string_value(json_object_get(json_array_get(ch, 0), "path")),
		  "/home/user/out/b.txt");
	CHECK_STR(json_string_value(json_object_get(json_array_get(ch, 0), "source")), "scan");
	json_decref(page);
	dsb_put(&D, g);
	daemon_down();
}

/* Execs: start, stdin, wait, kill, and the refusals of an ended one. */
static void test_execs(void)
{
	need_sandbox();
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);

	struct domain_exec_req r;
	json_t *j = json_loads("{\"argv\": []}", 0, NULL);
	CHECK_EQ_INT(domain_exec_parse(j, &r, &err), -1);
	domain_exec_req_free(&r);
	json_decref(j);
	CHECK_ERR(err, EINVAL, "\"argv\" must be a non-empty array");

	j = json_loads("{\"command\": \"read x; echo got $x; echo >&2 oops; exit 3\"}", 0, NULL);
	CHECK_EQ_INT(domain_exec_parse(j, &r, &err), 0);
	json_t *st = domain_exec_start(&D, g, &r, &err);
	domain_exec_req_free(&r);
	json_decref(j);
	REQUIRE(st);
	CHECK_STR(json_string_value(json_object_get(st, "mode")), "background");
	char ex[32];
	snprintf(ex, sizeof(ex), "%s", json_string_value(json_object_get(st, "exec_id")));
	json_decref(st);
	CHECK_EQ_INT(domain_exec_stdin(&D, g, ex, "hi\n", 3, 1, &err), 0);
	json_t *done = domain_exec_wait(&D, g, ex, 60000, &err);
	REQUIRE(done);
	CHECK_STR(json_string_value(json_object_get(done, "state")), "exited");
	CHECK_STR(json_string_value(json_object_get(done, "stdout")), "got hi\n");
	CHECK_STR(json_string_value(json_object_get(done, "stderr")), "oops\n");
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(done, "result"), "exit_code")),
		     3);
	json_decref(done);
	CHECK_EQ_INT(domain_exec_kill(&D, g, ex, SIGTERM, &err), -1);
	CHECK_ERR(err, EBUSY, "has ended");
	CHECK_EQ_INT(domain_exec_stdin(&D, g, ex, "x", 1, 0, &err), -1);
	CHECK_ERR(err, EBUSY, "has ended");

	j = json_loads("{\"argv\": [\"sleep\", \"600\"]}", 0, NULL);
	CHECK_EQ_INT(domain_exec_parse(j, &r, &err), 0);
	st = domain_exec_start(&D, g, &r, &err);
	domain_exec_req_free(&r);
	json_decref(j);
	REQUIRE(st);
	char sl[32];
	snprintf(sl, sizeof(sl), "%s", json_string_value(json_object_get(st, "exec_id")));
	json_decref(st);
	CHECK(domain_exec_wait(&D, g, sl, 50, &err) == NULL);
	CHECK_ERR(err, ETIMEDOUT, "still running");
	json_t *list = domain_exec_list(&D, g, &err);
	CHECK(list && json_array_size(list) == 2);
	CHECK_STR(json_string_value(json_object_get(json_array_get(list, 0), "exec_id")), sl);
	json_decref(list);
	CHECK_EQ_INT(domain_exec_kill(&D, g, sl, SIGKILL, &err), 0);
	done = domain_exec_wait(&D, g, sl, 60000, &err);
	REQUIRE(done);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(done, "result"), "signal")),
		     SIGKILL);
	json_decref(done);

	CHECK(domain_exec_get(&D, g, "ex-nope", &err) == NULL);
	CHECK_ERR(err, EINVAL, "invalid exec id");
	CHECK(domain_exec_get(&D, g, "ex-aaaaaaaaaaaaaaaaaaaaaaaaaa", &err) == NULL);
	CHECK_ERR(err, ENOENT, "no exec ex-aaaaaaaaaaaaaaaaaaaaaaaaaa");
	dsb_put(&D, g);
	daemon_down();
}

static int count_events(void *ud, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (type && !strcmp(type, "stdout"))
		(*(int *)ud)++;
	return 0;
}

/* Code cells and contexts: state kept across cells, events, refusals. */
static void test_code(void)
{
	need_sandbox();
	if (access("/usr/bin/python3", X_OK) < 0)
		tap_skip("the host image has no /usr/bin/python3 for the python context");
	daemon_up(8);
	sandlot_error_t *err = NULL;
	struct dsb *s = create(NULL);
	char id[32];
	snprintf(id, sizeof(id), "%s", s->id);
	dsb_release(&D, s);
	struct dsb *g = domain_sandbox_get(&D, id, &err);
	REQUIRE(g);
	json_t *ctx = domain_context_create(&D, g, "python", &err);
	REQUIRE(ctx);
	char cid[64];
	snprintf(cid, sizeof(cid), "%s", json_string_value(json_object_get(ctx, "id")));
	json_decref(ctx);

	struct domain_code_req r = { .context = cid, .code = json_string("x = 6\nprint('hi')") };
	int nout = 0;
	json_t *res = domain_code_run(&D, g, &r, count_events, &nout, &err);
	REQUIRE(res);
	CHECK_STR(json_string_value(json_object_get(res, "status")), "ok");
	CHECK_STR(json_string_value(json_object_get(res, "stdout")), "hi\n");
	CHECK(nout >= 1);
	json_decref(res);
	json_decref(r.code);
	r.code = json_string("x * 7");
	res = domain_code_run(&D, g, &r, NULL, NULL, &err);
	REQUIRE(res);
	CHECK_STR(json_string_value(json_object_get(res, "value")), "42");
	json_decref(res);
	json_decref(r.code);

	r = (struct domain_code_req){ .context = cid, .language = "bash", .code = json_string("") };
	CHECK(domain_code_run(&D, g, &r, NULL, NULL, &err) == NULL);
	CHECK_ERR(err, EINVAL, "is a python context");
	json_decref(r.code);
	json_t *list = domain_context_list(&D, g, &err);
	CHECK(list && json_array_size(list) == 1);
	json_decref(list);
	CHECK_EQ_INT(domain_context_delete(&D, g, cid, &err), 0);
	CHECK_EQ_INT(domain_context_delete(&D, g, cid, &err), -1);
	CHECK_ERR(err, ENOENT, "no context");
	json_t *body = json_loads("{\"code\": \"1\"}", 0, NULL);
	CHECK_EQ_INT(domain_code_parse(body, &r, &err), -1);
	CHECK_ERR(err, EINVAL, "give \"language\" or \"context\"");
	json_decref(body);
	dsb_put(&D, g);
	daemon_down();
}

/* Lookups of ids that are malformed or unknown. */
static void test_lookup_errors(void)
{
	need_sandbox(); /* the registry lives in the data directory of the run */
	daemon_up(8);
	sandlot_error_t *err = NULL;
	CHECK(domain_sandbox_find(&D, "nope", &err) == NULL);
	CHECK_ERR(err, ENOENT, "invalid sandbox id \"nope\"");
	CHECK(domain_sandbox_get(&D, "sb-aaaaaaaaaaaaaaaaaaaaaaaaaa", &err) == NULL);
	CHECK_ERR(err, ENOENT, "no sandbox sb-aaaaaaaaaaaaaaaaaaaaaaaaaa");
	CHECK_EQ_INT(domain_sandbox_delete(&D, NULL, &err), -1);
	CHECK_ERR(err, ENOENT, "invalid sandbox id");
	daemon_down();
}

/* Create bodies: each refusal names the field (EINVAL), nothing starts. */
static void test_create_parse(void)
{
	static const struct {
		const char *body, *part;
	} bad[] = {
		{ "[1]", "must be a JSON object, not an array" },
		{ "{\"memory\": \"12Q\"}", "field \"memory\": invalid size" },
		{ "{\"memory\": -1}", "field \"memory\" must be a positive number" },
		{ "{\"cpus\": 0}", "field \"cpus\" must be between" },
		{ "{\"pids\": 1}", "field \"pids\" must be between 2" },
		{ "{\"env\": {\"A=B\": \"x\"}}", "invalid variable name" },
		{ "{\"ttl_seconds\": \"1\"}", "field \"ttl_seconds\" must be an integer" },
		{ "{\"from_snapshot\": \"x\"}", "field \"from_snapshot\": invalid sandbox id" },
		{ "{\"metadata\": {\"a b\": \"x\"}}", "field \"metadata\": invalid key" },
		{ "{\"network\": {\"mode\": \"wide\"}}", "field \"network.mode\"" },
		{ "{\"packages\": {\"gem\": []}}", "unknown field \"packages.gem\"" },
		{ "{\"ports\": [0]}", "field \"ports\"" },
		{ "{\"colour\": 1}", "unknown field \"colour\"" },
	};
	memset(&D, 0, sizeof(D));
	D.cfg.data_dir = data_dir;
	D.cfg.default_image = "host";
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *j = json_loads(bad[i].body, JSON_DECODE_ANY, NULL);
		REQUIRE(j);
		struct domain_create c;
		sandlot_error_t *err = NULL;
		CHECK_EQ_INT(domain_create_parse(&D, j, &c, &err), -1);
		domain_create_free(&c);
		printf("#   %s\n", bad[i].body);
		CHECK_ERR(err, EINVAL, bad[i].part);
		json_decref(j);
	}
	/* A good one, normalised for the record. */
	json_t *j = json_loads("{\"memory\": \"256M\", \"ttl_seconds\": 60, \"env\": {\"A\": \"1\"}}",
			       0, NULL);
	struct domain_create c;
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(domain_create_parse(&D, j, &c, &err), 0);
	CHECK_EQ_INT(c.ttl, 60);
	CHECK_EQ_INT(json_integer_value(json_object_get(c.norm, "memory")), 256 << 20);
	CHECK_STR(c.env[0], "A=1");
	domain_create_free(&c);
	json_decref(j);
}

/* The one table of statuses, as domain.h writes it down. */
static void test_error_table(void)
{
	static const struct {
		int status, http;
		const char *code;
	} rows[] = {
		{ ENOENT, 404, "not_found" },          { EINVAL, 400, "bad_request" },
		{ EBUSY, 409, "conflict" },            { DOMAIN_EPAUSED, 409, "sandbox_paused" },
		{ DOMAIN_ECTXBUSY, 409, "context_busy" }, { DOMAIN_EENDED, 410, "sandbox_ended" },
		{ EPIPE, 410, "sandbox_gone" },        { EAGAIN, 429, "too_many_sandboxes" },
		{ ESHUTDOWN, 503, "shutting_down" },   { ENOSPC, 507, "insufficient_storage" },
		{ DOMAIN_EINTERP, 500, "interpreter_failed" }, { ENOMEM, 500, "internal" },
		{ EMFILE, 503, "out_of_descriptors" }, { ENFILE, 503, "out_of_descriptors" },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		sandlot_error_t *err = NULL;
		sandlot__error(&err, rows[i].status, "x");
		const char *code = NULL;
		CHECK_EQ_INT(http_status_of(err, &code), rows[i].http);
		CHECK_STR(code, rows[i].code);
		sandlot_error_free(err);
	}
	/* Details: kept in order, replaced by key, NULL values allowed. */
	sandlot_error_t *err = NULL;
	sandlot__error(&err, DOMAIN_EENDED, "ended");
	sandlot__error_detail(&err, "state", "expired");
	sandlot__error_detail(&err, "end_reason", NULL);
	sandlot__error_detail(&err, "state", "deleted");
	CHECK_STR(detail(err, "state"), "deleted");
	CHECK_STR(detail(err, "end_reason"), "(null)");
	const char *v;
	CHECK_STR(sandlot__error_detail_at(err, 0, &v), "state");
	CHECK(sandlot__error_detail_at(err, 2, &v) == NULL);
	sandlot__error_wrap(&err, "ctx");
	CHECK_STR(detail(err, "state"), "deleted");
	sandlot_error_free(err);
}

/* ---- harness ----------------------------------------------------------------- */

static void (*case_fn)(void);

static void case_main(void)
{
	case_fn();
#ifdef HAVE_LSAN
	if (__lsan_do_recoverable_leak_check()) {
		printf("#   check failed: LeakSanitizer found leaks (stack on stderr)\n");
		tap_case_failed = 1;
	}
#endif
	fflush(stdout);
}

#define RUN(fn) (case_fn = (fn), tap_run(#fn, case_main))

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int main(void)
{
	tap_timeout_s = 180;
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	snprintf(tmp_root, sizeof(tmp_root), "/var/tmp/sandlot-test-domain.XXXXXX");
	if (!mkdtemp(tmp_root)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(data_dir, sizeof(data_dir), "%s/data", tmp_root);
	mkdir(data_dir, 0700);
	setenv("SANDLOT_DATA_DIR", data_dir, 1);
	const char *init = getenv("SANDLOT_INIT");
	if (!init || !*init) {
		const char *fb = getenv("SANDLOT_TEST_INIT_FALLBACK");
		if (fb && access(fb, X_OK) == 0)
			setenv("SANDLOT_INIT", fb, 1);
		else
			init_skip = "no sandlot-init: run through `meson test`, or set SANDLOT_INIT";
	}
	RUN(test_error_table);
	RUN(test_create_parse);
	RUN(test_lookup_errors);
	RUN(test_state_machine);
	RUN(test_delete_paused);
	RUN(test_auto_resume);
	RUN(test_capacity);
	RUN(test_from_snapshot);
	RUN(test_files_and_changes);
	RUN(test_execs);
	RUN(test_code);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	/* The pool stays mounted for the next sandbox: unmount it (its loop
	 * device goes with it) before removing the data directory. */
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.data_dir = data_dir;
	sandlot_error_t *e = NULL;
	if (sandlot_storage_unmount(&o, &e) < 0) {
		printf("# unmount the storage pool: %s\n", sandlot_error_message(e));
		sandlot_error_free(e);
	}
	nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return tap_done();
}
