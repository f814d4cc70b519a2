/* libsandlot's public API (include/sandlot.h) against real sandboxes.
 *
 * Needs root (user namespaces with a host uid range, cgroups, the storage
 * pool's loop device) and a sandlot-init binary:
 *  - `meson test` in the normal build sets SANDLOT_INIT to the init it built;
 *  - the sanitizer build (b_sanitize != none) cannot link the static init, so
 *    meson passes SANDLOT_TEST_INIT_FALLBACK, the normal build's
 *    build/src/init/sandlot-init.  The library under test is still the
 *    sanitized one (init is another process, it needs no instrumentation).
 *    If that binary does not exist (`make` was not run) every sandbox case
 *    is skipped, saying why; an explicit SANDLOT_INIT always wins.
 * Without root the sandbox cases are skipped, saying so.
 *
 * main() makes one data directory under a fresh mkdtemp() directory
 * (SANDLOT_DATA_DIR), becomes a child subreaper, runs every case in its own
 * process (tap.h) and removes the directory at the end.  After each case the
 * case's process must have no sandlot-init child left (destroy reaps it); the
 * last case checks that no init of ours is alive anywhere and that no
 * workspace is left in the storage pool.  In an ASan build each case also ends with a
 * LeakSanitizer check (tap.h ends cases with _exit, which skips LSan's own);
 * a TSan build (-Db_sanitize=thread) fails a case on any report, because
 * TSan's _exit returns 66 when it reported something.
 *
 * A case whose subject deadlocks or blocks for good runs the call on a
 * helper thread with a deadline, says what is stuck, and ends the case
 * (nothing can be cleaned up behind a stuck library call; the process exit
 * takes the sandboxes down: their inits get EOF).  Cases that exercise a
 * known bug say so, with the file and function, in their comment.
 *
 * TEST_LIB_ONLY=substring runs only the cases whose name contains it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandlot.h"
#include "common/proto.h" /* SANDLOT_PROTO_WINDOW, SANDLOT_PROTO_MAX_DATA */
#include "core/private.h" /* sandlot__init_pid */
#include "core/sized.h"   /* sandlot__sized_layouts_check */
#include "core/teardown.h"    /* sandlot__stop, sandlot__ended, sandlot__remove_leftovers */
#include <glob.h>
#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static pid_t main_pid;
static char tmp_root[64];
static char data_dir[128];
static const char *init_skip; /* why sandbox cases are skipped, or NULL */

/* ---- small helpers -------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void bail(const char *why, int line)
{
	printf("#   giving up on this case: %s (%s:%d)\n", why, __FILE__, line);
	fflush(stdout);
	_exit(1);
}

#define REQUIRE(expr)                                 \
	do {                                          \
		if (!(expr))                          \
			bail("required: " #expr, __LINE__); \
	} while (0)

static void show_err(const char *what, const sandlot_error_t *e)
{
	printf("#   %s: [%d %s] %s\n", what, sandlot_error_status(e),
	       strerrorname_np(sandlot_error_status(e)) ? strerrorname_np(sandlot_error_status(e)) : "?",
	       sandlot_error_message(e));
	fflush(stdout);
}

/* Run `expr` (which passes E as its error argument); it must return >= 0.
 * On failure print the error and end the case. */
#define MUST(expr)                                                     \
	do {                                                           \
		sandlot_error_t *must_err_ = NULL, **E = &must_err_;   \
		if ((expr) < 0) {                                      \
			show_err(#expr, must_err_);                    \
			bail("call failed", __LINE__);                 \
		}                                                      \
		(void)E;                                               \
		sandlot_error_free(must_err_);                         \
	} while (0)

/* Check that `expr` (passing E) fails with `status` and a message that
 * contains `needle` (NULL: any non-empty message). */
#define MUST_FAIL(expr, status, needle)                                           \
	do {                                                                      \
		sandlot_error_t *mf_err_ = NULL, **E = &mf_err_;                  \
		long long mf_rc_ = (long long)(expr);                             \
		(void)E;                                                          \
		check_failure(#expr, mf_rc_ < 0, mf_err_, status, needle, __LINE__); \
		sandlot_error_free(mf_err_);                                      \
	} while (0)

static void check_failure(const char *what, int failed, const sandlot_error_t *e, int status,
			  const char *needle, int line)
{
	const char *msg = sandlot_error_message(e);
	if (!failed) {
		printf("#   check failed: %s should fail (%s:%d)\n", what, __FILE__, line);
		tap_case_failed = 1;
	} else if (!e) {
		printf("#   check failed: %s failed without an error (%s:%d)\n", what, __FILE__, line);
		tap_case_failed = 1;
	} else if (sandlot_error_status(e) != status || !msg || !*msg ||
		   (needle && !strstr(msg, needle))) {
		printf("#   check failed: %s: want [%s] with \"%s\", got [%s] \"%s\" (%s:%d)\n", what,
		       strerrorname_np(status), needle ? needle : "",
		       strerrorname_np(sandlot_error_status(e)) ? strerrorname_np(sandlot_error_status(e)) : "?",
		       msg ? msg : "(null)", __FILE__, line);
		tap_case_failed = 1;
	}
	fflush(stdout);
}

/* A growing byte buffer. */
struct buf {
	uint8_t *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np)
			bail("out of memory", __LINE__);
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static int buf_is(const struct buf *b, const char *s)
{
	return b->len == strlen(s) && (b->len == 0 || memcmp(b->p, s, b->len) == 0);
}

/* One TAP comment line: control characters (newlines above all, which
 * would end the comment) are shown escaped. */
static void show_buf(const char *what, const struct buf *b)
{
	printf("#   %s (%zu bytes): \"", what, b->len);
	size_t n = b->len > 200 ? 200 : b->len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = ((const unsigned char *)b->p)[i];
		if (c == '\n')
			fputs("\\n", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	puts("\"");
	fflush(stdout);
}

/* Deterministic pseudo-random bytes (xorshift64*): failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static uint8_t *random_bytes(size_t n)
{
	uint8_t *p = malloc(n ? n : 1);
	REQUIRE(p);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rnd();
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
	return p;
}

/* "1\n2\n...N\n", what `seq 1 N` prints. */
static void seq_text(struct buf *b, unsigned from, unsigned to)
{
	char line[16];
	for (unsigned i = from; i <= to; i++) {
		int n = snprintf(line, sizeof(line), "%u\n", i);
		buf_add(b, line, (size_t)n);
	}
}

/* ---- processes on the host ---------------------------------------------- */

/* Count sandlot-init processes whose parent is `ppid`; with live_only,
 * zombies (exited, not yet reaped) are not counted. */
static int count_inits(pid_t ppid, int live_only, int verbose)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char path[300], line[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		size_t len = fread(line, 1, sizeof(line) - 1, f);
		fclose(f);
		line[len] = '\0';
		char *open = strchr(line, '('), *close = strrchr(line, ')');
		if (!open || !close || close < open)
			continue;
		*close = '\0';
		char state = 0;
		int pp = 0;
		if (sscanf(close + 1, " %c %d", &state, &pp) != 2)
			continue;
		if (strcmp(open + 1, "sandlot-init") != 0 || pp != ppid)
			continue;
		if (live_only && (state == 'Z' || state == 'X'))
			continue;
		if (verbose)
			printf("#   sandlot-init pid %s (state %c, parent %d) is left\n", de->d_name, state,
			       pp);
		n++;
	}
	closedir(d);
	return n;
}

static int proc_comm_is(pid_t pid, const char *want)
{
	char path[64], comm[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	return strcmp(comm, want) == 0;
}

/* Directories named `id` in the cgroup hierarchies sandlot uses. */
static int count_cgroups(const char *id)
{
	static const char *const roots[] = { "/sys/fs/cgroup/sandlot", "/sys/fs/cgroup/unified/sandlot" };
	int n = 0;
	struct stat st;
	char path[512];
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", roots[i], id);
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			n++;
	}
	DIR *d = opendir("/sys/fs/cgroup");
	if (!d)
		return n;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || strcmp(de->d_name, "unified") == 0)
			continue;
		snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandlot/%s", de->d_name, id);
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			n++;
	}
	closedir(d);
	return n;
}

static int count_dir_entries(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static int call_within(void (*fn)(void *), void *arg, unsigned ms);

/* ---- sandboxes -------------------------------------------------------------- */

static void need_sandbox(void)
{
	if (geteuid() != 0)
		tap_skip("needs root: sandboxes take a host uid range, cgroups and a loop device");
	if (init_skip)
		tap_skip(init_skip);
}

static sandlot_t *new_sandbox_opts(const sandlot_options_t *o)
{
	need_sandbox();
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(o, &e);
	if (!sb) {
		show_err("sandlot_create", e);
		sandlot_error_free(e);
		bail("cannot create a sandbox", __LINE__);
	}
	REQUIRE(e == NULL);
	return sb;
}

static sandlot_t *new_sandbox(void)
{
	sandlot_options_t o;
	sandlot_options_init(&o);
	return new_sandbox_opts(&o);
}

/* What one command did, as seen by its callbacks. */
struct run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct buf out, err;
	int exits;              /* on_exit calls */
	int output_after_exit;  /* on_output calls after on_exit */
	sandlot_exit_t ex;
	sandlot_proc_t *proc;   /* for callbacks that act on the process */
	/* Flow control: on_output pauses the stream (returns 1) up to
	 * pause_budget times, and keeps returning 1 while `paused` (until a
	 * resumer thread clears it and calls sandlot_proc_resume_output). */
	int pause_budget;
	int paused;             /* returned 1, resume not yet called */
	size_t pauses, calls_while_paused, bytes_this_pause, max_bytes_while_paused;
	/* Kill from inside on_output once `kill_after` is seen. */
	const char *kill_after;
	int kill_sent, kill_rc;
};

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void run_fini(struct run *r)
{
	buf_free(&r->out);
	buf_free(&r->err);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
}

static int run_on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct run *r = ud;
	int ret = 0, kill_now = 0;
	pthread_mutex_lock(&r->mu);
	if (r->exits)
		r->output_after_exit++;
	if (r->paused) {
		r->calls_while_paused++;
		r->bytes_this_pause += len;
		if (r->bytes_this_pause > r->max_bytes_while_paused)
			r->max_bytes_while_paused = r->bytes_this_pause;
	}
	buf_add(stream == SANDLOT_STDERR ? &r->err : &r->out, data, len);
	if (r->paused) {
		ret = 1; /* still full: keep it paused */
	} else if (r->pause_budget > 0) {
		r->pause_budget--;
		r->paused = 1;
		r->bytes_this_pause = 0;
		r->pauses++;
		ret = 1;
	}
	if (r->kill_after && !r->kill_sent && r->proc && r->out.len &&
	    memmem(r->out.p, r->out.len, r->kill_after, strlen(r->kill_after))) {
		r->kill_sent = 1;
		kill_now = 1;
	}
	sandlot_proc_t *p = r->proc;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (kill_now) {
		/* The header allows this: only proc_wait and synchronous file
		 * calls are off limits in callbacks. */
		int rc = sandlot_proc_kill(p, SIGKILL, NULL);
		pthread_mutex_lock(&r->mu);
		r->kill_rc = rc;
		pthread_mutex_unlock(&r->mu);
	}
	return ret;
}

static void run_on_exit(void *ud, const sandlot_exit_t *st)
{
	struct run *r = ud;
	pthread_mutex_lock(&r->mu);
	r->exits++;
	r->ex = *st;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static sandlot_proc_t *start(sandlot_t *sb, const sandlot_exec_spec_t *spec, struct run *r)
{
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = run_on_output, .on_exit = run_on_exit, .userdata = r };
	sandlot_error_t *e = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, spec, &cb, &e);
	if (!p) {
		show_err("sandlot_exec", e);
		sandlot_error_free(e);
		bail("exec failed", __LINE__);
	}
	REQUIRE(e == NULL);
	pthread_mutex_lock(&r->mu);
	r->proc = p;
	pthread_mutex_unlock(&r->mu);
	return p;
}

/* Wait until `text` is in r's stdout, or the command ended, or timeout. */
static int wait_output(struct run *r, const char *text, unsigned timeout_ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->mu);
	int rc = 0, found;
	while (!(found = r->out.len && memmem(r->out.p, r->out.len, text, strlen(text))) && !r->exits &&
	       rc == 0)
		rc = pthread_cond_timedwait(&r->cv, &r->mu, &dl);
	pthread_mutex_unlock(&r->mu);
	return found;
}

/* Wait for on_exit without calling into the library. */
static int wait_exit_cb(struct run *r, unsigned timeout_ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->mu);
	int rc = 0;
	while (!r->exits && rc == 0)
		rc = pthread_cond_timedwait(&r->cv, &r->mu, &dl);
	int exited = r->exits > 0;
	pthread_mutex_unlock(&r->mu);
	return exited;
}

/* Wait for p, check that wait and on_exit agree, free p. */
static void finish_proc(sandlot_proc_t *p, struct run *r)
{
	sandlot_exit_t ex;
	memset(&ex, 0x5a, sizeof(ex)); /* every field is written */
	ex.size = sizeof(ex);
	MUST(sandlot_proc_wait(p, &ex, E));
	REQUIRE(wait_exit_cb(r, 5000));
	pthread_mutex_lock(&r->mu);
	CHECK_EQ_INT(r->exits, 1);
	CHECK_EQ_INT(ex.exit_code, r->ex.exit_code);
	CHECK_EQ_INT(ex.signal, r->ex.signal);
	CHECK_EQ_INT(ex.start_error, r->ex.start_error);
	CHECK_EQ_INT(ex.timed_out, r->ex.timed_out);
	pthread_mutex_unlock(&r->mu);
	sandlot_proc_free(p);
}

static void run_spec(sandlot_t *sb, const sandlot_exec_spec_t *spec, struct run *r)
{
	finish_proc(start(sb, spec, r), r);
}

static void run_sh(sandlot_t *sb, const char *script, struct run *r)
{
	const char *argv[] = { "sh", "-c", script, NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
	run_spec(sb, &spec, r);
}

/* Run a shell script that must exit 0; return nothing. */
static void sh_ok(sandlot_t *sb, const char *script)
{
	struct run r;
	run_init(&r);
	run_sh(sb, script, &r);
	if (r.ex.exit_code != 0) {
		printf("#   script failed (exit %d, signal %d): %s\n", r.ex.exit_code, r.ex.signal, script);
		show_buf("stderr", &r.err);
		tap_case_failed = 1;
	}
	run_fini(&r);
}

/* Write a whole file through a writer object. */
static int put_file(sandlot_t *sb, const char *path, const void *data, size_t len, uint32_t mode,
		    unsigned flags, sandlot_error_t **err)
{
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, path, mode, flags, err);
	if (!w)
		return -1;
	if (sandlot_file_writer_write(w, data, len, err) < 0) {
		sandlot_file_writer_abort(w);
		return -1;
	}
	return sandlot_file_writer_commit(w, err);
}

/* Read a whole file through a reader object, with read sizes of `chunk`
 * (0: random sizes). */
static int get_file(sandlot_t *sb, const char *path, struct buf *out, size_t chunk,
		    sandlot_error_t **err)
{
	sandlot_file_reader_t *rd = sandlot_file_open_read(sb, path, err);
	if (!rd)
		return -1;
	uint8_t *tmp = malloc(256 * KiB);
	REQUIRE(tmp);
	int rc = 0;
	for (;;) {
		size_t want = chunk ? chunk : 1 + rnd() % (256 * KiB);
		ssize_t n = sandlot_file_reader_read(rd, tmp, want, err);
		if (n < 0) {
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		CHECK((size_t)n <= want);
		buf_add(out, tmp, (size_t)n);
	}
	free(tmp);
	sandlot_file_reader_close(rd);
	return rc;
}

/* Whether `dir` lists an entry `name`; *tmp_files gets the number of the
 * writer's temporary files (".sandlot-tmp-*") there. */
static int dir_has(sandlot_t *sb, const char *dir, const char *name, int *tmp_files)
{
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	MUST(sandlot_list(sb, dir, &ents, &n, E));
	int found = 0, tmps = 0;
	for (size_t i = 0; i < n; i++) {
		if (name && strcmp(ents[i].name, name) == 0)
			found = 1;
		if (strncmp(ents[i].name, ".sandlot-tmp-", 13) == 0) {
			printf("#   temporary file left in %s: %s\n", dir, ents[i].name);
			tmps++;
		}
	}
	sandlot_dirents_free(ents, n);
	if (tmp_files)
		*tmp_files = tmps;
	return found;
}

static size_t list_count(sandlot_t *sb, const char *dir)
{
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	MUST(sandlot_list(sb, dir, &ents, &n, E));
	sandlot_dirents_free(ents, n);
	return n;
}

static int stat_errno(sandlot_t *sb, const char *path)
{
	sandlot_stat_t st;
	sandlot_error_t *e = NULL;
	int rc = sandlot_stat(sb, path, &st, &e);
	int s = rc < 0 ? sandlot_error_status(e) : 0;
	sandlot_error_free(e);
	return s;
}

static uint32_t pids_now(sandlot_t *sb)
{
	sandlot_usage_t u = { .size = sizeof(u) };
	MUST(sandlot_usage(sb, &u, E));
	return u.pids;
}

/* Wait (up to 3 s) until the sandbox runs `want` processes (exactly, or
 * at least: init forks the next command's warm process a few ms after a
 * command starts); return the last count. */
static uint32_t wait_pids_until(sandlot_t *sb, uint32_t want, int at_least)
{
	uint64_t t0 = now_ms();
	uint32_t n;
	while (((n = pids_now(sb)) != want && !(at_least && n > want)) && now_ms() - t0 < 3000)
		sleep_ms(5);
	return n;
}
#define wait_pids(sb, want) wait_pids_until(sb, want, 0)
#define wait_pids_at_least(sb, want) wait_pids_until(sb, want, 1)

/* Tasks of an idle sandbox: init and the process it keeps ready for the
 * next command, which it forks right after HELLO — so possibly after
 * sandlot_create() has returned: count once it is there. */
static uint32_t idle_pids(sandlot_t *sb)
{
	return wait_pids(sb, 2);
}

/* ---- options ---------------------------------------------------------------- */

static void test_options_defaults(void)
{
	sandlot_options_t o;
	memset(&o, 0xab, sizeof(o));
	sandlot_options_init(&o);
	CHECK_STR(o.image, "host");
	CHECK_EQ_INT(o.memory_bytes, 512 * MiB);
	CHECK_EQ_INT(o.cpus_milli, 0);
	CHECK_EQ_INT(o.pids, 256);
	CHECK_EQ_INT(o.disk_bytes, 1024 * MiB);
	CHECK_EQ_INT(o.nofile, 1024);
	CHECK(o.env == NULL);
	CHECK_STR(o.hostname, "sandlot");
	CHECK_EQ_INT(o.network, SANDLOT_NET_NONE);
	CHECK_EQ_INT(o.storage, SANDLOT_STORAGE_DEFAULT);
	CHECK(o.data_dir == NULL);
	CHECK(o.init_path == NULL);
	sandlot_error_t *e = NULL;
	CHECK_EQ_INT(sandlot_options_validate(&o, &e), 0);
	CHECK(e == NULL);
}

static void expect_invalid(const sandlot_options_t *o, int status, const char *needle, int line)
{
	sandlot_error_t *e = NULL;
	int rc = sandlot_options_validate(o, &e);
	const char *msg = sandlot_error_message(e);
	if (rc != -1 || sandlot_error_status(e) != status || !msg || !strstr(msg, needle)) {
		printf("#   check failed: validate should fail with [%s] naming \"%s\"; got rc %d [%s] \"%s\" (%s:%d)\n",
		       strerrorname_np(status), needle, rc,
		       e ? strerrorname_np(sandlot_error_status(e)) : "-", msg ? msg : "(null)", __FILE__, line);
		tap_case_failed = 1;
	}
	sandlot_error_free(e);
	if (sandlot_options_validate(o, NULL) != -1) { /* err may be NULL */
		printf("#   check failed: validate with NULL err should fail too (%s:%d)\n", __FILE__, line);
		tap_case_failed = 1;
	}
	fflush(stdout);
}

static void expect_valid(const sandlot_options_t *o, int line)
{
	sandlot_error_t *e = NULL;
	if (sandlot_options_validate(o, &e) != 0) {
		printf("#   check failed: validate should accept (%s:%d)\n", __FILE__, line);
		show_err("validate", e);
		tap_case_failed = 1;
	}
	sandlot_error_free(e);
}

/* A versioned struct (sandlot.h, "Versioned structs") with a size the
 * library must refuse: EINVAL, and a message naming the struct and `what`. */
static void expect_bad_size(int rc, sandlot_error_t **ep, const char *type, const char *what,
			    int line)
{
	sandlot_error_t *e = *ep;
	*ep = NULL;
	const char *msg = sandlot_error_message(e);
	if (rc != -1 || sandlot_error_status(e) != EINVAL || !msg || !strstr(msg, type) ||
	    !strstr(msg, what)) {
		printf("#   check failed: a bad size of %s should fail with EINVAL naming \"%s\"; "
		       "got rc %d \"%s\" (%s:%d)\n", type, what, rc, msg ? msg : "(null)", __FILE__,
		       line);
		tap_case_failed = 1;
	}
	sandlot_error_free(e);
}

/* Sizes that match no version of a struct are refused, for every versioned
 * struct and entry point; a newer caller's longer struct is taken when its
 * unknown fields are 0. */
static void test_versioned_struct_sizes(void)
{
	char why[256] = "";
	if (sandlot__sized_layouts_check(why, sizeof(why)) < 0) {
		printf("#   check failed: layout list of sized.c: %s\n", why);
		tap_case_failed = 1;
	}
	sandlot_options_t o;
	sandlot_error_t *e = NULL;
	sandlot_options_init(&o);
	CHECK_EQ_INT(o.size, sizeof(o));

	o.size = 0;
	expect_bad_size(sandlot_options_validate(&o, &e), &e, "sandlot_options_t",
			"sandlot_options_init()", __LINE__);
	e = NULL;
	REQUIRE(sandlot_create(&o, &e) == NULL);
	expect_bad_size(-1, &e, "sandlot_options_t", "size is 0", __LINE__);
	e = NULL;
	expect_bad_size(sandlot_prepare(&o, 1, &e), &e, "sandlot_options_t", "size is 0", __LINE__);
	e = NULL;
	char **names = NULL;
	expect_bad_size(sandlot_workspace_list(&o, &names, &e), &e, "sandlot_options_t",
			"size is 0", __LINE__);
	CHECK(names == NULL);
	/* Inside a field (the second half of memory_bytes). */
	o.size = offsetof(sandlot_options_t, memory_bytes) + 4;
	e = NULL;
	expect_bad_size(sandlot_options_validate(&o, &e), &e, "sandlot_options_t",
			"ends inside a field", __LINE__);
	/* Garbage: far past any version, or below the size field itself. */
	o.size = (size_t)1 << 40;
	e = NULL;
	expect_bad_size(sandlot_options_validate(&o, &e), &e, "sandlot_options_t",
			"not the size of any version", __LINE__);
	o.size = 3;
	e = NULL;
	expect_bad_size(sandlot_options_validate(&o, &e), &e, "sandlot_options_t",
			"not the size of any version", __LINE__);

	/* A newer caller: a longer struct whose extra fields are 0 works; one
	 * that sets one of them is refused (this library would ignore it). */
	struct {
		sandlot_options_t o;
		uint64_t newer_field;
	} newer;
	sandlot_options_init(&newer.o);
	CHECK_EQ_INT(newer.o.size, sizeof(newer.o));
	newer.o.size = sizeof(newer);
	newer.newer_field = 0;
	e = NULL;
	CHECK(sandlot_options_validate(&newer.o, &e) == 0);
	sandlot_error_free(e);
	newer.newer_field = 1;
	e = NULL;
	expect_bad_size(sandlot_options_validate(&newer.o, &e), &e, "sandlot_options_t",
			"needs a newer libsandlot", __LINE__);
	/* sandlot_options_init() of a newer caller zeroes what it does not know. */
	memset(&newer, 0xa5, sizeof(newer));
	sandlot_options_init_sized(&newer.o, sizeof(newer));
	CHECK_EQ_INT(newer.o.size, sizeof(newer));
	CHECK_EQ_INT(newer.newer_field, 0);
	CHECK_STR(newer.o.image, "host");

	/* The other versioned structs, at their entry points that need no
	 * sandbox (sandlot_exec's own checks come before the sandbox's). */
	sandlot_net_policy_t pol = { .mode = SANDLOT_NET_NONE }; /* no size */
	e = NULL;
	expect_bad_size(sandlot_net_policy_validate(&pol, &e), &e, "sandlot_net_policy_t",
			"size is 0", __LINE__);
	pol.size = sizeof(pol);
	CHECK(sandlot_net_policy_validate(&pol, NULL) == 0);
	sandlot_packages_t pk = { .size = 1, .pip = NULL };
	e = NULL;
	expect_bad_size(sandlot_packages_validate(&pk, &e), &e, "sandlot_packages_t",
			"not the size of any version", __LINE__);
	sandlot_net_config_t nc = { .size = sizeof(nc) + 8 * 1024 };
	e = NULL;
	expect_bad_size(sandlot_net_configure(&nc, &e), &e, "sandlot_net_config_t",
			"not the size of any version", __LINE__);
	sandlot_packages_config_t pc = { .size = 0 };
	e = NULL;
	expect_bad_size(sandlot_packages_configure(&pc, &e), &e, "sandlot_packages_config_t",
			"size is 0", __LINE__);
	const char *argv[] = { "true", NULL };
	sandlot_exec_spec_t spec = { .argv = argv }; /* no size */
	e = NULL;
	CHECK(sandlot_exec(NULL, &spec, NULL, &e) == NULL);
	expect_bad_size(-1, &e, "sandlot_exec_spec_t", "size is 0", __LINE__);
	spec.size = sizeof(spec);
	sandlot_exec_callbacks_t cb = { .size = offsetof(sandlot_exec_callbacks_t, on_output) + 2 };
	e = NULL;
	CHECK(sandlot_exec(NULL, &spec, &cb, &e) == NULL);
	expect_bad_size(-1, &e, "sandlot_exec_callbacks_t", "ends inside a field", __LINE__);
}

/* What on_exit of an older program's callbacks saw. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, exit_code;
	void *userdata;
} old_exit = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, -1, NULL };

static void old_on_exit(void *ud, const sandlot_exit_t *st)
{
	pthread_mutex_lock(&old_exit.mu);
	old_exit.calls++;
	old_exit.userdata = ud;
	old_exit.exit_code = st->exit_code;
	pthread_cond_broadcast(&old_exit.cv);
	pthread_mutex_unlock(&old_exit.mu);
}

/* A program built against an older sandlot.h, whose structs ended earlier,
 * still works: the library reads only what the size covers.  The bytes
 * past it (which the older program does not have: here garbage that would
 * fail every check if it were read) are never looked at, and the fields
 * they would hold take their defaults. */
static void test_versioned_struct_older_caller(void)
{
	need_sandbox();
	/* Options as they were before `network` (a program of that time). */
	union {
		sandlot_options_t o;
		unsigned char bytes[sizeof(sandlot_options_t)];
	} old;
	sandlot_options_init(&old.o);
	old.o.hostname = "old-caller";
	size_t old_size = offsetof(sandlot_options_t, network);
	memset(old.bytes + old_size, 0xff, sizeof(old) - old_size);
	old.o.size = old_size;
	CHECK(old.o.storage != SANDLOT_STORAGE_DEFAULT); /* the garbage is there */
	sandlot_error_t *e = NULL;
	if (sandlot_options_validate(&old.o, &e) != 0) {
		show_err("validate older options", e);
		tap_case_failed = 1;
	}
	sandlot_error_free(e);
	sandlot_t *sb = new_sandbox_opts(&old.o);

	/* An exec spec as it was before `cwd`, and callbacks before
	 * `userdata`: a cwd that does not exist and a stdin pipe (cat would
	 * wait for input) lie past the size. */
	const char *argv[] = { "sh", "-c", "pwd; hostname; cat; echo done", NULL };
	sandlot_exec_spec_t spec = { .size = offsetof(sandlot_exec_spec_t, cwd), .argv = argv,
				     .cwd = "/nonexistent-dir", .stdin_pipe = 1,
				     .timeout_ms = 1 };
	sandlot_proc_t *p = sandlot_exec(sb, &spec, NULL, &e);
	if (!p) {
		show_err("exec with an older spec", e);
		sandlot_error_free(e);
		sandlot_destroy(sb);
		bail("exec failed", __LINE__);
	}
	sandlot_exit_t ex = { .size = sizeof(ex) };
	CHECK(sandlot_proc_wait(p, &ex, NULL) == 0);
	CHECK_EQ_INT(ex.exit_code, 0);
	CHECK_EQ_INT(ex.timed_out, 0);
	CHECK_EQ_INT(ex.start_error, 0);
	sandlot_proc_free(p);

	struct run r;
	run_init(&r);
	sandlot_exec_spec_t spec2 = { .size = sizeof(spec2), .argv = argv };
	run_spec(sb, &spec2, &r);
	CHECK(buf_is(&r.out, "/home/user\nold-caller\ndone\n"));
	run_fini(&r);

	/* Callbacks as they were before `userdata`: the callbacks get NULL,
	 * not what lies past the size. */
	sandlot_exec_callbacks_t cb = { .size = offsetof(sandlot_exec_callbacks_t, userdata),
					.on_exit = old_on_exit, .userdata = (void *)&old_exit };
	p = sandlot_exec(sb, &spec2, &cb, &e);
	if (!p) {
		show_err("exec with older callbacks", e);
		sandlot_error_free(e);
		sandlot_destroy(sb);
		bail("exec failed", __LINE__);
	}
	CHECK(sandlot_proc_wait(p, NULL, NULL) == 0);
	pthread_mutex_lock(&old_exit.mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	while (!old_exit.calls &&
	       pthread_cond_timedwait(&old_exit.cv, &old_exit.mu, &until) == 0)
		;
	CHECK_EQ_INT(old_exit.calls, 1);
	CHECK(old_exit.userdata == NULL);
	CHECK_EQ_INT(old_exit.exit_code, 0);
	pthread_mutex_unlock(&old_exit.mu);
	sandlot_proc_free(p);
	sandlot_destroy(sb);
}

/* Structs the library fills in (docs/libsandlot.md): an older caller's
 * struct gets no byte past its size, and its size says what was written; a
 * newer caller's fields this library does not know come back 0; arrays are
 * laid out with the caller's stride; a size of 0 is refused before
 * anything is done. */
static void test_output_structs(void)
{
	need_sandbox();
	sandlot_t *sb = new_sandbox();
	sh_ok(sb, "mkdir -p /home/user/d && printf abc > /home/user/d/f && printf xy > /home/user/d/g");

	/* on_exit's status is the library's: its own size. */
	struct run r;
	run_init(&r);
	run_sh(sb, "true", &r);
	CHECK_EQ_INT(r.ex.size, sizeof(sandlot_exit_t));
	CHECK(SANDLOT_HAS(&r.ex, duration_ms));
	run_fini(&r);

	/* sandlot_exit_t of a caller that knew fields up to signal only. */
	const char *argv[] = { "sh", "-c", "exit 3", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
	size_t old_size = offsetof(sandlot_exit_t, timed_out);
	union {
		sandlot_exit_t ex;
		unsigned char b[sizeof(sandlot_exit_t) + 16];
	} u;
	memset(&u, 0xa5, sizeof(u));
	u.ex.size = old_size;
	sandlot_proc_t *p = sandlot_exec(sb, &spec, NULL, NULL);
	REQUIRE(p);
	MUST(sandlot_proc_wait(p, &u.ex, E));
	CHECK_EQ_INT(u.ex.size, old_size);
	CHECK_EQ_INT(u.ex.exit_code, 3);
	CHECK(SANDLOT_HAS(&u.ex, signal) && !SANDLOT_HAS(&u.ex, timed_out));
	int untouched = 1;
	for (size_t i = old_size; i < sizeof(u); i++)
		untouched &= u.b[i] == 0xa5;
	CHECK(untouched);
	/* A newer caller's: 16 bytes this library does not know, zeroed. */
	memset(&u, 0xa5, sizeof(u));
	u.ex.size = sizeof(u);
	MUST(sandlot_proc_wait(p, &u.ex, E));
	CHECK_EQ_INT(u.ex.size, sizeof(sandlot_exit_t));
	CHECK_EQ_INT(u.ex.exit_code, 3);
	int zeroed = 1;
	for (size_t i = sizeof(sandlot_exit_t); i < sizeof(u); i++)
		zeroed &= u.b[i] == 0;
	CHECK(zeroed);
	/* Not initialised: refused, nothing written. */
	memset(&u, 0, sizeof(u));
	u.ex.exit_code = 77;
	MUST_FAIL(sandlot_proc_wait(p, &u.ex, E), EINVAL, "size is 0 (not initialised)");
	CHECK_EQ_INT(u.ex.exit_code, 77);
	sandlot_proc_free(p);

	/* sandlot_usage_t: the same through another call. */
	union {
		sandlot_usage_t u;
		unsigned char b[sizeof(sandlot_usage_t)];
	} us;
	memset(&us, 0xa5, sizeof(us));
	us.u.size = offsetof(sandlot_usage_t, pids);
	MUST(sandlot_usage(sb, &us.u, E));
	CHECK_EQ_INT(us.u.size, offsetof(sandlot_usage_t, pids));
	CHECK(us.u.memory_bytes > 0 && us.u.memory_bytes != 0xa5a5a5a5a5a5a5a5ull);
	CHECK(us.b[offsetof(sandlot_usage_t, pids)] == 0xa5);
	us.u.size = (size_t)1 << 40;
	MUST_FAIL(sandlot_usage(sb, &us.u, E), EINVAL, "not the size of any version");

	/* sandlot_stat_t (no size field: the macro passes sizeof). */
	union {
		sandlot_stat_t st;
		unsigned char b[sizeof(sandlot_stat_t) + 16];
	} st;
	memset(&st, 0xa5, sizeof(st));
	MUST(sandlot_stat_sized(sb, "d/f", &st.st, sizeof(st), E));
	CHECK(st.st.type == SANDLOT_FILE && st.st.size == 3);
	zeroed = 1;
	for (size_t i = sizeof(sandlot_stat_t); i < sizeof(st); i++)
		zeroed &= st.b[i] == 0;
	CHECK(zeroed);
	MUST_FAIL(sandlot_stat_sized(sb, "d/f", &st.st, 8, E), EINVAL, "sandlot_stat_t");

	/* Arrays: entries 16 bytes longer than this library's (a newer
	 * caller's), then its own.  (No version is shorter than the first with
	 * this rule: a shorter stride is refused below.) */
	size_t strides[] = { sizeof(sandlot_dirent_t) + 16, sizeof(sandlot_dirent_t) };
	for (size_t k = 0; k < 2; k++) {
		size_t stride = strides[k];
		sandlot_dirent_t *ents = NULL;
		size_t n = 0;
		MUST(sandlot_list_sized(sb, "d", &ents, &n, stride, E));
		CHECK_EQ_INT(n, 2);
		unsigned seen = 0;
		for (size_t i = 0; i < n; i++) {
			sandlot_dirent_t e;
			memset(&e, 0, sizeof(e));
			memcpy(&e, (char *)ents + i * stride,
			       stride < sizeof(e) ? stride : sizeof(e));
			if (strcmp(e.name, "f") == 0 && e.st.size == 3 && e.st.type == SANDLOT_FILE)
				seen |= 1;
			if (strcmp(e.name, "g") == 0 && e.st.size == 2 && e.st.type == SANDLOT_FILE)
				seen |= 2;
			if (stride > sizeof(e)) {
				const unsigned char *tail = (unsigned char *)ents + i * stride + sizeof(e);
				for (size_t j = 0; j < stride - sizeof(e); j++)
					CHECK(tail[j] == 0);
			}
		}
		CHECK_EQ_INT(seen, 3);
		sandlot_dirents_free_sized(ents, n, stride);
	}
	MUST_FAIL(sandlot_list_sized(sb, "d", NULL, NULL, sizeof(sandlot_dirent_t) - 8, E), EINVAL,
		  "sandlot_dirent_t");

	/* Change items with a longer stride. */
	sh_ok(sb, "printf new > /home/user/d/h");
	size_t istride = sizeof(sandlot_change_t) + 8;
	sandlot_changes_t ch = { .size = sizeof(ch) };
	MUST(sandlot_changes_scan_sized(sb, 0, &ch, istride, E));
	int found = 0;
	for (size_t i = 0; i < ch.count; i++) {
		const sandlot_change_t *c = (const void *)((char *)ch.items + i * istride);
		if (c->path && strcmp(c->path, "/home/user/d/h") == 0 && c->kind == SANDLOT_CREATED)
			found = 1;
	}
	CHECK(found);
	sandlot_changes_free_sized(&ch, istride);

	/* sandlot_net_stats cannot fail: without a size it writes nothing. */
	sandlot_net_stats_t ns;
	memset(&ns, 0xa5, sizeof(ns));
	ns.size = 0;
	sandlot_net_stats(&ns);
	CHECK(ns.dns_allowed == 0xa5a5a5a5a5a5a5a5ull);
	ns.size = sizeof(ns);
	sandlot_net_stats(&ns);
	CHECK(ns.dns_allowed != 0xa5a5a5a5a5a5a5a5ull && ns.size == sizeof(ns));
	sandlot_destroy(sb);
}

static void test_options_validate(void)
{
	sandlot_options_t o;

	sandlot_options_init(&o);
	o.memory_bytes = 1 * MiB;
	expect_invalid(&o, EINVAL, "1048576", __LINE__);
	o.memory_bytes = 16 * MiB - 1;
	expect_invalid(&o, EINVAL, "16777215", __LINE__);
	o.memory_bytes = 16 * MiB;
	expect_valid(&o, __LINE__);
	o.memory_bytes = 0; /* 0 = default */
	expect_valid(&o, __LINE__);

	sandlot_options_init(&o);
	o.disk_bytes = 8 * MiB;
	expect_invalid(&o, EINVAL, "8388608", __LINE__);
	o.disk_bytes = 16 * MiB;
	expect_valid(&o, __LINE__);

	/* The isolation: ns (0, the default) or vm; nothing else. */
	sandlot_options_init(&o);
	CHECK_EQ_INT(o.isolation, SANDLOT_ISOLATION_NS);
	o.isolation = (sandlot_isolation_t)7;
	expect_invalid(&o, EINVAL, "unknown isolation 7", __LINE__);
	o.isolation = SANDLOT_ISOLATION_VM;
	expect_valid(&o, __LINE__);

	sandlot_options_init(&o);
	o.pids = 1;
	expect_invalid(&o, EINVAL, "pids", __LINE__);
	/* The header promises "a message naming the bad value": the value
	 * here is 1.  Bug: sandbox.c says only "(at least 2)". */
	{
		sandlot_error_t *e = NULL;
		sandlot_options_validate(&o, &e);
		const char *msg = sandlot_error_message(e);
		if (!strstr(msg, "1")) {
			printf("#   check failed: pids=1 message should name the value 1: \"%s\"\n", msg);
			tap_case_failed = 1;
		}
		sandlot_error_free(e);
	}
	o.pids = 2;
	expect_valid(&o, __LINE__);

	const char *bad_env1[] = { "OK=1", "NOEQUALS", NULL };
	const char *bad_env2[] = { "=value", NULL };
	const char *good_env[] = { "A=1", "EMPTY=", "X=a=b", NULL };
	sandlot_options_init(&o);
	o.env = bad_env1;
	expect_invalid(&o, EINVAL, "NOEQUALS", __LINE__);
	o.env = bad_env2;
	expect_invalid(&o, EINVAL, "=value", __LINE__);
	o.env = good_env;
	expect_valid(&o, __LINE__);

	char long_name[80];
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	sandlot_options_init(&o);
	o.hostname = "bad_name";
	expect_invalid(&o, EINVAL, "bad_name", __LINE__);
	o.hostname = "has space";
	expect_invalid(&o, EINVAL, "has space", __LINE__);
	o.hostname = "";
	expect_invalid(&o, EINVAL, "\"\"", __LINE__);
	o.hostname = long_name;
	expect_invalid(&o, EINVAL, long_name, __LINE__);
	long_name[63] = '\0';
	o.hostname = long_name;
	expect_valid(&o, __LINE__);
	o.hostname = "Box-01";
	expect_valid(&o, __LINE__);

	sandlot_options_init(&o);
	o.image = "no-such-image";
	expect_invalid(&o, ENOENT, "no-such-image", __LINE__);
}

/* ---- lifecycle -------------------------------------------------------------- */

static void test_create_rejects(void)
{
	need_sandbox();
	char storage[256];
	snprintf(storage, sizeof(storage), "%s/storage/mnt/ws", data_dir);
	int before = count_dir_entries(storage);

	sandlot_options_t o;
	sandlot_options_init(&o);
	o.memory_bytes = 1 * MiB;
	MUST_FAIL(sandlot_create(&o, E) ? 0 : -1, EINVAL, "1048576");
	CHECK(sandlot_create(&o, NULL) == NULL);

	sandlot_options_init(&o);
	o.init_path = "/nonexistent/sandlot-init";
	MUST_FAIL(sandlot_create(&o, E) ? 0 : -1, ENOENT, "/nonexistent/sandlot-init");

	/* An "init" that exits at once: the start must fail and leave
	 * nothing (no process, no cgroup, no storage). */
	sandlot_options_init(&o);
	o.init_path = "/bin/true";
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(&o, &e);
	CHECK(sb == NULL);
	CHECK(e != NULL && sandlot_error_status(e) > 0 && *sandlot_error_message(e));
	if (e)
		printf("#   (expected) %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	sandlot_destroy(sb);
	CHECK_EQ_INT(count_inits(getpid(), 0, 1), 0);
	int status;
	CHECK(waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD); /* nothing unreaped */
	CHECK_EQ_INT(count_dir_entries(storage), before);
}

static void test_create_destroy(void)
{
	need_sandbox();
	sandlot_t *a = new_sandbox();
	sandlot_t *b = sandlot_create(NULL, NULL); /* NULL options = defaults */
	REQUIRE(b);

	regex_t re;
	REQUIRE(regcomp(&re, "^sb-[a-z2-7]{26}$", REG_EXTENDED | REG_NOSUB) == 0);
	CHECK(regexec(&re, sandlot_id(a), 0, NULL, 0) == 0);
	CHECK(regexec(&re, sandlot_id(b), 0, NULL, 0) == 0);
	regfree(&re);
	CHECK(strcmp(sandlot_id(a), sandlot_id(b)) != 0);
	printf("#   ids %s %s\n", sandlot_id(a), sandlot_id(b));

	pid_t pa = sandlot__init_pid(a), pb = sandlot__init_pid(b);
	CHECK(pa > 1 && pb > 1 && pa != pb);
	CHECK(kill(pa, 0) == 0);
	CHECK(kill(pb, 0) == 0);
	CHECK(proc_comm_is(pa, "sandlot-init"));
	CHECK(sandlot_alive(a) == 1);
	CHECK(sandlot_alive(b) == 1);

	char id_a[64];
	snprintf(id_a, sizeof(id_a), "%s", sandlot_id(a));
	const char *cgmode = getenv("SANDLOT_CGROUP");
	int cg_checked = !(cgmode && strcmp(cgmode, "none") == 0);
	if (cg_checked)
		CHECK(count_cgroups(id_a) > 0);

	sandlot_destroy(a);
	errno = 0;
	CHECK(kill(pa, 0) < 0 && errno == ESRCH); /* killed and reaped */
	if (cg_checked)
		CHECK_EQ_INT(count_cgroups(id_a), 0);

	/* The other sandbox is unaffected. */
	CHECK(sandlot_alive(b) == 1);
	CHECK(kill(pb, 0) == 0);
	struct run r;
	run_init(&r);
	run_sh(b, "echo still here", &r);
	CHECK(buf_is(&r.out, "still here\n"));
	run_fini(&r);
	sandlot_destroy(b);
	errno = 0;
	CHECK(kill(pb, 0) < 0 && errno == ESRCH);
	sandlot_destroy(NULL); /* no-op */
}

struct creator {
	int id, failures;
	const char *data_dir;
	char ids[3][32];
};

static void *creator_main(void *arg)
{
	struct creator *c = arg;
	for (int i = 0; i < 3; i++) {
		sandlot_error_t *e = NULL;
		sandlot_options_t o;
		sandlot_options_init(&o);
		o.data_dir = c->data_dir;
		sandlot_t *sb = sandlot_create(&o, &e);
		if (!sb) {
			show_err("concurrent create", e);
			sandlot_error_free(e);
			c->failures++;
			continue;
		}
		snprintf(c->ids[i], sizeof(c->ids[i]), "%s", sandlot_id(sb));
		char script[64];
		snprintf(script, sizeof(script), "echo %d-%d", c->id, i);
		const char *argv[] = { "sh", "-c", script, NULL };
		sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
		struct run r;
		run_init(&r);
		sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
						.on_output = run_on_output, .on_exit = run_on_exit, .userdata = &r };
		sandlot_proc_t *p = sandlot_exec(sb, &s, &cb, NULL);
		sandlot_exit_t ex = { .size = sizeof(ex), .exit_code = -1 };
		if (p)
			sandlot_proc_wait(p, &ex, NULL);
		sandlot_proc_free(p);
		char want[32];
		snprintf(want, sizeof(want), "%d-%d\n", c->id, i);
		if (!p || ex.exit_code != 0 || !buf_is(&r.out, want))
			c->failures++;
		run_fini(&r);
		sandlot_destroy(sb);
	}
	return NULL;
}

static void create_in_threads(const char *dir)
{
	enum { NT = 6 };
	struct creator c[NT];
	pthread_t t[NT];
	for (int i = 0; i < NT; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		c[i].id = i;
		c[i].data_dir = dir;
		REQUIRE(pthread_create(&t[i], NULL, creator_main, &c[i]) == 0);
	}
	int failures = 0;
	for (int i = 0; i < NT; i++) {
		pthread_join(t[i], NULL);
		failures += c[i].failures;
	}
	if (failures)
		printf("#   check failed: %d of %d creates/runs failed with data dir %s\n", failures,
		       NT * 3, dir);
	CHECK_EQ_INT(failures, 0);
	for (int i = 0; i < NT * 3; i++)
		for (int j = i + 1; j < NT * 3; j++) {
			const char *a = c[i / 3].ids[i % 3], *b = c[j / 3].ids[j % 3];
			CHECK(!*a || strcmp(a, b) != 0);
		}
}

/* Sandboxes created and destroyed from several threads at once (as the
 * daemon does): uid slots, cgroups, storage and the caches are shared.
 * First in a fresh data directory, where the threads also race to make and
 * mount the storage pool; then in the shared one, where it exists. */
static void test_create_concurrent(void)
{
	need_sandbox();
	char fresh[256];
	snprintf(fresh, sizeof(fresh), "%s/data-concurrent", tmp_root);
	create_in_threads(fresh);
	create_in_threads(data_dir);
}

/* sandlot_alive() notices that init died; everything then fails with EPIPE
 * instead of hanging, and running commands are reported killed. */
static void test_alive_after_init_killed(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r;
	run_init(&r);
	const char *argv[] = { "sh", "-c", "echo ready; exec sleep 30", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
	sandlot_proc_t *p = start(sb, &spec, &r);
	CHECK(wait_output(&r, "ready", 5000));

	CHECK(kill(sandlot__init_pid(sb), SIGKILL) == 0);
	uint64_t t0 = now_ms();
	while (sandlot_alive(sb) && now_ms() - t0 < 5000)
		sleep_ms(5);
	CHECK(sandlot_alive(sb) == 0);
	CHECK(wait_exit_cb(&r, 5000));
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	CHECK_EQ_INT(r.ex.exit_code, -1);
	finish_proc(p, &r);
	run_fini(&r);

	const char *true_argv[] = { "true", NULL };
	sandlot_exec_spec_t ts = { .size = sizeof(ts), .argv = true_argv };
	MUST_FAIL(sandlot_exec(sb, &ts, NULL, E) ? 0 : -1, EPIPE, NULL);
	sandlot_stat_t st;
	MUST_FAIL(sandlot_stat(sb, "/home/user", &st, E), EPIPE, NULL);
	MUST_FAIL(sandlot_file_open_read(sb, "x", E) ? 0 : -1, EPIPE, NULL);
	MUST_FAIL(sandlot_file_open_write(sb, "x", 0, 0, E) ? 0 : -1, EPIPE, NULL);
	sandlot_changes_t ch = { .size = sizeof(ch) };
	MUST_FAIL(sandlot_changes_scan(sb, &ch, E), EPIPE, NULL);
	sandlot_destroy(sb);
}

/* sandlot__stop() ends a running sandbox at once, from another thread
 * while a command runs in it; sandlot__ended() sees that (and, before,
 * that it runs); a second stop is harmless and destroy still works. */
static void test_stop_and_ended(void)
{
	sandlot_t *sb = new_sandbox();
	CHECK_EQ_INT(sandlot__ended(sb), 0);
	struct run r;
	run_init(&r);
	const char *argv[] = { "sh", "-c", "echo ready; exec sleep 30", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
	sandlot_proc_t *p = start(sb, &spec, &r);
	CHECK(wait_output(&r, "ready", 5000));
	CHECK_EQ_INT(sandlot__ended(sb), 0);

	sandlot__stop(sb);
	CHECK(wait_exit_cb(&r, 5000));
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	uint64_t t0 = now_ms();
	while (!sandlot__ended(sb) && now_ms() - t0 < 5000)
		sleep_ms(5);
	CHECK_EQ_INT(sandlot__ended(sb), 1);
	CHECK_EQ_INT(sandlot__ended(sb), 1); /* nothing was reaped by asking */
	sandlot__stop(sb);
	finish_proc(p, &r);
	run_fini(&r);
	const char *true_argv[] = { "true", NULL };
	sandlot_exec_spec_t ts = { .size = sizeof(ts), .argv = true_argv };
	MUST_FAIL(sandlot_exec(sb, &ts, NULL, E) ? 0 : -1, EPIPE, NULL);
	sandlot_destroy(sb);
}

/* A sandbox whose init died by itself (here: killed from outside, as an
 * out-of-memory kill or a crash would) is ended. */
static void test_ended_when_init_dies(void)
{
	sandlot_t *sb = new_sandbox();
	CHECK_EQ_INT(sandlot__ended(sb), 0);
	CHECK(kill(sandlot__init_pid(sb), SIGKILL) == 0);
	uint64_t t0 = now_ms();
	while (!sandlot__ended(sb) && now_ms() - t0 < 5000)
		sleep_ms(5);
	CHECK_EQ_INT(sandlot__ended(sb), 1);
	sandlot_destroy(sb);
}

/* How many cgroup directories named `id` exist (every v1 hierarchy, or
 * the v2 tree). */
static size_t cgroup_dirs_named(const char *id)
{
	size_t n = 0;
	const char *roots[] = { "/sys/fs/cgroup/*", "/sys/fs/cgroup" };
	for (size_t i = 0; i < 2; i++) {
		char pat[256];
		snprintf(pat, sizeof(pat), "%s/sandlot/%s", roots[i], id);
		glob_t g;
		if (glob(pat, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g) == 0)
			n += g.gl_pathc;
		globfree(&g);
	}
	return n;
}

/* sandlot__remove_leftovers(): bad ids are refused before anything is
 * looked up (a glob character or a path must never reach the cgroup
 * tree); an id nothing is left of is clean; a live sandbox's cgroup is
 * left alone without kill; with kill, what a lost sandbox left (its
 * processes, its cgroups) goes, and a later destroy of the handle copes. */
static void test_remove_leftovers(void)
{
	MUST_FAIL(sandlot__remove_leftovers(NULL, 0, E), EINVAL, "invalid sandbox id");
	MUST_FAIL(sandlot__remove_leftovers("", 0, E), EINVAL, "invalid sandbox id");
	MUST_FAIL(sandlot__remove_leftovers("sb-*", 1, E), EINVAL, "sb-*");
	MUST_FAIL(sandlot__remove_leftovers("../sandlot", 1, E), EINVAL, NULL);
	MUST_FAIL(sandlot__remove_leftovers("sb-aaaaaaaaaaaaaaaaaaaaaaaaa/", 1, E), EINVAL, NULL);
	MUST_FAIL(sandlot__remove_leftovers("sb-aaaaaaaaaaaaaaaaaaaaaaaaaa1", 1, E), EINVAL, NULL);
	/* Without an error pointer, still refused. */
	CHECK_EQ_INT(sandlot__remove_leftovers("sb-?", 1, NULL), -1);
	char fresh[32];
	sandlot_new_id(NULL, fresh);
	CHECK_EQ_INT(sandlot__remove_leftovers(fresh, 1, NULL), 0);
	sandlot_release_id(fresh);

	sandlot_t *sb = new_sandbox();
	char id[32];
	snprintf(id, sizeof(id), "%s", sandlot_id(sb));
	size_t dirs = cgroup_dirs_named(id);
	CHECK(dirs > 0);
	/* Live, without kill: left alone, and it still works. */
	MUST(sandlot__remove_leftovers(id, 0, E) > 0 ? 0 : -1);
	CHECK_EQ_INT(cgroup_dirs_named(id), dirs);
	CHECK_EQ_INT(sandlot__ended(sb), 0);
	struct run r;
	run_init(&r);
	run_sh(sb, "echo alive", &r);
	CHECK(buf_is(&r.out, "alive\n"));
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);

	/* As after a kill -9 of the owner: kill what is there, then retry
	 * until the kernel let go of the cgroups. */
	int left = sandlot__remove_leftovers(id, 1, NULL);
	CHECK(left >= 0);
	uint64_t t0 = now_ms();
	while (left > 0 && now_ms() - t0 < 5000) {
		sleep_ms(20);
		left = sandlot__remove_leftovers(id, 0, NULL);
	}
	CHECK_EQ_INT(left, 0);
	CHECK_EQ_INT(cgroup_dirs_named(id), 0);
	t0 = now_ms();
	while (!sandlot__ended(sb) && now_ms() - t0 < 5000)
		sleep_ms(5);
	CHECK_EQ_INT(sandlot__ended(sb), 1);
	sandlot_destroy(sb);
	CHECK_EQ_INT(sandlot__remove_leftovers(id, 0, NULL), 0);
}

/* ---- exec ------------------------------------------------------------------- */

static void test_exec_basic(void)
{
	need_sandbox();
	const char *env[] = { "SBVAR=one", "OVR=sandbox", NULL };
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.env = env;
	o.hostname = "box-1";
	sandlot_t *sb = new_sandbox_opts(&o);
	struct run r;

	run_init(&r);
	run_sh(sb, "echo out; echo err >&2; exit 3", &r);
	CHECK(buf_is(&r.out, "out\n"));
	CHECK(buf_is(&r.err, "err\n"));
	CHECK_EQ_INT(r.ex.exit_code, 3);
	CHECK_EQ_INT(r.ex.signal, 0);
	CHECK_EQ_INT(r.ex.start_error, 0);
	CHECK_EQ_INT(r.ex.timed_out, 0);
	CHECK_EQ_INT(r.ex.oom_killed, 0);
	CHECK_EQ_INT(r.ex.pids_limited, 0);
	run_fini(&r);

	/* Environment: defaults, sandbox options, then the exec's own. */
	const char *xenv[] = { "OVR=exec", NULL };
	const char *argv[] = { "sh", "-c", "echo $SBVAR $OVR $HOSTNAME $(hostname) $HOME $USER $(id -u); pwd",
			       NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .env = xenv };
	run_init(&r);
	run_spec(sb, &spec, &r);
	if (!buf_is(&r.out, "one exec box-1 box-1 /home/user user 1000\n/home/user\n"))
		show_buf("stdout", &r.out), tap_case_failed = 1;
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);

	/* Working directory: relative = under /home/user. */
	MUST(sandlot_mkdir(sb, "sub", 0, 0, E));
	const char *pwd[] = { "pwd", NULL };
	sandlot_exec_spec_t ws = { .size = sizeof(ws), .argv = pwd, .cwd = "sub" };
	run_init(&r);
	run_spec(sb, &ws, &r);
	CHECK(buf_is(&r.out, "/home/user/sub\n"));
	run_fini(&r);
	ws.cwd = "/tmp";
	run_init(&r);
	run_spec(sb, &ws, &r);
	CHECK(buf_is(&r.out, "/tmp\n"));
	run_fini(&r);

	/* No callbacks at all: wait still reports. */
	const char *ex7[] = { "sh", "-c", "echo ignored; exit 7", NULL };
	sandlot_exec_spec_t s7 = { .size = sizeof(s7), .argv = ex7 };
	sandlot_proc_t *p = sandlot_exec(sb, &s7, NULL, NULL);
	REQUIRE(p);
	sandlot_exit_t ex = { .size = sizeof(ex) };
	MUST(sandlot_proc_wait(p, &ex, E));
	CHECK_EQ_INT(ex.exit_code, 7);
	CHECK(sandlot_proc_pid(p) > 1);
	MUST(sandlot_proc_wait(p, NULL, E)); /* again, and with out == NULL */
	sandlot_proc_free(p);

	/* Duration is wall time. */
	const char *slp[] = { "sleep", "0.2", NULL };
	sandlot_exec_spec_t ss = { .size = sizeof(ss), .argv = slp };
	run_init(&r);
	run_spec(sb, &ss, &r);
	CHECK(r.ex.duration_ms >= 180 && r.ex.duration_ms < 5000);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);

	sandlot_destroy(sb);
}

/* sandlot_set_env: later commands see the new entries (overriding the
 * defaults and the creation's), commands already running keep theirs, bad
 * entries change nothing. */
static void test_set_env(void)
{
	need_sandbox();
	const char *env[] = { "A=create", "B=create", NULL };
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.env = env;
	sandlot_t *sb = new_sandbox_opts(&o);
	struct run r;

	/* A command running across the change keeps its environment. */
	const char *slow[] = { "sh", "-c", "read x; echo $A $B $C $HOME", NULL };
	sandlot_exec_spec_t ss = { .size = sizeof(ss), .argv = slow, .stdin_pipe = 1 };
	run_init(&r);
	sandlot_proc_t *p = start(sb, &ss, &r);

	const char *set[] = { "B=set", "C=x=y", "HOME=/tmp", NULL };
	MUST(sandlot_set_env(sb, set, E));
	MUST(sandlot_set_env(sb, NULL, E));         /* no-ops */
	const char *none[] = { NULL };
	MUST(sandlot_set_env(sb, none, E));
	const char *bad1[] = { "D=1", "NOEQUALS", NULL };
	MUST_FAIL(sandlot_set_env(sb, bad1, E), EINVAL, "NOEQUALS");
	const char *bad2[] = { "=v", NULL };
	MUST_FAIL(sandlot_set_env(sb, bad2, E), EINVAL, NULL);

	MUST(sandlot_proc_close_stdin(p, E));
	finish_proc(p, &r);
	if (!buf_is(&r.out, "create create /home/user\n"))
		show_buf("stdout", &r.out), tap_case_failed = 1;
	run_fini(&r);

	/* Later commands: the set entries, the rest as before, D never set; the
	 * exec's own entries still win. */
	run_init(&r);
	run_sh(sb, "echo $A $B $C $HOME ${D-unset} $USER", &r);
	if (!buf_is(&r.out, "create set x=y /tmp unset user\n"))
		show_buf("stdout", &r.out), tap_case_failed = 1;
	run_fini(&r);
	const char *xenv[] = { "B=exec", NULL };
	const char *argv[] = { "sh", "-c", "echo $B", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .env = xenv };
	run_init(&r);
	run_spec(sb, &spec, &r);
	CHECK(buf_is(&r.out, "exec\n"));
	run_fini(&r);
	sandlot_destroy(sb);
}

/* Network policies through the library (the enforcement itself is tested
 * against a fake internet in tests/integration/test_network.py). */
static void test_network_policy(void)
{
	const char *bad[] = { "*.com", NULL };
	sandlot_net_policy_t p = { .size = sizeof(p), .mode = SANDLOT_NET_ALLOWLIST, .allow = bad };
	MUST_FAIL(sandlot_net_policy_validate(&p, E), EINVAL, "too broad");
	p.mode = SANDLOT_NET_OPEN;
	const char *one[] = { "x.example", NULL };
	p.allow = one;
	MUST_FAIL(sandlot_net_policy_validate(&p, E), EINVAL, "allowlist");
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.network = SANDLOT_NET_ALLOWLIST;
	o.net_allow = bad;
	MUST_FAIL(sandlot_options_validate(&o, E), EINVAL, "*.com");

	need_sandbox();
	const char *allow[] = { "Example.TEST.", "*.pypi.test", "203.0.113.0/24", NULL };
	sandlot_options_init(&o);
	o.network = SANDLOT_NET_ALLOWLIST;
	o.net_allow = allow;
	sandlot_t *sb = new_sandbox_opts(&o);
	const char *const *a, *const *d;
	CHECK_EQ_INT(sandlot_network(sb, &a, &d), SANDLOT_NET_ALLOWLIST);
	CHECK_STR(a[0], "example.test");
	CHECK_STR(a[1], "*.pypi.test");
	CHECK_STR(a[2], "203.0.113.0/24");
	CHECK(a[3] == NULL && d[0] == NULL);
	/* A name not allowed: NXDOMAIN from sandlot (no upstream is needed), in the log. */
	struct run r;
	run_init(&r);
	run_sh(sb, "getent hosts blocked.example; echo rc=$?", &r);
	CHECK(buf_is(&r.out, "rc=2\n"));
	run_fini(&r);
	sandlot_net_event_t *ev = NULL;
	size_t n = 0;
	uint64_t dropped = 7;
	MUST(sandlot_net_log(sb, 0, &ev, &n, &dropped, E));
	CHECK(n >= 1 && dropped == 0);
	for (size_t i = 0; i < n; i++) {
		CHECK_STR(ev[i].layer, "dns");
		CHECK_STR(ev[i].verdict, "refused");
		CHECK_STR(ev[i].reason, "not_allowed");
		CHECK_STR(ev[i].name, "blocked.example");
		CHECK_EQ_INT(ev[i].seq, i + 1);
	}
	free(ev);
	MUST(sandlot_net_log(sb, n, &ev, &n, NULL, E));
	CHECK(n == 0 && ev == NULL);
	/* Back to none: loopback only, failing fast. */
	sandlot_net_policy_t none = { .size = sizeof(none), .mode = SANDLOT_NET_NONE };
	MUST(sandlot_set_network(sb, &none, E));
	CHECK_EQ_INT(sandlot_network(sb, &a, &d), SANDLOT_NET_NONE);
	run_init(&r);
	run_sh(sb, "python3 -c 'import socket, errno\ntry: socket.create_connection("
		   "(\"203.0.113.9\", 443), 3)\nexcept OSError as e: print(errno.errorcode[e.errno])'",
	       &r);
	if (!buf_is(&r.out, "ECONNREFUSED\n"))
		show_buf("stdout", &r.out), tap_case_failed = 1;
	run_fini(&r);
	MUST_FAIL(sandlot_set_network(sb, &p, E), EINVAL, "allowlist");
	CHECK_EQ_INT(sandlot_network(sb, NULL, NULL), SANDLOT_NET_NONE);
	sandlot_destroy(sb);
}

/* All output arrives before on_exit, exactly once, in order, with more
 * output than the flow-control window. */
static void test_exec_output_order(void)
{
	sandlot_t *sb = new_sandbox();
	struct buf want = { 0 }, want_err = { 0 };
	seq_text(&want, 1, 200000);
	struct run r;
	run_init(&r);
	run_sh(sb, "seq 1 200000", &r);
	CHECK_EQ_INT(r.out.len, want.len);
	CHECK(r.out.len == want.len && memcmp(r.out.p, want.p, want.len) == 0);
	CHECK_EQ_INT(r.output_after_exit, 0);
	CHECK_EQ_INT(r.exits, 1);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);

	buf_free(&want);
	seq_text(&want, 1, 100000);
	seq_text(&want_err, 100001, 200000);
	run_init(&r);
	run_sh(sb, "seq 1 100000; seq 100001 200000 >&2; echo end", &r);
	buf_add(&want, "end\n", 4);
	CHECK(r.out.len == want.len && memcmp(r.out.p, want.p, want.len) == 0);
	CHECK(r.err.len == want_err.len && memcmp(r.err.p, want_err.p, want_err.len) == 0);
	CHECK_EQ_INT(r.output_after_exit, 0);
	run_fini(&r);
	buf_free(&want);
	buf_free(&want_err);
	sandlot_destroy(sb);
}

static void test_exec_signals_and_codes(void)
{
	sandlot_t *sb = new_sandbox();
	static const struct {
		const char *script;
		int code, sig;
	} cases[] = {
		{ "exit 0", 0, 0 },
		{ "exit 1", 1, 0 },
		{ "exit 255", 255, 0 },
		{ "kill -TERM $$", -1, SIGTERM },
		{ "kill -KILL $$", -1, SIGKILL },
		{ "kill -SEGV $$", -1, SIGSEGV },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct run r;
		run_init(&r);
		run_sh(sb, cases[i].script, &r);
		if (r.ex.exit_code != cases[i].code || r.ex.signal != cases[i].sig) {
			printf("#   check failed: \"%s\": want exit %d signal %d, got exit %d signal %d\n",
			       cases[i].script, cases[i].code, cases[i].sig, r.ex.exit_code, r.ex.signal);
			tap_case_failed = 1;
		}
		CHECK_EQ_INT(r.ex.start_error, 0);
		run_fini(&r);
	}
	sandlot_destroy(sb);
}

static void expect_start_error(sandlot_t *sb, const sandlot_exec_spec_t *spec, int code, int err,
			       const char *needle1, const char *needle2, int line)
{
	struct run r;
	run_init(&r);
	run_spec(sb, spec, &r);
	if (r.ex.exit_code != code || r.ex.start_error != err || r.ex.signal != 0 ||
	    !strstr(r.ex.error, needle1) || (needle2 && !strstr(r.ex.error, needle2))) {
		printf("#   check failed: want exit %d start_error %s naming \"%s\"; got exit %d start_error %d signal %d \"%s\" (%s:%d)\n",
		       code, strerrorname_np(err), needle1, r.ex.exit_code, r.ex.start_error, r.ex.signal,
		       r.ex.error, __FILE__, line);
		tap_case_failed = 1;
	}
	CHECK_EQ_INT(r.out.len + r.err.len, 0);
	CHECK_EQ_INT(r.exits, 1);
	run_fini(&r);
}

static void test_exec_start_errors(void)
{
	sandlot_t *sb = new_sandbox();
	const char *missing[] = { "no-such-command-xyz", "arg", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = missing };
	expect_start_error(sb, &s, 127, ENOENT, "no-such-command-xyz", NULL, __LINE__);

	const char *missing_abs[] = { "/no/such/dir/cmd", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = missing_abs };
	expect_start_error(sb, &s, 127, ENOENT, "/no/such/dir/cmd", NULL, __LINE__);

	/* The working directory fails: STAGE 'w', so 126 even for ENOENT. */
	const char *tru[] = { "true", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = tru,
				   .cwd = "/nonexistent-dir" };
	expect_start_error(sb, &s, 126, ENOENT, "/nonexistent-dir", "working directory", __LINE__);
	s.cwd = "missing-rel";
	expect_start_error(sb, &s, 126, ENOENT, "missing-rel", "working directory", __LINE__);

	/* Not executable: 126 with EACCES. */
	const char *script = "#!/bin/sh\necho hi\n";
	MUST(put_file(sb, "script.sh", script, strlen(script), 0644, 0, E));
	const char *noexec[] = { "./script.sh", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = noexec };
	expect_start_error(sb, &s, 126, EACCES, "script.sh", NULL, __LINE__);
	/* A file as working directory. */
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = tru, .cwd = "script.sh" };
	expect_start_error(sb, &s, 126, ENOTDIR, "script.sh", "working directory", __LINE__);

	/* Once executable it runs. */
	MUST(put_file(sb, "script.sh", script, strlen(script), 0755, 0, E));
	struct run r;
	run_init(&r);
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = noexec };
	run_spec(sb, &s, &r);
	CHECK(buf_is(&r.out, "hi\n"));
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);
	sandlot_destroy(sb);
}

static int exits_seen;
static void count_exit(void *ud, const sandlot_exit_t *st)
{
	exits_seen++;
}

static void test_exec_invalid_spec(void)
{
	sandlot_t *sb = new_sandbox();
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb), .on_exit = count_exit };
	const char *empty_argv[] = { NULL };
	const char *empty_cmd[] = { "", NULL };
	const char *ok[] = { "true", NULL };
	const char *bad_env[] = { "GOOD=1", "BADENTRY", NULL };
	sandlot_exec_spec_t s0 = { .size = sizeof(s0), .argv = NULL };
	sandlot_exec_spec_t s1 = { .size = sizeof(s1), .argv = empty_argv };
	sandlot_exec_spec_t s2 = { .size = sizeof(s2), .argv = empty_cmd };
	sandlot_exec_spec_t s3 = { .size = sizeof(s3), .argv = ok, .env = bad_env };
	MUST_FAIL(sandlot_exec(sb, NULL, &cb, E) ? 0 : -1, EINVAL, NULL);
	MUST_FAIL(sandlot_exec(sb, &s0, &cb, E) ? 0 : -1, EINVAL, NULL);
	MUST_FAIL(sandlot_exec(sb, &s1, &cb, E) ? 0 : -1, EINVAL, NULL);
	MUST_FAIL(sandlot_exec(sb, &s2, &cb, E) ? 0 : -1, EINVAL, NULL);
	MUST_FAIL(sandlot_exec(sb, &s3, &cb, E) ? 0 : -1, EINVAL, "BADENTRY");
	CHECK(sandlot_exec(sb, &s3, &cb, NULL) == NULL);
	sleep_ms(50);
	CHECK_EQ_INT(exits_seen, 0); /* no callbacks for a refused exec */
	sandlot_destroy(sb);
}

static void test_exec_timeout(void)
{
	sandlot_t *sb = new_sandbox();
	uint32_t idle = idle_pids(sb);
	struct run r;
	const char *slp[] = { "sleep", "30", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = slp, .timeout_ms = 300 };
	run_init(&r);
	uint64_t t0 = now_ms();
	run_spec(sb, &s, &r);
	uint64_t took = now_ms() - t0;
	CHECK_EQ_INT(r.ex.timed_out, 1);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	CHECK_EQ_INT(r.ex.exit_code, -1);
	CHECK(r.ex.duration_ms >= 290 && r.ex.duration_ms < 10000);
	CHECK(took < 10000);
	run_fini(&r);

	/* The whole process group goes, output flowing or not. */
	const char *grp[] = { "sh", "-c", "sleep 30 & sleep 30 & while :; do echo tick; sleep 0.01; done", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = grp, .timeout_ms = 300 };
	run_init(&r);
	run_spec(sb, &s, &r);
	CHECK_EQ_INT(r.ex.timed_out, 1);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	CHECK(r.out.len > 0);
	run_fini(&r);
	CHECK_EQ_INT(wait_pids(sb, idle), idle); /* the sleeps are gone too */

	/* Finishing first: not timed out, and the timer does not fire later. */
	const char *tru[] = { "true", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = tru, .timeout_ms = 200 };
	run_init(&r);
	run_spec(sb, &s, &r);
	CHECK_EQ_INT(r.ex.timed_out, 0);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);
	sleep_ms(300);
	sandlot_destroy(sb);
}

/* 1 MiB through cat: stdin credit and output credit both in play. */
static void test_exec_stdin_roundtrip(void)
{
	sandlot_t *sb = new_sandbox();
	const size_t n = 1 * MiB;
	uint8_t *data = random_bytes(n);
	struct run r;
	run_init(&r);
	const char *cat[] = { "cat", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = cat, .stdin_pipe = 1 };
	sandlot_proc_t *p = start(sb, &s, &r);
	for (size_t off = 0; off < n;) {
		size_t k = 1 + rnd() % (200 * KiB);
		if (k > n - off)
			k = n - off;
		MUST(sandlot_proc_write_stdin(p, data + off, k, E));
		off += k;
	}
	MUST(sandlot_proc_write_stdin(p, data, 0, E)); /* no-op */
	MUST(sandlot_proc_close_stdin(p, E));
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	CHECK_EQ_INT(r.out.len, n);
	CHECK(r.out.len == n && memcmp(r.out.p, data, n) == 0);
	CHECK_EQ_INT(r.output_after_exit, 0);
	run_fini(&r);

	/* 8 MiB in one call into something that prints nothing. */
	free(data);
	data = random_bytes(8 * MiB);
	run_init(&r);
	const char *wc[] = { "wc", "-c", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = wc, .stdin_pipe = 1 };
	p = start(sb, &s, &r);
	MUST(sandlot_proc_write_stdin(p, data, 8 * MiB, E));
	MUST(sandlot_proc_close_stdin(p, E));
	MUST(sandlot_proc_close_stdin(p, E)); /* twice is fine */
	finish_proc(p, &r);
	CHECK(buf_is(&r.out, "8388608\n"));
	run_fini(&r);
	free(data);
	sandlot_destroy(sb);
}

static void test_exec_stdin_errors(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r;
	const char *tru[] = { "true", NULL };

	/* Without a pipe. */
	run_init(&r);
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = tru };
	sandlot_proc_t *p = start(sb, &s, &r);
	MUST_FAIL(sandlot_proc_write_stdin(p, "x", 1, E), EINVAL, "stdin");
	MUST(sandlot_proc_close_stdin(p, E));
	finish_proc(p, &r);
	run_fini(&r);

	/* After the exit. */
	run_init(&r);
	s.stdin_pipe = 1;
	p = start(sb, &s, &r);
	MUST(sandlot_proc_wait(p, NULL, E));
	MUST_FAIL(sandlot_proc_write_stdin(p, "x", 1, E), EPIPE, NULL);
	MUST(sandlot_proc_write_stdin(p, "x", 0, E));
	MUST(sandlot_proc_close_stdin(p, E));
	finish_proc(p, &r);
	run_fini(&r);

	/* Blocked on credit when the command exits without reading: EPIPE,
	 * not a hang. */
	const char *slp[] = { "sleep", "0.3", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = slp, .stdin_pipe = 1 };
	size_t n = 4 * MiB;
	uint8_t *data = random_bytes(n);
	run_init(&r);
	p = start(sb, &s, &r);
	uint64_t t0 = now_ms();
	MUST_FAIL(sandlot_proc_write_stdin(p, data, n, E), EPIPE, NULL);
	CHECK(now_ms() - t0 < 10000);
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);
	free(data);
	sandlot_destroy(sb);
}

static void test_exec_kill(void)
{
	sandlot_t *sb = new_sandbox();
	uint32_t idle = idle_pids(sb);
	struct run r;
	const char *slp[] = { "sleep", "30", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = slp };
	run_init(&r);
	sandlot_proc_t *p = start(sb, &s, &r);
	uint64_t t0 = now_ms();
	MUST(sandlot_proc_kill(p, SIGTERM, E));
	finish_proc(p, &r);
	CHECK(now_ms() - t0 < 5000);
	CHECK_EQ_INT(r.ex.signal, SIGTERM);
	CHECK_EQ_INT(r.ex.exit_code, -1);
	CHECK_EQ_INT(r.ex.timed_out, 0);
	run_fini(&r);

	/* The signal goes to the process group. */
	const char *grp[] = { "sh", "-c", "sleep 30 & sleep 30 & echo ready; wait", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = grp };
	run_init(&r);
	p = start(sb, &s, &r);
	CHECK(wait_output(&r, "ready", 5000));
	CHECK(wait_pids_at_least(sb, idle + 3) >= idle + 3);
	MUST(sandlot_proc_kill(p, SIGTERM, E));
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.signal, SIGTERM);
	run_fini(&r);
	CHECK_EQ_INT(wait_pids(sb, idle), idle);

	/* Bad signals; a finished process. */
	run_init(&r);
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = slp };
	p = start(sb, &s, &r);
	MUST_FAIL(sandlot_proc_kill(p, 0, E), EINVAL, "0");
	MUST_FAIL(sandlot_proc_kill(p, 65, E), EINVAL, "65");
	MUST_FAIL(sandlot_proc_kill(p, -9, E), EINVAL, "-9");
	MUST(sandlot_proc_kill(p, SIGKILL, E));
	MUST(sandlot_proc_wait(p, NULL, E));
	MUST(sandlot_proc_kill(p, SIGTERM, E)); /* already gone: no error */
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	run_fini(&r);
	sandlot_destroy(sb);
}

/* An exec marked `last` (a one-shot run) leaves no spare process behind
 * it: the sandbox runs init and the command, then init alone; the next
 * exec still works (forked on demand) and brings the spare back. */
static void test_exec_last(void)
{
	sandlot_t *sb = new_sandbox();
	uint32_t idle = idle_pids(sb); /* init and the spare */
	CHECK_EQ_INT(idle, 2);
	struct run r;
	const char *slp[] = { "sh", "-c", "echo started; sleep 0.3", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = slp, .last = 1 };
	run_init(&r);
	sandlot_proc_t *p = start(sb, &s, &r);
	CHECK(wait_output(&r, "started", 5000));
	/* Well past the delay after which a spare would be forked (5 ms). */
	sleep_ms(100);
	CHECK_EQ_INT(pids_now(sb), 3); /* init, sh and its sleep: no spare */
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);
	sleep_ms(100);
	CHECK_EQ_INT(pids_now(sb), 1); /* init alone */

	const char *echo[] = { "echo", "again", NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(s), .argv = echo };
	run_init(&r);
	p = start(sb, &s, &r);
	finish_proc(p, &r);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	CHECK(wait_output(&r, "again", 1000));
	run_fini(&r);
	CHECK_EQ_INT(wait_pids(sb, 2), 2); /* the spare is back */
	sandlot_destroy(sb);
}

/* Resumes output from its own thread whenever on_output paused it. */
struct resumer {
	struct run *r;
	sandlot_proc_t *p;
	unsigned delay_us_max;
	size_t resumes;
};

static void *resumer_main(void *arg)
{
	struct resumer *rs = arg;
	struct run *r = rs->r;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->paused && !r->exits)
			pthread_cond_wait(&r->cv, &r->mu);
		if (!r->paused)
			break;
		pthread_mutex_unlock(&r->mu);
		if (rs->delay_us_max)
			usleep((useconds_t)(rnd() % rs->delay_us_max));
		pthread_mutex_lock(&r->mu);
		r->paused = 0;
		pthread_mutex_unlock(&r->mu);
		sandlot_proc_resume_output(rs->p);
		rs->resumes++;
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* on_output pauses after every chunk; another thread resumes it.  All the
 * output must still arrive, in order, and nothing may deadlock. */
static void test_exec_pause_resume(void)
{
	sandlot_t *sb = new_sandbox();
	struct buf want = { 0 };
	seq_text(&want, 1, 300000);
	struct run r;
	run_init(&r);
	r.pause_budget = 1 << 30;
	const char *argv[] = { "seq", "1", "300000", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	struct resumer rs = { &r, p, 200, 0 };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, resumer_main, &rs) == 0);
	REQUIRE(wait_exit_cb(&r, 20000));
	pthread_join(t, NULL);
	finish_proc(p, &r);
	printf("#   %zu pauses, %zu resumes, %zu bytes\n", r.pauses, rs.resumes, r.out.len);
	CHECK(r.pauses >= 3);
	CHECK_EQ_INT(r.out.len, want.len);
	CHECK(r.out.len == want.len && memcmp(r.out.p, want.p, want.len) == 0);
	CHECK_EQ_INT(r.output_after_exit, 0);
	CHECK_EQ_INT(r.ex.exit_code, 0);
	run_fini(&r);
	buf_free(&want);
	sandlot_destroy(sb);
}

/* The header: after on_output returns 1, what is already in flight (at
 * most one 256 KiB window) may still arrive, then nothing until
 * sandlot_proc_resume_output(); no data is lost either way. */
static void test_exec_pause_holds_output(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r;
	run_init(&r);
	r.pause_budget = 3;
	const char *argv[] = { "head", "-c", "4M", "/dev/zero", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	struct resumer rs = { &r, p, 300000, 0 };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, resumer_main, &rs) == 0);
	REQUIRE(wait_exit_cb(&r, 20000));
	pthread_join(t, NULL);
	finish_proc(p, &r);
	printf("#   %zu pauses; %zu on_output calls while paused, at most %zu bytes in one pause\n",
	       r.pauses, r.calls_while_paused, r.max_bytes_while_paused);
	CHECK_EQ_INT(r.out.len, 4 * MiB);
	/* The contract: never more than the window while paused. */
	CHECK(r.max_bytes_while_paused <= SANDLOT_PROTO_WINDOW);
	run_fini(&r);
	sandlot_destroy(sb);
}

/* sandlot_proc_kill() from inside on_output — allowed by the header, and
 * the natural way to cap a command's output.  Bug: callbacks run with
 * conn->lock held and sandlot_proc_kill() takes it again: the I/O thread
 * deadlocks (and with it every sandbox of the process). */
static void test_exec_kill_from_callback(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r;
	run_init(&r);
	r.kill_after = "go";
	const char *argv[] = { "sh", "-c", "sleep 0.2; echo go; exec sleep 30", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	if (!wait_exit_cb(&r, 8000)) {
		printf("#   check failed: no on_exit 8 s after on_output called sandlot_proc_kill(): "
		       "the I/O thread is deadlocked (exec.c: sandlot_proc_kill locks conn->lock, "
		       "already held by conn_readable around every callback)\n");
		bail("cannot clean up behind a deadlocked I/O thread", __LINE__);
	}
	CHECK_EQ_INT(r.kill_rc, 0);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	finish_proc(p, &r);
	run_fini(&r);
	sandlot_destroy(sb);
}

static void free_proc(void *p)
{
	sandlot_proc_free(p);
}

/* A consumer pauses output and then gives up on the command (an HTTP client
 * went away): sandlot_proc_free() must still return.  Bug: it sends KILL
 * and waits for EXIT, but init sends EXIT only after the output still in
 * the pipes, which needs the credit the paused stream never returns. */
static void test_exec_free_while_paused(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r;
	run_init(&r);
	r.pause_budget = 1;
	const char *argv[] = { "head", "-c", "4M", "/dev/zero", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	uint64_t t0 = now_ms();
	pthread_mutex_lock(&r.mu);
	while (!r.paused && now_ms() - t0 < 5000) {
		pthread_mutex_unlock(&r.mu);
		sleep_ms(5);
		pthread_mutex_lock(&r.mu);
	}
	pthread_mutex_unlock(&r.mu);
	REQUIRE(r.paused);
	sleep_ms(200); /* let the window fill */
	if (!call_within(free_proc, p, 5000)) {
		printf("#   check failed: sandlot_proc_free() of a command with paused output never "
		       "returns (exec.c sandlot_proc_free: kill + wait, but EXIT waits for credit)\n");
		bail("a library call is stuck", __LINE__);
	}
	CHECK_EQ_INT(r.exits, 1);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	run_fini(&r);
	sandlot_destroy(sb);
}

/* Arguments: a large one works; one too large for a protocol frame is an
 * error from sandlot_exec(), and the sandbox carries on. */
static void test_exec_big_args(void)
{
	sandlot_t *sb = new_sandbox();
	size_t n = 100 * KiB;
	char *big = malloc(n + 1);
	REQUIRE(big);
	memset(big, 'x', n);
	big[n] = '\0';
	const char *argv[] = { "sh", "-c", "printf %s \"$1\" | wc -c", "sh", big, NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	struct run r;
	run_init(&r);
	run_spec(sb, &s, &r);
	CHECK(buf_is(&r.out, "102400\n"));
	run_fini(&r);
	free(big);

	n = 2 * MiB;
	big = malloc(n + 1);
	REQUIRE(big);
	memset(big, 'y', n);
	big[n] = '\0';
	const char *argv2[] = { "echo", big, NULL };
	s = (sandlot_exec_spec_t){ .size = sizeof(sandlot_exec_spec_t), .argv = argv2 };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb), .on_exit = count_exit };
	sandlot_error_t *e = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, &s, &cb, &e);
	CHECK(p == NULL);
	CHECK(e != NULL && sandlot_error_status(e) > 0);
	if (e)
		printf("#   (expected) [%s] %s\n", strerrorname_np(sandlot_error_status(e)),
		       sandlot_error_message(e));
	sandlot_error_free(e);
	sandlot_proc_free(p);
	free(big);
	run_init(&r);
	run_sh(sb, "echo ok", &r);
	CHECK(buf_is(&r.out, "ok\n"));
	run_fini(&r);
	sandlot_destroy(sb);
}

struct worker {
	sandlot_t *sb;
	int id;
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 20; i++) {
		char script[128], want[64];
		int code = (w->id * 20 + i) % 7;
		snprintf(script, sizeof(script), "echo %d-%d; echo e%d >&2; exit %d", w->id, i, i, code);
		snprintf(want, sizeof(want), "%d-%d\n", w->id, i);
		struct run r;
		run_init(&r);
		const char *argv[] = { "sh", "-c", script, NULL };
		sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
		sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
						.on_output = run_on_output, .on_exit = run_on_exit, .userdata = &r };
		sandlot_error_t *e = NULL;
		sandlot_proc_t *p = sandlot_exec(w->sb, &s, &cb, &e);
		if (!p) {
			show_err("exec", e);
			sandlot_error_free(e);
			w->failures++;
			run_fini(&r);
			continue;
		}
		sandlot_exit_t ex = { .size = sizeof(ex) };
		if (i % 2) {
			sandlot_proc_wait(p, &ex, NULL);
		} else {
			wait_exit_cb(&r, 20000);
			ex = r.ex;
		}
		sandlot_proc_free(p);
		char want_err[16];
		snprintf(want_err, sizeof(want_err), "e%d\n", i);
		if (!buf_is(&r.out, want) || !buf_is(&r.err, want_err) || ex.exit_code != code ||
		    r.exits != 1 || r.output_after_exit) {
			if (w->failures < 3)
				printf("#   thread %d exec %d: exit %d (want %d), %d exits, out \"%.*s\"\n", w->id, i,
				       ex.exit_code, code, r.exits, (int)r.out.len, (char *)r.out.p);
			w->failures++;
		}
		run_fini(&r);
	}
	return NULL;
}

static void test_exec_concurrent(void)
{
	sandlot_t *sb = new_sandbox();
	enum { NT = 8 };
	struct worker w[NT];
	pthread_t t[NT];
	uint64_t t0 = now_ms();
	for (int i = 0; i < NT; i++) {
		w[i] = (struct worker){ sb, i, 0 };
		REQUIRE(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
	}
	int failures = 0;
	for (int i = 0; i < NT; i++) {
		pthread_join(t[i], NULL);
		failures += w[i].failures;
	}
	printf("#   %d execs in %llu ms\n", NT * 20, (unsigned long long)(now_ms() - t0));
	CHECK_EQ_INT(failures, 0);
	sandlot_usage_t u = { .size = sizeof(u) };
	MUST(sandlot_usage(sb, &u, E));
	sandlot_destroy(sb);
}

/* The limits are reported per run. */
static void test_exec_limits(void)
{
	need_sandbox();
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.pids = 8;
	o.memory_bytes = 64 * MiB;
	sandlot_t *sb = new_sandbox_opts(&o);
	uint32_t idle = idle_pids(sb);
	struct run r;
	run_init(&r);
	/* dash gives up at the first failed fork, leaving the sleeps. */
	run_sh(sb, "i=0; while [ $i -lt 20 ]; do sleep 1 & i=$((i+1)); done; wait", &r);
	CHECK_EQ_INT(r.ex.pids_limited, 1);
	CHECK_EQ_INT(r.ex.oom_killed, 0);
	run_fini(&r);
	CHECK_EQ_INT(wait_pids(sb, idle), idle);

	run_init(&r);
	run_sh(sb, "head -c 512M /dev/zero | tail -n 1 >/dev/null", &r);
	if (r.ex.oom_killed != 1) {
		printf("#   exit %d signal %d oom %d pids %d\n", r.ex.exit_code, r.ex.signal,
		       r.ex.oom_killed, r.ex.pids_limited);
		show_buf("stderr", &r.err);
	}
	CHECK_EQ_INT(r.ex.oom_killed, 1);
	CHECK(r.ex.exit_code != 0);
	run_fini(&r);
	sandlot_usage_t u = { .size = sizeof(u) };
	MUST(sandlot_usage(sb, &u, E));
	CHECK(u.oom_kills >= 1);
	CHECK(u.pids_limit_hits >= 1);

	/* A later, clean run does not inherit the flags. */
	run_init(&r);
	run_sh(sb, "true", &r);
	CHECK_EQ_INT(r.ex.oom_killed, 0);
	CHECK_EQ_INT(r.ex.pids_limited, 0);
	run_fini(&r);
	sandlot_destroy(sb);
}

/* ---- files ------------------------------------------------------------------ */

static void test_file_roundtrip_8m(void)
{
	sandlot_t *sb = new_sandbox();
	const size_t n = 8 * MiB;
	uint8_t *data = random_bytes(n);

	sandlot_file_writer_t *w = NULL;
	MUST((w = sandlot_file_open_write(sb, "big.bin", 0, 0, E)) ? 0 : -1);
	for (size_t off = 0; off < n;) {
		size_t k = 1 + rnd() % (300 * KiB);
		if (k > n - off)
			k = n - off;
		MUST(sandlot_file_writer_write(w, data + off, k, E));
		off += k;
	}
	MUST(sandlot_file_writer_write(w, data, 0, E));
	MUST(sandlot_file_writer_commit(w, E));

	sandlot_stat_t st;
	MUST(sandlot_stat(sb, "big.bin", &st, E));
	CHECK_EQ_INT(st.type, SANDLOT_FILE);
	CHECK_EQ_INT(st.size, n);
	CHECK_EQ_INT(st.mode, 0644);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	CHECK(st.mtime_ns > now_ns - 120 * (int64_t)1000000000 && st.mtime_ns < now_ns + 120 * (int64_t)1000000000);

	struct buf got = { 0 };
	MUST(get_file(sb, "/home/user/big.bin", &got, 0, E));
	CHECK_EQ_INT(got.len, n);
	CHECK(got.len == n && memcmp(got.p, data, n) == 0);
	buf_free(&got);

	/* The command side sees the same bytes. */
	struct run r;
	run_init(&r);
	run_sh(sb, "wc -c < big.bin", &r);
	CHECK(buf_is(&r.out, "8388608\n"));
	run_fini(&r);

	/* Reading past the end keeps returning 0. */
	sandlot_file_reader_t *rd = NULL;
	MUST((rd = sandlot_file_open_read(sb, "big.bin", E)) ? 0 : -1);
	uint8_t *tmp = malloc(n + 1);
	REQUIRE(tmp);
	size_t total = 0;
	for (;;) {
		ssize_t k = 0;
		MUST(k = sandlot_file_reader_read(rd, tmp + total, n + 1 - total, E));
		if (k == 0)
			break;
		total += (size_t)k;
	}
	CHECK_EQ_INT(total, n);
	ssize_t again = -2;
	MUST(again = sandlot_file_reader_read(rd, tmp, 10, E));
	CHECK_EQ_INT(again, 0);
	sandlot_file_reader_close(rd);
	free(tmp);

	/* Replacing it: new content and mode, atomically. */
	MUST(put_file(sb, "big.bin", data, 1000, 0600, 0, E));
	MUST(sandlot_stat(sb, "big.bin", &st, E));
	CHECK_EQ_INT(st.size, 1000);
	CHECK_EQ_INT(st.mode, 0600);

	/* An empty file. */
	MUST(put_file(sb, "empty", "", 0, 0, 0, E));
	MUST(get_file(sb, "empty", &got, 4096, E));
	CHECK_EQ_INT(got.len, 0);
	buf_free(&got);
	free(data);
	sandlot_destroy(sb);
}

static void test_file_reader_errors(void)
{
	sandlot_t *sb = new_sandbox();
	MUST_FAIL(sandlot_file_open_read(sb, "missing.txt", E) ? 0 : -1, ENOENT, "missing.txt");
	MUST_FAIL(sandlot_file_open_read(sb, "/home/user/nodir/missing.txt", E) ? 0 : -1, ENOENT,
		  "missing.txt");
	CHECK(sandlot_file_open_read(sb, "missing.txt", NULL) == NULL);
	MUST_FAIL(sandlot_file_open_read(sb, "/home/user", E) ? 0 : -1, EISDIR, "/home/user");
	sh_ok(sb, "mkfifo fifo");
	MUST_FAIL(sandlot_file_open_read(sb, "fifo", E) ? 0 : -1, EINVAL, "fifo");
	MUST_FAIL(sandlot_file_open_read(sb, "", E) ? 0 : -1, EINVAL, NULL);
	MUST_FAIL(sandlot_file_open_read(sb, NULL, E) ? 0 : -1, EINVAL, NULL);
	sandlot_destroy(sb);
}

/* Closing a reader early aborts the transfer; the sandbox stays usable. */
static void test_file_reader_close_early(void)
{
	sandlot_t *sb = new_sandbox();
	sh_ok(sb, "head -c 16M /dev/urandom > big");
	for (int i = 0; i < 5; i++) {
		sandlot_file_reader_t *rd = NULL;
		MUST((rd = sandlot_file_open_read(sb, "big", E)) ? 0 : -1);
		char b[1000];
		ssize_t k = 0;
		if (i > 0)
			MUST(k = sandlot_file_reader_read(rd, b, sizeof(b), E));
		CHECK(i == 0 || k > 0);
		sandlot_file_reader_close(rd);
	}
	struct buf got = { 0 };
	MUST(get_file(sb, "big", &got, 64 * KiB, E));
	CHECK_EQ_INT(got.len, 16 * MiB);
	buf_free(&got);
	sandlot_file_reader_close(NULL);
	sandlot_destroy(sb);
}

/* Missing parent: fails (by writer_write or commit) with ENOENT unless
 * SANDLOT_WRITE_MKDIRS. */
static void test_file_writer_missing_parent(void)
{
	sandlot_t *sb = new_sandbox();
	uint8_t *data = random_bytes(512 * KiB);
	sandlot_error_t *e = NULL;
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, "nodir/sub/f.bin", 0, 0, &e);
	int failed_at = 0;
	if (!w) {
		failed_at = 1;
	} else if (sandlot_file_writer_write(w, data, 512 * KiB, &e) < 0) {
		failed_at = 2;
		sandlot_file_writer_abort(w);
	} else if (sandlot_file_writer_commit(w, &e) < 0) {
		failed_at = 3;
	}
	printf("#   failed at step %d: %s\n", failed_at, sandlot_error_message(e));
	CHECK(failed_at != 0);
	CHECK_EQ_INT(sandlot_error_status(e), ENOENT);
	CHECK(strstr(sandlot_error_message(e), "nodir/sub/f.bin") != NULL);
	sandlot_error_free(e);
	CHECK_EQ_INT(stat_errno(sb, "nodir"), ENOENT);

	MUST(put_file(sb, "nodir/sub/f.bin", data, 512 * KiB, 0, SANDLOT_WRITE_MKDIRS, E));
	sandlot_stat_t st;
	MUST(sandlot_stat(sb, "nodir/sub", &st, E));
	CHECK_EQ_INT(st.type, SANDLOT_DIR);
	MUST(sandlot_stat(sb, "nodir/sub/f.bin", &st, E));
	CHECK_EQ_INT(st.size, 512 * KiB);
	/* Directories made for the writer belong to the sandbox user. */
	struct run r;
	run_init(&r);
	run_sh(sb, "stat -c %u nodir nodir/sub nodir/sub/f.bin", &r);
	CHECK(buf_is(&r.out, "1000\n1000\n1000\n"));
	run_fini(&r);

	/* A directory in the way. */
	MUST_FAIL(put_file(sb, "nodir", data, 10, 0, 0, E), EISDIR, "nodir");
	free(data);
	sandlot_destroy(sb);
}

static void test_file_writer_abort(void)
{
	sandlot_t *sb = new_sandbox();
	MUST(sandlot_mkdir(sb, "adir", 0, 0, E));
	uint8_t *data = random_bytes(1 * MiB);

	sandlot_file_writer_t *w = NULL;
	MUST((w = sandlot_file_open_write(sb, "adir/f", 0, 0, E)) ? 0 : -1);
	MUST(sandlot_file_writer_write(w, data, 1 * MiB, E));
	sandlot_file_writer_abort(w);
	CHECK_EQ_INT(list_count(sb, "adir"), 0);
	CHECK_EQ_INT(stat_errno(sb, "adir/f"), ENOENT);

	/* Abort with no data at all. */
	MUST((w = sandlot_file_open_write(sb, "adir/g", 0, 0, E)) ? 0 : -1);
	sandlot_file_writer_abort(w);
	CHECK_EQ_INT(list_count(sb, "adir"), 0);

	/* Aborting a replacement keeps the original. */
	MUST(put_file(sb, "adir/keep", "original", 8, 0, 0, E));
	MUST((w = sandlot_file_open_write(sb, "adir/keep", 0, 0, E)) ? 0 : -1);
	MUST(sandlot_file_writer_write(w, data, 300 * KiB, E));
	sandlot_file_writer_abort(w);
	int tmps = -1;
	CHECK(dir_has(sb, "adir", "keep", &tmps));
	CHECK_EQ_INT(tmps, 0);
	CHECK_EQ_INT(list_count(sb, "adir"), 1);
	struct buf got = { 0 };
	MUST(get_file(sb, "adir/keep", &got, 0, E));
	CHECK(buf_is(&got, "original"));
	buf_free(&got);
	sandlot_file_writer_abort(NULL);
	free(data);
	sandlot_destroy(sb);
}

static ssize_t zero_source(void *ud, void *buf, size_t len)
{
	size_t *left = ud;
	size_t n = len < *left ? len : *left;
	memset(buf, 0, n);
	*left -= n;
	return (ssize_t)n;
}

/* A 16M disk: a 32 MiB write fails and leaves nothing: EDQUOT from the
 * workspace's quota in the pool, ENOSPC from a full tmpfs. */
static void enospc_case(sandlot_storage_t storage)
{
	int full = storage == SANDLOT_STORAGE_TMPFS ? ENOSPC : EDQUOT;
	need_sandbox();
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.disk_bytes = 16 * MiB;
	o.storage = storage;
	sandlot_t *sb = new_sandbox_opts(&o);
	struct run df;
	run_init(&df);
	run_sh(sb, "df -k /home/user | tail -n 1", &df);
	show_buf("df", &df.out);
	run_fini(&df);
	uint8_t *chunk = random_bytes(1 * MiB);

	sandlot_error_t *e = NULL;
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, "big", 0, 0, &e);
	REQUIRE(w);
	int failed_at = 0;
	for (int i = 0; i < 32; i++) {
		if (sandlot_file_writer_write(w, chunk, 1 * MiB, &e) < 0) {
			failed_at = 1 + i;
			sandlot_file_writer_abort(w);
			break;
		}
	}
	if (!failed_at && sandlot_file_writer_commit(w, &e) < 0)
		failed_at = 100;
	printf("#   failed at %s %d: %s\n", failed_at == 100 ? "commit" : "MiB", failed_at,
	       sandlot_error_message(e));
	CHECK(failed_at != 0);
	CHECK_EQ_INT(sandlot_error_status(e), full);
	CHECK(strstr(sandlot_error_message(e), "big") != NULL);
	sandlot_error_free(e);
	int tmps = -1;
	CHECK(!dir_has(sb, "/home/user", "big", &tmps));
	CHECK_EQ_INT(tmps, 0);

	/* The callback form. */
	size_t left = 32 * MiB;
	MUST_FAIL(sandlot_file_write(sb, "big2", 0, 0, zero_source, &left, E), full, "big2");
	CHECK(!dir_has(sb, "/home/user", "big2", &tmps));
	CHECK_EQ_INT(tmps, 0);

	/* The space came back, and a failed replacement keeps the original. */
	MUST(put_file(sb, "small", chunk, 1 * MiB, 0, 0, E));
	left = 32 * MiB;
	MUST_FAIL(sandlot_file_write(sb, "small", 0, 0, zero_source, &left, E), full, "small");
	struct buf got = { 0 };
	MUST(get_file(sb, "small", &got, 0, E));
	CHECK(got.len == 1 * MiB && memcmp(got.p, chunk, got.len) == 0);
	buf_free(&got);
	CHECK(dir_has(sb, "/home/user", "small", &tmps));
	CHECK_EQ_INT(tmps, 0);
	free(chunk);
	sandlot_destroy(sb);
}

static void test_file_enospc(void)
{
	enospc_case(SANDLOT_STORAGE_DEFAULT); /* the storage pool here */
}

static void test_file_enospc_tmpfs(void)
{
	enospc_case(SANDLOT_STORAGE_TMPFS);
}

struct src_ctx {
	const uint8_t *data;
	size_t len, off;
	size_t fail_at; /* fail with EIO once off reaches this (0: never) */
	int calls;
};

static ssize_t mem_source(void *ud, void *buf, size_t len)
{
	struct src_ctx *c = ud;
	c->calls++;
	if (c->fail_at && c->off >= c->fail_at) {
		errno = EIO;
		return -1;
	}
	/* Short reads of varying size, as a socket would give. */
	size_t n = 1 + rnd() % len;
	if (n > c->len - c->off)
		n = c->len - c->off;
	memcpy(buf, c->data + c->off, n);
	c->off += n;
	return (ssize_t)n;
}

struct sink_ctx {
	struct buf b;
	size_t fail_after; /* fail with ENOSPC once this much arrived (0: never) */
	int calls;
};

static int mem_sink(void *ud, const void *buf, size_t len)
{
	struct sink_ctx *c = ud;
	c->calls++;
	if (c->fail_after && c->b.len >= c->fail_after) {
		errno = ENOSPC;
		return -1;
	}
	buf_add(&c->b, buf, len);
	return 0;
}

static void test_file_callbacks(void)
{
	sandlot_t *sb = new_sandbox();
	size_t n = 3 * MiB + 17;
	uint8_t *data = random_bytes(n);

	struct src_ctx src = { data, n, 0, 0, 0 };
	MUST(sandlot_file_write(sb, "cb.bin", 0640, 0, mem_source, &src, E));
	sandlot_stat_t st;
	MUST(sandlot_stat(sb, "cb.bin", &st, E));
	CHECK_EQ_INT(st.size, n);
	CHECK_EQ_INT(st.mode, 0640);
	struct sink_ctx sink = { 0 };
	MUST(sandlot_file_read(sb, "cb.bin", mem_sink, &sink, E));
	CHECK(sink.b.len == n && memcmp(sink.b.p, data, n) == 0);
	buf_free(&sink.b);

	/* MKDIRS through the callback form. */
	src = (struct src_ctx){ data, 1000, 0, 0, 0 };
	MUST(sandlot_file_write(sb, "deep/er/cb.bin", 0, SANDLOT_WRITE_MKDIRS, mem_source, &src, E));
	CHECK_EQ_INT(stat_errno(sb, "deep/er/cb.bin"), 0);

	/* The source fails: EIO, and no file. */
	src = (struct src_ctx){ data, n, 0, 1 * MiB, 0 };
	MUST_FAIL(sandlot_file_write(sb, "failed.bin", 0, 0, mem_source, &src, E), EIO, "failed.bin");
	int tmps = -1;
	CHECK(!dir_has(sb, "/home/user", "failed.bin", &tmps));
	CHECK_EQ_INT(tmps, 0);

	/* The sink fails: its errno, and the transfer stops. */
	sink = (struct sink_ctx){ .fail_after = 256 * KiB };
	MUST_FAIL(sandlot_file_read(sb, "cb.bin", mem_sink, &sink, E), ENOSPC, "cb.bin");
	buf_free(&sink.b);

	/* Missing: ENOENT before the sink sees anything. */
	sink = (struct sink_ctx){ 0 };
	MUST_FAIL(sandlot_file_read(sb, "nope.bin", mem_sink, &sink, E), ENOENT, "nope.bin");
	CHECK_EQ_INT(sink.calls, 0);

	/* Empty source: an empty file; reading it never calls the sink. */
	src = (struct src_ctx){ data, 0, 0, 0, 0 };
	MUST(sandlot_file_write(sb, "empty", 0, 0, mem_source, &src, E));
	MUST(sandlot_stat(sb, "empty", &st, E));
	CHECK_EQ_INT(st.size, 0);
	sink = (struct sink_ctx){ 0 };
	MUST(sandlot_file_read(sb, "empty", mem_sink, &sink, E));
	CHECK_EQ_INT(sink.b.len, 0);
	buf_free(&sink.b);

	/* The sandbox's read-only root. */
	src = (struct src_ctx){ data, 10, 0, 0, 0 };
	sandlot_error_t *e = NULL;
	CHECK(sandlot_file_write(sb, "/etc/sandlot-test", 0, 0, mem_source, &src, &e) < 0);
	CHECK(e && sandlot_error_status(e) > 0);
	sandlot_error_free(e);
	free(data);
	sandlot_destroy(sb);
}

struct pipe_feed {
	int fd;
	const uint8_t *data;
	size_t len;
};

static void *pipe_feeder(void *arg)
{
	struct pipe_feed *f = arg;
	size_t off = 0;
	while (off < f->len) {
		size_t k = 1 + rnd() % (100 * KiB);
		if (k > f->len - off)
			k = f->len - off;
		ssize_t w = write(f->fd, f->data + off, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			break;
		off += (size_t)w;
	}
	close(f->fd);
	return NULL;
}

static int fd_equals(int fd, const uint8_t *data, size_t n)
{
	uint8_t *b = malloc(n + 1);
	REQUIRE(b);
	ssize_t got = pread(fd, b, n + 1, 0);
	int same = got == (ssize_t)n && memcmp(b, data, n) == 0;
	free(b);
	return same;
}

static void test_file_fd(void)
{
	sandlot_t *sb = new_sandbox();
	size_t n = 2 * MiB + 3;
	uint8_t *data = random_bytes(n);

	int in = memfd_create("in", MFD_CLOEXEC), out = memfd_create("out", MFD_CLOEXEC);
	REQUIRE(in >= 0 && out >= 0);
	REQUIRE(write(in, data, n) == (ssize_t)n);
	REQUIRE(lseek(in, 0, SEEK_SET) == 0);
	MUST(sandlot_file_write_fd(sb, "fd.bin", 0600, 0, in, E));
	MUST(sandlot_file_read_fd(sb, "fd.bin", out, E));
	CHECK(fd_equals(out, data, n));
	sandlot_stat_t st;
	MUST(sandlot_stat(sb, "fd.bin", &st, E));
	CHECK_EQ_INT(st.mode, 0600);

	/* A pipe fed by another thread: a streaming source. */
	int p[2];
	REQUIRE(pipe2(p, O_CLOEXEC) == 0);
	struct pipe_feed feed = { p[1], data, n };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, pipe_feeder, &feed) == 0);
	MUST(sandlot_file_write_fd(sb, "pipe.bin", 0, 0, p[0], E));
	pthread_join(t, NULL);
	close(p[0]);
	REQUIRE(ftruncate(out, 0) == 0 && lseek(out, 0, SEEK_SET) == 0);
	MUST(sandlot_file_read_fd(sb, "pipe.bin", out, E));
	CHECK(fd_equals(out, data, n));

	/* Bad descriptors. */
	MUST_FAIL(sandlot_file_write_fd(sb, "badfd.bin", 0, 0, -1, E), EBADF, "badfd.bin");
	CHECK_EQ_INT(stat_errno(sb, "badfd.bin"), ENOENT);
	MUST_FAIL(sandlot_file_read_fd(sb, "fd.bin", -1, E), EBADF, "fd.bin");
	MUST_FAIL(sandlot_file_read_fd(sb, "nope", out, E), ENOENT, "nope");
	close(in);
	close(out);
	free(data);
	sandlot_destroy(sb);
}

static void test_fs_ops(void)
{
	sandlot_t *sb = new_sandbox();
	sandlot_stat_t st;

	MUST_FAIL(sandlot_mkdir(sb, "a/b/c", 0, 0, E), ENOENT, "a/b/c");
	MUST(sandlot_mkdir(sb, "a/b/c", 0750, SANDLOT_MKDIR_PARENTS, E));
	MUST(sandlot_stat(sb, "a/b/c", &st, E));
	CHECK_EQ_INT(st.type, SANDLOT_DIR);
	CHECK_EQ_INT(st.mode, 0750);
	MUST(sandlot_stat(sb, "a/b", &st, E));
	CHECK_EQ_INT(st.type, SANDLOT_DIR);
	MUST_FAIL(sandlot_mkdir(sb, "a", 0, 0, E), EEXIST, "a");
	MUST(sandlot_mkdir(sb, "a", 0, SANDLOT_MKDIR_PARENTS, E)); /* like mkdir -p */

	MUST(put_file(sb, "a/f.txt", "hello", 5, 0, 0, E));
	MUST_FAIL(sandlot_mkdir(sb, "a/f.txt", 0, SANDLOT_MKDIR_PARENTS, E), EEXIST, "a/f.txt");
	sh_ok(sb, "ln -s f.txt a/link");

	sandlot_stat_t abs_st;
	MUST(sandlot_stat(sb, "a/f.txt", &st, E));
	MUST(sandlot_stat(sb, "/home/user/a/f.txt", &abs_st, E));
	CHECK_EQ_INT(st.type, SANDLOT_FILE);
	CHECK_EQ_INT(st.size, 5);
	CHECK_EQ_INT(st.mode, 0644);
	CHECK_EQ_INT(st.mtime_ns, abs_st.mtime_ns);
	MUST(sandlot_stat(sb, "a/link", &st, E));
	CHECK_EQ_INT(st.type, SANDLOT_SYMLINK); /* not followed */

	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	MUST(sandlot_list(sb, "a", &ents, &n, E));
	CHECK_EQ_INT(n, 3);
	int seen = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(ents[i].name, "b") == 0 && ents[i].st.type == SANDLOT_DIR)
			seen |= 1;
		else if (strcmp(ents[i].name, "f.txt") == 0 && ents[i].st.type == SANDLOT_FILE &&
			 ents[i].st.size == 5 && ents[i].st.mode == 0644)
			seen |= 2;
		else if (strcmp(ents[i].name, "link") == 0 && ents[i].st.type == SANDLOT_SYMLINK)
			seen |= 4;
		else
			printf("#   unexpected entry \"%s\" type %c\n", ents[i].name, ents[i].st.type);
	}
	CHECK_EQ_INT(seen, 7);
	sandlot_dirents_free(ents, n);
	MUST_FAIL(sandlot_list(sb, "a/f.txt", &ents, &n, E), ENOTDIR, "a/f.txt");
	MUST_FAIL(sandlot_list(sb, "missing", &ents, &n, E), ENOENT, "missing");

	/* An empty directory lists as nothing (no "." or ".."). */
	MUST(sandlot_list(sb, "a/b/c", &ents, &n, E));
	CHECK_EQ_INT(n, 0);
	sandlot_dirents_free(ents, n);

	MUST_FAIL(sandlot_remove(sb, "a", 0, E), ENOTEMPTY, "a");
	CHECK_EQ_INT(stat_errno(sb, "a/f.txt"), 0);
	MUST(sandlot_remove(sb, "a/f.txt", 0, E));
	CHECK_EQ_INT(stat_errno(sb, "a/f.txt"), ENOENT);
	MUST(sandlot_remove(sb, "a/link", 0, E));
	MUST(sandlot_remove(sb, "a/b/c", 0, E)); /* empty dir without the flag */
	MUST(put_file(sb, "a/b/x", "x", 1, 0, 0, E));
	MUST(sandlot_remove(sb, "a", SANDLOT_REMOVE_RECURSIVE, E));
	CHECK_EQ_INT(stat_errno(sb, "a"), ENOENT);
	MUST_FAIL(sandlot_remove(sb, "a", 0, E), ENOENT, "a");
	CHECK_EQ_INT(list_count(sb, "/home/user"), 0);

	/* Recursive removal of a deep tree made by a command. */
	sh_ok(sb, "mkdir -p t/1/2/3/4 t/x && for i in $(seq 1 200); do echo $i > t/x/$i; done && ln -s / t/root");
	MUST(sandlot_remove(sb, "t", SANDLOT_REMOVE_RECURSIVE, E));
	CHECK_EQ_INT(stat_errno(sb, "t"), ENOENT);
	MUST(sandlot_stat(sb, "/bin/sh", &st, E)); /* the symlink was not followed */

	MUST_FAIL(sandlot_stat(sb, "", &st, E), EINVAL, NULL);
	MUST_FAIL(sandlot_list(sb, "", &ents, &n, E), EINVAL, NULL);
	MUST_FAIL(sandlot_mkdir(sb, "", 0, 0, E), EINVAL, NULL);
	MUST_FAIL(sandlot_remove(sb, "", 0, E), EINVAL, NULL);
	sandlot_destroy(sb);
}

/* A sandbox whose init is tests/unit/fake_init.c (a compromised init). */
static sandlot_t *new_fake_sandbox(void)
{
	need_sandbox();
	const char *fake = getenv("SANDLOT_TEST_FAKE_INIT");
	if (!fake || access(fake, X_OK) != 0)
		bail("SANDLOT_TEST_FAKE_INIT is not set or not executable: run this through "
		     "`meson test`", __LINE__);
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.init_path = fake;
	return new_sandbox_opts(&o);
}

/* What init answers CONFIG with when its set-up fails (fake_init.c sends
 * the ERROR a real init sends for a failed mount) is the error of
 * sandlot_create(): its errno and message, and nothing is left behind. */
static void test_init_config_refused(void)
{
	need_sandbox();
	const char *fake = getenv("SANDLOT_TEST_FAKE_INIT");
	if (!fake || access(fake, X_OK) != 0)
		bail("SANDLOT_TEST_FAKE_INIT is not set or not executable: run this through "
		     "`meson test`", __LINE__);
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.init_path = fake;
	o.hostname = "refuse-config";
	MUST_FAIL(sandlot_create(&o, E) ? 0 : -1, EACCES, "mount /proc: Permission denied");
	int status;
	CHECK(waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD); /* fake init reaped */
}

/* sandlot_list() must refuse the entry names a compromised init could use
 * to walk its callers out of a directory: "", ".", "..", "/", names with a
 * '/' or a NUL.  Refused with EPROTO (the whole listing: a caller must
 * not act on a listing half of which was a lie), naming the entry. */
static void test_list_hostile_names(void)
{
	sandlot_t *sb = new_fake_sandbox();
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	MUST(sandlot_list(sb, "/x/fine", &ents, &n, E));
	CHECK_EQ_INT(n, 1);
	CHECK(n == 1 && strcmp(ents[0].name, "ok") == 0);
	sandlot_dirents_free(ents, n);

	static const char *const keys[] = { "dotdot", "dot", "slash", "root", "empty", "nul" };
	static const char *const shown[] = { "\"..\"", "\".\"", "\"a/b\"", "\"/\"", "\"\"",
					     "NUL" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char path[64];
		snprintf(path, sizeof(path), "/x/%s", keys[i]);
		ents = NULL;
		n = 0;
		MUST_FAIL(sandlot_list(sb, path, &ents, &n, E), EPROTO, shown[i]);
		CHECK(ents == NULL && n == 0);
	}
	sandlot_destroy(sb);
	int status;
	CHECK(waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD); /* fake init reaped */
}

/* Sparse files: stat and list tell the apparent size from the allocated
 * bytes, and a read with a limit refuses a file over it before any data,
 * naming both sizes. */
static void test_file_read_limit(void)
{
	sandlot_t *sb = new_sandbox();
	/* As big as the sandbox's file size limit (its disk size) allows. */
	sh_ok(sb, "truncate -s 900M sparse && head -c 300000 /dev/urandom > real");
	sandlot_stat_t st;
	MUST(sandlot_stat(sb, "sparse", &st, E));
	CHECK(st.size == 900 * MiB);
	CHECK(st.allocated < 64 * KiB);
	MUST(sandlot_stat(sb, "real", &st, E));
	CHECK_EQ_INT(st.size, 300000);
	CHECK(st.allocated >= 300000);
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	MUST(sandlot_list(sb, "/home/user", &ents, &n, E));
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ents[i].name, "sparse"))
			CHECK(ents[i].st.size == 900 * MiB && ents[i].st.allocated < 64 * KiB);
		else if (!strcmp(ents[i].name, "real"))
			CHECK(ents[i].st.allocated >= 300000);
	sandlot_dirents_free(ents, n);

	MUST_FAIL(sandlot_file_open_read_max(sb, "sparse", MiB, E) ? 0 : -1, EFBIG,
		  "the file is 943718400 bytes, over the limit of 1048576 bytes");
	MUST_FAIL(sandlot_file_open_read_max(sb, "real", 299999, E) ? 0 : -1, EFBIG,
		  "over the limit of 299999 bytes");
	/* Exactly at the limit, and without one, the whole file comes. */
	int fd = memfd_create("read", MFD_CLOEXEC);
	REQUIRE(fd >= 0);
	MUST(sandlot_file_read_fd_max(sb, "real", fd, 300000, E));
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 300000);
	close(fd);
	sandlot_file_reader_t *r = sandlot_file_open_read_max(sb, "real", 0, NULL);
	CHECK(r != NULL);
	sandlot_file_reader_close(r);
	sandlot_destroy(sb);
}

/* The host enforces the limit and the credit window itself: a compromised
 * init that sends a file whatever the limit says, and faster than its
 * credit, gets the transfer refused instead of filling the host's memory. */
static void test_file_read_hostile_sizes(void)
{
	sandlot_t *sb = new_fake_sandbox();
	char buf[4096];
	sandlot_file_reader_t *r = sandlot_file_open_read_max(sb, "any", 128 * KiB, NULL);
	REQUIRE(r != NULL);
	ssize_t got = 0, k;
	sandlot_error_t *e = NULL;
	while ((k = sandlot_file_reader_read(r, buf, sizeof(buf), &e)) > 0)
		got += k;
	CHECK(k < 0 && e && sandlot_error_status(e) == EFBIG);
	CHECK_EQ_INT(got, 0);
	if (e)
		printf("#   (expected) %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	sandlot_file_reader_close(r);

	r = sandlot_file_open_read(sb, "any", NULL);
	REQUIRE(r != NULL);
	got = 0;
	while ((k = sandlot_file_reader_read(r, buf, sizeof(buf), &e)) > 0)
		got += k;
	CHECK(k < 0 && e && sandlot_error_status(e) == EPROTO);
	CHECK_EQ_INT(got, 0); /* its first frame was already past the credit */
	if (e)
		printf("#   (expected) %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	sandlot_file_reader_close(r);
	sandlot_destroy(sb);
}

static const sandlot_change_t *find_change(const sandlot_changes_t *c, const char *path)
{
	for (size_t i = 0; i < c->count; i++)
		if (strcmp(c->items[i].path, path) == 0)
			return &c->items[i];
	return NULL;
}

static void show_changes(const sandlot_changes_t *c)
{
	for (size_t i = 0; i < c->count; i++)
		printf("#   %c %c %llu %s\n", c->items[i].kind, c->items[i].type,
		       (unsigned long long)c->items[i].size, c->items[i].path);
	fflush(stdout);
}

static void expect_change(const sandlot_changes_t *c, const char *path, int kind, int type,
			  long long size, int line)
{
	const sandlot_change_t *ch = find_change(c, path);
	if (!ch || ch->kind != (sandlot_change_kind_t)kind || ch->type != (sandlot_file_type_t)type ||
	    (size >= 0 && ch->size != (uint64_t)size)) {
		printf("#   check failed: want change %c %c %lld %s (%s:%d)\n", kind, type, size, path,
		       __FILE__, line);
		tap_case_failed = 1;
	}
}

static void test_changes_scan(void)
{
	sandlot_t *sb = new_sandbox();
	sandlot_changes_t c = { .size = sizeof(c) };

	/* The baseline was taken at create: an untouched workspace. */
	MUST(sandlot_changes_scan(sb, &c, E));
	CHECK_EQ_INT(c.count, 0);
	CHECK_EQ_INT(c.truncated, 0);
	sandlot_changes_free(&c);

	MUST(put_file(sb, "keep.txt", "k", 1, 0, 0, E));
	MUST(put_file(sb, "mod.txt", "1", 1, 0, 0, E));
	MUST(put_file(sb, "gone.txt", "g", 1, 0, 0, E));
	MUST(sandlot_mkdir(sb, "olddir", 0, 0, E));
	MUST(sandlot_changes_scan(sb, &c, E));
	show_changes(&c);
	CHECK_EQ_INT(c.count, 4);
	expect_change(&c, "/home/user/keep.txt", 'c', 'f', 1, __LINE__);
	expect_change(&c, "/home/user/mod.txt", 'c', 'f', 1, __LINE__);
	expect_change(&c, "/home/user/gone.txt", 'c', 'f', 1, __LINE__);
	expect_change(&c, "/home/user/olddir", 'c', 'd', -1, __LINE__);
	sandlot_changes_free(&c);

	sh_ok(sb, "echo new > new.txt; echo more >> mod.txt; rm gone.txt; mkdir newdir; echo x > newdir/f");
	MUST(sandlot_changes_scan(sb, &c, E));
	show_changes(&c);
	CHECK_EQ_INT(c.count, 5);
	CHECK_EQ_INT(c.truncated, 0);
	expect_change(&c, "/home/user/new.txt", 'c', 'f', 4, __LINE__);
	expect_change(&c, "/home/user/newdir", 'c', 'd', -1, __LINE__);
	expect_change(&c, "/home/user/newdir/f", 'c', 'f', 2, __LINE__);
	expect_change(&c, "/home/user/mod.txt", 'm', 'f', 6, __LINE__);
	expect_change(&c, "/home/user/gone.txt", 'd', 'f', 0, __LINE__);
	CHECK(find_change(&c, "/home/user/keep.txt") == NULL);
	sandlot_changes_free(&c);

	/* Nothing since. */
	MUST(sandlot_changes_scan(sb, &c, E));
	CHECK_EQ_INT(c.count, 0);
	sandlot_changes_free(&c);

	/* Same size, new content (mtime moves): modified.  Deleting a tree
	 * reports its entries. */
	sleep_ms(20);
	sh_ok(sb, "printf 'K' > keep.txt; rm -r newdir");
	MUST(sandlot_changes_scan(sb, &c, E));
	show_changes(&c);
	expect_change(&c, "/home/user/keep.txt", 'm', 'f', 1, __LINE__);
	expect_change(&c, "/home/user/newdir", 'd', 'd', 0, __LINE__);
	expect_change(&c, "/home/user/newdir/f", 'd', 'f', 0, __LINE__);
	CHECK_EQ_INT(c.count, 3);
	sandlot_changes_free(&c);
	sandlot_changes_free(NULL);
	sandlot_destroy(sb);
}

/* ---- destroy with work in flight ------------------------------------------- */

/* Run fn(arg) on its own thread; 1 if it returned within ms.  A call that
 * does not return is left blocked (the case then ends). */
struct timed_call {
	void (*fn)(void *);
	void *arg;
};

static void *timed_call_main(void *a)
{
	struct timed_call *tc = a;
	tc->fn(tc->arg);
	return NULL;
}

static int join_within(pthread_t t, unsigned ms);

static int call_within(void (*fn)(void *), void *arg, unsigned ms)
{
	static struct timed_call tc; /* outlives a call that never returns */
	tc = (struct timed_call){ fn, arg };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, timed_call_main, &tc) == 0);
	return join_within(t, ms);
}

/* Take back the memory at `addr`, which sandlot_destroy() has just freed
 * (glibc hands the chunk freed last out first), and fill it with 1s: to a
 * handle that still points into the destroyed sandbox, its connection mutex
 * then looks held, so the dangling use blocks (and the case says so)
 * instead of silently working on freed memory.  Returns the block, to be
 * freed at the end, or NULL when the memory went elsewhere (another
 * allocator, a sanitizer's quarantine, a library that keeps it alive). */
static void *reclaim_freed(uintptr_t addr)
{
	void *held[300];
	size_t nh = 0, size = 0;
	void *got = NULL;
	for (size_t sz = 16; sz <= 4096 && nh < 300; sz += 16) {
		void *p = malloc(sz);
		if ((uintptr_t)p == addr) {
			got = p;
			size = sz;
			break;
		}
		if (p)
			held[nh++] = p;
	}
	for (size_t i = 0; i < nh; i++)
		free(held[i]);
	if (got) {
		const uint32_t one = 1;
		for (size_t o = 0; o + sizeof(one) <= size; o += sizeof(one))
			memcpy((char *)got + o, &one, sizeof(one));
	} else {
		printf("#   (the destroyed sandbox's memory was not reclaimed; dangling uses go unseen "
		       "here, a TSan build reports them)\n");
	}
	return got;
}


static void free_procs(void *arg)
{
	sandlot_proc_t **procs = arg;
	sandlot_proc_free(procs[0]);
	sandlot_proc_free(procs[1]);
}

struct waiter {
	sandlot_proc_t *p;
	sandlot_exit_t ex;
	int rc, done;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->rc = sandlot_proc_wait(w->p, &w->ex, NULL);
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static int join_within(pthread_t t, unsigned ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return pthread_timedjoin_np(t, NULL, &dl) == 0;
}

/* Destroy with a command running and another thread in sandlot_proc_wait:
 * on_exit reports SIGKILL, the wait returns, and the caller can still
 * release its handle (the header: free after on_exit has run).
 * Bugs exercised: the proc handle keeps a pointer to the freed sandbox
 * (sandlot_proc_wait/free lock p->sb->conn after sandlot_destroy freed
 * it), and finish() calls sb->ops->usage() while ns_stop frees the backend
 * state (see the report). */
/* The attack of many long paths, scaled down: a sandbox whose code makes
 * 3,000 files with 3.7 KB paths (11 MB of paths) in 64M of memory.  The
 * report keeps to changes_max_bytes (truncated), init survives the scans
 * (it was OOM-killed before, losing the sandbox), and a later change is
 * still found where the walk reaches (paths sorting before the big tree;
 * past the walk's memory, nothing is tracked, and every scan says
 * truncated). */
static void test_changes_scan_bytes(void)
{
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.memory_bytes = 64 * MiB;
	o.changes_max_bytes = 256 * KiB;
	sandlot_t *sb = new_sandbox_opts(&o);
	sh_ok(sb, "python3 -c \"import os\n"
		  "p = 'a/' + '/'.join(('d%02d' % i) + 'x' * 247 for i in range(14))\n"
		  "os.makedirs(p)\n"
		  "for i in range(3000): open(os.path.join(p, ('%08d' % i) + 'y' * 190), 'w').close()\n"
		  "\"");
	sandlot_changes_t c = { .size = sizeof(c) };
	MUST(sandlot_changes_scan(sb, &c, E));
	printf("#   %zu changes, %llu bytes, truncated %d\n", c.count, (unsigned long long)c.bytes,
	       c.truncated);
	CHECK(c.truncated);
	CHECK(c.count > 10);
	CHECK(c.bytes <= 256 * KiB);
	uint64_t sum = 0;
	for (size_t i = 0; i < c.count; i++)
		sum += 34 + strlen(c.items[i].path);
	CHECK_EQ_INT(sum, c.bytes);
	sandlot_changes_free(&c);
	/* A smaller limit for one call. */
	sh_ok(sb, "touch a/zz && for f in a/d00*/d01*/d02*; do touch $f; done");
	MUST(sandlot_changes_scan_max(sb, 8 * KiB, &c, E));
	CHECK(c.bytes <= 8 * KiB);
	sandlot_changes_free(&c);
	for (int i = 0; i < 3; i++) {
		MUST(sandlot_changes_scan(sb, &c, E));
		sandlot_changes_free(&c);
	}
	CHECK(sandlot_alive(sb));
	sh_ok(sb, "echo late > 0-late.txt");
	MUST(sandlot_changes_scan(sb, &c, E));
	expect_change(&c, "/home/user/0-late.txt", 'c', 'f', 5, __LINE__);
	CHECK_EQ_INT(c.count, 1);
	CHECK(c.truncated); /* the walk still stops in the big tree */
	sandlot_changes_free(&c);
	CHECK(sandlot_alive(sb));
	sandlot_destroy(sb);

	sandlot_options_init(&o);
	o.changes_max_bytes = 100;
	MUST_FAIL(sandlot_options_validate(&o, E), EINVAL, "4K");
	sandlot_options_init(&o);
	o.memory_bytes = 64 * MiB;
	o.scan_memory_bytes = 32 * MiB;
	MUST_FAIL(sandlot_options_validate(&o, E), EINVAL, "a quarter");
}

/* A compromised init that reports far more than asked: the host keeps
 * what the limit allows and says truncated. */
static void test_changes_scan_hostile_flood(void)
{
	sandlot_t *sb = new_fake_sandbox();
	sandlot_changes_t c = { .size = sizeof(c) };
	MUST(sandlot_changes_scan(sb, &c, E));
	printf("#   %zu changes, %llu bytes kept of 24 MiB sent\n", c.count, (unsigned long long)c.bytes);
	CHECK(c.truncated);
	CHECK(c.bytes <= 8 * MiB && c.bytes > 7 * MiB);
	sandlot_changes_free(&c);
	MUST(sandlot_changes_scan_max(sb, MiB, &c, E));
	CHECK(c.truncated && c.bytes <= MiB);
	sandlot_changes_free(&c);
	sandlot_destroy(sb);
}

static void test_destroy_running_exec(void)
{
	sandlot_t *sb = new_sandbox();
	struct run r, r2;
	run_init(&r);
	run_init(&r2);
	const char *argv[] = { "sh", "-c", "echo ready; exec sleep 30", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	sandlot_proc_t *p2 = start(sb, &s, &r2); /* nobody waits on this one */
	CHECK(wait_output(&r, "ready", 5000));
	CHECK(wait_output(&r2, "ready", 5000));
	struct waiter w = { p, { .size = sizeof(sandlot_exit_t) }, -1, 0 };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	sleep_ms(100);
	CHECK(!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST));

	uint64_t t0 = now_ms();
	uintptr_t sb_addr = (uintptr_t)sb;
	sandlot_destroy(sb);
	CHECK(now_ms() - t0 < 5000);
	int joined = join_within(t, 5000);
	CHECK(joined);
	if (!joined)
		bail("sandlot_proc_wait did not return after sandlot_destroy", __LINE__);
	CHECK_EQ_INT(w.rc, 0);
	CHECK_EQ_INT(w.ex.signal, SIGKILL);
	CHECK_EQ_INT(w.ex.exit_code, -1);
	CHECK(wait_exit_cb(&r, 1000));
	CHECK(wait_exit_cb(&r2, 1000));
	CHECK_EQ_INT(r.exits, 1);
	CHECK_EQ_INT(r.ex.signal, SIGKILL);
	CHECK_EQ_INT(r2.exits, 1);
	CHECK_EQ_INT(r2.ex.signal, SIGKILL);

	/* The caller still owns p and p2 and must be able to free them. */
	void *poison = reclaim_freed(sb_addr);
	sandlot_proc_t *procs[2] = { p, p2 };
	if (!call_within(free_procs, procs, 3000)) {
		printf("#   check failed: sandlot_proc_free() after sandlot_destroy() blocks: the proc "
		       "still uses the freed sandbox (p->sb->conn.lock, exec.c sandlot_proc_free)\n");
		bail("a library call is stuck", __LINE__);
	}
	free(poison);
	run_fini(&r);
	run_fini(&r2);
}

static void close_reader(void *rd)
{
	sandlot_file_reader_close(rd);
}

struct drain {
	sandlot_file_reader_t *rd;
	size_t bytes;
	ssize_t last;
	int status, done;
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;
	static uint8_t b[64 * 1024];
	sandlot_error_t *e = NULL;
	for (;;) {
		ssize_t n = sandlot_file_reader_read(d->rd, b, sizeof(b), &e);
		d->last = n;
		if (n <= 0)
			break;
		__atomic_add_fetch(&d->bytes, (size_t)n, __ATOMIC_SEQ_CST);
	}
	d->status = sandlot_error_status(e);
	sandlot_error_free(e);
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Destroy while a reader is open and a thread is blocked in
 * sandlot_file_reader_read (init is stopped, so no data comes): the read
 * returns an error, nothing hangs, and the reader can still be closed.
 * Same dangling-sandbox bug as above (rd->r.sb). */
static void test_destroy_open_reader(void)
{
	sandlot_t *sb = new_sandbox();
	sh_ok(sb, "head -c 32M /dev/zero > big");
	sandlot_file_reader_t *rd = NULL;
	MUST((rd = sandlot_file_open_read(sb, "big", E)) ? 0 : -1);
	char b[100];
	ssize_t k = 0;
	MUST(k = sandlot_file_reader_read(rd, b, sizeof(b), E));
	CHECK(k > 0);
	pid_t init = sandlot__init_pid(sb);
	REQUIRE(kill(init, SIGSTOP) == 0);
	struct drain d = { rd, 0, 0, 0, 0 };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, drain_main, &d) == 0);
	sleep_ms(300);
	CHECK(!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST)); /* blocked, waiting for data */

	uintptr_t sb_addr = (uintptr_t)sb;
	sandlot_destroy(sb);
	int joined = join_within(t, 5000);
	CHECK(joined);
	if (!joined)
		bail("sandlot_file_reader_read hangs after sandlot_destroy", __LINE__);
	CHECK(d.bytes < 32 * MiB);
	CHECK_EQ_INT(d.last, -1);
	CHECK_EQ_INT(d.status, EPIPE);

	void *poison = reclaim_freed(sb_addr);
	if (!call_within(close_reader, rd, 3000)) {
		printf("#   check failed: sandlot_file_reader_close() after sandlot_destroy() blocks: the "
		       "reader still uses the freed sandbox (rd->r.sb->conn.lock, files.c)\n");
		bail("a library call is stuck", __LINE__);
	}
	free(poison);
}

struct late_write {
	sandlot_file_writer_t *w;
	const void *data;
	size_t len;
	int rc;
	sandlot_error_t *e;
};

static void late_write_main(void *arg)
{
	struct late_write *lw = arg;
	lw->rc = sandlot_file_writer_write(lw->w, lw->data, lw->len, &lw->e);
	if (lw->rc == 0)
		lw->rc = sandlot_file_writer_commit(lw->w, &lw->e);
	else
		sandlot_file_writer_abort(lw->w);
}

/* Destroy with a writer open: later writes and the commit fail (EPIPE),
 * and the writer can still be released.  Same dangling-sandbox bug. */
static void test_destroy_open_writer(void)
{
	sandlot_t *sb = new_sandbox();
	uint8_t *data = random_bytes(256 * KiB);
	sandlot_file_writer_t *w = NULL;
	MUST((w = sandlot_file_open_write(sb, "w.bin", 0, 0, E)) ? 0 : -1);
	MUST(sandlot_file_writer_write(w, data, 256 * KiB, E));
	uintptr_t sb_addr = (uintptr_t)sb;
	sandlot_destroy(sb);
	void *poison = reclaim_freed(sb_addr);
	struct late_write lw = { w, data, 256 * KiB, 0, NULL };
	if (!call_within(late_write_main, &lw, 3000)) {
		printf("#   check failed: sandlot_file_writer_write() after sandlot_destroy() blocks: the "
		       "writer still uses the freed sandbox (w->r.sb->conn.lock, files.c)\n");
		bail("a library call is stuck", __LINE__);
	}
	CHECK_EQ_INT(lw.rc, -1);
	CHECK_EQ_INT(sandlot_error_status(lw.e), EPIPE);
	sandlot_error_free(lw.e);
	free(poison);
	free(data);
}

/* ---- usage and errors -------------------------------------------------------- */

static void test_usage(void)
{
	sandlot_t *sb = new_sandbox();
	sandlot_usage_t u;
	memset(&u, 0xff, sizeof(u)); /* every field is written */
	u.size = sizeof(u);
	MUST(sandlot_usage(sb, &u, E));
	printf("#   memory %llu peak %llu pids %u cpu %llu us\n", (unsigned long long)u.memory_bytes,
	       (unsigned long long)u.memory_peak_bytes, u.pids, (unsigned long long)u.cpu_usec);
	CHECK(u.memory_bytes > 0);
	CHECK(u.pids >= 1);
	CHECK(u.memory_peak_bytes == 0 || u.memory_peak_bytes >= u.memory_bytes / 2);
	CHECK_EQ_INT(u.oom_kills, 0);
	CHECK_EQ_INT(u.pids_limit_hits, 0);

	sh_ok(sb, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done");
	/* Settled (init and its spare): right after the create, init may
	 * still run a thread of its set-up. */
	uint32_t idle = idle_pids(sb);
	struct run r;
	run_init(&r);
	const char *argv[] = { "sh", "-c", "sleep 30 & echo ready; wait", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = argv };
	sandlot_proc_t *p = start(sb, &s, &r);
	CHECK(wait_output(&r, "ready", 5000));
	wait_pids_at_least(sb, idle + 2);
	MUST(sandlot_usage(sb, &u, NULL));
	CHECK(u.pids >= idle + 2);
	CHECK(u.cpu_usec > 0);
	CHECK(u.memory_bytes > 0);
	MUST(sandlot_proc_kill(p, SIGKILL, E));
	finish_proc(p, &r);
	run_fini(&r);
	sandlot_destroy(sb);
}

static void test_error_contract(void)
{
	CHECK_EQ_INT(sandlot_error_status(NULL), 0);
	CHECK(sandlot_error_message(NULL) != NULL);
	sandlot_error_free(NULL);

	sandlot_t *sb = new_sandbox();
	sandlot_error_t *e = NULL;
	sandlot_stat_t st;

	/* Success leaves *err alone. */
	CHECK_EQ_INT(sandlot_stat(sb, "/home/user", &st, &e), 0);
	CHECK(e == NULL);

	/* Failure: status + one-line message with the operation and path. */
	CHECK_EQ_INT(sandlot_stat(sb, "no/such/file", &st, &e), -1);
	REQUIRE(e != NULL);
	CHECK_EQ_INT(sandlot_error_status(e), ENOENT);
	const char *msg = sandlot_error_message(e);
	CHECK(strncmp(msg, "stat ", 5) == 0);
	CHECK(strstr(msg, "no/such/file") != NULL);
	CHECK(strchr(msg, '\n') == NULL);
	printf("#   message: %s\n", msg);
	sandlot_error_free(e);
	e = NULL;

	/* NULL err is tolerated everywhere. */
	CHECK_EQ_INT(sandlot_stat(sb, "no/such/file", &st, NULL), -1);
	CHECK(sandlot_file_open_read(sb, "no/such/file", NULL) == NULL);
	CHECK_EQ_INT(sandlot_remove(sb, "no/such/file", 0, NULL), -1);
	CHECK_EQ_INT(sandlot_mkdir(sb, "x/y/z", 0, 0, NULL), -1);
	sandlot_dirent_t *ents;
	size_t n;
	CHECK_EQ_INT(sandlot_list(sb, "no/such/dir", &ents, &n, NULL), -1);
	CHECK_EQ_INT(sandlot_file_read(sb, "no/such/file", mem_sink, NULL, NULL), -1);
	CHECK_EQ_INT(sandlot_file_read_fd(sb, "no/such/file", -1, NULL), -1);
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, "no/such/dir/f", 0, 0, NULL);
	if (w)
		CHECK_EQ_INT(sandlot_file_writer_commit(w, NULL), -1);
	const char *bad[] = { "", NULL };
	sandlot_exec_spec_t s = { .size = sizeof(s), .argv = bad };
	CHECK(sandlot_exec(sb, &s, NULL, NULL) == NULL);
	sandlot_usage_t u = { .size = sizeof(u) };
	CHECK_EQ_INT(sandlot_usage(sb, &u, NULL), 0);

	/* Argument errors. */
	char long_path[5000];
	memset(long_path, 'x', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = '\0';
	MUST_FAIL(sandlot_stat(sb, long_path, &st, E), ENAMETOOLONG, NULL);
	MUST_FAIL(sandlot_file_open_write(sb, NULL, 0, 0, E) ? 0 : -1, EINVAL, "empty path");
	sandlot_destroy(sb);
}

/* ---- the end ------------------------------------------------------------------- */

static void test_nothing_left(void)
{
	/* Inits of crashed cases get EOF and exit; give them a moment. */
	uint64_t t0 = now_ms();
	while (count_inits(main_pid, 1, 0) > 0 && now_ms() - t0 < 3000)
		sleep_ms(20);
	CHECK_EQ_INT(count_inits(main_pid, 1, 1), 0);
	CHECK_EQ_INT(count_inits(getpid(), 0, 1), 0);
	char storage[256];
	snprintf(storage, sizeof(storage), "%s/storage/mnt/ws", data_dir);
	CHECK_EQ_INT(count_dir_entries(storage), 0);
}

/* ---- harness ----------------------------------------------------------------- */

static void (*case_fn)(void);

/* Runs in the case's process: the case, then the per-case checks. */

/* ---- ports ------------------------------------------------------------------- */

/* A TCP listener on the host's 127.0.0.1, on an ephemeral port (*port). */
static int host_listener(unsigned *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 8) == 0);
	REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* Send `msg`, read until EOF; 1 if the answer is `want`. */
static int exchange(int fd, const char *msg, const char *want)
{
	if (write(fd, msg, strlen(msg)) != (ssize_t)strlen(msg))
		return 0;
	shutdown(fd, SHUT_WR);
	char buf[256];
	size_t got = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 5000) != 1)
			break;
		ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	if (strcmp(buf, want) != 0)
		printf("#   answer \"%s\", want \"%s\"\n", buf, want);
	return strcmp(buf, want) == 0;
}

/* A server inside the sandbox, started by the case: answers each
 * connection with "<tag>:" + what the client sent, then closes. */
static const char port_server_py[] =
	"import socket, sys\n"
	"fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
	"s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	"s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)\n"
	"print('ready', flush=True)\n"
	"while True:\n"
	"    c, _ = s.accept(); data = b''\n"
	"    while True:\n"
	"        d = c.recv(4096)\n"
	"        if not d: break\n"
	"        data += d\n"
	"    c.sendall(sys.argv[3].encode() + b':' + data); c.close()\n";

/* sandlot_port_connect() reaches a server inside the sandbox — not the
 * host's own loopback, where a listener of the test waits on the same port
 * number — whether it listens on 127.0.0.1, 0.0.0.0 or [::1] only; nothing
 * listening is ECONNREFUSED, a bad port EINVAL, an ended sandbox EPIPE. */
static void test_port_connect(void)
{
	sandlot_t *sb = new_sandbox();
	unsigned port;
	int host_fd = host_listener(&port);
	char pstr[16];
	snprintf(pstr, sizeof(pstr), "%u", port);

	MUST_FAIL(sandlot_port_connect(sb, port, 0, E), ECONNREFUSED, "nothing is listening on port");
	MUST_FAIL(sandlot_port_connect(sb, 0, 0, E), EINVAL, "invalid port 0");
	MUST_FAIL(sandlot_port_connect(sb, 65536, 0, E), EINVAL, "invalid port 65536");

	static const char *const binds[] = { "127.0.0.1", "0.0.0.0", "::1" };
	for (size_t i = 0; i < 3; i++) {
		char tag[16];
		snprintf(tag, sizeof(tag), "in%zu", i);
		const char *argv[] = { "python3", "-c", port_server_py, binds[i], pstr, tag, NULL };
		sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
		struct run r;
		run_init(&r);
		sandlot_proc_t *p = start(sb, &spec, &r);
		if (!wait_output(&r, "ready", 10000)) {
			show_buf("server stderr", &r.err);
			bail("the server inside did not start", __LINE__);
		}
		char want[32];
		snprintf(want, sizeof(want), "%s:hello", tag);
		int fd;
		MUST(fd = sandlot_port_connect(sb, port, 0, E));
		CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
		CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
		CHECK(exchange(fd, "hello", want));
		close(fd);

		/* A second connection: the server serves each in turn. */
		snprintf(want, sizeof(want), "%s:again", tag);
		MUST(fd = sandlot_port_connect(sb, port, 2000, E));
		CHECK(exchange(fd, "again", want));
		close(fd);
		MUST(sandlot_proc_kill(p, SIGKILL, E));
		finish_proc(p, &r);
		run_fini(&r);
	}
	/* The host's listener never saw a connection. */
	int fl = fcntl(host_fd, F_GETFL);
	fcntl(host_fd, F_SETFL, fl | O_NONBLOCK);
	int c = accept(host_fd, NULL, NULL);
	CHECK(c < 0 && errno == EAGAIN);
	if (c >= 0)
		close(c);
	close(host_fd);

	CHECK(kill(sandlot__init_pid(sb), SIGKILL) == 0);
	uint64_t t0 = now_ms();
	while (sandlot_alive(sb) && now_ms() - t0 < 5000)
		sleep_ms(5);
	MUST_FAIL(sandlot_port_connect(sb, port, 0, E), EPIPE, "ended");
	sandlot_destroy(sb);
}

static void case_main(void)
{
	case_fn();
	int left = count_inits(getpid(), 0, 1);
	if (left != 0) {
		printf("#   check failed: %d sandlot-init child(ren) not reaped by sandlot_destroy\n", left);
		tap_case_failed = 1;
	}
#ifdef HAVE_LSAN
	if (__lsan_do_recoverable_leak_check()) {
		printf("#   check failed: LeakSanitizer found leaks (stack on stderr)\n");
		tap_case_failed = 1;
	}
#endif
	fflush(stdout);
}

/* TEST_LIB_ONLY=substring runs only the matching cases (for debugging). */
static int selected(const char *name)
{
	const char *only = getenv("TEST_LIB_ONLY");
	return !only || !*only || strstr(name, only);
}

#define RUN(fn) (selected(#fn) ? (case_fn = (fn), tap_run(#fn, case_main)) : (void)0)

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void setup(void)
{
	main_pid = getpid();
	/* Inits of crashed cases come back to us, to be counted and reaped. */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

	snprintf(tmp_root, sizeof(tmp_root), "/tmp/sandlot-test-lib.XXXXXX");
	if (!mkdtemp(tmp_root)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(data_dir, sizeof(data_dir), "%s/data", tmp_root);
	setenv("SANDLOT_DATA_DIR", data_dir, 1);

	const char *init = getenv("SANDLOT_INIT");
	if (!init || !*init) {
		const char *fb = getenv("SANDLOT_TEST_INIT_FALLBACK");
		if (fb && access(fb, X_OK) == 0) {
			setenv("SANDLOT_INIT", fb, 1);
			init = fb;
		} else if (fb) {
			static char why[600];
			snprintf(why, sizeof(why),
				 "sanitizer build: it has no static sandlot-init and the normal build's "
				 "%s does not exist (run `make` first, or set SANDLOT_INIT)", fb);
			init_skip = why;
		} else {
			init_skip = "SANDLOT_INIT is not set: run this through `meson test` or point it at "
				    "build/src/init/sandlot-init";
		}
	}
	printf("# data dir %s, init %s\n", data_dir, init && *init ? init : "(none)");
	fflush(stdout);
}

static void teardown(void)
{
	/* Our leftovers only: children (direct or handed to us as subreaper)
	 * named sandlot-init. */
	for (int round = 0; round < 2; round++) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		while (d && (de = readdir(d))) {
			pid_t pid = (pid_t)atoi(de->d_name);
			if (pid <= 0)
				continue;
			char path[64], line[512];
			snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
			FILE *f = fopen(path, "re");
			if (!f)
				continue;
			size_t len = fread(line, 1, sizeof(line) - 1, f);
			fclose(f);
			line[len] = '\0';
			char *close_paren = strrchr(line, ')');
			char st;
			int pp;
			if (close_paren && sscanf(close_paren + 1, " %c %d", &st, &pp) == 2 && pp == main_pid &&
			    proc_comm_is(pid, "sandlot-init") && st != 'Z')
				kill(pid, SIGKILL);
		}
		if (d)
			closedir(d);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		sleep_ms(50);
	}
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	/* The storage pools stay mounted for the next sandbox: unmount them
	 * (their loop devices go with them) before removing the files. */
	const char *dirs[] = { data_dir, NULL, NULL };
	char fresh[300];
	snprintf(fresh, sizeof(fresh), "%s/data-concurrent", tmp_root);
	dirs[1] = fresh;
	for (int i = 0; dirs[i]; i++) {
		sandlot_options_t o;
		sandlot_options_init(&o);
		o.data_dir = dirs[i];
		sandlot_error_t *e = NULL;
		if (sandlot_storage_unmount(&o, &e) < 0) {
			printf("# unmount the storage pool of %s: %s\n", dirs[i], sandlot_error_message(e));
			sandlot_error_free(e);
		}
	}
	if (nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
		printf("# could not remove %s: %s\n", tmp_root, strerror(errno));
}

int main(void)
{
	setup();
#ifdef SANITIZED
	tap_timeout_s = 90;
#else
	tap_timeout_s = 45;
#endif
	RUN(test_options_defaults);
	RUN(test_options_validate);
	RUN(test_versioned_struct_sizes);
	RUN(test_versioned_struct_older_caller);
	RUN(test_output_structs);
	RUN(test_create_rejects);
	RUN(test_create_destroy);
	RUN(test_create_concurrent);
	RUN(test_alive_after_init_killed);
	RUN(test_stop_and_ended);
	RUN(test_ended_when_init_dies);
	RUN(test_remove_leftovers);
	RUN(test_port_connect);
	RUN(test_exec_basic);
	RUN(test_set_env);
	RUN(test_network_policy);
	RUN(test_exec_output_order);
	RUN(test_exec_signals_and_codes);
	RUN(test_exec_start_errors);
	RUN(test_exec_invalid_spec);
	RUN(test_exec_timeout);
	RUN(test_exec_stdin_roundtrip);
	RUN(test_exec_stdin_errors);
	RUN(test_exec_last);
	RUN(test_exec_kill);
	RUN(test_exec_pause_resume);
	RUN(test_exec_pause_holds_output);
	RUN(test_exec_kill_from_callback);
	RUN(test_exec_free_while_paused);
	RUN(test_exec_big_args);
	RUN(test_exec_concurrent);
	RUN(test_exec_limits);
	RUN(test_file_roundtrip_8m);
	RUN(test_file_reader_errors);
	RUN(test_file_reader_close_early);
	RUN(test_file_writer_missing_parent);
	RUN(test_file_writer_abort);
	RUN(test_file_enospc);
	RUN(test_file_enospc_tmpfs);
	RUN(test_file_callbacks);
	RUN(test_file_fd);
	RUN(test_fs_ops);
	RUN(test_init_config_refused);
	RUN(test_list_hostile_names);
	RUN(test_file_read_limit);
	RUN(test_file_read_hostile_sizes);
	RUN(test_changes_scan);
	RUN(test_changes_scan_bytes);
	RUN(test_changes_scan_hostile_flood);
	RUN(test_destroy_running_exec);
	RUN(test_destroy_open_reader);
	RUN(test_destroy_open_writer);
	RUN(test_usage);
	RUN(test_error_contract);
	RUN(test_nothing_left);
	teardown();
	return tap_done();
}
