/* src/linux/cgroup*.c against the real kernel.  Needs root.
 *
 * The v1 cases run wherever /sys/fs/cgroup/memory is a cgroup v1 mount
 * (hybrid hosts such as our test machine); the v2 cases run against
 * /sys/fs/cgroup when it is cgroup2, else against /sys/fs/cgroup/unified.
 * On a hybrid host that cgroup2 mount has no memory/pids/cpu controllers, so
 * the v2 limit cases check that creation fails naming the missing controller
 * and skip (saying so) the enforcement cases that need them.
 *
 * Every cgroup is named "sltest<pid of main>-..." so parallel runs do not
 * collide, and the last case fails if any of them is left over (and removes
 * it).  Each case runs in its own process (tap.h); the mode is chosen once
 * per process, so each case sets SANDLOT_CGROUP* before its first call.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

#include "common/error.h"
#include "common/util.h"
#include "linux/cgroup.h"
#include "tap.h"

#define MiB ((uint64_t)1 << 20)

static pid_t main_pid;

/* ---- environment ------------------------------------------------------------ */

static int is_fs(const char *path, long magic)
{
	struct statfs s;
	return statfs(path, &s) == 0 && (long)s.f_type == magic;
}

static void need_root(void)
{
	if (geteuid() != 0)
		tap_skip("needs root to create cgroups");
}

static void use_v1(void)
{
	need_root();
	if (!is_fs("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC))
		tap_skip("host has no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
	setenv("SANDLOT_CGROUP", "v1", 1);
	CHECK_STR(sandlot__cgroup_mode(), "v1");
}

static const char *v2_root(void)
{
	if (is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC))
		return "/sys/fs/cgroup";
	if (is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC))
		return "/sys/fs/cgroup/unified";
	return NULL;
}

static void use_v2(void)
{
	need_root();
	const char *root = v2_root();
	if (!root)
		tap_skip("host has no cgroup2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified");
	setenv("SANDLOT_CGROUP", "v2", 1);
	setenv("SANDLOT_CGROUP_V2_ROOT", root, 1);
	CHECK_STR(sandlot__cgroup_mode(), "v2");
}

/* The first of memory/pids/cpu the v2 root does not offer, or NULL. */
static const char *v2_missing_controller(void)
{
	static const char *const want[] = { "memory", "pids", "cpu" };
	char path[PATH_MAX], buf[512] = "";
	snprintf(path, sizeof(path), "%s/cgroup.controllers", v2_root());
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	for (size_t i = 0; i < 3; i++) {
		char *p = buf;
		size_t l = strlen(want[i]);
		int found = 0;
		while ((p = strstr(p, want[i]))) {
			if ((p == buf || p[-1] == ' ') && (p[l] == ' ' || p[l] == '\n' || !p[l]))
				found = 1;
			p += l;
		}
		if (!found)
			return want[i];
	}
	return NULL;
}

/* Skip a v2 enforcement case on hosts whose cgroup2 lacks the controllers. */
static void need_v2_controllers(void)
{
	const char *miss = v2_missing_controller();
	if (miss) {
		static char why[256];
		snprintf(why, sizeof(why),
			 "cgroup2 at %s offers no \"%s\" controller (hybrid host: it is on v1), "
			 "so v2 limits cannot be enforced here; covered by the v1 cases",
			 v2_root(), miss);
		tap_skip(why);
	}
}

static const char *name_for(const char *label)
{
	static char buf[128];
	snprintf(buf, sizeof(buf), "sltest%d-%s", (int)main_pid, label);
	return buf;
}

/* ---- files ------------------------------------------------------------------ */

static char *read_trim(const char *dir, const char *file)
{
	static char buf[4096];
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return NULL;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return buf;
}

static int file_exists(const char *dir, const char *file)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return access(path, F_OK) == 0;
}

static int dir_gone(const char *dir)
{
	struct stat st;
	return stat(dir, &st) < 0 && errno == ENOENT;
}

static int procs_has(const char *dir, pid_t pid)
{
	char *s = read_trim(dir, "cgroup.procs");
	if (!s)
		return 0;
	for (char *p = s; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v == pid)
			return 1;
		p = end;
		while (*p == '\n')
			p++;
	}
	return 0;
}

static int procs_empty(const char *dir)
{
	char *s = read_trim(dir, "cgroup.procs");
	return s && !*s;
}

/* Every directory the handle uses, copied (so they can be checked after
 * destroy).  Returns the count. */
static const char *const v1_ctrls[] = { "memory", "pids", "cpu", "cpuacct", "freezer" };

static int all_paths(sandlot_cgroup_t *cg, char paths[8][PATH_MAX])
{
	int n = 0;
	if (strcmp(sandlot__cgroup_mode(), "v2") == 0) {
		snprintf(paths[n++], PATH_MAX, "%s", sandlot__cgroup_path(cg, ""));
		return n;
	}
	for (size_t i = 0; i < 5; i++) {
		const char *p = sandlot__cgroup_path(cg, v1_ctrls[i]);
		if (p)
			snprintf(paths[n++], PATH_MAX, "%s", p);
	}
	return n;
}

/* ---- children ----------------------------------------------------------------- */

/* A child that waits on a pipe before running fn (so the test can move it
 * into the cgroup first) and reports through another pipe.  It dies with
 * the test case. */
struct kid {
	pid_t pid;
	int go;    /* write a byte to start it */
	int from;  /* what it reports */
};

static void spawn(struct kid *k, void (*fn)(int report_fd))
{
	int go[2], rep[2];
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		abort();
	fflush(stdout);
	k->pid = fork();
	if (k->pid < 0)
		abort();
	if (k->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(go[1]);
		close(rep[0]);
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(100);
		fn(rep[1]);
		_exit(0);
	}
	close(go[0]);
	close(rep[1]);
	k->go = go[1];
	k->from = rep[0];
}

static void start(struct kid *k)
{
	CHECK(write(k->go, "g", 1) == 1);
}

/* Read a number the child reported ("%d\n" text), -1 at EOF. */
static long report(struct kid *k)
{
	char buf[32];
	size_t n = 0;
	while (n < sizeof(buf) - 1) {
		ssize_t r = read(k->from, buf + n, 1);
		if (r <= 0)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

static void say(int fd, long v)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", v);
	if (write(fd, buf, (size_t)n) != n)
		_exit(101);
}

static void kid_sleep(int fd)
{
	say(fd, getpid());
	for (;;)
		pause();
}

static volatile char sink;

static void kid_work(int fd)
{
	/* Touch 16 MiB and burn some CPU, then report and wait. */
	size_t len = 16 * MiB;
	volatile char *p = malloc(len); /* volatile: the stores must happen */
	if (!p)
		_exit(102);
	for (size_t i = 0; i < len; i += 4096)
		p[i] = 1;
	uint64_t x = 0;
	for (uint64_t i = 0; i < 50000000u; i++)
		x += i ^ (x >> 3);
	sink = (char)x;
	say(fd, 1);
	for (;;)
		pause();
}

static void kid_hog(int fd)
{
	/* Allocate and touch 200 MiB, 1 MiB at a time. */
	for (int i = 0; i < 200; i++) {
		char *p = malloc(MiB);
		if (!p)
			_exit(103);
		memset(p, 1, MiB);
		sink = p[i];
	}
	say(fd, 0);
	_exit(0);
}

static void kid_forker(int fd)
{
	/* Fork 20 sleepers; report how many forks were refused with EAGAIN. */
	int refused = 0, other = 0;
	for (int i = 0; i < 20; i++) {
		pid_t p = fork();
		if (p == 0) {
			for (;;)
				pause();
		}
		if (p < 0) {
			if (errno == EAGAIN)
				refused++;
			else
				other++;
		}
	}
	say(fd, refused);
	say(fd, other);
	for (;;)
		pause();
}

static void kid_escaper(int fd)
{
	/* setsid + double fork: the grandchild is in no process group or session
	 * of ours and its parent is gone.  It reports its pid and sleeps. */
	setsid();
	pid_t mid = fork();
	if (mid == 0) {
		setsid();
		pid_t g = fork();
		if (g == 0) {
			signal(SIGTERM, SIG_IGN);
			signal(SIGHUP, SIG_IGN);
			say(fd, getpid());
			for (;;)
				pause();
		}
		_exit(0);
	}
	waitpid(mid, NULL, 0);
	say(fd, getpid());
	for (;;)
		pause();
}

static void kid_forkstorm(int fd)
{
	/* Keep forking children that keep forking, until killed. */
	say(fd, getpid());
	for (;;) {
		pid_t p = fork();
		if (p == 0)
			continue;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
}

/* Reap every child (killed ones are zombies by now). */
static void reap_all(void)
{
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
}

static int wait_signal(pid_t pid)
{
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

/* ---- scenarios shared by v1 and v2 ------------------------------------------- */

static sandlot_cgroup_t *must_create(const char *label, const struct sandlot_cgroup_limits *lim)
{
	sandlot_error_t *err = NULL;
	sandlot_cgroup_t *cg = sandlot__cgroup_create(name_for(label), lim, &err);
	if (!cg) {
		printf("#   create %s: %s\n", name_for(label), sandlot_error_message(err));
		sandlot_error_free(err);
		CHECK(cg != NULL);
		fflush(stdout);
		_exit(1);
	}
	return cg;
}

static void add(sandlot_cgroup_t *cg, pid_t pid)
{
	sandlot_error_t *err = NULL;
	int r = sandlot__cgroup_add_pid(cg, pid, &err);
	if (r < 0)
		printf("#   add_pid: %s\n", sandlot_error_message(err));
	CHECK_EQ_INT(r, 0);
	sandlot_error_free(err);
}

static void usage(sandlot_cgroup_t *cg, sandlot_usage_t *u)
{
	sandlot_error_t *err = NULL;
	int r = sandlot__cgroup_usage(cg, u, &err);
	if (r < 0)
		printf("#   usage: %s\n", sandlot_error_message(err));
	CHECK_EQ_INT(r, 0);
	sandlot_error_free(err);
	printf("#   usage: mem=%llu peak=%llu pids=%u cpu_usec=%llu oom=%llu pidhits=%llu\n",
	       (unsigned long long)u->memory_bytes, (unsigned long long)u->memory_peak_bytes,
	       u->pids, (unsigned long long)u->cpu_usec, (unsigned long long)u->oom_kills,
	       (unsigned long long)u->pids_limit_hits);
}

static void cgkill(sandlot_cgroup_t *cg)
{
	sandlot_error_t *err = NULL;
	int r = sandlot__cgroup_kill(cg, &err);
	if (r < 0)
		printf("#   kill: %s\n", sandlot_error_message(err));
	CHECK_EQ_INT(r, 0);
	sandlot_error_free(err);
}

/* Destroy and check every directory is gone. */
static void destroy_checked(sandlot_cgroup_t *cg)
{
	char paths[8][PATH_MAX];
	int n = all_paths(cg, paths);
	CHECK(n > 0);
	sandlot__cgroup_destroy(cg);
	for (int i = 0; i < n; i++) {
		if (!dir_gone(paths[i]))
			printf("#   still there after destroy: %s\n", paths[i]);
		CHECK(dir_gone(paths[i]));
	}
}

static void check_limit_files(sandlot_cgroup_t *cg)
{
	if (strcmp(sandlot__cgroup_mode(), "v1") == 0) {
		const char *mem = sandlot__cgroup_path(cg, "memory");
		CHECK_STR(read_trim(mem, "memory.limit_in_bytes"), "67108864");
		if (file_exists(mem, "memory.memsw.limit_in_bytes"))
			CHECK_STR(read_trim(mem, "memory.memsw.limit_in_bytes"), "67108864");
		else
			printf("#   no memory.memsw.limit_in_bytes (no swap accounting)\n");
		CHECK_STR(read_trim(mem, "memory.swappiness"), "0");
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, "pids"), "pids.max"), "16");
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, "cpu"), "cpu.cfs_period_us"), "100000");
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, "cpu"), "cpu.cfs_quota_us"), "150000");
		CHECK(sandlot__cgroup_path(cg, "cpuacct") != NULL);
		CHECK(sandlot__cgroup_path(cg, "freezer") != NULL);
		CHECK(sandlot__cgroup_path(cg, "bogus") == NULL);
		CHECK_STR(sandlot__cgroup_path(cg, ""), mem);
	} else {
		const char *d = sandlot__cgroup_path(cg, "");
		CHECK_STR(read_trim(d, "memory.max"), "67108864");
		if (file_exists(d, "memory.swap.max"))
			CHECK_STR(read_trim(d, "memory.swap.max"), "0");
		CHECK_STR(read_trim(d, "pids.max"), "16");
		CHECK_STR(read_trim(d, "cpu.max"), "150000 100000");
	}
}

static void scenario_limits(void)
{
	struct sandlot_cgroup_limits lim = { 64 * MiB, 1500, 16 };
	sandlot_cgroup_t *cg = must_create("limits", &lim);
	char expect[PATH_MAX];
	snprintf(expect, sizeof(expect), "/sandlot/%s", name_for("limits"));
	const char *p = sandlot__cgroup_path(cg, "");
	CHECK(p && strlen(p) > strlen(expect) && strcmp(p + strlen(p) - strlen(expect), expect) == 0);
	check_limit_files(cg);
	destroy_checked(cg);

	/* Below 0.01 CPU the period grows so the quota stays >= 1 ms. */
	struct sandlot_cgroup_limits tiny = { 0, 5, 0 };
	cg = must_create("tinycpu", &tiny);
	if (strcmp(sandlot__cgroup_mode(), "v1") == 0) {
		const char *cpu = sandlot__cgroup_path(cg, "cpu");
		CHECK_STR(read_trim(cpu, "cpu.cfs_period_us"), "1000000");
		CHECK_STR(read_trim(cpu, "cpu.cfs_quota_us"), "5000");
	} else {
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, ""), "cpu.max"), "5000 1000000");
	}
	destroy_checked(cg);
}

static void scenario_add_and_usage(int expect_accounting)
{
	sandlot_cgroup_t *cg = must_create("usage", NULL);
	struct kid k;
	spawn(&k, kid_work);
	add(cg, k.pid);
	char paths[8][PATH_MAX];
	int n = all_paths(cg, paths);
	for (int i = 0; i < n; i++) {
		if (!procs_has(paths[i], k.pid))
			printf("#   pid %d not in %s/cgroup.procs\n", (int)k.pid, paths[i]);
		CHECK(procs_has(paths[i], k.pid));
	}
	start(&k);
	CHECK_EQ_INT(report(&k), 1);
	sandlot_usage_t u;
	memset(&u, 0xff, sizeof(u));
	usage(cg, &u);
	CHECK(u.pids >= 1 && u.pids < 100);
	CHECK_EQ_INT(u.oom_kills, 0);
	CHECK_EQ_INT(u.pids_limit_hits, 0);
	CHECK(u.cpu_usec > 1000); /* at least 1 ms: cpu.stat works on every v2 cgroup */
	if (expect_accounting) {
		CHECK(u.memory_bytes >= 8 * MiB);
		CHECK(u.memory_peak_bytes >= u.memory_bytes);
	}
	/* Bad pid. */
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__cgroup_add_pid(cg, 0, &err), -1);
	CHECK_EQ_INT(sandlot_error_status(err), EINVAL);
	sandlot_error_free(err);
	err = NULL;
	/* A pid that does not exist: the kernel's ESRCH comes back. */
	CHECK_EQ_INT(sandlot__cgroup_add_pid(cg, 0x3ffffff, &err), -1);
	CHECK_EQ_INT(sandlot_error_status(err), ESRCH);
	CHECK(err && strstr(sandlot_error_message(err), "add pid 67108863 to "));
	sandlot_error_free(err);

	destroy_checked(cg); /* kills the child */
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
}

static void scenario_oom(void)
{
	struct sandlot_cgroup_limits lim = { 64 * MiB, 0, 0 };
	sandlot_cgroup_t *cg = must_create("oom", &lim);
	struct kid k;
	spawn(&k, kid_hog);
	add(cg, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), -1); /* killed before it could say it survived */
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
	sandlot_usage_t u;
	usage(cg, &u);
	CHECK(u.oom_kills >= 1);
	CHECK(u.memory_peak_bytes == 0 || u.memory_peak_bytes <= 64 * MiB);
	CHECK(u.memory_peak_bytes == 0 || u.memory_peak_bytes >= 32 * MiB);
	destroy_checked(cg);
}

static void scenario_pids(void)
{
	struct sandlot_cgroup_limits lim = { 0, 0, 8 };
	sandlot_cgroup_t *cg = must_create("pids", &lim);
	struct kid k;
	spawn(&k, kid_forker);
	add(cg, k.pid);
	start(&k);
	long refused = report(&k), other = report(&k);
	printf("#   forks refused with EAGAIN: %ld, other errors: %ld\n", refused, other);
	CHECK_EQ_INT(refused, 20 - 7); /* 8 tasks: the forker and 7 children */
	CHECK_EQ_INT(other, 0);
	sandlot_usage_t u;
	usage(cg, &u);
	CHECK(u.pids_limit_hits >= 1);
	CHECK_EQ_INT(u.pids, 8);
	cgkill(cg);
	CHECK(procs_empty(sandlot__cgroup_path(cg, "pids")));
	destroy_checked(cg);
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
}

static void scenario_kill(void)
{
	/* Orphans are re-parented to us, so we can reap them and then be sure
	 * kill(pid, 0) == ESRCH means gone (a zombie would still answer). */
	CHECK_EQ_INT(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	sandlot_cgroup_t *cg = must_create("kill", NULL);
	struct kid k;
	spawn(&k, kid_escaper);
	add(cg, k.pid);
	start(&k);
	/* Both the child and the grandchild report their pid, in either order. */
	long a = report(&k), b = report(&k);
	CHECK(a == k.pid || b == k.pid);
	long grandchild = a == k.pid ? b : a;
	CHECK(grandchild > 1);
	CHECK_EQ_INT(kill((pid_t)grandchild, 0), 0);
	CHECK(procs_has(sandlot__cgroup_path(cg, ""), (pid_t)grandchild));

	cgkill(cg);
	char paths[8][PATH_MAX];
	int n = all_paths(cg, paths);
	for (int i = 0; i < n; i++)
		CHECK(procs_empty(paths[i]));
	reap_all();
	errno = 0;
	CHECK(kill(k.pid, 0) == -1 && errno == ESRCH);
	errno = 0;
	CHECK(kill((pid_t)grandchild, 0) == -1 && errno == ESRCH);

	/* Killing an empty cgroup is fine. */
	cgkill(cg);

	/* The cgroup stays usable after a kill: in v1 it must be thawed again,
	 * or the next process added would freeze (and this case time out). */
	if (strcmp(sandlot__cgroup_mode(), "v1") == 0)
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, "freezer"), "freezer.state"), "THAWED");
	struct kid k2;
	spawn(&k2, kid_sleep);
	add(cg, k2.pid);
	start(&k2);
	CHECK_EQ_INT(report(&k2), k2.pid);
	destroy_checked(cg);
	CHECK_EQ_INT(wait_signal(k2.pid), SIGKILL);
}

static void scenario_forkstorm(void)
{
	/* A fork storm held down by the pids limit: kill must still empty it. */
	struct sandlot_cgroup_limits lim = { 256 * MiB, 0, 64 };
	sandlot_cgroup_t *cg = must_create("storm", &lim);
	struct kid k;
	spawn(&k, kid_forkstorm);
	add(cg, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), k.pid);
	sandlot__cg_sleep_ms(300);
	sandlot_usage_t u;
	usage(cg, &u);
	CHECK(u.pids > 1);
	uint64_t t0 = sandlot__now_ms();
	cgkill(cg);
	printf("#   fork storm killed in %llu ms\n", (unsigned long long)(sandlot__now_ms() - t0));
	destroy_checked(cg);
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
}

static void scenario_destroy_live(void)
{
	sandlot_cgroup_t *cg = must_create("live", NULL);
	struct kid k;
	spawn(&k, kid_sleep);
	add(cg, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), k.pid);
	destroy_checked(cg); /* kill + rmdir while the child (a zombie after) is unreaped */
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
	sandlot__cgroup_destroy(NULL);
}

static void scenario_exists(void)
{
	sandlot_cgroup_t *cg = must_create("twice", NULL);
	sandlot_error_t *err = NULL;
	CHECK(sandlot__cgroup_create(name_for("twice"), NULL, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), EEXIST);
	CHECK(err && strstr(sandlot_error_message(err), "already exists"));
	printf("#   %s\n", sandlot_error_message(err));
	sandlot_error_free(err);
	/* The first one is untouched by the failed second create. */
	char paths[8][PATH_MAX];
	int n = all_paths(cg, paths);
	for (int i = 0; i < n; i++)
		CHECK(!dir_gone(paths[i]));
	destroy_checked(cg);
}

/* sandlot__cgroup_remove_named(), which sandlotd runs after every sandbox
 * it ends: an empty leftover goes from every hierarchy; one that holds a
 * process stays, reported, until it is asked to kill and the process is
 * gone. */
static void scenario_remove_named(void)
{
	sandlot_cgroup_t *live = must_create("named-live", NULL);
	struct kid k;
	spawn(&k, kid_sleep);
	add(live, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), k.pid);

	char paths[8][PATH_MAX], empty[8][PATH_MAX];
	int n = all_paths(live, paths);
	char ename[128], lname[128];
	snprintf(ename, sizeof(ename), "%s", name_for("named-empty"));
	snprintf(lname, sizeof(lname), "%s", name_for("named-live"));
	for (int i = 0; i < n; i++) {
		char *slash = strrchr(paths[i], '/');
		snprintf(empty[i], PATH_MAX, "%.*s/%s", (int)(slash - paths[i]), paths[i], ename);
		if (mkdir(empty[i], 0755) < 0 && errno != EEXIST)
			CHECK(!"mkdir leftover");
	}
	CHECK_EQ_INT(sandlot__cgroup_remove_named(ename, 0), 0);
	for (int i = 0; i < n; i++) {
		CHECK(dir_gone(empty[i]));
		CHECK(!dir_gone(paths[i]));
	}
	/* Live: left alone in every hierarchy. */
	CHECK_EQ_INT(sandlot__cgroup_remove_named(lname, 0), 1);
	for (int i = 0; i < n; i++)
		CHECK(!dir_gone(paths[i]));
	sandlot__cgroup_remove_named(lname, 1);
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
	CHECK_EQ_INT(sandlot__cgroup_remove_named(lname, 0), 0);
	for (int i = 0; i < n; i++)
		CHECK(dir_gone(paths[i]));
	/* Nothing of that name: nothing to do. */
	CHECK_EQ_INT(sandlot__cgroup_remove_named(ename, 0), 0);
	sandlot__cgroup_close(live);
}

static void scenario_cleanup_stale(void)
{
	/* One leftover holding a live process and one empty leftover (made by
	 * hand, as after a crash) in every hierarchy the live one uses. */
	sandlot_cgroup_t *live = must_create("stale-live", NULL);
	struct kid k;
	spawn(&k, kid_sleep);
	add(live, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), k.pid);

	char paths[8][PATH_MAX], empty[8][PATH_MAX];
	int n = all_paths(live, paths);
	for (int i = 0; i < n; i++) {
		char *slash = strrchr(paths[i], '/');
		snprintf(empty[i], PATH_MAX, "%.*s/%s", (int)(slash - paths[i]), paths[i],
			 name_for("stale-empty"));
		if (mkdir(empty[i], 0755) < 0 && errno != EEXIST)
			CHECK(!"mkdir leftover");
	}
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "sltest%d-stale-", (int)main_pid);
	/* Too young: a concurrent create may be about to populate it. */
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale(prefix, 3600), 0);
	for (int i = 0; i < n; i++)
		CHECK(!dir_gone(empty[i]));
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale(prefix, 0), 1);
	for (int i = 0; i < n; i++) {
		CHECK(dir_gone(empty[i]));
		CHECK(!dir_gone(paths[i]));
	}
	/* Nothing else matches: a second pass removes nothing. */
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale(prefix, 0), 0);
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale("sltest-no-such-prefix-", 0), 0);
	destroy_checked(live);
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
}

static void scenario_bad_names(void)
{
	static const char *const bad[] = { "", ".", "..", "a/b", "../x", "a b", "a\nb" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sandlot_error_t *err = NULL;
		CHECK(sandlot__cgroup_create(bad[i], NULL, &err) == NULL);
		CHECK_EQ_INT(sandlot_error_status(err), EINVAL);
		sandlot_error_free(err);
	}
	char longname[200];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	sandlot_error_t *err = NULL;
	CHECK(sandlot__cgroup_create(longname, NULL, &err) == NULL);
	CHECK(err && strstr(sandlot_error_message(err), "invalid cgroup name"));
	sandlot_error_free(err);
}

/* ---- v1 cases ------------------------------------------------------------------ */

/* ---- prepared cgroups ------------------------------------------------------ */

static char pool_tmp[PATH_MAX];

/* Every case gets a pool directory of its own: the host's pool is left
 * alone. */
static void use_test_pool(void)
{
	snprintf(pool_tmp, sizeof(pool_tmp), "/tmp/sltest-pool-%d-XXXXXX", (int)main_pid);
	CHECK(mkdtemp(pool_tmp) != NULL);
	setenv("SANDLOT_CGROUP_POOL_DIR", pool_tmp, 1);
}

/* The data directory the test pools are for (only its name matters). */
#define TEST_DD "/var/tmp/sltest-pool-data"

/* Remove the test's pool directories (data-dir, preparer.lock), checking
 * that no marker is left in them. */
static void remove_test_pool(void)
{
	DIR *base = opendir(pool_tmp);
	CHECK(base != NULL);
	struct dirent *pe;
	while (base && (pe = readdir(base))) {
		if (pe->d_name[0] == '.')
			continue;
		char pool[PATH_MAX + 300];
		snprintf(pool, sizeof(pool), "%s/%s", pool_tmp, pe->d_name);
		DIR *d = opendir(pool);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			CHECK(strcmp(de->d_name, "data-dir") == 0 || strcmp(de->d_name, "preparer.lock") == 0);
			CHECK_EQ_INT(unlinkat(dirfd(d), de->d_name, 0), 0);
		}
		if (d)
			closedir(d);
		CHECK_EQ_INT(rmdir(pool), 0);
	}
	if (base)
		closedir(base);
	CHECK_EQ_INT(rmdir(pool_tmp), 0);
}

static void check_memory_limit(sandlot_cgroup_t *cg, uint64_t bytes)
{
	char want[32];
	snprintf(want, sizeof(want), "%llu", (unsigned long long)bytes);
	if (strcmp(sandlot__cgroup_mode(), "v1") == 0) {
		const char *mem = sandlot__cgroup_path(cg, "memory");
		CHECK_STR(read_trim(mem, "memory.limit_in_bytes"), want);
		if (file_exists(mem, "memory.memsw.limit_in_bytes"))
			CHECK_STR(read_trim(mem, "memory.memsw.limit_in_bytes"), want);
	} else {
		CHECK_STR(read_trim(sandlot__cgroup_path(cg, ""), "memory.max"), want);
	}
}

static void check_pids_limit(sandlot_cgroup_t *cg, const char *want)
{
	CHECK_STR(read_trim(sandlot__cgroup_path(cg, "pids"), "pids.max"), want);
}

/* fill, take (matching limits and not), adopt with the limits rewritten
 * up and down, return, cleanup_stale leaving prepared and just-taken
 * cgroups alone, drain.  `limits`: whether the host can apply them here. */
static void scenario_pool(int limits)
{
	use_test_pool();
	struct sandlot_cgroup_limits base = { .memory_bytes = 64 * MiB, .pids = 32 },
				     up = { .memory_bytes = 96 * MiB, .pids = 48, .cpus_milli = 500 },
				     down = { .memory_bytes = 32 * MiB, .pids = 16 }, none = { 0 };
	if (!limits)
		base = up = down = none;
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	CHECK_EQ_INT(sandlot__cgroup_pool_fill(TEST_DD, &base, 3), 3);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 3);
	CHECK_EQ_INT(sandlot__cgroup_pool_fill(TEST_DD, &base, 3), 0); /* full already */

	/* Taken: unmarked, adopted by create (not made again), limits
	 * rewritten where they differ. */
	char name[32];
	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, &up, name), 1);
	CHECK(strncmp(name, "sb-", 3) == 0 && strlen(name) == 29);
	CHECK(!sandlot__cgroup_pool_has(name));
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 2);
	/* Just taken: young, so the stale collector leaves it to its taker. */
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale(name, 30), 0);
	sandlot_error_t *err = NULL;
	sandlot_cgroup_t *cg = sandlot__cgroup_create(name, &up, &err);
	if (!cg)
		printf("#   adopt: %s\n", sandlot_error_message(err));
	CHECK(cg != NULL);
	if (limits) {
		check_memory_limit(cg, up.memory_bytes);
		check_pids_limit(cg, "48");
		if (strcmp(sandlot__cgroup_mode(), "v1") == 0)
			CHECK_STR(read_trim(sandlot__cgroup_path(cg, "cpu"), "cpu.cfs_quota_us"), "50000");
		else
			CHECK_STR(read_trim(sandlot__cgroup_path(cg, ""), "cpu.max"), "50000 100000");
	}
	/* Adopted once: the name is an ordinary existing cgroup now. */
	CHECK(sandlot__cgroup_create(name, &up, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), EEXIST);
	sandlot_error_free(err);
	err = NULL;
	destroy_checked(cg);

	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, &down, name), 1);
	cg = sandlot__cgroup_create(name, &down, &err);
	CHECK(cg != NULL);
	if (limits) {
		check_memory_limit(cg, down.memory_bytes);
		check_pids_limit(cg, "16");
	}
	destroy_checked(cg);

	/* Taken and given back: free again, under the same name. */
	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, &base, name), 1);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	sandlot__cgroup_pool_return(name);
	CHECK(sandlot__cgroup_pool_has(name));
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 1);
	/* Prepared and free: never stale, whatever its age. */
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale(name, 0), 0);
	char paths[8][PATH_MAX];
	char probe_name[32];
	snprintf(probe_name, sizeof(probe_name), "%s", name);
	CHECK_EQ_INT(sandlot__cgroup_pool_drain(TEST_DD), 1);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, &base, name), 0);
	/* The drained one is gone from every hierarchy. */
	cg = sandlot__cgroup_create(probe_name, NULL, &err);
	CHECK(cg != NULL); /* made afresh: nothing was left under the name */
	int n = all_paths(cg, paths);
	CHECK(n > 0);
	destroy_checked(cg);
	remove_test_pool();
}

/* Many processes take from a pool of one at once: exactly one gets it. */
static void scenario_pool_race(void)
{
	use_test_pool();
	CHECK_EQ_INT(sandlot__cgroup_pool_fill(TEST_DD, NULL, 1), 1);
	enum { N = 8 };
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t kids[N];
	for (int i = 0; i < N; i++) {
		fflush(stdout);
		kids[i] = fork();
		if (kids[i] == 0) {
			char name[32];
			char c = sandlot__cgroup_pool_take(TEST_DD, NULL, name) ? 'y' : 'n';
			if (write(fds[1], &c, 1) != 1)
				_exit(1);
			if (c == 'y') {
				sandlot_cgroup_t *cg = sandlot__cgroup_create(name, NULL, NULL);
				if (!cg)
					_exit(2);
				sandlot__cgroup_destroy(cg);
			}
			_exit(0);
		}
	}
	close(fds[1]);
	int yes = 0, got = 0;
	char c;
	while (read(fds[0], &c, 1) == 1) {
		got++;
		yes += c == 'y';
	}
	close(fds[0]);
	for (int i = 0; i < N; i++)
		CHECK_EQ_INT(wait_signal(kids[i]), 0);
	CHECK_EQ_INT(got, N);
	CHECK_EQ_INT(yes, 1);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	remove_test_pool();
}

/* A pool belongs to its preparer: the file "data-dir" names the data dir;
 * while the preparer holds its lock, reclaim leaves it alone; once the
 * preparer is gone (here: a child that held it and exited), reclaim drains
 * it, whichever data dir asks. */
static void scenario_pool_reclaim(void)
{
	use_test_pool();
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(stdout);
	pid_t kid = fork();
	if (kid == 0) {
		close(fds[0]);
		int h = sandlot__cgroup_pool_hold(TEST_DD, NULL);
		if (h < 0 || sandlot__cgroup_pool_fill(TEST_DD, NULL, 2) != 2)
			_exit(1);
		char c = 'y';
		if (write(fds[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause(); /* holding the pool until killed */
	}
	close(fds[1]);
	char c;
	CHECK_EQ_INT(read(fds[0], &c, 1), 1);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 2);
	/* The pool names its data dir. */
	DIR *base = opendir(pool_tmp);
	struct dirent *pe;
	char dd[256] = "";
	while (base && (pe = readdir(base)))
		if (pe->d_name[0] != '.') {
			char path[PATH_MAX + 300];
			snprintf(path, sizeof(path), "%s/%s/data-dir", pool_tmp, pe->d_name);
			FILE *f = fopen(path, "r");
			CHECK(f != NULL);
			if (f) {
				CHECK(fgets(dd, sizeof(dd), f) != NULL);
				fclose(f);
			}
		}
	if (base)
		closedir(base);
	CHECK_STR(dd, TEST_DD "\n");
	/* Alive: left alone. */
	CHECK_EQ_INT(sandlot__cgroup_pool_reclaim(), 0);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 2);
	/* Killed: its free cgroups are drained, from every hierarchy. */
	char name[32];
	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, NULL, name), 1);
	sandlot__cgroup_pool_return(name);
	CHECK(sandlot__cgroup_pool_has(name));
	kill(kid, SIGKILL);
	CHECK_EQ_INT(wait_signal(kid), SIGKILL);
	close(fds[0]);
	CHECK_EQ_INT(sandlot__cgroup_pool_reclaim(), 2);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	/* (and its directory: nothing names the data dir any more) */
	base = opendir(pool_tmp);
	int dirs = 0;
	while (base && (pe = readdir(base)))
		dirs += pe->d_name[0] != '.';
	if (base)
		closedir(base);
	CHECK_EQ_INT(dirs, 0);
	CHECK(!sandlot__cgroup_pool_has(name));
	sandlot_cgroup_t *cg = sandlot__cgroup_create(name, NULL, NULL);
	CHECK(cg != NULL); /* made afresh: nothing was left under the name */
	destroy_checked(cg);
	/* A new preparer of the same data dir gets the (empty) pool. */
	int h = sandlot__cgroup_pool_hold(TEST_DD, NULL);
	CHECK(h >= 0);
	CHECK_EQ_INT(sandlot__cgroup_pool_fill(TEST_DD, NULL, 1), 1);
	CHECK_EQ_INT(sandlot__cgroup_pool_reclaim(), 0);
	/* Letting go drains it and removes its directory. */
	char left[32];
	CHECK_EQ_INT(sandlot__cgroup_pool_take(TEST_DD, NULL, left), 1);
	sandlot__cgroup_pool_return(left);
	sandlot__cgroup_pool_release(TEST_DD, h);
	CHECK_EQ_INT(sandlot__cgroup_pool_count(TEST_DD), 0);
	CHECK(!sandlot__cgroup_pool_has(left));
	base = opendir(pool_tmp);
	int entries = 0;
	while (base && (pe = readdir(base)))
		entries += pe->d_name[0] != '.';
	if (base)
		closedir(base);
	CHECK_EQ_INT(entries, 0);
	remove_test_pool();
}

static void test_v1_limits(void) { use_v1(); scenario_limits(); }
static void test_v1_add_and_usage(void) { use_v1(); scenario_add_and_usage(1); }
static void test_v1_oom(void) { use_v1(); scenario_oom(); }
static void test_v1_pids(void) { use_v1(); scenario_pids(); }
static void test_v1_kill_escaped(void) { use_v1(); scenario_kill(); }
static void test_v1_kill_forkstorm(void) { use_v1(); scenario_forkstorm(); }
static void test_v1_destroy_live(void) { use_v1(); scenario_destroy_live(); }
static void test_v1_exists(void) { use_v1(); scenario_exists(); }
static void test_v1_cleanup_stale(void) { use_v1(); scenario_cleanup_stale(); }
static void test_v1_remove_named(void) { use_v1(); scenario_remove_named(); }
static void test_v1_bad_names(void) { use_v1(); scenario_bad_names(); }
static void test_v1_pool(void) { use_v1(); scenario_pool(1); }
static void test_v1_pool_race(void) { use_v1(); scenario_pool_race(); }
static void test_v1_pool_reclaim(void) { use_v1(); scenario_pool_reclaim(); }

static void test_v1_missing_hierarchy(void)
{
	/* A v1 root with a memory mount but no pids mount: a pids limit fails
	 * naming the controller, and nothing is created anywhere. */
	need_root();
	if (!is_fs("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC))
		tap_skip("host has no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
	char tmp[] = "/tmp/sltest-v1root-XXXXXX", link[64];
	CHECK(mkdtemp(tmp) != NULL);
	snprintf(link, sizeof(link), "%s/memory", tmp);
	CHECK_EQ_INT(symlink("/sys/fs/cgroup/memory", link), 0);
	setenv("SANDLOT_CGROUP", "v1", 1);
	setenv("SANDLOT_CGROUP_V1_ROOT", tmp, 1);
	sandlot_error_t *err = NULL;
	struct sandlot_cgroup_limits lim = { 64 * MiB, 0, 10 };
	CHECK(sandlot__cgroup_create(name_for("nopids"), &lim, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
	printf("#   %s\n", sandlot_error_message(err));
	CHECK(err && strstr(sandlot_error_message(err),
			    "cgroup v1 controller \"pids\" is not mounted at"));
	CHECK(err && strstr(sandlot_error_message(err), "needed for the process limit"));
	sandlot_error_free(err);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "/sys/fs/cgroup/memory/sandlot/%s", name_for("nopids"));
	CHECK(dir_gone(dir));
	unlink(link);
	rmdir(tmp);
}

/* ---- v2 cases ------------------------------------------------------------------ */

static void test_v2_limits(void)
{
	use_v2();
	need_v2_controllers();
	scenario_limits();
}

static void test_v2_missing_controller(void)
{
	use_v2();
	const char *miss = v2_missing_controller();
	if (!miss)
		tap_skip("cgroup2 offers memory, pids and cpu here; nothing is missing");
	struct {
		struct sandlot_cgroup_limits lim;
		const char *ctrl;
	} cases[] = {
		{ { 64 * MiB, 0, 0 }, "memory" },
		{ { 0, 0, 10 }, "pids" },
		{ { 0, 500, 0 }, "cpu" },
	};
	int failed_some = 0;
	for (size_t i = 0; i < 3; i++) {
		sandlot_error_t *err = NULL;
		sandlot_cgroup_t *cg = sandlot__cgroup_create(name_for("nolimit"), &cases[i].lim, &err);
		if (cg) { /* this controller exists here */
			sandlot__cgroup_destroy(cg);
			continue;
		}
		failed_some = 1;
		char want[64];
		snprintf(want, sizeof(want), "controller \"%s\" is not available", cases[i].ctrl);
		printf("#   %s\n", sandlot_error_message(err));
		CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
		CHECK(err && strstr(sandlot_error_message(err), want));
		sandlot_error_free(err);
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s/sandlot/%s", v2_root(), name_for("nolimit"));
		CHECK(dir_gone(dir));
	}
	CHECK(failed_some);
}

static void test_v2_add_and_usage(void)
{
	use_v2();
	/* Memory accounting needs the memory controller; CPU time does not. */
	scenario_add_and_usage(v2_missing_controller() == NULL);
}

static void test_v2_oom(void) { use_v2(); need_v2_controllers(); scenario_oom(); }
static void test_v2_pids(void) { use_v2(); need_v2_controllers(); scenario_pids(); }
static void test_v2_kill_escaped(void) { use_v2(); scenario_kill(); }
static void test_v2_kill_forkstorm(void) { use_v2(); need_v2_controllers(); scenario_forkstorm(); }
static void test_v2_destroy_live(void) { use_v2(); scenario_destroy_live(); }
static void test_v2_exists(void) { use_v2(); scenario_exists(); }
static void test_v2_cleanup_stale(void) { use_v2(); scenario_cleanup_stale(); }
static void test_v2_remove_named(void) { use_v2(); scenario_remove_named(); }
/* Without the controllers here (a hybrid host), the pool still works with
 * no limits; with them, the limits are checked too. */
static void test_v2_pool(void) { use_v2(); scenario_pool(v2_missing_controller() == NULL); }
static void test_v2_pool_race(void) { use_v2(); scenario_pool_race(); }
static void test_v2_pool_reclaim(void) { use_v2(); scenario_pool_reclaim(); }

static void test_v2_not_cgroup2(void)
{
	need_root();
	setenv("SANDLOT_CGROUP", "v2", 1);
	setenv("SANDLOT_CGROUP_V2_ROOT", "/tmp", 1);
	sandlot_error_t *err = NULL;
	CHECK(sandlot__cgroup_create(name_for("notcg2"), NULL, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
	CHECK(err && strstr(sandlot_error_message(err), "/tmp is not a cgroup2 mount"));
	sandlot_error_free(err);
}

/* ---- mode selection ------------------------------------------------------------- */

static void test_mode_detect(void)
{
	unsetenv("SANDLOT_CGROUP");
	const char *want = is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)          ? "v2"
			   : is_fs("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC) ? "v1"
										 : "none";
	printf("#   detected %s\n", sandlot__cgroup_mode());
	CHECK_STR(sandlot__cgroup_mode(), want);
}

static void test_mode_none(void)
{
	setenv("SANDLOT_CGROUP", "none", 1);
	CHECK_STR(sandlot__cgroup_mode(), "none");
	sandlot_error_t *err = NULL;
	struct sandlot_cgroup_limits lim = { 64 * MiB, 0, 0 };
	CHECK(sandlot__cgroup_create("x", &lim, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
	printf("#   %s\n", sandlot_error_message(err));
	CHECK(err && strstr(sandlot_error_message(err), "cannot apply memory/CPU/process limits"));
	sandlot_error_free(err);
	err = NULL;

	/* Without limits: a handle that does nothing, and says so on kill. */
	sandlot_cgroup_t *cg = sandlot__cgroup_create("x", NULL, &err);
	CHECK(cg != NULL);
	CHECK_EQ_INT(sandlot__cgroup_add_pid(cg, getpid(), &err), 0);
	sandlot_usage_t u;
	memset(&u, 0xff, sizeof(u));
	CHECK_EQ_INT(sandlot__cgroup_usage(cg, &u, &err), 0);
	CHECK_EQ_INT(u.memory_bytes, 0);
	CHECK_EQ_INT(u.pids, 0);
	CHECK_EQ_INT(sandlot__cgroup_kill(cg, &err), -1);
	CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
	sandlot_error_free(err);
	CHECK(sandlot__cgroup_path(cg, "memory") == NULL);
	CHECK_EQ_INT(sandlot__cgroup_cleanup_stale("x", 0), 0);
	sandlot__cgroup_destroy(cg);
}

static void test_mode_invalid(void)
{
	setenv("SANDLOT_CGROUP", "v3", 1);
	CHECK_STR(sandlot__cgroup_mode(), "none");
	sandlot_error_t *err = NULL;
	CHECK(sandlot__cgroup_create("x", NULL, &err) == NULL);
	CHECK_EQ_INT(sandlot_error_status(err), EINVAL);
	CHECK(err && strstr(sandlot_error_message(err),
			    "invalid SANDLOT_CGROUP=\"v3\": expected v1, v2 or none"));
	sandlot_error_free(err);
}

/* ---- leftovers ------------------------------------------------------------------- */

/* Kill what is in dir and remove it; returns 1 if it existed. */
static int scrub(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return 0;
	char *s = read_trim(dir, "cgroup.procs");
	for (char *p = s; p && *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v > 0)
			kill((pid_t)v, SIGKILL);
		p = end;
		while (*p == '\n')
			p++;
	}
	for (int i = 0; i < 100 && rmdir(dir) < 0 && errno == EBUSY; i++)
		usleep(10000);
	return 1;
}

/* sandlot__cgroup_v2_nest(): sandbox cgroups below a given cgroup (as
 * sandlotd puts them below its own, daemon/node.c), with a process in one,
 * and nothing nested left after destroy; directories outside the v2 root
 * and a v1 mode are refused. */
static void test_v2_nest(void)
{
	use_v2();
	char below[PATH_MAX], parent[PATH_MAX + 16];
	snprintf(below, sizeof(below), "%s/sltest%d-nest", v2_root(), (int)main_pid);
	CHECK(mkdir(below, 0755) == 0);
	errno = 0;
	CHECK(sandlot__cgroup_v2_nest("/elsewhere/x") < 0 && errno == EINVAL);
	CHECK(sandlot__cgroup_v2_nest(v2_root()) < 0 && errno == EINVAL);
	CHECK(sandlot__cgroup_v2_nest(below) == 0);
	CHECK_STR(sandlot__cgroup_v2_root(), below);
	sandlot_cgroup_t *cg = must_create("nested", NULL);
	char want[PATH_MAX * 2];
	snprintf(want, sizeof(want), "%s/sandlot/%s", below, name_for("nested"));
	CHECK_STR(sandlot__cgroup_path(cg, NULL), want);
	struct kid k;
	spawn(&k, kid_sleep);
	add(cg, k.pid);
	start(&k);
	CHECK_EQ_INT(report(&k), k.pid);
	char procs[PATH_MAX * 2 + 16];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", want);
	char *text = sandlot__read_file(procs, 4096);
	CHECK(text && atoi(text) == k.pid);
	free(text);
	destroy_checked(cg);
	CHECK_EQ_INT(wait_signal(k.pid), SIGKILL);
	snprintf(parent, sizeof(parent), "%s/sandlot", below);
	CHECK(rmdir(parent) == 0);
	CHECK(rmdir(below) == 0);
}

static void test_v1_nest_refused(void)
{
	use_v1();
	errno = 0;
	CHECK(sandlot__cgroup_v2_nest("/sys/fs/cgroup/unified/x") < 0 && errno == EINVAL);
}

static void test_no_leftovers(void)
{
	/* Every case above must have removed what it made. */
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "sltest%d-", (int)main_pid);
	const char *roots[] = { "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids",
				"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
				"/sys/fs/cgroup/freezer", v2_root() };
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		if (!roots[i])
			continue;
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%s/sandlot", roots[i]);
		DIR *d = opendir(parent);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
				continue;
			char dir[PATH_MAX * 2];
			snprintf(dir, sizeof(dir), "%s/%s", parent, de->d_name);
			printf("#   leftover: %s\n", dir);
			scrub(dir);
			CHECK(!"no leftover cgroups");
		}
		closedir(d);
	}
}

int main(void)
{
	main_pid = getpid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	TAP_RUN(test_mode_detect);
	TAP_RUN(test_mode_none);
	TAP_RUN(test_mode_invalid);
	TAP_RUN(test_v1_limits);
	TAP_RUN(test_v1_add_and_usage);
	TAP_RUN(test_v1_oom);
	TAP_RUN(test_v1_pids);
	TAP_RUN(test_v1_kill_escaped);
	TAP_RUN(test_v1_kill_forkstorm);
	TAP_RUN(test_v1_destroy_live);
	TAP_RUN(test_v1_exists);
	TAP_RUN(test_v1_cleanup_stale);
	TAP_RUN(test_v1_remove_named);
	TAP_RUN(test_v1_bad_names);
	TAP_RUN(test_v1_missing_hierarchy);
	TAP_RUN(test_v1_pool);
	TAP_RUN(test_v1_pool_race);
	TAP_RUN(test_v1_pool_reclaim);
	TAP_RUN(test_v2_limits);
	TAP_RUN(test_v2_missing_controller);
	TAP_RUN(test_v2_add_and_usage);
	TAP_RUN(test_v2_oom);
	TAP_RUN(test_v2_pids);
	TAP_RUN(test_v2_kill_escaped);
	TAP_RUN(test_v2_kill_forkstorm);
	TAP_RUN(test_v2_destroy_live);
	TAP_RUN(test_v2_exists);
	TAP_RUN(test_v2_cleanup_stale);
	TAP_RUN(test_v2_remove_named);
	TAP_RUN(test_v2_not_cgroup2);
	TAP_RUN(test_v2_pool);
	TAP_RUN(test_v2_pool_race);
	TAP_RUN(test_v2_pool_reclaim);
	TAP_RUN(test_v2_nest);
	TAP_RUN(test_v1_nest_refused);
	TAP_RUN(test_no_leftovers);
	return tap_done();
}
