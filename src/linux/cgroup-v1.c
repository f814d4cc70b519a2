/* cgroup v1: one directory per controller hierarchy,
 * <v1 root>/<controller>/sandlot/<name>, for memory, pids, cpu, cpuacct and
 * freezer (whichever are mounted).  See cgroup.h for the contract.
 *
 * Why these files:
 *  - memory.limit_in_bytes caps RAM; memory.memsw.limit_in_bytes (only
 *    present with swap accounting) set to the same value caps RAM + swap, so
 *    the sandbox cannot spill past its limit into swap.  swappiness 0 keeps
 *    the kernel from swapping it at all where it lets us set that.
 *  - pids.max caps tasks; pids.events "max" counts refused forks.
 *  - cpu.cfs_quota_us / cfs_period_us is the CPU quota; cpuacct.usage the
 *    CPU time used.
 *  - freezer lets kill stop every process first, so nothing can fork while
 *    we walk cgroup.procs: v1 has no cgroup.kill.  A frozen task keeps a
 *    pending SIGKILL until thawed, then dies without running user code.
 */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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
#define FREEZE_WAIT_MS 200

static const char *const ctrl_name[SL_CG_NCTRL] = {
	[SL_CG_FREEZER] = "freezer",
	[SL_CG_MEMORY] = "memory",
	[SL_CG_PIDS] = "pids",
	[SL_CG_CPU] = "cpu",
	[SL_CG_CPUACCT] = "cpuacct",
};

/* Where each controller is mounted, and which share a mount. */
struct mounts {
	char path[SL_CG_NCTRL][PATH_MAX];
	bool present[SL_CG_NCTRL];
	int alias_of[SL_CG_NCTRL]; /* index of the first controller on the same mount, or -1 */
};

static void find_mounts_now(struct mounts *m)
{
	dev_t dev[SL_CG_NCTRL];
	const char *root = sandlot__cgroup_v1_root();
	for (int i = 0; i < SL_CG_NCTRL; i++) {
		struct statfs sfs;
		struct stat st;
		m->present[i] = sandlot__cg_pathf(m->path[i], "%s/%s", root, ctrl_name[i]) == 0 &&
				statfs(m->path[i], &sfs) == 0 &&
				(long)sfs.f_type == CGROUP_SUPER_MAGIC && stat(m->path[i], &st) == 0;
		m->alias_of[i] = -1;
		if (!m->present[i])
			continue;
		dev[i] = st.st_dev;
		for (int j = 0; j < i; j++)
			if (m->present[j] && m->alias_of[j] < 0 && dev[j] == dev[i]) {
				m->alias_of[i] = j;
				break;
			}
	}
}

/* The hierarchies are looked up once per process (ten system calls that
 * every sandbox would otherwise repeat): they are mounted at boot. */
static struct mounts cached_mounts;
static pthread_once_t mounts_once = PTHREAD_ONCE_INIT;

static void cache_mounts(void)
{
	find_mounts_now(&cached_mounts);
}

static void find_mounts(struct mounts *m)
{
	pthread_once(&mounts_once, cache_mounts);
	*m = cached_mounts;
}

static int need(const struct mounts *m, int ctrl, const char *what, sandlot_error_t **err)
{
	if (m->present[ctrl])
		return 0;
	return sandlot__error(err, ENOTSUP,
			      "cgroup v1 controller \"%s\" is not mounted at %s; it is needed for %s",
			      ctrl_name[ctrl], m->path[ctrl], what);
}

static int write_u64(const char *dir, const char *file, uint64_t v, sandlot_error_t **err)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	if (sandlot__cg_write(dir, file, buf) < 0)
		return sandlot__error_errno(err, errno, "write %s to %s/%s", buf, dir, file);
	return 0;
}

/* Write the limits in `lim` that differ from `old` (NULL: a fresh cgroup,
 * no limits yet).  0 means "no limit" in both. */
static int apply_limits(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *old,
			const struct sandlot_cgroup_limits *lim, sandlot_error_t **err)
{
	static const struct sandlot_cgroup_limits fresh = { 0, 0, 0 };
	if (!old)
		old = &fresh;
	const char *mem = cg->dir[SL_CG_MEMORY];
	if (lim->memory_bytes != old->memory_bytes) {
		/* memsw may never be below the RAM limit: lower the RAM limit
		 * first, raise memsw first.  -1 is "no limit" in v1. */
		uint64_t want = lim->memory_bytes ? lim->memory_bytes : UINT64_MAX;
		uint64_t had = old->memory_bytes ? old->memory_bytes : UINT64_MAX;
		bool memsw = sandlot__cg_exists(mem, "memory.memsw.limit_in_bytes");
		char buf[32];
		if (want == UINT64_MAX)
			snprintf(buf, sizeof(buf), "-1");
		else
			snprintf(buf, sizeof(buf), "%llu", (unsigned long long)want);
		const char *first = want < had ? "memory.limit_in_bytes" : "memory.memsw.limit_in_bytes";
		const char *second = want < had ? "memory.memsw.limit_in_bytes" : "memory.limit_in_bytes";
		if ((memsw || strcmp(first, "memory.limit_in_bytes") == 0) &&
		    sandlot__cg_write(mem, first, buf) < 0)
			return sandlot__error_errno(err, errno, "write %s to %s/%s", buf, mem, first);
		if ((memsw || strcmp(second, "memory.limit_in_bytes") == 0) &&
		    sandlot__cg_write(mem, second, buf) < 0)
			return sandlot__error_errno(err, errno, "write %s to %s/%s", buf, mem, second);
		if (lim->memory_bytes && !old->memory_bytes)
			sandlot__cg_write(mem, "memory.swappiness", "0"); /* best effort */
	}
	if (lim->pids != old->pids) {
		if (!lim->pids) {
			if (sandlot__cg_write(cg->dir[SL_CG_PIDS], "pids.max", "max") < 0)
				return sandlot__error_errno(err, errno, "write max to %s/pids.max",
							    cg->dir[SL_CG_PIDS]);
		} else if (write_u64(cg->dir[SL_CG_PIDS], "pids.max", lim->pids, err) < 0) {
			return -1;
		}
	}
	if (lim->cpus_milli != old->cpus_milli) {
		const char *cpu = cg->dir[SL_CG_CPU];
		if (!lim->cpus_milli) {
			if (sandlot__cg_write(cpu, "cpu.cfs_quota_us", "-1") < 0)
				return sandlot__error_errno(err, errno, "write -1 to %s/cpu.cfs_quota_us",
							    cpu);
		} else {
			uint64_t quota, period;
			sandlot__cg_cpu_quota(lim->cpus_milli, &quota, &period);
			/* A quota above the new period would be refused: lift it
			 * first, then set period and quota. */
			if (old->cpus_milli)
				sandlot__cg_write(cpu, "cpu.cfs_quota_us", "-1");
			if (write_u64(cpu, "cpu.cfs_period_us", period, err) < 0 ||
			    write_u64(cpu, "cpu.cfs_quota_us", quota, err) < 0)
				return -1;
		}
	}
	return 0;
}

static int v1_create(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *lim,
		     sandlot_error_t **err)
{
	static const struct sandlot_cgroup_limits none = { 0, 0, 0 };
	if (!lim)
		lim = &none;
	struct mounts m;
	find_mounts(&m);
	if (need(&m, SL_CG_MEMORY, "memory accounting", err) < 0 ||
	    (lim->pids && need(&m, SL_CG_PIDS, "the process limit", err) < 0) ||
	    (lim->cpus_milli && need(&m, SL_CG_CPU, "the CPU limit", err) < 0))
		return -1;

	for (int i = 0; i < SL_CG_NCTRL; i++) {
		if (!m.present[i])
			continue;
		if (m.alias_of[i] >= 0) {
			/* Co-mounted (e.g. cpu,cpuacct): same directory, made once. */
			cg->dir[i] = strdup(cg->dir[m.alias_of[i]]);
			if (!cg->dir[i])
				goto nomem;
			continue;
		}
		char parent[PATH_MAX];
		if (sandlot__cg_pathf(parent, "%s/sandlot/%s", m.path[i], cg->name) < 0) {
			sandlot__error_errno(err, errno, "cgroup path under %s", m.path[i]);
			goto fail;
		}
		*strrchr(parent, '/') = '\0'; /* the full path fits, so the parent does */
		if (mkdir(parent, 0755) < 0 && errno != EEXIST) {
			sandlot__error_errno(err, errno, "mkdir %s", parent);
			goto fail;
		}
		if (asprintf(&cg->dir[i], "%s/%s", parent, cg->name) < 0) {
			cg->dir[i] = NULL;
			goto nomem;
		}
		if (mkdir(cg->dir[i], 0755) < 0) {
			if (errno == EEXIST)
				sandlot__error(err, EEXIST, "%s already exists", cg->dir[i]);
			else
				sandlot__error_errno(err, errno, "mkdir %s", cg->dir[i]);
			goto fail;
		}
		cg->owned[i] = true;
	}
	if (apply_limits(cg, NULL, lim, err) < 0)
		goto fail;
	return 0;

nomem:
	sandlot__error(err, ENOMEM, "out of memory");
fail:
	sandlot__cg_rmdirs(cg);
	return -1;
}

static int v1_adopt(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *preset,
		    const struct sandlot_cgroup_limits *lim, sandlot_error_t **err)
{
	struct mounts m;
	find_mounts(&m);
	if (need(&m, SL_CG_MEMORY, "memory accounting", err) < 0 ||
	    (lim->pids && need(&m, SL_CG_PIDS, "the process limit", err) < 0) ||
	    (lim->cpus_milli && need(&m, SL_CG_CPU, "the CPU limit", err) < 0))
		return -1;
	/* Every directory must be there (the memory one was just touched by
	 * the taker); those that are become ours either way, so that a
	 * cgroup found incomplete is removed whole by the caller. */
	int missing = 0;
	for (int i = 0; i < SL_CG_NCTRL; i++) {
		if (!m.present[i])
			continue;
		if (m.alias_of[i] >= 0) {
			cg->dir[i] = strdup(cg->dir[m.alias_of[i]]);
		} else if (asprintf(&cg->dir[i], "%s/sandlot/%s", m.path[i], cg->name) < 0) {
			cg->dir[i] = NULL;
		} else if (i != SL_CG_MEMORY && access(cg->dir[i], F_OK) < 0) {
			missing = errno;
		} else {
			cg->owned[i] = true;
		}
		if (!cg->dir[i])
			return sandlot__error(err, ENOMEM, "out of memory");
	}
	if (missing)
		return sandlot__error_errno(err, missing, "prepared cgroup %s is incomplete", cg->name);
	return apply_limits(cg, preset, lim, err);
}

static int v1_add_pid(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err)
{
	char buf[16];
	snprintf(buf, sizeof(buf), "%d", (int)pid);
	for (int i = 0; i < SL_CG_NCTRL; i++) {
		if (!cg->owned[i])
			continue;
		if (sandlot__cg_write(cg->dir[i], "cgroup.procs", buf) < 0)
			return sandlot__error_errno(err, errno, "add pid %d to %s", (int)pid,
						    cg->dir[i]);
	}
	return 0;
}

static int v1_usage(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err)
{
	const char *mem = cg->dir[SL_CG_MEMORY];
	if (sandlot__cg_read_u64(mem, "memory.usage_in_bytes", &out->memory_bytes) < 0)
		return sandlot__error_errno(err, errno, "read %s/memory.usage_in_bytes", mem);
	sandlot__cg_read_u64(mem, "memory.max_usage_in_bytes", &out->memory_peak_bytes);
	sandlot__cg_read_key(mem, "memory.oom_control", "oom_kill", &out->oom_kills);

	uint64_t v;
	const char *pids = cg->dir[SL_CG_PIDS];
	if (pids && sandlot__cg_read_u64(pids, "pids.current", &v) == 0) {
		out->pids = (uint32_t)v;
	} else {
		size_t n = 0;
		free(sandlot__cg_procs(mem, &n)); /* no pids hierarchy: count processes */
		out->pids = (uint32_t)n;
	}
	/* In v1 pids.events "max" counts the forks refused in this cgroup. */
	if (pids)
		sandlot__cg_read_key(pids, "pids.events", "max", &out->pids_limit_hits);

	const char *acct = cg->dir[SL_CG_CPUACCT];
	if (acct && sandlot__cg_read_u64(acct, "cpuacct.usage", &v) == 0)
		out->cpu_usec = v / 1000; /* nanoseconds */
	return 0;
}

static bool freezer_state_is(const char *dir, const char *state)
{
	cleanup_free char *s = sandlot__cg_read(dir, "freezer.state");
	return s && strncmp(s, state, strlen(state)) == 0 && (s[strlen(state)] == '\n' ||
							      s[strlen(state)] == '\0');
}

static bool all_empty(sandlot_cgroup_t *cg)
{
	for (int i = 0; i < SL_CG_NCTRL; i++)
		if (cg->owned[i] && !sandlot__cg_dir_empty(cg->dir[i]))
			return false;
	return true;
}

static int v1_kill(sandlot_cgroup_t *cg, sandlot_error_t **err)
{
	const char *fz = cg->dir[SL_CG_FREEZER]; /* first in the table: never an alias */
	uint64_t deadline = sandlot__now_ms() + KILL_TIMEOUT_MS;
	for (;;) {
		if (all_empty(cg))
			return 0;
		if (fz) {
			/* FREEZING until every task is frozen; writing FROZEN again
			 * retries tasks that were busy.  Go on regardless after a
			 * while: a task that never freezes still gets SIGKILL. */
			uint64_t until = sandlot__now_ms() + FREEZE_WAIT_MS;
			while (sandlot__cg_write(fz, "freezer.state", "FROZEN") == 0 &&
			       !freezer_state_is(fz, "FROZEN") && sandlot__now_ms() < until)
				sandlot__cg_sleep_ms(1);
		}
		for (int i = 0; i < SL_CG_NCTRL; i++)
			if (cg->owned[i])
				sandlot__cg_kill_procs(cg->dir[i]);
		if (fz)
			sandlot__cg_write(fz, "freezer.state", "THAWED");

		/* Let the killed tasks exit before looking again. */
		for (int t = 0; t < 50 && !all_empty(cg); t++)
			sandlot__cg_sleep_ms(2);
		if (all_empty(cg))
			return 0;
		if (sandlot__now_ms() >= deadline) {
			size_t n = 0;
			cleanup_free pid_t *left = sandlot__cg_procs(cg->dir[SL_CG_MEMORY], &n);
			return sandlot__error(err, ETIMEDOUT,
					      "kill cgroup \"%s\": %zu process(es) still present "
					      "after %d ms (first: %d)",
					      cg->name, n, KILL_TIMEOUT_MS,
					      left && n ? (int)left[0] : 0);
		}
	}
}

/* A set of cgroup names. */
struct names {
	char **v;
	size_t n;
};

static void names_add(struct names *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], name) == 0)
			return;
	char *copy = strdup(name);
	char **grown = copy ? realloc(l->v, (l->n + 1) * sizeof(*l->v)) : NULL;
	if (!grown) {
		free(copy);
		return; /* out of memory: that one is not cleaned up this time */
	}
	l->v = grown;
	l->v[l->n++] = copy;
}

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Add the names under <mount>/sandlot that start with prefix. */
static void collect_names(const char *mount, const char *prefix, struct names *l)
{
	char parent[PATH_MAX];
	if (sandlot__cg_pathf(parent, "%s/sandlot", mount) < 0)
		return;
	cleanup_closedir DIR *d = opendir(parent);
	if (!d)
		return;
	size_t pl = strlen(prefix);
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0 && strncmp(de->d_name, prefix, pl) == 0)
			names_add(l, de->d_name);
}

static int v1_cleanup_stale(const char *prefix, unsigned min_age_s)
{
	struct mounts m;
	find_mounts(&m);
	struct names l = { NULL, 0 };
	for (int i = 0; i < SL_CG_NCTRL; i++)
		if (m.present[i] && m.alias_of[i] < 0)
			collect_names(m.path[i], prefix, &l);

	int removed = 0;
	for (size_t k = 0; k < l.n; k++) {
		/* Prepared, and free: not a leftover.  (Checked before the age:
		 * see sandlot__cgroup_pool_take.) */
		if (sandlot__cgroup_pool_has(l.v[k]))
			continue;
		/* Live in any hierarchy means live: leave all of it alone. */
		char dir[SL_CG_NCTRL][PATH_MAX];
		bool live = false;
		for (int i = 0; i < SL_CG_NCTRL; i++) {
			dir[i][0] = '\0';
			if (!m.present[i] || m.alias_of[i] >= 0)
				continue;
			if (sandlot__cg_pathf(dir[i], "%s/sandlot/%s", m.path[i], l.v[k]) < 0 ||
			    !sandlot__cg_dir_empty(dir[i]) || sandlot__cg_young(dir[i], min_age_s))
				live = true;
		}
		if (live)
			continue;
		bool any = false;
		for (int i = 0; i < SL_CG_NCTRL; i++)
			if (dir[i][0] && rmdir(dir[i]) == 0)
				any = true;
		removed += any;
	}
	names_free(&l);
	return removed;
}

static const char *v1_path(sandlot_cgroup_t *cg, const char *controller)
{
	if (!*controller)
		return cg->dir[SL_CG_MEMORY];
	for (int i = 0; i < SL_CG_NCTRL; i++)
		if (strcmp(controller, ctrl_name[i]) == 0)
			return cg->dir[i];
	return NULL;
}

const struct sandlot_cgroup_ops sandlot__cgroup_v1_ops = {
	.mode = "v1",
	.create = v1_create,
	.adopt = v1_adopt,
	.add_pid = v1_add_pid,
	.usage = v1_usage,
	.kill = v1_kill,
	.cleanup_stale = v1_cleanup_stale,
	.path = v1_path,
};
