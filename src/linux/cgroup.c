/* cgroup front end: picks the implementation once (v2, v1 or none), checks
 * arguments, and holds the file helpers both implementations share.  See
 * cgroup.h for the contract. */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "linux/syscalls.h"

#define CG_NAME_MAX 128
#define CG_FILE_MAX (64 * 1024)

/* ---- "none": no usable cgroups ------------------------------------------ */

/* Why there is no cgroup support, for the error of a create with limits. */
static char none_reason[512];
/* SANDLOT_CGROUP held something unknown: every create fails. */
static bool none_invalid;

static int none_create(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *lim,
		       sandlot_error_t **err)
{
	if (none_invalid)
		return sandlot__error(err, EINVAL, "%s", none_reason);
	if (lim && (lim->memory_bytes || lim->cpus_milli || lim->pids))
		return sandlot__error(err, ENOTSUP,
				      "cannot apply memory/CPU/process limits: %s", none_reason);
	return 0;
}

static int none_add_pid(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err)
{
	return 0;
}

static int none_usage(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err)
{
	return 0; /* all zero: nothing is accounted */
}

static int none_kill(sandlot_cgroup_t *cg, sandlot_error_t **err)
{
	return sandlot__error(err, ENOTSUP,
			      "cannot kill sandbox \"%s\" through cgroups: no cgroup in use (%s)",
			      cg->name, none_reason);
}

static int none_cleanup_stale(const char *prefix, unsigned min_age_s)
{
	return 0;
}

static const char *none_path(sandlot_cgroup_t *cg, const char *controller)
{
	return NULL;
}

static const struct sandlot_cgroup_ops none_ops = {
	.mode = "none",
	.create = none_create,
	.add_pid = none_add_pid,
	.usage = none_usage,
	.kill = none_kill,
	.cleanup_stale = none_cleanup_stale,
	.path = none_path,
};

/* ---- choosing the implementation, once ----------------------------------- */

static const struct sandlot_cgroup_ops *ops;
static char v1_root[PATH_MAX] = "/sys/fs/cgroup";
static char v2_root[PATH_MAX] = "/sys/fs/cgroup";
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static bool fs_magic_is(const char *path, long magic)
{
	struct statfs sfs;
	return statfs(path, &sfs) == 0 && (long)sfs.f_type == magic;
}

static void choose_ops(void)
{
	/* Roots too long to hold a cgroup path are treated as unusable below. */
	const char *e = getenv("SANDLOT_CGROUP_V1_ROOT");
	if (e && *e && sandlot__cg_pathf(v1_root, "%s", e) < 0)
		v1_root[0] = '\0';

	/* The v2 root: explicit, else /sys/fs/cgroup when it is cgroup2, else
	 * the "unified" mount of a hybrid host (only useful with SANDLOT_CGROUP=v2
	 * there, since it rarely has controllers). */
	bool pure_v2 = fs_magic_is("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC);
	e = getenv("SANDLOT_CGROUP_V2_ROOT");
	if (e && *e) {
		if (sandlot__cg_pathf(v2_root, "%s", e) < 0)
			v2_root[0] = '\0';
	} else if (!pure_v2 && fs_magic_is("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC))
		snprintf(v2_root, sizeof(v2_root), "/sys/fs/cgroup/unified");

	const char *force = getenv("SANDLOT_CGROUP");
	if (force && *force) {
		if (strcmp(force, "v2") == 0) {
			ops = &sandlot__cgroup_v2_ops;
		} else if (strcmp(force, "v1") == 0) {
			ops = &sandlot__cgroup_v1_ops;
		} else if (strcmp(force, "none") == 0) {
			snprintf(none_reason, sizeof(none_reason),
				 "cgroups are disabled by SANDLOT_CGROUP=none");
			ops = &none_ops;
		} else {
			snprintf(none_reason, sizeof(none_reason),
				 "invalid SANDLOT_CGROUP=\"%.64s\": expected v1, v2 or none", force);
			none_invalid = true;
			ops = &none_ops;
		}
		return;
	}

	char mem[PATH_MAX];
	bool mem_ok = sandlot__cg_pathf(mem, "%s/memory", v1_root) == 0;
	if (pure_v2)
		ops = &sandlot__cgroup_v2_ops;
	else if (mem_ok && fs_magic_is(mem, CGROUP_SUPER_MAGIC))
		ops = &sandlot__cgroup_v1_ops;
	else {
		int n = snprintf(none_reason, sizeof(none_reason),
				 "no usable cgroup hierarchy (/sys/fs/cgroup is not cgroup2 and "
				 "%.300s/memory is not a cgroup v1 memory mount)",
				 v1_root);
		(void)n; /* cut at 300 characters: it is only a message */
		ops = &none_ops;
	}
}

static const struct sandlot_cgroup_ops *get_ops(void)
{
	pthread_once(&ops_once, choose_ops);
	return ops;
}

const struct sandlot_cgroup_ops *sandlot__cgroup_ops(void)
{
	return get_ops();
}

const char *sandlot__cgroup_v1_root(void)
{
	get_ops();
	return v1_root;
}

const char *sandlot__cgroup_v2_root(void)
{
	get_ops();
	return v2_root;
}

int sandlot__cgroup_v2_nest(const char *dir)
{
	get_ops();
	if (ops != &sandlot__cgroup_v2_ops || !dir || dir[0] != '/' ||
	    strncmp(dir, v2_root, strlen(v2_root)) != 0 || dir[strlen(v2_root)] != '/') {
		errno = EINVAL;
		return -1;
	}
	char nested[PATH_MAX];
	if (sandlot__cg_pathf(nested, "%s", dir) < 0)
		return -1;
	memcpy(v2_root, nested, sizeof(v2_root));
	return 0;
}

const char *sandlot__cgroup_mode(void)
{
	return get_ops()->mode;
}

/* ---- the interface ------------------------------------------------------- */

static bool valid_name(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > CG_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static void free_handle(sandlot_cgroup_t *cg)
{
	for (int i = 0; i < SL_CG_NCTRL; i++)
		free(cg->dir[i]);
	free(cg->name);
	free(cg);
}

sandlot_cgroup_t *sandlot__cgroup_create(const char *name, const struct sandlot_cgroup_limits *lim,
					 sandlot_error_t **err)
{
	const struct sandlot_cgroup_ops *o = get_ops();
	if (!name || !valid_name(name)) {
		sandlot__error(err, EINVAL,
			       "invalid cgroup name \"%.64s\": expected 1 to %d characters of "
			       "A-Z a-z 0-9 . _ -",
			       name ? name : "(null)", CG_NAME_MAX);
		return NULL;
	}
	sandlot_cgroup_t *cg = calloc(1, sizeof(*cg));
	if (!cg || !(cg->name = strdup(name))) {
		free(cg);
		sandlot__error(err, ENOMEM, "create cgroup \"%s\": out of memory", name);
		return NULL;
	}
	cg->ops = o;
	struct sandlot_cgroup_limits preset;
	if (o->adopt && sandlot__cg_pool_claimed(name, &preset)) {
		static const struct sandlot_cgroup_limits none = { 0, 0, 0 };
		if (o->adopt(cg, &preset, lim ? lim : &none, NULL) == 0)
			return cg;
		/* Not usable after all (removed under us, a limit refused):
		 * remove what is left of it and make it afresh below, which
		 * reports what is wrong if that fails too. */
		sandlot__cg_rmdirs(cg);
		for (int i = 0; i < SL_CG_NCTRL; i++) {
			free(cg->dir[i]);
			cg->dir[i] = NULL;
		}
	}
	if (o->create(cg, lim, err) < 0) {
		sandlot__error_wrap(err, "create cgroup \"%s\" (%s)", name, o->mode);
		free_handle(cg);
		return NULL;
	}
	return cg;
}

int sandlot__cgroup_add_pid(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err)
{
	if (pid <= 0)
		return sandlot__error(err, EINVAL, "add pid %d to cgroup \"%s\": invalid pid",
				      (int)pid, cg->name);
	return cg->ops->add_pid(cg, pid, err);
}

int sandlot__cgroup_usage(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	return cg->ops->usage(cg, out, err);
}

int sandlot__cgroup_kill(sandlot_cgroup_t *cg, sandlot_error_t **err)
{
	return cg->ops->kill(cg, err);
}

void sandlot__cgroup_destroy(sandlot_cgroup_t *cg)
{
	if (!cg)
		return;
	int saved = errno;
	bool populated = false;
	for (int i = 0; i < SL_CG_NCTRL; i++)
		if (cg->dir[i] && !sandlot__cg_dir_empty(cg->dir[i]))
			populated = true;
	if (populated)
		cg->ops->kill(cg, NULL);
	sandlot__cg_rmdirs(cg);
	free_handle(cg);
	errno = saved;
}

void sandlot__cgroup_close(sandlot_cgroup_t *cg)
{
	if (cg)
		free_handle(cg);
}

int sandlot__cgroup_cleanup_stale(const char *prefix, unsigned min_age_s)
{
	if (!prefix)
		return 0;
	return get_ops()->cleanup_stale(prefix, min_age_s);
}

const char *sandlot__cgroup_path(sandlot_cgroup_t *cg, const char *controller)
{
	return cg->ops->path(cg, controller ? controller : "");
}

/* ---- shared helpers ------------------------------------------------------ */

static char *join(const char *dir, const char *file)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, file) < 0)
		return NULL;
	return p;
}

char *sandlot__cg_read(const char *dir, const char *file)
{
	cleanup_free char *p = join(dir, file);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	return sandlot__read_file(p, CG_FILE_MAX);
}

int sandlot__cg_write(const char *dir, const char *file, const char *value)
{
	cleanup_free char *p = join(dir, file);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	return sandlot__write_file(p, value, 0);
}

bool sandlot__cg_exists(const char *dir, const char *file)
{
	cleanup_free char *p = join(dir, file);
	return p && access(p, F_OK) == 0;
}

int sandlot__cg_read_u64(const char *dir, const char *file, uint64_t *out)
{
	cleanup_free char *s = sandlot__cg_read(dir, file);
	if (!s)
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno) {
		errno = EINVAL;
		return -1;
	}
	*out = v;
	return 0;
}

int sandlot__cg_read_key(const char *dir, const char *file, const char *key, uint64_t *out)
{
	cleanup_free char *s = sandlot__cg_read(dir, file);
	if (!s)
		return -1;
	size_t kl = strlen(key);
	for (char *line = s; line && *line;) {
		char *nl = strchr(line, '\n');
		if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
			*out = strtoull(line + kl + 1, NULL, 10);
			return 0;
		}
		line = nl ? nl + 1 : NULL;
	}
	errno = ENOENT;
	return -1;
}

pid_t *sandlot__cg_procs(const char *dir, size_t *n)
{
	cleanup_free char *s = sandlot__cg_read(dir, "cgroup.procs");
	if (!s)
		return NULL;
	size_t cap = 1;
	for (char *c = s; *c; c++)
		cap += *c == '\n';
	pid_t *v = calloc(cap, sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	size_t k = 0;
	for (char *c = s; *c && k < cap;) {
		char *end;
		long pid = strtol(c, &end, 10);
		if (end == c)
			break;
		if (pid > 0)
			v[k++] = (pid_t)pid;
		c = end;
		while (*c == '\n')
			c++;
	}
	*n = k;
	return v;
}

int sandlot__cg_kill_procs(const char *dir)
{
	size_t n = 0;
	cleanup_free pid_t *pids = sandlot__cg_procs(dir, &n);
	if (!pids)
		return -1;
	for (size_t i = 0; i < n; i++)
		kill(pids[i], SIGKILL); /* ESRCH: it died meanwhile */
	return (int)n;
}

bool sandlot__cg_dir_empty(const char *dir)
{
	size_t n = 0;
	cleanup_free pid_t *pids = sandlot__cg_procs(dir, &n);
	if (!pids)
		return errno == ENOENT;
	return n == 0;
}

int sandlot__cg_pathf(char *buf, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX) {
		buf[0] = '\0';
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

void sandlot__cg_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int sandlot__cg_rmdir(const char *dir, unsigned timeout_ms)
{
	uint64_t deadline = sandlot__now_ms() + timeout_ms;
	for (;;) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || sandlot__now_ms() >= deadline)
			return -1;
		sandlot__cg_sleep_ms(10);
	}
}

void sandlot__cg_rmdirs(sandlot_cgroup_t *cg)
{
	for (int i = SL_CG_NCTRL - 1; i >= 0; i--)
		if (cg->dir[i] && cg->owned[i]) {
			sandlot__cg_rmdir(cg->dir[i], 1000);
			cg->owned[i] = false;
		}
}

void sandlot__cg_cpu_quota(uint32_t cpus_milli, uint64_t *quota_us, uint64_t *period_us)
{
	uint64_t period = cpus_milli < 10 ? 1000000 : 100000;
	*period_us = period;
	*quota_us = (uint64_t)cpus_milli * period / 1000;
}

int sandlot__cgroup_join_prepare(sandlot_cgroup_t *cg, struct sandlot_cgroup_join *j,
				 sandlot_error_t **err)
{
	j->ntasks = 0;
	j->dir_fd = -1;
	for (size_t i = 0; i < sizeof(j->tasks_fd) / sizeof(j->tasks_fd[0]); i++)
		j->tasks_fd[i] = -1;
	if (cg->ops == &sandlot__cgroup_v2_ops) {
		j->dir_fd = open(cg->dir[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (j->dir_fd < 0)
			return sandlot__error_errno(err, errno, "open cgroup %s", cg->dir[0]);
		return 0;
	}
	if (cg->ops != &sandlot__cgroup_v1_ops)
		return 0;
	for (int i = 0; i < SL_CG_NCTRL; i++) {
		/* Co-mounted controllers share one directory: join it once. */
		if (!cg->dir[i] || !cg->owned[i])
			continue;
		char path[PATH_MAX];
		if (sandlot__cg_pathf(path, "%s/tasks", cg->dir[i]) < 0 ||
		    (j->tasks_fd[j->ntasks] = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
			int e = errno;
			sandlot__cgroup_join_close(j);
			return sandlot__error_errno(err, e, "open %s/tasks", cg->dir[i]);
		}
		j->ntasks++;
	}
	return 0;
}

SANDLOT_CLONE_CHILD int sandlot__cgroup_join_self(const struct sandlot_cgroup_join *j)
{
	for (int i = 0; i < j->ntasks; i++)
		if (sys_write(j->tasks_fd[i], "0", 1) != 1)
			return -1;
	return 0;
}

void sandlot__cgroup_join_close(struct sandlot_cgroup_join *j)
{
	for (int i = 0; i < j->ntasks; i++)
		if (j->tasks_fd[i] >= 0)
			close(j->tasks_fd[i]);
	j->ntasks = 0;
	if (j->dir_fd >= 0)
		close(j->dir_fd);
	j->dir_fd = -1;
}

bool sandlot__cg_young(const char *dir, unsigned secs)
{
	/* No age asked for: never young.  (Kernels with fine-grained file
	 * timestamps can stamp a new directory a second ahead of time(), which
	 * made "now - mtime < 0" true at a second's edge, and a reclaimed
	 * prepared cgroup stayed.) */
	if (secs == 0)
		return false;
	struct stat st;
	if (stat(dir, &st) < 0)
		return true;
	return time(NULL) - st.st_mtime < (time_t)secs;
}

/* "<dir>/<file>" opened read-only, or -1. */
static int open_in(const char *dir, const char *file)
{
	char path[PATH_MAX];
	if (!dir || sandlot__cg_pathf(path, "%s/%s", dir, file) < 0)
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

void sandlot__cgroup_event_fds(sandlot_cgroup_t *cg, int *oom_fd, int *pids_fd)
{
	*oom_fd = *pids_fd = -1;
	if (cg->ops == &sandlot__cgroup_v1_ops) {
		*oom_fd = open_in(cg->dir[SL_CG_MEMORY], "memory.oom_control");
		*pids_fd = open_in(cg->dir[SL_CG_PIDS], "pids.events");
	} else if (cg->ops == &sandlot__cgroup_v2_ops) {
		*oom_fd = open_in(cg->dir[0], "memory.events");
		*pids_fd = open_in(cg->dir[0], "pids.events");
	}
}

/* GLOB_ONLYDIR is a glibc extension, and only a hint there; musl (the
 * static `sandlot`, src/cli/meson.build) has no such flag.  Nothing but a
 * cgroup's directory can match the patterns below anyway. */
#ifndef GLOB_ONLYDIR
#define GLOB_ONLYDIR 0
#endif

/* Every directory of the cgroup named `name` (v1: one per hierarchy; v2:
 * one), as a glob over the roots this process uses. */
static int named_dirs(const char *name, glob_t *g)
{
	char pat[PATH_MAX];
	const char *mode = sandlot__cgroup_mode();
	if (!valid_name(name))
		return -1;
	int rc;
	if (!strcmp(mode, "v1"))
		rc = sandlot__cg_pathf(pat, "%s/*/sandlot/%s", sandlot__cgroup_v1_root(), name);
	else if (!strcmp(mode, "v2"))
		rc = sandlot__cg_pathf(pat, "%s/sandlot/%s", sandlot__cgroup_v2_root(), name);
	else
		return -1;
	if (rc < 0)
		return -1;
	return glob(pat, GLOB_NOSORT | GLOB_ONLYDIR, NULL, g) == 0 ? 0 : -1;
}

/* sandlot__cgroup_remove_named() lists the directories once: a glob over
 * the v1 roots reads the root and looks up <controller>/sandlot/<name> in
 * each of its ten or so hierarchies, and sandlotd does this after every
 * sandbox it ends (two listings per call, three with kill, took about 5 %
 * of its CPU time in a burst of 200 concurrent creates and deletes).  It
 * never lists the directories every sandbox's cgroup is in either: that
 * would cost time in proportion to the sandboxes alive.
 *
 * A directory counts as remaining unless its rmdir succeeded or found it
 * gone (v1 hierarchies mounted together appear under each name: the
 * second rmdir of one finds it gone).  None is removed while a process is
 * left in any, nor when `name` is a free prepared cgroup. */
int sandlot__cgroup_remove_named(const char *name, int kill)
{
	glob_t g;
	if (named_dirs(name, &g) < 0)
		return 0;
	if (kill)
		for (size_t i = 0; i < g.gl_pathc; i++)
			sandlot__cg_kill_procs(g.gl_pathv[i]);
	bool keep = sandlot__cgroup_pool_has(name);
	for (size_t i = 0; i < g.gl_pathc && !keep; i++)
		keep = !sandlot__cg_dir_empty(g.gl_pathv[i]);
	int left = 0;
	for (size_t i = 0; i < g.gl_pathc && !left; i++)
		left = keep || (rmdir(g.gl_pathv[i]) < 0 && errno != ENOENT);
	globfree(&g);
	return left;
}
