/* Sandbox lifecycle: options, create, destroy. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/sbid.h"
#include "common/util.h"
#include "core/private.h"
#include "core/sized.h"
#include "linux/cgroup.h"
#include "linux/storage.h"
#include "net/policy.h"

#define DEFAULT_MEMORY (512ull << 20)
#define DEFAULT_DISK (1ull << 30)
#define DEFAULT_PIDS 256
#define DEFAULT_NOFILE 1024
#define MIN_MEMORY (16ull << 20)
#define MIN_DISK (16ull << 20)
#define DEFAULT_CHANGES_MAX (8ull << 20)
#define MIN_CHANGES_MAX (4ull << 10)
#define MAX_SCAN_MEMORY_DEFAULT (32ull << 20)
#define MIN_SCAN_MEMORY (64ull << 10)

/* Writes `size` bytes, the caller's sizeof (the sandlot_options_init()
 * macro): the defaults of the fields an older caller knows.  A size below
 * the size field's is a no-op, since nothing could be written safely; the
 * size it leaves (or the caller's garbage) fails later with EINVAL. */
void sandlot_options_init_sized(sandlot_options_t *o, size_t size)
{
	sandlot_options_t d;
	memset(&d, 0, sizeof(d));
	d.image = "host";
	d.memory_bytes = DEFAULT_MEMORY;
	d.pids = DEFAULT_PIDS;
	d.disk_bytes = DEFAULT_DISK;
	d.nofile = DEFAULT_NOFILE;
	d.hostname = "sandlot";
	d.network = SANDLOT_NET_NONE;
	if (size < sizeof(d.size))
		return;
	d.size = size;
	if (size > sizeof(d)) {
		/* A caller with a newer sandlot.h: the fields this library does
		 * not know are 0, their default. */
		memset((char *)o + sizeof(d), 0, size - sizeof(d));
		size = sizeof(d);
	}
	memcpy(o, &d, size);
}

void sandlot__strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static size_t key_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) : strlen(kv);
}

char **sandlot__env_merge(char *const *base, const char *const *extra)
{
	size_t nb = 0, ne = 0;
	while (base && base[nb])
		nb++;
	while (extra && extra[ne])
		ne++;
	char **out = calloc(nb + ne + 1, sizeof(char *));
	if (!out)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < nb + ne; i++) {
		const char *kv = i < nb ? base[i] : extra[i - nb];
		size_t kl = key_len(kv);
		size_t j;
		for (j = 0; j < n; j++)
			if (key_len(out[j]) == kl && strncmp(out[j], kv, kl) == 0)
				break;
		char *dup = strdup(kv);
		if (!dup) {
			sandlot__strv_free(out);
			return NULL;
		}
		if (j < n) {
			free(out[j]);
			out[j] = dup;
		} else {
			out[n++] = dup;
		}
	}
	return out;
}

static int validate_env(const char *const *env, sandlot_error_t **err)
{
	for (size_t i = 0; env && env[i]; i++) {
		const char *eq = strchr(env[i], '=');
		if (!eq || eq == env[i])
			return sandlot__error(err, EINVAL,
					      "invalid environment entry \"%s\": expected KEY=VALUE", env[i]);
	}
	return 0;
}

/* sandlot-init next to the running program (build/bin, or an install's
 * bin/ + libexec/sandlot/), unless SANDLOT_INIT or the options say where;
 * else the usual system places and where this library's install put it. */
static char *find_init(const char *given, sandlot_error_t **err)
{
	const char *env = getenv("SANDLOT_INIT");
	const char *want = given ? given : env;
	if (want) {
		if (access(want, X_OK) < 0)
			return sandlot__error_errno(err, errno, "sandlot-init at %s", want), NULL;
		return strdup(want);
	}
	static const char *const rel[] = {
		"/sandlot-init", "/../libexec/sandlot/sandlot-init",
		"/../lib/sandlot/sandlot-init", "/../bin/sandlot-init", NULL,
	};
	static const char *const sys[] = {
		"/usr/libexec/sandlot/sandlot-init", "/usr/local/libexec/sandlot/sandlot-init",
		"/usr/lib/sandlot/sandlot-init",
#ifdef SANDLOT_INSTALLED_INIT
		SANDLOT_INSTALLED_INIT, /* where `meson install` put it */
#endif
		NULL,
	};
	char *found = sandlot__find_beside_self(rel, sys, "", X_OK);
	if (found || errno == ENOMEM)
		return found ? found : (sandlot__error(err, ENOMEM, "out of memory"), NULL);
	sandlot__error(err, ENOENT,
		       "sandlot-init not found next to this program; set SANDLOT_INIT to its path");
	return NULL;
}

static int check_hostname(const char *h, sandlot_error_t **err)
{
	size_t n = strlen(h);
	if (n == 0 || n > 63)
		return sandlot__error(err, EINVAL, "invalid hostname \"%s\": 1 to 63 characters", h);
	for (const char *p = h; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-'))
			return sandlot__error(err, EINVAL,
					      "invalid hostname \"%s\": letters, digits and '-' only", h);
	return 0;
}

static const char *const default_env[] = {
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/home/user",
	"USER=user",
	"LOGNAME=user",
	"SHELL=/bin/bash",
	"LANG=C.UTF-8",
	"TMPDIR=/tmp",
	"HOSTNAME=sandlot",
	/* Agents watch output live; Python block-buffers it when not a tty. */
	"PYTHONUNBUFFERED=1",
	NULL,
};

/* Either shape of common/sbid.h, what sandlot__sbid_new() makes. */
int sandlot__sandbox_id_valid(const char *id)
{
	return id && sandlot__sbid_parse(id, strlen(id), NULL);
}

/* sandlot_options_validate(); a built image is looked up only with
 * check_image (sandlot_create() opens it right after, which looks it up). */
static int validate(const sandlot_options_t *opts, int check_image, sandlot_error_t **err)
{
	if (opts->memory_bytes && opts->memory_bytes < MIN_MEMORY)
		return sandlot__error(err, EINVAL, "memory limit of %llu bytes is below the minimum of 16M",
				      (unsigned long long)opts->memory_bytes);
	if (opts->disk_bytes && opts->disk_bytes < MIN_DISK)
		return sandlot__error(err, EINVAL, "disk size of %llu bytes is below the minimum of 16M",
				      (unsigned long long)opts->disk_bytes);
	if (opts->pids == 1)
		return sandlot__error(err, EINVAL,
				      "pids limit of 1 is too low: init and a command need at least 2");
	if (opts->changes_max_bytes && opts->changes_max_bytes < MIN_CHANGES_MAX)
		return sandlot__error(err, EINVAL,
				      "changes limit of %llu bytes is below the minimum of 4K",
				      (unsigned long long)opts->changes_max_bytes);
	uint64_t memory = opts->memory_bytes ? opts->memory_bytes : DEFAULT_MEMORY;
	if (opts->scan_memory_bytes &&
	    (opts->scan_memory_bytes < MIN_SCAN_MEMORY || opts->scan_memory_bytes > memory / 4))
		return sandlot__error(err, EINVAL,
				      "scan memory of %llu bytes is outside 64K to a quarter of the "
				      "memory limit (%llu bytes)",
				      (unsigned long long)opts->scan_memory_bytes,
				      (unsigned long long)memory);
	if (opts->storage != SANDLOT_STORAGE_DEFAULT && opts->storage != SANDLOT_STORAGE_POOL &&
	    opts->storage != SANDLOT_STORAGE_TMPFS)
		return sandlot__error(err, EINVAL, "unknown storage kind %d", (int)opts->storage);
	if (opts->workspace && sandlot__workspace_name_check(opts->workspace, err) < 0)
		return -1;
	if (opts->workspace && opts->storage == SANDLOT_STORAGE_TMPFS)
		return sandlot__error(err, EINVAL,
				      "a kept workspace needs pool storage, not tmpfs");
	if (sandlot__overcommit_check(opts, err) < 0)
		return -1;
	if (opts->id && !sandlot__sandbox_id_valid(opts->id))
		return sandlot__error(err, EINVAL,
				      "invalid sandbox id \"%.64s\": " SANDLOT_SBID_EXPECTED, opts->id);
	if (validate_env(opts->env, err) < 0)
		return -1;
	if (opts->hostname && check_hostname(opts->hostname, err) < 0)
		return -1;
	struct sl_policy *net = sandlot__net_policy_of(opts, err);
	if (!net)
		return -1;
	sl_policy_unref(net);
	if (!sandlot__backend_for(opts, err))
		return -1;
	if (check_image && opts->image && strcmp(opts->image, "host") != 0) {
		char digest[SANDLOT_DIGEST_HEX + 1];
		if (sandlot__image_resolve(sandlot__data_dir(opts->data_dir), opts->image, digest,
					   err) < 0)
			return -1;
	}
	return 0;
}

int sandlot_options_validate(const sandlot_options_t *opts, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (!opts) {
		sandlot_options_init(&o);
		return validate(&o, 1, err);
	}
	if (sandlot__options_copy(opts, &o, err) < 0)
		return -1;
	return validate(&o, 1, err);
}

/* opts with the defaults of unset limits applied (what a sandbox gets). */
static void effective(const sandlot_options_t *in, sandlot_options_t *out)
{
	*out = *in;
	if (!out->memory_bytes)
		out->memory_bytes = DEFAULT_MEMORY;
	if (!out->disk_bytes)
		out->disk_bytes = DEFAULT_DISK;
	if (!out->pids)
		out->pids = DEFAULT_PIDS;
	if (!out->nofile)
		out->nofile = DEFAULT_NOFILE;
	if (!out->changes_max_bytes)
		out->changes_max_bytes = DEFAULT_CHANGES_MAX;
	/* The walk's memory is init's, inside the sandbox's limit: a sixteenth
	 * of it (the baseline and the new snapshot: an eighth at most). */
	if (!out->scan_memory_bytes) {
		uint64_t m = out->memory_bytes / 16;
		out->scan_memory_bytes = m > MAX_SCAN_MEMORY_DEFAULT ? MAX_SCAN_MEMORY_DEFAULT
				: m < MIN_SCAN_MEMORY ? MIN_SCAN_MEMORY : m;
	}
}

int sandlot_prepare(const sandlot_options_t *likely, unsigned count, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (!likely)
		sandlot_options_init(&o);
	else if (sandlot__options_copy(likely, &o, err) < 0)
		return -1;
	likely = &o;
	/* Stopping works whatever the options say now (the image may be gone
	 * since). */
	if (count && sandlot_options_validate(likely, err) < 0)
		return -1;
	const struct sandlot_backend_ops *ops = sandlot__backend_for(likely, err);
	if (!ops)
		return -1;
	sandlot_options_t eff;
	effective(likely, &eff);
	return ops->prepare ? ops->prepare(&eff, count, err) : 0;
}

void sandlot_new_id(const sandlot_options_t *opts, char id[32])
{
	sandlot_options_t o;
	/* Options this library cannot read: the defaults' id (an id is
	 * never wrong, it may just not find resources prepared for it). */
	if (!opts || sandlot__options_copy(opts, &o, NULL) < 0)
		sandlot_options_init(&o);
	opts = &o;
	const struct sandlot_backend_ops *ops = sandlot__backend_for(opts, NULL);
	sandlot_options_t eff;
	effective(opts, &eff);
	if (ops && ops->new_id)
		ops->new_id(&eff, id);
	else
		sandlot__sbid_new(id);
}

void sandlot_release_id(const char *id)
{
	sandlot__cgroup_pool_return(id);
}

/* Wait for init's HELLO and its answer to CONFIG, then for the backend's
 * side (whose report, when it has one, says why init never answered). */
static int wait_ready(sandlot_t *sb, sandlot_error_t **err)
{
	sandlot_error_t *hello_err = NULL;
	unsigned timeout = sb->ops->ready_timeout_ms ? sb->ops->ready_timeout_ms : 10000;
	int hello = sandlot__conn_wait_ready(&sb->conn, timeout, &hello_err);
	if (sb->ops->ready(sb, err) < 0) {
		sandlot_error_free(hello_err);
		return -1;
	}
	/* ready may have waited on (a VM whose boot the host slowed down). */
	if (hello < 0 && sandlot__conn_wait_ready(&sb->conn, 0, NULL) == 0) {
		sandlot_error_free(hello_err);
		hello_err = NULL;
		hello = 0;
	}
	if (hello < 0) {
		if (err)
			*err = hello_err;
		else
			sandlot_error_free(hello_err);
		return -1;
	}
	sandlot__trace("hello");
	if (sandlot__net_start(sb, err) < 0)
		return -1;
	sandlot__trace("network");
	return 0;
}

int sandlot_wait_ready(sandlot_t *sb, sandlot_error_t **err)
{
	pthread_mutex_lock(&sb->ready_lock);
	if (sb->ready == 0) {
		sandlot_error_t *e = NULL;
		if (wait_ready(sb, &e) == 0) {
			sb->ready = 1;
		} else {
			sb->ready = -1;
			sb->ready_status = sandlot_error_status(e);
			sb->ready_msg = strdup(sandlot_error_message(e));
			sandlot_error_free(e);
		}
	}
	int rc = sb->ready;
	if (rc < 0)
		sandlot__error(err, sb->ready_status, "create sandbox: %s",
			       sb->ready_msg ? sb->ready_msg : "set-up failed");
	pthread_mutex_unlock(&sb->ready_lock);
	return rc < 0 ? -1 : 0;
}

static void free_sandbox(sandlot_t *sb)
{
	if (sb->conn_open)
		sandlot__conn_free(&sb->conn);
	pthread_mutex_destroy(&sb->env_lock);
	pthread_mutex_destroy(&sb->ready_lock);
	free(sb->ready_msg);
	pthread_mutex_destroy(&sb->net_lock);
	sl_policy_unref(sb->net_policy);
	sandlot__image_release(&sb->img);
	sandlot__strv_free(sb->env);
	free(sb->image);
	free(sb->hostname);
	free(sb->data_dir);
	free(sb->workspace);
	free(sb->init_path);
	free(sb);
}

/* sandlot_create(), or with `resume` sandlot_resume(). */
static sandlot_t *create(const sandlot_options_t *opts, int resume, sandlot_error_t **err)
{
	const char *what = resume ? "resume sandbox" : "create sandbox";
	sandlot_options_t given;
	if (!opts)
		sandlot_options_init(&given);
	else if (sandlot__options_copy(opts, &given, err) < 0)
		return NULL;
	opts = &given;
	if (validate(opts, 0, err) < 0)
		return NULL;
	const struct sandlot_backend_ops *ops = sandlot__backend_for(opts, err);
	if (!ops)
		return NULL;
	if (resume && !opts->workspace)
		return sandlot__error(err, EINVAL, "resume sandbox: no workspace named (the paused "
				      "sandbox's sandlot_options_t.workspace)"), NULL;
	if (resume && !ops->resume)
		return sandlot__error(err, ENOTSUP, "resume sandbox: the %s backend cannot resume "
				      "sandboxes", ops->name), NULL;

	sandlot_t *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	sb->conn_fd = -1;
	sb->img.lock_fd = -1;
	sb->refs = 1;
	pthread_mutex_init(&sb->env_lock, NULL);
	pthread_mutex_init(&sb->ready_lock, NULL);
	sb->ready = opts->start_nowait ? 0 : 1;
	effective(opts, &sb->opts);
	/* Without an id of the caller's, the backend may still choose one
	 * (the ns backend names a sandbox after the prepared cgroup it takes). */
	sb->id_given = opts->id != NULL;
	pthread_mutex_init(&sb->net_lock, NULL);
	if (opts->id)
		snprintf(sb->id, sizeof(sb->id), "%s", opts->id);
	else
		sandlot__sbid_new(sb->id);
	sb->opts.id = NULL; /* in sb->id */

	const char *dd = opts->data_dir ? opts->data_dir : getenv("SANDLOT_DATA_DIR");
	sb->image = strdup(opts->image ? opts->image : "host");
	sb->hostname = strdup(opts->hostname ? opts->hostname : "sandlot");
	sb->data_dir = strdup(dd && *dd ? dd : "/var/lib/sandlot");
	sb->workspace = opts->workspace ? strdup(opts->workspace) : NULL;
	sb->opts.workspace = sb->workspace;
	sb->opts.disk_overcommit = sandlot__overcommit(opts);
	/* Compiled once: the strings of opts need not outlive this call. */
	sb->net_policy = sandlot__net_policy_of(opts, err);
	sb->opts.net_allow = sb->opts.net_deny = NULL;
	if (!sb->net_policy)
		goto fail;
	if (!sb->image || !sb->hostname || !sb->data_dir ||
	    (opts->workspace && !sb->workspace)) {
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	/* A built image: locked in use from now until the sandbox is
	 * destroyed; its environment comes between ours and the caller's. */
	if (strcmp(sb->image, "host") != 0 &&
	    sandlot__image_open(sb->data_dir, sb->image, &sb->img, err) < 0)
		goto fail;
	char host_env[80], user_env[80], logname_env[80];
	snprintf(host_env, sizeof(host_env), "HOSTNAME=%s", sb->hostname);
	snprintf(user_env, sizeof(user_env), "USER=%s", sb->img.user ? sb->img.user : "user");
	snprintf(logname_env, sizeof(logname_env), "LOGNAME=%s", sb->img.user ? sb->img.user : "user");
	const char *const hn[] = { host_env, user_env, logname_env, NULL };
	char **base = sandlot__env_merge((char *const *)default_env, hn);
	char **with_image = base ? sandlot__env_merge(base, (const char *const *)sb->img.env) : NULL;
	sb->env = with_image ? sandlot__env_merge(with_image, opts->env) : NULL;
	sandlot__strv_free(base);
	sandlot__strv_free(with_image);
	if (!sb->env) {
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	sb->opts.image = sb->image;
	sb->opts.hostname = sb->hostname;
	sb->opts.data_dir = sb->data_dir;
	sb->opts.env = NULL; /* folded into sb->env */
	sb->init_path = find_init(opts->init_path, err);
	if (!sb->init_path)
		goto fail;
	sb->opts.init_path = sb->init_path;
	if (sandlot__mkdir_p(sb->data_dir, 0700) < 0) {
		sandlot__error_errno(err, errno, "create data directory %s", sb->data_dir);
		goto fail;
	}

	sb->ops = ops;
	if (sandlot__init_config_fill(sb, err) < 0)
		goto fail;
	if ((resume ? ops->resume : ops->start)(sb, err) < 0)
		goto fail;
	/* The connection (and the I/O thread, the first time) is set up
	 * while the sandbox sets itself up, so HELLO is read as it comes. */
	if (sandlot__conn_open(&sb->conn, sb->conn_fd, err) < 0) {
		close(sb->conn_fd);
		ops->kill(sb);
		ops->release(sb);
		goto fail;
	}
	sb->conn_open = 1;
	/* init's configuration goes out now, while init starts (HELLO and
	 * CONFIG cross: no round trip). */
	sandlot_error_t *cfg_err = NULL;
	if (sandlot__conn_configure(&sb->conn, &sb->init_cfg, &cfg_err) < 0) {
		/* Only when init is gone already: the backend's report says
		 * why, where it has one. */
		if (sb->ops->ready(sb, err) == 0 && err)
			*err = steal_pointer(&cfg_err);
		sandlot_error_free(cfg_err);
		goto fail_started;
	}
	/* A sandbox with a network is ready only once its policy is in place,
	 * before any command of the caller's runs. */
	if (opts->start_nowait && sb->net_policy->mode == SANDLOT_NET_NONE)
		return sb; /* sandlot_wait_ready() does the rest */
	if (wait_ready(sb, err) < 0)
		goto fail_started;
	sb->ready = 1;
	/* No baseline scan to ask for: init takes it itself (protocol.md). */
	return sb;

fail_started:
	sandlot__error_wrap(err, "%s", what);
	sandlot_destroy(sb);
	return NULL;
fail:
	sandlot__error_wrap(err, "%s", what);
	/* An id from sandlot_new_id() whose prepared cgroup was never adopted
	 * (the failure came first): free again for the next sandbox. */
	if (sb->id_given)
		sandlot_release_id(sb->id);
	free_sandbox(sb); /* the connection was never opened */
	return NULL;
}

sandlot_t *sandlot_create(const sandlot_options_t *opts, sandlot_error_t **err)
{
	return create(opts, 0, err);
}

sandlot_t *sandlot_resume(const sandlot_options_t *opts, sandlot_error_t **err)
{
	return create(opts, 1, err);
}

int sandlot_pause(sandlot_t *sb, unsigned flags, sandlot_error_t **err)
{
	if (flags & ~SANDLOT_PAUSE_MEMORY)
		return sandlot__error(err, EINVAL, "pause sandbox %s: unknown flags 0x%x", sb->id,
				      flags & ~SANDLOT_PAUSE_MEMORY);
	if (!sb->ops->pause)
		return sandlot__error(err, ENOTSUP, "pause sandbox %s: the %s backend cannot pause "
				      "sandboxes", sb->id, sb->ops->name);
	if (!sb->workspace)
		return sandlot__error(err, EINVAL,
				      "pause sandbox %s: it has no kept workspace (made without "
				      "sandlot_options_t.workspace), so nothing could be resumed",
				      sb->id);
	if (!sandlot_alive(sb))
		return sandlot__error(err, EPIPE, "pause sandbox %s: it has ended", sb->id);
	if (sb->ops->pause(sb, flags, err) < 0)
		return sandlot__error_wrap(err, "pause sandbox %s", sb->id);
	return 0;
}

void sandlot__ref(sandlot_t *sb)
{
	__atomic_add_fetch(&sb->refs, 1, __ATOMIC_RELAXED);
}

void sandlot__unref(sandlot_t *sb)
{
	if (__atomic_sub_fetch(&sb->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free_sandbox(sb);
}

void sandlot_destroy(sandlot_t *sb)
{
	if (!sb)
		return;
	sandlot__trace(NULL);
	/* 1. Kill: the connection then reads EOF.  2. Shut the connection
	 * down: every open stream sees on_lost (commands end as killed) while
	 * the backend is still intact.  3. Release cgroup, storage, uids. */
	if (sb->ops)
		sb->ops->kill(sb);
	sandlot__trace("destroy: kill");
	sandlot__net_stop(sb);
	if (sb->conn_open)
		sandlot__conn_shutdown(&sb->conn);
	if (sb->ops)
		sb->ops->release(sb);
	/* No longer in use: `sandlot image rm` may take it from here. */
	sandlot__image_release(&sb->img);
	sandlot__trace("destroy: release");
	sandlot__unref(sb);
}

void sandlot_destroy_nowait(sandlot_t *sb)
{
	if (!sb)
		return;
	if (!sb->ops || !sb->ops->detach || sb->ops->detach(sb) < 0) {
		sandlot_destroy(sb);
		return;
	}
	/* This process stops serving the sandbox's network (its listeners,
	 * the nftables context); open streams see on_lost (commands end as
	 * killed), as with sandlot_destroy(); the helper does everything else. */
	sandlot__net_stop(sb);
	if (sb->conn_open)
		sandlot__conn_shutdown(&sb->conn);
	sb->ops->release(sb);
	/* A built image is free from now on: nothing of the sandbox can use
	 * it any more. */
	sandlot__image_release(&sb->img);
	sandlot__unref(sb);
}

int sandlot_set_env(sandlot_t *sb, const char *const *env, sandlot_error_t **err)
{
	if (!env || !env[0])
		return 0;
	if (validate_env(env, err) < 0)
		return -1;
	/* Merged under the lock, so two concurrent calls cannot lose each
	 * other's entries; exec holds it just as briefly, for its own merge. */
	pthread_mutex_lock(&sb->env_lock);
	char **merged = sandlot__env_merge(sb->env, env);
	if (!merged) {
		pthread_mutex_unlock(&sb->env_lock);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	char **old = sb->env;
	sb->env = merged;
	pthread_mutex_unlock(&sb->env_lock);
	sandlot__strv_free(old);
	return 0;
}

const char *sandlot_id(const sandlot_t *sb)
{
	return sb->id;
}

pid_t sandlot__init_pid(const sandlot_t *sb)
{
	return sb->ops ? sb->ops->init_pid(sb) : 0;
}

int sandlot_alive(const sandlot_t *sb)
{
	sandlot_t *m = (sandlot_t *)sb;
	pthread_mutex_lock(&m->conn.lock);
	int alive = !m->conn.dead;
	pthread_mutex_unlock(&m->conn.lock);
	return alive;
}

int sandlot_usage(sandlot_t *sb, sandlot_usage_t *out, sandlot_error_t **err)
{
	if (sandlot__out_check("sandlot_usage_t", out, sizeof(*out), err) < 0)
		return -1;
	sandlot_usage_t full;
	memset(&full, 0, sizeof(full));
	if (sb->ops->usage(sb, &full, err) < 0)
		return -1;
	sandlot__out_put(out, &full, sizeof(full));
	return 0;
}

#define DEFAULT_CONNECT_TIMEOUT_MS 5000

int sandlot_port_connect(sandlot_t *sb, unsigned port, unsigned timeout_ms, sandlot_error_t **err)
{
	if (port == 0 || port > 65535)
		return sandlot__error(err, EINVAL, "invalid port %u: expected 1 to 65535", port);
	if (timeout_ms == 0)
		timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	if (timeout_ms > INT_MAX)
		timeout_ms = INT_MAX;
	if (!sb->ops || !sb->ops->port_connect)
		return sandlot__error(err, ENOTSUP, "the %s backend cannot connect to ports",
				      sb->ops ? sb->ops->name : "(none)");
	if (!sandlot_alive(sb))
		return sandlot__error(err, EPIPE, "sandbox %s has ended", sb->id);
	return sb->ops->port_connect(sb, (uint16_t)port, timeout_ms, err);
}
