/* Kept workspaces (sandlot_options_t.workspace, sandlot_workspace_*) and
 * the storage pool against real sandboxes.
 *
 * Needs root and a sandlot-init binary, like test_lib.c (meson passes
 * SANDLOT_INIT, or SANDLOT_TEST_INIT_FALLBACK in the sanitizer build); the
 * sandbox cases are skipped, saying why, where those are missing.
 *
 * What must hold: files written in one sandbox are there, byte for byte,
 * in a later sandbox given the same workspace — which runs under another
 * host uid range — and they belong to the sandbox user (uid 1000) there;
 * the pool stores sandbox uids (checked on the pool itself); one sandbox
 * at a time; copies are independent; quotas are reserved and given back;
 * a size that cannot be reserved is refused; bad options are refused.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandlot.h"
#include "core/private.h" /* sandlot__init_pid */
#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif

static char tmp_root[64];
static char data_dir[128];
static char ws_dir[128];
static char kept_dir[160];
static const char *init_skip;

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
		tap_skip("the host has no loop devices: the storage pool needs one");
}

static sandlot_t *create_on(const char *image, uint64_t disk)
{
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.workspace = image;
	if (disk)
		o.disk_bytes = disk;
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(&o, &e);
	if (!sb) {
		printf("#   sandlot_create on %s: [%d] %s\n", image, sandlot_error_status(e),
		       sandlot_error_message(e));
		sandlot_error_free(e);
		bail("cannot create a sandbox", __LINE__);
	}
	return sb;
}

/* ---- running a command and keeping its stdout ---------------------------- */

struct out {
	pthread_mutex_t mu;
	char *p;
	size_t len;
};

static int on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct out *o = ud;
	if (stream != SANDLOT_STDOUT) {
		printf("#   stderr: %.*s\n", (int)len, (const char *)data);
		return 0;
	}
	pthread_mutex_lock(&o->mu);
	char *n = realloc(o->p, o->len + len + 1);
	if (n) {
		memcpy(n + o->len, data, len);
		o->p = n;
		o->len += len;
		o->p[o->len] = '\0';
	}
	pthread_mutex_unlock(&o->mu);
	return 0;
}

/* `sh -c script` as the sandbox user; its stdout (caller frees), NULL if it
 * failed. */
static char *sh(sandlot_t *sb, const char *script)
{
	const char *argv[] = { "sh", "-c", script, NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .timeout_ms = 60000 };
	struct out o = { .p = NULL };
	pthread_mutex_init(&o.mu, NULL);
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .userdata = &o };
	sandlot_error_t *e = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, &e);
	REQUIRE(p);
	sandlot_exit_t ex = { .size = sizeof(ex) };
	REQUIRE(sandlot_proc_wait(p, &ex, &e) == 0);
	sandlot_proc_free(p);
	pthread_mutex_destroy(&o.mu);
	if (ex.exit_code != 0) {
		printf("#   `%s` exited with %d (signal %d)\n", script, ex.exit_code, ex.signal);
		free(o.p);
		return NULL;
	}
	return o.p ? o.p : strdup("");
}

static void sh_ok(sandlot_t *sb, const char *script)
{
	char *out = sh(sb, script);
	REQUIRE(out);
	free(out);
}

/* Host uid of the sandbox's root (its init): the base of its uid range. */
static unsigned host_base(sandlot_t *sb)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)sandlot__init_pid(sb));
	FILE *f = fopen(path, "re");
	REQUIRE(f);
	unsigned uid = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %u", &uid) == 1)
			break;
	fclose(f);
	return uid;
}

/* ---- cases ------------------------------------------------------------------ */

/* The script writes a tree of files of every kind the workspace holds:
 * text, a 5 MiB random file, a subdirectory, a symlink, a file with
 * unusual permissions, and something in /tmp; the digest covers contents,
 * modes and owners as the sandbox sees them. */
#define WRITE_TREE                                                                        \
	"set -e; cd /home/user; echo hello > a.txt; mkdir -p d/e;"                        \
	" head -c 5242880 /dev/urandom > d/e/big.bin; ln -s a.txt link; "                 \
	" printf 'x' > d/mode600; chmod 600 d/mode600; echo tmpdata > /tmp/t.txt"
#define DIGEST                                                                            \
	"cd /home/user && find . /tmp/t.txt -path ./.cache -prune -o -print | LC_ALL=C sort |" \
	" while read -r f; do stat -c '%n %F %a %u:%g %s' \"$f\";"                          \
	" [ -f \"$f\" ] && [ ! -L \"$f\" ] && sha256sum < \"$f\"; done; true"

static uint64_t reserved_now(void)
{
	sandlot_storage_info_t si = { .size = sizeof(si) };
	sandlot_error_t *e = NULL;
	REQUIRE(sandlot_storage_info(NULL, &si, &e) == 0);
	return si.reserved_bytes;
}

static uint64_t size_of(const char *name)
{
	uint64_t bytes = 0;
	sandlot_error_t *e = NULL;
	if (sandlot_workspace_size(NULL, name, &bytes, &e) < 0) {
		sandlot_error_free(e);
		return 0;
	}
	return bytes;
}

static void test_survives_recreate(void)
{
	need_sandbox();
	const char *img = "survive";
	CHECK(size_of(img) == 0);

	sandlot_t *a = create_on(img, 64u << 20);
	CHECK(size_of(img) == 64u << 20); /* created, and kept while in use */
	unsigned base_a = host_base(a);
	sh_ok(a, WRITE_TREE);
	char *before = sh(a, DIGEST);
	REQUIRE(before && strstr(before, "big.bin"));
	sandlot_destroy(a);
	CHECK(size_of(img) == 64u << 20);
	CHECK(reserved_now() >= 64u << 20);

	/* Another uid range for the next one: hold the first range meanwhile
	 * so the new sandbox cannot draw it again. */
	sandlot_t *holder = NULL;
	sandlot_t *b = NULL;
	for (int tries = 0; tries < 4; tries++) {
		b = create_on(img, 0);
		if (host_base(b) != base_a)
			break;
		if (!holder) {
			holder = b; /* it took the old range: keep that busy */
			continue;
		}
		sandlot_destroy(b);
		b = NULL;
	}
	REQUIRE(b);
	printf("#   uid range of the first sandbox %u, of the second %u\n", base_a, host_base(b));
	CHECK(host_base(b) != base_a);
	char *after = sh(b, DIGEST);
	REQUIRE(after);
	CHECK_STR(after, before);
	if (strcmp(after, before) != 0)
		printf("#   before:\n%s\n#   after:\n%s\n", before, after);
	/* Owned by the sandbox user, as created. */
	char *owner = sh(b, "stat -c %u:%g /home/user/a.txt /home/user/d/e/big.bin /home/user");
	CHECK_STR(owner, "1000:1000\n1000:1000\n1000:1000\n");
	free(owner);
	/* Still writable by the user, in /home/user and /tmp. */
	sh_ok(b, "set -e; echo more >> /home/user/a.txt; echo again > /tmp/t2; rm /tmp/t.txt");
	free(before);
	free(after);
	sandlot_destroy(b);
	sandlot_destroy(holder);
}

static void test_pool_stores_sandbox_uids(void)
{
	need_sandbox();
	sandlot_t *sb = create_on("owners", 32u << 20);
	sh_ok(sb, "echo x > /home/user/owned; echo y > /tmp/owned-tmp");
	sandlot_destroy(sb);
	/* In the pool itself: the raw owner is 1000, not the host uid. */
	char path[300];
	struct stat st;
	snprintf(path, sizeof(path), "%s/owners/home/owned", kept_dir);
	CHECK(stat(path, &st) == 0 && st.st_uid == 1000 && st.st_gid == 1000);
	snprintf(path, sizeof(path), "%s/owners/tmp", kept_dir);
	CHECK(stat(path, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 01777);
}

static void test_one_sandbox_at_a_time(void)
{
	need_sandbox();
	const char *img = "busy";
	sandlot_t *a = create_on(img, 32u << 20);
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.workspace = img;
	sandlot_error_t *e = NULL;
	sandlot_t *b = sandlot_create(&o, &e);
	CHECK(b == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	printf("#   second user: %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	sandlot_destroy(b);
	/* Copying or removing a workspace in use is refused as well. */
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_copy(NULL, img, "busy-copy", &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	sandlot_error_free(e);
	CHECK(size_of("busy-copy") == 0);
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_remove(NULL, img, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	sandlot_error_free(e);
	sandlot_destroy(a);
	/* Free again the moment the first is destroyed. */
	b = create_on(img, 0);
	sandlot_destroy(b);
}

static void test_copy_is_independent(void)
{
	need_sandbox();
	const char *img = "orig", *copy = "copy";
	sandlot_t *a = create_on(img, 32u << 20);
	sh_ok(a, "head -c 1000000 /dev/urandom > /home/user/r; sha256sum < /home/user/r > /tmp/sum");
	char *sum = sh(a, "sha256sum < /home/user/r");
	REQUIRE(sum);
	sandlot_destroy(a);

	sandlot_error_t *e = NULL;
	uint64_t before = reserved_now();
	CHECK_EQ_INT(sandlot_workspace_copy(NULL, img, copy, &e), 0);
	sandlot_error_free(e);
	CHECK(size_of(copy) == 32u << 20);
	CHECK(reserved_now() == before + (32u << 20)); /* a copy is reserved too */
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_copy(NULL, img, copy, &e), -1); /* exists */
	CHECK_EQ_INT(sandlot_error_status(e), EEXIST);
	sandlot_error_free(e);

	sandlot_t *b = create_on(copy, 0);
	char *sum_b = sh(b, "sha256sum < /home/user/r");
	CHECK_STR(sum_b, sum);
	char *tmp_b = sh(b, "cat /tmp/sum");
	CHECK_STR(tmp_b, sum);
	sh_ok(b, "rm /home/user/r");
	sandlot_destroy(b);
	/* The original is untouched by what happened to the copy. */
	a = create_on(img, 0);
	char *sum_a = sh(a, "sha256sum < /home/user/r");
	CHECK_STR(sum_a, sum);
	sandlot_destroy(a);
	free(sum);
	free(sum_b);
	free(tmp_b);
	free(sum_a);
	/* No half-made workspace is left next to them. */
	DIR *d = opendir(kept_dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		CHECK(strncmp(de->d_name, ".new-", 5) != 0);
	if (d)
		closedir(d);
	/* Removed: gone from the list, and the reservation given back. */
	before = reserved_now();
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_remove(NULL, copy, &e), 0);
	CHECK(reserved_now() == before - (32u << 20));
	char **names = NULL;
	CHECK_EQ_INT(sandlot_workspace_list(NULL, &names, &e), 0);
	int has_orig = 0, has_copy = 0;
	for (size_t i = 0; names && names[i]; i++) {
		has_orig |= !strcmp(names[i], img);
		has_copy |= !strcmp(names[i], copy);
	}
	CHECK(has_orig && !has_copy);
	sandlot_strv_free(names);
	CHECK_EQ_INT(sandlot_workspace_remove(NULL, copy, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), ENOENT);
	sandlot_error_free(e);
}

/* An ephemeral workspace leaves nothing in the pool, reservation included. */
static void test_ephemeral_leaves_nothing(void)
{
	need_sandbox();
	sandlot_t *warm = create_on("warm", 16u << 20); /* makes the pool */
	sandlot_destroy(warm);
	uint64_t before = reserved_now();
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.disk_bytes = 48u << 20;
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(&o, &e);
	REQUIRE(sb);
	CHECK(reserved_now() == before + (48u << 20));
	sh_ok(sb, "head -c 3000000 /dev/urandom > /home/user/f");
	sandlot_destroy(sb);
	CHECK(reserved_now() == before);
	char ws[200];
	snprintf(ws, sizeof(ws), "%s/data/storage/mnt/ws", tmp_root);
	DIR *d = opendir(ws);
	REQUIRE(d);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	CHECK_EQ_INT(n, 0);
}

/* A disk bigger than the data filesystem can give: ENOSPC naming it,
 * nothing reserved, nothing made. */
static void test_admission(void)
{
	need_sandbox();
	uint64_t before = reserved_now();
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.disk_bytes = 8ull << 40;
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(&o, &e);
	CHECK(sb == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), ENOSPC);
	printf("#   %s\n", sandlot_error_message(e));
	CHECK(e && strstr(sandlot_error_message(e), "cannot reserve 8.0T"));
	sandlot_error_free(e);
	sandlot_destroy(sb);
	CHECK(reserved_now() == before);
	/* The same through a kept workspace and a copy. */
	o.workspace = "huge";
	e = NULL;
	sb = sandlot_create(&o, &e);
	CHECK(sb == NULL && sandlot_error_status(e) == ENOSPC);
	sandlot_error_free(e);
	CHECK(size_of("huge") == 0);
	CHECK(reserved_now() == before);
}

static void test_existing_workspace_quota_wins(void)
{
	need_sandbox();
	const char *img = "size";
	sandlot_t *a = create_on(img, 24u << 20);
	sandlot_destroy(a);
	sandlot_t *b = create_on(img, 1u << 30); /* ignored: the workspace is 24M */
	CHECK(size_of(img) == 24u << 20);
	/* Over the quota: a clean write error (EDQUOT), not a kill by
	 * RLIMIT_FSIZE; under it, fine. */
	char *out = sh(b, "head -c 40000000 /dev/zero 2>&1 >/home/user/fill; echo rc=$?");
	CHECK(out && strstr(out, "quota exceeded") && strstr(out, "rc=1"));
	/* Each line a TAP comment (the output has two). */
	for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		printf("#   %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
	}
	free(out);
	out = sh(b, "rm /home/user/fill; head -c 20000000 /dev/zero > /home/user/fill; echo rc=$?");
	CHECK_STR(out, "rc=0\n");
	free(out);
	sandlot_destroy(b);
}

static void test_given_id(void)
{
	need_sandbox();
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.id = "sb-abcdefghijklmnopqrstuvwxyz";
	sandlot_error_t *e = NULL;
	sandlot_t *sb = sandlot_create(&o, &e);
	REQUIRE(sb);
	CHECK_STR(sandlot_id(sb), "sb-abcdefghijklmnopqrstuvwxyz");
	sandlot_destroy(sb);
}

static void test_bad_options(void)
{
	sandlot_options_t o;
	sandlot_options_init(&o);
	sandlot_error_t *e = NULL;
	o.workspace = "x";
	o.storage = SANDLOT_STORAGE_TMPFS;
	CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	CHECK(e && strstr(sandlot_error_message(e), "tmpfs"));
	sandlot_error_free(e);
	e = NULL;
	o.storage = SANDLOT_STORAGE_DEFAULT;
	static const char *const bad_names[] = { "", "../x", "a/b", ".hidden", "UPPER",
						 "x" "0123456789012345678901234567890123456789"
						 "0123456789012345678901234567890123456789" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		o.workspace = bad_names[i];
		CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
		CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
		sandlot_error_free(e);
		e = NULL;
	}
	o.workspace = NULL;
	o.disk_overcommit = 0.5;
	CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
	CHECK(e && strstr(sandlot_error_message(e), "overcommit"));
	sandlot_error_free(e);
	e = NULL;
	o.disk_overcommit = 0;
	static const char *const bad_ids[] = { "sb-short", "xx-abcdefghijklmnopqrstuvwxyz",
					       "sb-ABCDEFGHIJKLMNOPQRSTUVWXYZ", "sb-abcdefghijklmnopqrstuvwxy1",
					       "sb-../../../../etc/passwd.xxxxxx" };
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		o.id = bad_ids[i];
		CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
		CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
		sandlot_error_free(e);
		e = NULL;
	}
	/* A file that is not an image of the former layout: refused, and
	 * left as it is. */
	if (geteuid() == 0 && !init_skip && access("/dev/loop-control", F_OK) == 0) {
		char img[256];
		snprintf(img, sizeof(img), "%s/not-an-image", ws_dir);
		FILE *f = fopen(img, "we");
		REQUIRE(f);
		fputs("hello\n", f);
		fclose(f);
		CHECK_EQ_INT(sandlot_workspace_import(NULL, "imported", img, &e), -1);
		CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
		printf("#   %s\n", sandlot_error_message(e));
		sandlot_error_free(e);
		struct stat st;
		CHECK(stat(img, &st) == 0 && st.st_size == 6);
	}
}

/* sandlot_pause() and sandlot_resume(): the ns backend keeps the files
 * (also those of a process still writing when the pause came), ends every
 * process, and refuses what it cannot do with the sandbox left running;
 * a resume never makes a fresh workspace. */
static void test_pause_resume(void)
{
	need_sandbox();
	const char *img = "paused";
	sandlot_t *sb = create_on(img, 32u << 20);
	sh_ok(sb, "echo kept > /home/user/f; echo tmp > /tmp/t");
	/* A writer that is still running when the pause comes. */
	const char *bg[] = { "sh", "-c", "echo last > /home/user/g; exec sleep 1000", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = bg };
	sandlot_error_t *e = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, &spec, NULL, &e);
	REQUIRE(p);
	char *seen = NULL;
	for (int i = 0; i < 200 && !(seen && strcmp(seen, "last\n") == 0); i++) {
		free(seen);
		seen = sh(sb, "cat /home/user/g 2>/dev/null; true");
	}
	CHECK_STR(seen, "last\n");
	free(seen);

	/* Refused, and it runs on: the running state (ENOTSUP for ns), flags
	 * this library does not know (EINVAL). */
	CHECK_EQ_INT(sandlot_pause(sb, SANDLOT_PAUSE_MEMORY, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), ENOTSUP);
	printf("#   memory: %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	CHECK_EQ_INT(sandlot_pause(sb, 0x80, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	sandlot_error_free(e);
	e = NULL;
	CHECK(sandlot_alive(sb));
	sh_ok(sb, "test -f /home/user/f");

	pid_t init = sandlot__init_pid(sb);
	CHECK_EQ_INT(sandlot_pause(sb, 0, &e), 0);
	if (e)
		printf("#   pause: %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	/* Ended: no command runs, the background one was killed, and init
	 * has exited (release reaps it). */
	CHECK(!sandlot_alive(sb));
	sandlot_exit_t ex = { .size = sizeof(ex) };
	CHECK_EQ_INT(sandlot_proc_wait(p, &ex, &e), 0);
	sandlot_error_free(e);
	e = NULL;
	CHECK(ex.signal != 0 || ex.exit_code != 0);
	sandlot_proc_free(p);
	char path[64], st[512] = "";
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)init);
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(st, sizeof(st), f))
			st[0] = '\0';
		fclose(f);
	}
	char *rp = strrchr(st, ')');
	CHECK(rp && rp[1] == ' ' && rp[2] == 'Z');
	/* Pausing again: it has ended. */
	CHECK_EQ_INT(sandlot_pause(sb, 0, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EPIPE);
	sandlot_error_free(e);
	e = NULL;
	sandlot_destroy(sb);
	CHECK(size_of(img) == 32u << 20);

	/* A snapshot of the paused sandbox, then the resume: both have the
	 * files, /tmp included. */
	CHECK_EQ_INT(sandlot_workspace_copy(NULL, img, "paused-snap", &e), 0);
	sandlot_error_free(e);
	e = NULL;
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.workspace = img;
	sandlot_t *r = sandlot_resume(&o, &e);
	if (!r)
		printf("#   resume: %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	REQUIRE(r);
	char *files = sh(r, "cat /home/user/f /home/user/g /tmp/t");
	CHECK_STR(files, "kept\nlast\ntmp\n");
	free(files);
	/* In use: a second resume is refused. */
	CHECK(sandlot_resume(&o, &e) == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	sandlot_error_free(e);
	e = NULL;
	sandlot_destroy(r);
	o.workspace = "paused-snap";
	r = sandlot_resume(&o, &e);
	REQUIRE(r);
	files = sh(r, "cat /home/user/f /home/user/g");
	CHECK_STR(files, "kept\nlast\n");
	free(files);
	sandlot_destroy(r);
	CHECK_EQ_INT(sandlot_workspace_remove(NULL, "paused-snap", &e), 0);
	CHECK_EQ_INT(sandlot_workspace_remove(NULL, img, &e), 0);

	/* Nothing to resume: ENOENT, and no workspace made. */
	o.workspace = "never-made";
	CHECK(sandlot_resume(&o, &e) == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), ENOENT);
	printf("#   %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	CHECK(size_of("never-made") == 0);
	o.workspace = NULL;
	CHECK(sandlot_resume(&o, &e) == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	sandlot_error_free(e);
	e = NULL;
	/* Each backend resumes only what it kept: the vm backend has no
	 * workspace of that name (an ns one), and says so before anything
	 * starts. */
	o.workspace = img;
	o.isolation = SANDLOT_ISOLATION_VM;
	CHECK(sandlot_resume(&o, &e) == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), ENOENT);
	CHECK(strstr(sandlot_error_message(e), "vm backend") != NULL);
	printf("#   %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	e = NULL;
	CHECK(size_of(img) == 0);
	o.isolation = SANDLOT_ISOLATION_NS;
	o.workspace = NULL;

	/* Without a kept workspace there is nothing to resume: refused, and
	 * it runs on. */
	sandlot_t *eph = sandlot_create(NULL, &e);
	REQUIRE(eph);
	CHECK_EQ_INT(sandlot_pause(eph, 0, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	printf("#   %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	CHECK(sandlot_alive(eph));
	sh_ok(eph, "true");
	sandlot_destroy(eph);
}

/* ---- harness ----------------------------------------------------------------- */

static void (*case_fn)(void);

/* The case, then (ASan builds) a leak check: tap.h ends cases with _exit,
 * which skips LeakSanitizer's own. */
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
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int main(void)
{
	tap_timeout_s = 120;
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	snprintf(tmp_root, sizeof(tmp_root), "/var/tmp/sandlot-test-ws.XXXXXX");
	if (!mkdtemp(tmp_root)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(data_dir, sizeof(data_dir), "%s/data", tmp_root);
	snprintf(ws_dir, sizeof(ws_dir), "%s/ws", tmp_root);
	snprintf(kept_dir, sizeof(kept_dir), "%s/storage/mnt/kept", data_dir);
	mkdir(ws_dir, 0700);
	setenv("SANDLOT_DATA_DIR", data_dir, 1);
	const char *init = getenv("SANDLOT_INIT");
	if (!init || !*init) {
		const char *fb = getenv("SANDLOT_TEST_INIT_FALLBACK");
		if (fb && access(fb, X_OK) == 0)
			setenv("SANDLOT_INIT", fb, 1);
		else
			init_skip = "no sandlot-init: run through `meson test`, or set SANDLOT_INIT";
	}
	RUN(test_bad_options);
	RUN(test_given_id);
	RUN(test_survives_recreate);
	RUN(test_pool_stores_sandbox_uids);
	RUN(test_one_sandbox_at_a_time);
	RUN(test_copy_is_independent);
	RUN(test_pause_resume);
	RUN(test_existing_workspace_quota_wins);
	RUN(test_ephemeral_leaves_nothing);
	RUN(test_admission);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	/* The pool stays mounted for the next sandbox: unmount it (its loop
	 * device goes with it) before removing the data directory. */
	sandlot_error_t *e = NULL;
	if (sandlot_storage_unmount(NULL, &e) < 0) {
		printf("# unmount the storage pool: %s\n", sandlot_error_message(e));
		sandlot_error_free(e);
	}
	nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return tap_done();
}
