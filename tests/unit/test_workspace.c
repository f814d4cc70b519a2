/* Kept workspaces (sandlot_options_t.workspace_image, sandlot_workspace_copy)
 * against real sandboxes.
 *
 * Needs root and a sandlot-init binary, like test_lib.c (meson passes
 * SANDLOT_INIT, or SANDLOT_TEST_INIT_FALLBACK in the sanitizer build); the
 * sandbox cases are skipped, saying why, where those are missing.
 *
 * What must hold: files written in one sandbox are there, byte for byte,
 * in a later sandbox given the same image — which runs under another host
 * uid range — and they belong to the sandbox user (uid 1000) there; the
 * image stores sandbox uids (checked on the image itself with debugfs);
 * one sandbox at a time; copies are independent; bad options are refused.
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
#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif

static char tmp_root[64];
static char data_dir[128];
static char ws_dir[128];
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
		tap_skip("the host has no loop devices: kept workspaces need ext4 storage");
}

static sandlot_t *create_on(const char *image, uint64_t disk)
{
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.workspace_image = image;
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
	sandlot_exec_spec_t spec = { .argv = argv, .timeout_ms = 60000 };
	struct out o = { .p = NULL };
	pthread_mutex_init(&o.mu, NULL);
	sandlot_exec_callbacks_t cb = { .on_output = on_output, .userdata = &o };
	sandlot_error_t *e = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, &e);
	REQUIRE(p);
	sandlot_exit_t ex;
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
	snprintf(path, sizeof(path), "/proc/%d/status", (int)sandlot_init_pid(sb));
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

static void test_survives_recreate(void)
{
	need_sandbox();
	char img[256];
	snprintf(img, sizeof(img), "%s/survive.img", ws_dir);
	CHECK(access(img, F_OK) < 0);

	sandlot_t *a = create_on(img, 64u << 20);
	CHECK(access(img, F_OK) == 0); /* created, and kept while in use */
	unsigned base_a = host_base(a);
	sh_ok(a, WRITE_TREE);
	char *before = sh(a, DIGEST);
	REQUIRE(before && strstr(before, "big.bin"));
	sandlot_destroy(a);

	struct stat st;
	CHECK(stat(img, &st) == 0 && st.st_size == (off_t)(64u << 20));
	/* Allocated far less than its size: the copy stayed sparse. */
	CHECK(st.st_blocks * 512 < (off_t)(32u << 20));

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

static void test_image_stores_sandbox_uids(void)
{
	need_sandbox();
	const char *debugfs = access("/usr/sbin/debugfs", X_OK) == 0 ? "/usr/sbin/debugfs"
			      : access("/sbin/debugfs", X_OK) == 0  ? "/sbin/debugfs"
								    : NULL;
	if (!debugfs)
		tap_skip("debugfs (e2fsprogs) is not installed: cannot read the image's owners");
	char img[256];
	snprintf(img, sizeof(img), "%s/owners.img", ws_dir);
	sandlot_t *sb = create_on(img, 32u << 20);
	sh_ok(sb, "echo x > /home/user/owned");
	sandlot_destroy(sb);
	/* On the image itself: the raw owner is 1000, not the host uid. */
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "%s -R 'stat /home/owned' %s 2>/dev/null | grep -o 'User: *[0-9]*'",
		 debugfs, img);
	FILE *f = popen(cmd, "r");
	REQUIRE(f);
	char line[128] = "";
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	pclose(f);
	line[strcspn(line, "\n")] = '\0';
	printf("#   debugfs: %s\n", line);
	unsigned uid = 0;
	CHECK(sscanf(line, "User: %u", &uid) == 1 && uid == 1000);
}

static void test_one_sandbox_at_a_time(void)
{
	need_sandbox();
	char img[256];
	snprintf(img, sizeof(img), "%s/busy.img", ws_dir);
	sandlot_t *a = create_on(img, 32u << 20);
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.workspace_image = img;
	sandlot_error_t *e = NULL;
	sandlot_t *b = sandlot_create(&o, &e);
	CHECK(b == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	printf("#   second user: %s\n", sandlot_error_message(e));
	sandlot_error_free(e);
	sandlot_destroy(b);
	/* Copying an image in use is refused as well. */
	char dst[256];
	snprintf(dst, sizeof(dst), "%s/busy-copy.img", ws_dir);
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_copy(img, dst, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EBUSY);
	sandlot_error_free(e);
	CHECK(access(dst, F_OK) < 0);
	sandlot_destroy(a);
	/* Free again the moment the first is destroyed. */
	b = create_on(img, 0);
	sandlot_destroy(b);
}

static void test_copy_is_independent(void)
{
	need_sandbox();
	char img[256], copy[256];
	snprintf(img, sizeof(img), "%s/orig.img", ws_dir);
	snprintf(copy, sizeof(copy), "%s/copy.img", ws_dir);
	sandlot_t *a = create_on(img, 32u << 20);
	sh_ok(a, "head -c 1000000 /dev/urandom > /home/user/r; sha256sum < /home/user/r > /tmp/sum");
	char *sum = sh(a, "sha256sum < /home/user/r");
	REQUIRE(sum);
	sandlot_destroy(a);

	sandlot_error_t *e = NULL;
	CHECK_EQ_INT(sandlot_workspace_copy(img, copy, &e), 0);
	sandlot_error_free(e);
	e = NULL;
	CHECK_EQ_INT(sandlot_workspace_copy(img, copy, &e), -1); /* exists */
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
	/* No temporary file is left next to them. */
	DIR *d = opendir(ws_dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		CHECK(strstr(de->d_name, ".tmp-") == NULL);
	if (d)
		closedir(d);
}

static void test_existing_image_size_wins(void)
{
	need_sandbox();
	char img[256];
	snprintf(img, sizeof(img), "%s/size.img", ws_dir);
	sandlot_t *a = create_on(img, 24u << 20);
	sandlot_destroy(a);
	sandlot_t *b = create_on(img, 1u << 30); /* ignored: the image is 24M */
	char *df = sh(b, "df -k /home/user | awk 'NR==2 {print $2}'");
	REQUIRE(df);
	long kb = atol(df);
	printf("#   /home/user size %ld KiB\n", kb);
	CHECK(kb > 16 * 1024 && kb <= 24 * 1024);
	/* Over the quota: a clean ENOSPC, not a kill by RLIMIT_FSIZE. */
	char *out = sh(b, "head -c 40000000 /dev/zero > /home/user/fill 2>/dev/null; echo rc=$?");
	CHECK(out && strcmp(out, "rc=0\n") != 0);
	free(out);
	free(df);
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
	o.workspace_image = "/x.img";
	o.storage = SANDLOT_STORAGE_TMPFS;
	CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	CHECK(e && strstr(sandlot_error_message(e), "tmpfs"));
	sandlot_error_free(e);
	e = NULL;
	o.storage = SANDLOT_STORAGE_DEFAULT;
	o.workspace_image = "";
	CHECK_EQ_INT(sandlot_options_validate(&o, &e), -1);
	CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
	sandlot_error_free(e);
	e = NULL;
	o.workspace_image = NULL;
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
	/* A file that is not an image: refused, and left as it is. */
	if (geteuid() == 0 && !init_skip && access("/dev/loop-control", F_OK) == 0) {
		char img[256];
		snprintf(img, sizeof(img), "%s/not-an-image", ws_dir);
		FILE *f = fopen(img, "we");
		REQUIRE(f);
		fputs("hello\n", f);
		fclose(f);
		o.id = NULL;
		o.workspace_image = img;
		sandlot_t *sb = sandlot_create(&o, &e);
		CHECK(sb == NULL);
		CHECK_EQ_INT(sandlot_error_status(e), EINVAL);
		printf("#   %s\n", sandlot_error_message(e));
		sandlot_error_free(e);
		sandlot_destroy(sb);
		struct stat st;
		CHECK(stat(img, &st) == 0 && st.st_size == 6);
	}
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
	RUN(test_image_stores_sandbox_uids);
	RUN(test_one_sandbox_at_a_time);
	RUN(test_copy_is_independent);
	RUN(test_existing_image_size_wins);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return tap_done();
}
