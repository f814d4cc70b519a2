/* cgroup v2: one directory, <v2 root>/sandlot/<name>.  See cgroup.h for the
 * contract.
 *
 * Controllers (memory, pids, cpu) have to be enabled top-down: a cgroup only
 * gets memory.max if its parent lists "memory" in cgroup.subtree_control.  So
 * create enables each one the host offers in the root's and in sandlot/'s
 * subtree_control (the root is exempt from the "no internal processes" rule,
 * and sandlot/ itself never holds a process).  A controller the host does not
 * offer only fails creation when a limit needs it; without it the matching
 * usage counters read 0.
 *
 * memory.max caps RAM and memory.swap.max 0 forbids swap, so the limit is on
 * memory incl. swap as the interface promises.  cgroup.kill (5.14) kills
 * everything inside atomically, forks in flight included.
 */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "common/cleanup.h"
#include "common/util.h"

#define KILL_TIMEOUT_MS 2000

/* Whether the space-separated list in "<dir>/<file>" holds word. */
static bool list_has(const char *dir, const char *file, const char *word)
{
	cleanup_free char *s = sandlot__cg_read(dir, file);
	if (!s)
		return false;
	size_t wl = strlen(word);
	for (char *p = s; (p = strstr(p, word)); p += wl) {
		bool start = p == s || p[-1] == ' ' || p[-1] == '\n';
		bool end = p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n';
		if (start && end)
			return true;
	}
	return false;
}

static char *list_text(const char *dir, const char *file)
{
	char *s = sandlot__cg_read(dir, file);
	if (s) {
		size_t n = strlen(s);
		while (n && s[n - 1] == '\n')
			s[--n] = '\0';
	}
	return s;
}

/* The controllers this backend uses, and what needs each. */
static const struct {
	const char *name;
	const char *needed_for;
} ctrls[] = {
	{ "memory", "the memory limit" },
	{ "pids", "the process limit" },
	{ "cpu", "the CPU limit" },
};

static bool needed(const struct sandlot_cgroup_limits *lim, size_t i)
{
	switch (i) {
	case 0: return lim->memory_bytes != 0;
	case 1: return lim->pids != 0;
	default: return lim->cpus_milli != 0;
	}
}

/* Make sure every controller in `want` that dir offers is enabled in its
 * subtree_control.  Fails only for a controller a limit needs. */
static int enable_controllers(const char *dir, const struct sandlot_cgroup_limits *lim,
			      sandlot_error_t **err)
{
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(ctrls); i++) {
		const char *c = ctrls[i].name;
		if (!list_has(dir, "cgroup.controllers", c)) {
			if (!needed(lim, i))
				continue;
			cleanup_free char *have = list_text(dir, "cgroup.controllers");
			return sandlot__error(err, ENOTSUP,
					      "cgroup v2 controller \"%s\" is not available in %s "
					      "(cgroup.controllers: \"%s\"); it is needed for %s",
					      c, dir, have ? have : "", ctrls[i].needed_for);
		}
		if (list_has(dir, "cgroup.subtree_control", c))
			continue;
		char plus[32];
		snprintf(plus, sizeof(plus), "+%s", c);
		if (sandlot__cg_write(dir, "cgroup.subtree_control", plus) < 0 && needed(lim, i))
			return sandlot__error_errno(err, errno,
						    "enable cgroup v2 controller \"%s\" in "
						    "%s/cgroup.subtree_control (needed for %s)",
						    c, dir, ctrls[i].needed_for);
	}
	return 0;
}

static int write_str(const char *dir, const char *file, const char *value, sandlot_error_t **err)
{
	if (sandlot__cg_write(dir, file, value) < 0)
		return sandlot__error_errno(err, errno, "write \"%s\" to %s/%s", value, dir, file);
	return 0;
}

/* Write the limits in `lim` that differ from `old` (NULL: a fresh cgroup,
 * no limits yet).  0 means "no limit" in both. */
static int apply_limits(const char *dir, const struct sandlot_cgroup_limits *old,
			const struct sandlot_cgroup_limits *lim, sandlot_error_t **err)
{
	static const struct sandlot_cgroup_limits fresh = { 0, 0, 0 };
	bool is_fresh = !old;
	if (!old)
		old = &fresh;
	char buf[64];
	if (lim->memory_bytes != old->memory_bytes) {
		if (lim->memory_bytes)
			snprintf(buf, sizeof(buf), "%llu", (unsigned long long)lim->memory_bytes);
		else
			snprintf(buf, sizeof(buf), "max");
		if (write_str(dir, "memory.max", buf, err) < 0)
			return -1;
	}
	/* Absent without swap accounting; then there is no swap to use.  Set
	 * with the first memory limit (a prepared cgroup that had one has it). */
	if (lim->memory_bytes && (is_fresh || !old->memory_bytes) &&
	    sandlot__cg_exists(dir, "memory.swap.max") &&
	    write_str(dir, "memory.swap.max", "0", err) < 0)
		return -1;
	if (lim->pids != old->pids) {
		if (lim->pids)
			snprintf(buf, sizeof(buf), "%u", lim->pids);
		else
			snprintf(buf, sizeof(buf), "max");
		if (write_str(dir, "pids.max", buf, err) < 0)
			return -1;
	}
	if (lim->cpus_milli != old->cpus_milli) {
		if (lim->cpus_milli) {
			uint64_t quota, period;
			sandlot__cg_cpu_quota(lim->cpus_milli, &quota, &period);
			snprintf(buf, sizeof(buf), "%llu %llu", (unsigned long long)quota,
				 (unsigned long long)period);
		} else {
			snprintf(buf, sizeof(buf), "max 100000");
		}
		if (write_str(dir, "cpu.max", buf, err) < 0)
			return -1;
	}
	return 0;
}

static int v2_create(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *lim,
		     sandlot_error_t **err)
{
	static const struct sandlot_cgroup_limits none = { 0, 0, 0 };
	if (!lim)
		lim = &none;
	const char *root = sandlot__cgroup_v2_root();
	struct statfs sfs;
	if (statfs(root, &sfs) < 0 || (long)sfs.f_type != CGROUP2_SUPER_MAGIC)
		return sandlot__error(err, ENOTSUP, "%s is not a cgroup2 mount", root);

	if (enable_controllers(root, lim, err) < 0)
		return -1;
	char parent[PATH_MAX];
	if (sandlot__cg_pathf(parent, "%s/sandlot/%s", root, cg->name) < 0)
		return sandlot__error_errno(err, errno, "cgroup path under %s", root);
	*strrchr(parent, '/') = '\0'; /* the full path fits, so the parent does */
	if (mkdir(parent, 0755) < 0 && errno != EEXIST)
		return sandlot__error_errno(err, errno, "mkdir %s", parent);
	if (enable_controllers(parent, lim, err) < 0)
		return -1;

	if (asprintf(&cg->dir[0], "%s/%s", parent, cg->name) < 0) {
		cg->dir[0] = NULL;
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	if (mkdir(cg->dir[0], 0755) < 0) {
		if (errno == EEXIST)
			return sandlot__error(err, EEXIST, "%s already exists", cg->dir[0]);
		return sandlot__error_errno(err, errno, "mkdir %s", cg->dir[0]);
	}
	cg->owned[0] = true;
	if (apply_limits(cg->dir[0], NULL, lim, err) < 0) {
		sandlot__cg_rmdirs(cg);
		return -1;
	}
	return 0;
}

static int v2_adopt(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *preset,
		    const struct sandlot_cgroup_limits *lim, sandlot_error_t **err)
{
	if (asprintf(&cg->dir[0], "%s/sandlot/%s", sandlot__cgroup_v2_root(), cg->name) < 0) {
		cg->dir[0] = NULL;
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	struct stat st;
	if (stat(cg->dir[0], &st) < 0)
		return sandlot__error_errno(err, errno, "prepared cgroup %s", cg->dir[0]);
	cg->owned[0] = true;
	/* A limit the preset lacked needs its controller, which the pool
	 * filler enabled where the host offers it. */
	if ((lim->memory_bytes && !preset->memory_bytes && !sandlot__cg_exists(cg->dir[0], "memory.max")) ||
	    (lim->pids && !preset->pids && !sandlot__cg_exists(cg->dir[0], "pids.max")) ||
	    (lim->cpus_milli && !preset->cpus_milli && !sandlot__cg_exists(cg->dir[0], "cpu.max")))
		return sandlot__error(err, ENOTSUP, "prepared cgroup %s lacks a controller", cg->dir[0]);
	return apply_limits(cg->dir[0], preset, lim, err);
}

static int v2_add_pid(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err)
{
	char buf[16];
	snprintf(buf, sizeof(buf), "%d", (int)pid);
	if (sandlot__cg_write(cg->dir[0], "cgroup.procs", buf) < 0)
		return sandlot__error_errno(err, errno, "add pid %d to %s", (int)pid, cg->dir[0]);
	return 0;
}

static int v2_usage(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err)
{
	const char *dir = cg->dir[0];
	size_t n = 0;
	cleanup_free pid_t *procs = sandlot__cg_procs(dir, &n);
	if (!procs)
		return sandlot__error_errno(err, errno, "read %s/cgroup.procs", dir);

	uint64_t v;
	sandlot__cg_read_u64(dir, "memory.current", &out->memory_bytes);
	sandlot__cg_read_u64(dir, "memory.peak", &out->memory_peak_bytes); /* 5.19+ */
	sandlot__cg_read_key(dir, "memory.events", "oom_kill", &out->oom_kills);
	if (sandlot__cg_read_u64(dir, "pids.current", &v) == 0)
		out->pids = (uint32_t)v;
	else
		out->pids = (uint32_t)n;
	sandlot__cg_read_key(dir, "pids.events", "max", &out->pids_limit_hits);
	sandlot__cg_read_key(dir, "cpu.stat", "usage_usec", &out->cpu_usec);
	return 0;
}

static int v2_kill(sandlot_cgroup_t *cg, sandlot_error_t **err)
{
	const char *dir = cg->dir[0];
	bool has_kill = sandlot__cg_exists(dir, "cgroup.kill");
	uint64_t deadline = sandlot__now_ms() + KILL_TIMEOUT_MS;
	for (int round = 0;; round++) {
		if (sandlot__cg_dir_empty(dir))
			return 0;
		if (round % 50 == 0 || !has_kill) {
			if (has_kill) {
				if (sandlot__cg_write(dir, "cgroup.kill", "1") < 0)
					return sandlot__error_errno(err, errno, "write %s/cgroup.kill",
								    dir);
			} else {
				/* Before 5.14: kill what is listed, again and again;
				 * v2's freezer lets SIGKILL through, so freeze first
				 * to stop forks. */
				sandlot__cg_write(dir, "cgroup.freeze", "1");
				sandlot__cg_kill_procs(dir);
				sandlot__cg_write(dir, "cgroup.freeze", "0");
			}
		}
		if (sandlot__now_ms() >= deadline) {
			size_t n = 0;
			cleanup_free pid_t *left = sandlot__cg_procs(dir, &n);
			return sandlot__error(err, ETIMEDOUT,
					      "kill cgroup \"%s\": %zu process(es) still present "
					      "after %d ms (first: %d)",
					      cg->name, n, KILL_TIMEOUT_MS,
					      left && n ? (int)left[0] : 0);
		}
		sandlot__cg_sleep_ms(2);
	}
}

static int v2_cleanup_stale(const char *prefix, unsigned min_age_s)
{
	char parent[PATH_MAX];
	if (sandlot__cg_pathf(parent, "%s/sandlot", sandlot__cgroup_v2_root()) < 0)
		return 0;
	cleanup_closedir DIR *d = opendir(parent);
	if (!d)
		return 0;
	size_t pl = strlen(prefix);
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0 || strncmp(de->d_name, prefix, pl) != 0)
			continue;
		/* Prepared, and free: not a leftover (checked before the age). */
		if (sandlot__cgroup_pool_has(de->d_name))
			continue;
		char dir[PATH_MAX];
		if (sandlot__cg_pathf(dir, "%s/%s", parent, de->d_name) == 0 &&
		    sandlot__cg_dir_empty(dir) && !sandlot__cg_young(dir, min_age_s) && rmdir(dir) == 0)
			removed++;
	}
	return removed;
}

static const char *v2_path(sandlot_cgroup_t *cg, const char *controller)
{
	return cg->dir[0];
}

const struct sandlot_cgroup_ops sandlot__cgroup_v2_ops = {
	.mode = "v2",
	.create = v2_create,
	.adopt = v2_adopt,
	.add_pid = v2_add_pid,
	.usage = v2_usage,
	.kill = v2_kill,
	.cleanup_stale = v2_cleanup_stale,
	.path = v2_path,
};
