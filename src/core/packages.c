/* Package installs (include/sandlot.h, docs/network.md "Packages").
 *
 * Threat model, in short.  Package managers run code chosen by whoever
 * chose the packages: setup.py and build backends (pip, for source
 * distributions), install scripts (npm).  Whatever runs that code must not
 * be able to write anything another sandbox will read.  So:
 *
 *   1. Download, in a fresh sandbox of the same image (the "fetcher"),
 *      whose network is the asking sandbox's policy plus the registries and
 *      in which no package code runs: pip downloads wheels only
 *      (--only-binary :all:, nothing is built), npm installs with
 *      --ignore-scripts.  Nothing of the asking sandbox's is in there.
 *   2. Keep what the fetcher downloaded in the host-side cache
 *      (<data dir>/cache/packages, root-only, outside every sandbox), under
 *      a key made of the manager, the image, the registry and the exact
 *      specifiers, written to a temporary directory and renamed into place
 *      whole.
 *   3. Copy the entry into the asking sandbox and install from it there,
 *      offline (pip --no-index --find-links, npm --offline --cache): build
 *      steps and install scripts run in the asking sandbox only, on its own
 *      copy.
 * A second install of the same pinned packages finds the entry and skips
 * step 1: nothing is downloaded.  Unpinned specifiers ("lodash@4") always
 * fetch, so they get what the registry has now.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "core/sized.h"
#include "linux/cgroup.h"
#include "net/policy.h"

#define MAX_SPECS 64
#define MAX_SPEC_LEN 200
#define OUTPUT_MAX (256u << 10)
#define STEP_TIMEOUT_MS (10ull * 60 * 1000)
#define COPY_MAX_FILES 200000
#define COPY_MAX_BYTES (4ull << 30)

enum mgr { PIP, NPM };
static const char *const mgr_name[] = { "pip", "npm" };

/* ---- configuration ------------------------------------------------------------ */

static struct {
	pthread_mutex_t lock;
	int done, used;
	char *index[2];         /* pip index URL, npm registry URL */
	char **hosts[2];        /* hosts allowed while fetching, NULL-terminated */
	char *ca_file;
	char *cache_dir;        /* NULL: <data dir>/cache/packages */
} C = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The host of an http(s) URL, into out.  0, or -1 if it is not one. */
static int url_host(const char *url, char *out, size_t n)
{
	const char *p;
	if (!strncmp(url, "https://", 8))
		p = url + 8;
	else if (!strncmp(url, "http://", 7))
		p = url + 7;
	else
		return -1;
	size_t l = strcspn(p, ":/?#");
	if (l == 0 || l >= n || memchr(p, '@', strcspn(p, "/?#")))
		return -1;
	memcpy(out, p, l);
	out[l] = '\0';
	char norm[SL_NAME_MAX + 1];
	if (sl_name_normalize(out, l, norm) != SL_NAME_OK)
		return -1;
	snprintf(out, n, "%s", norm);
	return 0;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* hosts = the URL's host + extra (a NULL-terminated list or a comma list). */
static char **make_hosts(const char *url, const char *const *extra, const char *csv,
			 sandlot_error_t **err)
{
	char host[SL_NAME_MAX + 1];
	if (url_host(url, host, sizeof(host)) < 0)
		return sandlot__error(err, EINVAL, "invalid registry URL \"%.100s\": expected "
				      "https://HOST/... with a host name", url), NULL;
	size_t n = 1;
	for (size_t i = 0; extra && extra[i]; i++)
		n++;
	cleanup_free char *copy = csv ? strdup(csv) : NULL;
	if (copy)
		for (const char *c = copy; *c; c++)
			n += *c == ',';
	char **v = calloc(n + 2, sizeof(char *));
	if (!v)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	size_t k = 0;
	v[k++] = strdup(host);
	for (size_t i = 0; extra && extra[i]; i++)
		v[k++] = strdup(extra[i]);
	for (char *save = NULL, *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
	     t = strtok_r(NULL, ",", &save))
		v[k++] = strdup(t);
	for (size_t i = 0; i < k; i++) {
		char norm[SL_NAME_MAX + 1];
		if (!v[i] || sl_name_normalize(v[i], strlen(v[i]), norm) != SL_NAME_OK) {
			sandlot__error(err, EINVAL, "invalid registry host \"%.100s\"", v[i] ? v[i] : "");
			strv_free(v);
			return NULL;
		}
	}
	return v;
}

static int configure_locked(const sandlot_packages_config_t *cfg, const char *pip_hosts_csv,
			    const char *npm_hosts_csv, sandlot_error_t **err)
{
	static const char *const pypi_files[] = { "files.pythonhosted.org", NULL };
	const char *pip = cfg->pip_index && *cfg->pip_index ? cfg->pip_index
							      : "https://pypi.org/simple";
	const char *npm = cfg->npm_registry && *cfg->npm_registry ? cfg->npm_registry
								   : "https://registry.npmjs.org/";
	const char *const *pip_extra = cfg->pip_hosts;
	if (!pip_extra && !pip_hosts_csv && !(cfg->pip_index && *cfg->pip_index))
		pip_extra = pypi_files;
	char **ph = make_hosts(pip, pip_extra, pip_hosts_csv, err);
	char **nh = ph ? make_hosts(npm, cfg->npm_hosts, npm_hosts_csv, err) : NULL;
	if (!nh) {
		strv_free(ph);
		return -1;
	}
	if (cfg->ca_file && access(cfg->ca_file, R_OK) < 0) {
		sandlot__error_errno(err, errno, "package CA file %s", cfg->ca_file);
		strv_free(ph);
		strv_free(nh);
		return -1;
	}
	for (int m = 0; m < 2; m++) {
		free(C.index[m]);
		strv_free(C.hosts[m]);
	}
	free(C.ca_file);
	free(C.cache_dir);
	C.index[PIP] = strdup(pip);
	C.index[NPM] = strdup(npm);
	C.hosts[PIP] = ph;
	C.hosts[NPM] = nh;
	C.ca_file = cfg->ca_file && *cfg->ca_file ? strdup(cfg->ca_file) : NULL;
	C.cache_dir = cfg->cache_dir && *cfg->cache_dir ? strdup(cfg->cache_dir) : NULL;
	C.done = 1;
	return 0;
}

int sandlot_packages_configure(const sandlot_packages_config_t *cfg, sandlot_error_t **err)
{
	sandlot_packages_config_t buf = { .size = sizeof(buf) };
	if (cfg && sandlot__packages_config_copy(cfg, &buf, err) < 0)
		return -1;
	cfg = &buf;
	pthread_mutex_lock(&C.lock);
	int r = C.used ? sandlot__error(err, EBUSY, "packages were installed already: configure "
					"the registries before the first install")
		       : configure_locked(cfg, NULL, NULL, err);
	pthread_mutex_unlock(&C.lock);
	return r;
}

/* The configuration for an install (C.lock held): from the environment if
 * nobody configured it. */
static int config_locked(sandlot_error_t **err)
{
	C.used = 1;
	if (C.done)
		return 0;
	sandlot_packages_config_t cfg = {
		.size = sizeof(cfg),
		.pip_index = getenv("SANDLOT_PIP_INDEX"),
		.npm_registry = getenv("SANDLOT_NPM_REGISTRY"),
		.ca_file = getenv("SANDLOT_PACKAGE_CA"),
		.cache_dir = getenv("SANDLOT_PACKAGE_CACHE"),
	};
	if (configure_locked(&cfg, getenv("SANDLOT_PIP_HOSTS"), getenv("SANDLOT_NPM_HOSTS"), err) < 0)
		return sandlot__error_wrap(err, "package registries from the environment");
	return 0;
}

/* ---- specifiers ------------------------------------------------------------------ */

static int in(char c, const char *set)
{
	return c && strchr(set, c);
}

static int alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* name[extras](op version)(,op version)*: a PEP 508 requirement without
 * URLs, markers or spaces. */
static int pip_spec_ok(const char *s, int *pinned)
{
	const char *p = s;
	if (!alnum(*p))
		return 0;
	while (alnum(*p) || in(*p, "._-"))
		p++;
	if (*p == '[') {
		p++;
		while (alnum(*p) || in(*p, "._-,"))
			p++;
		if (*p++ != ']')
			return 0;
	}
	int nclauses = 0, exact = 0;
	while (*p) {
		if (nclauses && *p++ != ',')
			return 0;
		size_t ol = strspn(p, "=<>!~");
		static const char *const ops[] = { "==", ">=", "<=", "!=", "~=", "<", ">", "===" };
		int op = -1;
		for (int i = 0; i < 8; i++)
			if (strlen(ops[i]) == ol && !strncmp(p, ops[i], ol))
				op = i;
		if (op < 0)
			return 0;
		p += ol;
		const char *v = p;
		while (alnum(*p) || in(*p, ".*+!_-"))
			p++;
		if (p == v)
			return 0;
		if ((op == 0 || op == 7) && !memchr(v, '*', (size_t)(p - v)))
			exact = 1;
		nclauses++;
	}
	*pinned = exact && nclauses == 1;
	return 1;
}

/* [@scope/]name[@range]: registry packages only. */
static int npm_spec_ok(const char *s, int *pinned)
{
	const char *p = s;
	if (*p == '@') {
		p++;
		if (!alnum(*p))
			return 0;
		while (alnum(*p) || in(*p, "._~-"))
			p++;
		if (*p++ != '/')
			return 0;
	}
	if (!alnum(*p) && !in(*p, "_"))
		return 0;
	while (alnum(*p) || in(*p, "._~-"))
		p++;
	*pinned = 0;
	if (!*p)
		return 1;
	if (*p++ != '@' || !*p)
		return 0;
	const char *v = p;
	while (alnum(*p) || in(*p, ".^~<>=| *+-"))
		p++;
	if (*p)
		return 0;
	/* x.y.z exactly (a prerelease or build suffix allowed). */
	int dots = 0, digits = 0;
	const char *q = v;
	for (; *q && *q != '-' && *q != '+'; q++) {
		if (*q == '.') {
			if (!digits)
				return 1;
			dots++;
			digits = 0;
		} else if (*q >= '0' && *q <= '9') {
			digits++;
		} else {
			return 1;
		}
	}
	*pinned = dots == 2 && digits > 0;
	return 1;
}

static int validate_list(enum mgr m, const char *const *v, int *all_pinned, sandlot_error_t **err)
{
	size_t n = 0;
	*all_pinned = 1;
	for (; v && v[n]; n++) {
		int pinned = 0;
		size_t l = strlen(v[n]);
		if (l == 0 || l > MAX_SPEC_LEN ||
		    !(m == PIP ? pip_spec_ok(v[n], &pinned) : npm_spec_ok(v[n], &pinned)))
			return sandlot__error(err, EINVAL, "invalid %s package \"%.100s\": %s", mgr_name[m],
					      v[n], m == PIP
					      ? "expected a requirement such as pandas==2.2.0 or "
						"requests>=2,<3 (no options, URLs, paths or markers)"
					      : "expected a registry package such as lodash@4 or "
						"@types/node@20.11.0 (no git, URL, file or alias "
						"specifiers)");
		*all_pinned &= pinned;
	}
	if (n > MAX_SPECS)
		return sandlot__error(err, EINVAL, "at most %d %s packages per install", MAX_SPECS,
				      mgr_name[m]);
	return 0;
}

int sandlot_packages_validate(const sandlot_packages_t *pk, sandlot_error_t **err)
{
	int pinned;
	sandlot_packages_t buf;
	if (!pk)
		return 0;
	if (sandlot__packages_copy(pk, &buf, err) < 0)
		return -1;
	pk = &buf;
	if (validate_list(PIP, pk->pip, &pinned, err) < 0 ||
	    validate_list(NPM, pk->npm, &pinned, err) < 0)
		return -1;
	return 0;
}

/* ---- running commands ---------------------------------------------------------------- */

struct capture {
	pthread_mutex_t lock;
	char *buf;
	size_t len, cap;
	int truncated;
};

static void cap_add(struct capture *c, const char *data, size_t len)
{
	pthread_mutex_lock(&c->lock);
	size_t room = OUTPUT_MAX > c->len ? OUTPUT_MAX - c->len : 0;
	if (len > room) {
		c->truncated = 1;
		len = room;
	}
	if (c->len + len + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : 4096;
		while (cap < c->len + len + 1)
			cap *= 2;
		char *nb = realloc(c->buf, cap);
		if (!nb) {
			pthread_mutex_unlock(&c->lock);
			return;
		}
		c->buf = nb;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	c->buf[c->len] = '\0';
	pthread_mutex_unlock(&c->lock);
}

static int on_output(void *ud, sandlot_stream_t s, const void *data, size_t len)
{
	cap_add(ud, data, len);
	return 0;
}

static void proc_done(void *ud, const sandlot_exit_t *ex)
{
}

/* Run argv in sb with its output into c (after a "$ argv" line).  Returns
 * the exit status (0 = success), or -1 with err if it could not start. */
static int run(sandlot_t *sb, const char *const *argv, const char *const *env, const char *cwd,
	       struct capture *c, sandlot_error_t **err)
{
	char line[1024];
	size_t n = (size_t)snprintf(line, sizeof(line), "$");
	for (size_t i = 0; argv[i] && n < sizeof(line) - 2; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s", argv[i]);
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	cap_add(c, line, n);
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .env = env, .cwd = cwd,
				     .timeout_ms = STEP_TIMEOUT_MS };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb), .on_output = on_output,
					.on_exit = proc_done, .userdata = c };
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, err);
	if (!p)
		return -1;
	sandlot_exit_t ex = { .size = sizeof(ex) };
	int r = sandlot_proc_wait(p, &ex, err);
	sandlot_proc_free(p);
	if (r < 0)
		return -1;
	if (ex.start_error) {
		cap_add(c, ex.error, strlen(ex.error));
		cap_add(c, "\n", 1);
		return ex.start_error == ENOENT ? 127 : 126;
	}
	if (ex.timed_out)
		return sandlot__error(err, ETIMEDOUT, "%s took longer than %llu minutes", argv[0],
				      (unsigned long long)(STEP_TIMEOUT_MS / 60000));
	return ex.signal ? 128 + ex.signal : ex.exit_code;
}

/* ---- copying trees between the host and sandboxes ---------------------------------------- */

struct copy_budget {
	size_t files;
	uint64_t bytes;
};

static int safe_name(const char *n)
{
	if (!*n || !strcmp(n, ".") || !strcmp(n, "..") || strlen(n) > 255)
		return 0;
	for (const char *p = n; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == '/' || *p == 0x7f)
			return 0;
	return 1;
}

/* The tree at `remote` in sb into the host directory dirfd (which exists):
 * regular files and directories only. */
static int copy_out(sandlot_t *sb, const char *remote, int dirfd, struct copy_budget *b,
		    sandlot_error_t **err)
{
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	if (sandlot_list(sb, remote, &ents, &n, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const char *name = ents[i].name;
		if (!safe_name(name))
			continue;
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", remote, name);
		if (++b->files > COPY_MAX_FILES || (b->bytes += ents[i].st.size) > COPY_MAX_BYTES) {
			rc = sandlot__error(err, EFBIG, "the download is too large (over %d files or "
					    "%llu GiB)", COPY_MAX_FILES, COPY_MAX_BYTES >> 30);
		} else if (ents[i].st.type == SANDLOT_DIR) {
			if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST) {
				rc = sandlot__error_errno(err, errno, "create %s in the cache", name);
				break;
			}
			cleanup_close int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
						       O_CLOEXEC);
			rc = sub < 0 ? sandlot__error_errno(err, errno, "open %s in the cache", name)
				     : copy_out(sb, path, sub, b, err);
		} else if (ents[i].st.type == SANDLOT_FILE) {
			cleanup_close int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL |
						      O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd < 0)
				rc = sandlot__error_errno(err, errno, "create %s in the cache", name);
			else
				rc = sandlot_file_read_fd(sb, path, fd, err);
		}
	}
	sandlot_dirents_free(ents, n);
	return rc;
}

/* The host tree at dirfd into `remote` in sb (created). */
static int copy_in(sandlot_t *sb, int dirfd, const char *remote, sandlot_error_t **err)
{
	if (sandlot_mkdir(sb, remote, 0755, SANDLOT_MKDIR_PARENTS, err) < 0)
		return -1;
	int dup = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	cleanup_closedir DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (!d) {
		if (dup >= 0)
			close(dup);
		return sandlot__error_errno(err, errno, "read the package cache");
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!safe_name(de->d_name))
			continue;
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", remote, de->d_name);
		struct stat st;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return sandlot__error_errno(err, errno, "read the package cache");
		if (S_ISDIR(st.st_mode)) {
			cleanup_close int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY |
						       O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || copy_in(sb, sub, path, err) < 0)
				return sub < 0 ? sandlot__error_errno(err, errno, "read the package cache")
					       : -1;
		} else if (S_ISREG(st.st_mode)) {
			cleanup_close int fd = openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				return sandlot__error_errno(err, errno, "read the package cache");
			if (sandlot_file_write_fd(sb, path, 0644, 0, fd, err) < 0)
				return -1;
		}
	}
	return 0;
}

static int remove_tree_at(int dirfd, const char *name)
{
	cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return unlinkat(dirfd, name, 0);
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				remove_tree_at(fd, de->d_name);
		closedir(d);
	} else if (dup >= 0) {
		close(dup);
	}
	return unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* ---- the cache -------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What the entry's directory holds the result of: manager, image,
 * registry, sorted specifiers, one per line.  A new string. */
static char *key_text(enum mgr m, const char *image, const char *const *specs)
{
	size_t n = 0, len = 64 + strlen(image) + strlen(C.index[m]);
	while (specs[n])
		len += strlen(specs[n++]) + 1;
	const char **sorted = calloc(n + 1, sizeof(*sorted));
	char *t = malloc(len);
	if (!sorted || !t) {
		free(sorted);
		free(t);
		return NULL;
	}
	memcpy(sorted, specs, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_str);
	size_t o = (size_t)snprintf(t, len, "sandlot-packages 1\n%s\n%s\n%s\n", mgr_name[m], image,
				    C.index[m]);
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(t + o, len - o, "%s\n", sorted[i]);
	free(sorted);
	return t;
}

static void key_name(const char *text, char out[17])
{
	uint64_t h = 14695981039346656037ull; /* FNV-1a; the text inside decides */
	for (const char *p = text; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* The entry's directory for key text `t` if there is one that matches it
 * exactly, else -1. */
static int cache_lookup(int mgrfd, const char *name, const char *t)
{
	cleanup_close int fd = openat(mgrfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char got[16384];
	cleanup_close int kf = openat(fd, "KEY", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n = kf >= 0 ? sandlot__read_full(kf, got, sizeof(got) - 1) : -1;
	if (n < 0)
		return -1;
	got[n] = '\0';
	if (strcmp(got, t) != 0)
		return -1;
	return steal_fd(&fd);
}

/* ---- one manager's install ----------------------------------------------------------------- */

static void add_env(const char **env, size_t *n, const char *kv)
{
	env[(*n)++] = kv;
	env[*n] = NULL;
}

/* What the fetcher f downloaded to `remote`, into a temporary entry renamed
 * into place when complete.  0 or -1. */
static int store(sandlot_t *f, const char *remote, int mgrfd, const char *name,
		 const char *keytext, sandlot_error_t **err)
{
	char tmp[64];
	sandlot__new_id(".tmp-", tmp);
	if (mkdirat(mgrfd, tmp, 0700) < 0)
		return sandlot__error_errno(err, errno, "create a package cache entry");
	cleanup_close int tfd = openat(mgrfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct copy_budget b = { 0 };
	int ok = tfd >= 0 && mkdirat(tfd, "files", 0700) == 0;
	cleanup_close int ffd = ok ? openat(tfd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (ffd < 0 || copy_out(f, remote, ffd, &b, err) < 0) {
		if (ffd < 0)
			sandlot__error_errno(err, errno, "create a package cache entry");
		remove_tree_at(mgrfd, tmp);
		return -1;
	}
	cleanup_close int kf = openat(tfd, "KEY", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (kf < 0 || sandlot__write_all(kf, keytext, strlen(keytext)) < 0 || fsync(kf) < 0) {
		sandlot__error_errno(err, errno, "write a package cache entry");
		remove_tree_at(mgrfd, tmp);
		return -1;
	}
	/* An entry another install made meanwhile stays: it is as good. */
	if (renameat(mgrfd, tmp, mgrfd, name) < 0)
		remove_tree_at(mgrfd, tmp);
	return 0;
}

/* Step 1: download into the fetcher, copy into a new cache entry. */
static int fetch(sandlot_t *sb, enum mgr m, const char *const *specs, int mgrfd, const char *name,
		 const char *keytext, struct capture *out, sandlot_error_t **err)
{
	/* The asking sandbox's policy, plus the registries. */
	pthread_mutex_lock(&sb->net_lock);
	struct sl_policy *p = sl_policy_widen(sb->net_policy, (const char *const *)C.hosts[m], err);
	pthread_mutex_unlock(&sb->net_lock);
	if (!p)
		return -1;
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.image = sb->img.lock_fd >= 0 ? sb->img.digest : sb->image;
	o.data_dir = sb->data_dir;
	o.init_path = sb->init_path;
	o.memory_bytes = 1ull << 30;
	o.disk_bytes = 4ull << 30;
	o.pids = 512;
	o.network = p->mode;
	o.net_allow = (const char *const *)p->allow_text;
	o.net_deny = (const char *const *)p->deny_text;
	sandlot_t *f = sandlot_create(&o, err);
	sl_policy_unref(p);
	if (!f)
		return sandlot__error_wrap(err, "create the sandbox that downloads %s packages",
					   mgr_name[m]);
	int rc = -1;
	const char *env[16];
	size_t ne = 0;
	env[0] = NULL;
	if (C.ca_file) {
		cleanup_close int ca = open(C.ca_file, O_RDONLY | O_CLOEXEC);
		if (ca < 0 || sandlot_file_write_fd(f, "/tmp/sandlot-ca.pem", 0644, 0, ca, err) < 0) {
			if (ca < 0)
				sandlot__error_errno(err, errno, "package CA file %s", C.ca_file);
			goto out;
		}
		add_env(env, &ne, m == PIP ? "PIP_CERT=/tmp/sandlot-ca.pem"
					   : "NODE_EXTRA_CA_CERTS=/tmp/sandlot-ca.pem");
	}
	const char *argv[MAX_SPECS + 32];
	size_t a = 0;
	const char *remote;
	if (m == PIP) {
		static const char *const head[] = {
			"python3", "-m", "pip", "download", "--only-binary=:all:", "--no-cache-dir",
			"--disable-pip-version-check", "--no-input", "--progress-bar", "off",
			"--dest", "/tmp/sandlot-dl", "--index-url",
		};
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(head); i++)
			argv[a++] = head[i];
		argv[a++] = C.index[PIP];
		argv[a++] = "--";
		remote = "/tmp/sandlot-dl";
	} else {
		static const char *const head[] = {
			"npm", "install", "--ignore-scripts", "--no-audit", "--no-fund",
			"--no-update-notifier", "--loglevel=warn", "--prefix", "/tmp/sandlot-stage",
			"--cache", "/tmp/sandlot-npm", "--registry",
		};
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(head); i++)
			argv[a++] = head[i];
		argv[a++] = C.index[NPM];
		remote = "/tmp/sandlot-npm/_cacache";
	}
	for (size_t i = 0; specs[i]; i++)
		argv[a++] = specs[i];
	argv[a] = NULL;
	int st = run(f, argv, env, "/tmp", out, err);
	if (st < 0)
		goto out;
	if (st != 0) {
		const char *why = st == 127 ? "is not installed in this image" : "failed";
		if (m == PIP && out->buf && strstr(out->buf, "No module named pip"))
			why = "is not installed in this image", st = 127;
		sandlot__error(err, st == 127 ? ENOENT : EIO, "%s download %s (exit status %d)%s",
			       mgr_name[m], why, st,
			       m == PIP && out->buf && strstr(out->buf, "matching distribution")
				       ? ": sandlot installs pip packages from wheels only" : "");
		goto out;
	}
	if (store(f, remote, mgrfd, name, keytext, err) < 0)
		goto out;
	rc = 0;
out:;
	char fid[32];
	snprintf(fid, sizeof(fid), "%s", sandlot_id(f));
	sandlot_destroy(f);
	/* sandlot_destroy() gives the kernel about a second to let go of the
	 * cgroup; nobody would retry later for this sandbox (sandlotd does for
	 * its own), so wait a little longer here, on a loaded host. */
	for (int i = 0; i < 40 && sandlot__cgroup_remove_named(fid, 0); i++)
		usleep(100 * 1000);
	return rc;
}

/* Step 3: copy the entry into sb and install from it, offline. */
static int install_from(sandlot_t *sb, enum mgr m, const char *const *specs, int entryfd,
			struct capture *out, sandlot_error_t **err)
{
	char dir[80];
	sandlot__new_id("/tmp/.sandlot-packages-", dir);
	cleanup_close int files = openat(entryfd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (files < 0)
		return sandlot__error_errno(err, errno, "read the package cache");
	char where[120];
	snprintf(where, sizeof(where), m == PIP ? "%s" : "%s/_cacache", dir);
	if (copy_in(sb, files, where, err) < 0)
		return sandlot__error_wrap(err, "copy the packages into the sandbox");
	const char *argv[MAX_SPECS + 32];
	const char *env[8] = { NULL };
	size_t a = 0, ne = 0;
	if (m == PIP) {
		static const char *const head[] = {
			"python3", "-m", "pip", "install", "--user", "--no-index",
			"--disable-pip-version-check", "--no-input", "--no-warn-script-location",
			"--progress-bar", "off", "--find-links",
		};
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(head); i++)
			argv[a++] = head[i];
		argv[a++] = dir;
		argv[a++] = "--";
		/* Debian's pip refuses --user into a "system" Python without it;
		 * the user site is the sandbox's own. */
		add_env(env, &ne, "PIP_BREAK_SYSTEM_PACKAGES=1");
	} else {
		static const char *const head[] = {
			"npm", "install", "--offline", "--no-audit", "--no-fund",
			"--no-update-notifier", "--loglevel=warn", "--registry",
		};
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(head); i++)
			argv[a++] = head[i];
		argv[a++] = C.index[NPM];
		argv[a++] = "--cache";
		argv[a++] = dir;
	}
	for (size_t i = 0; specs[i]; i++)
		argv[a++] = specs[i];
	argv[a] = NULL;
	int st = run(sb, argv, env, "/home/user", out, err);
	sandlot_remove(sb, dir, SANDLOT_REMOVE_RECURSIVE, NULL);
	if (st < 0)
		return -1;
	if (st != 0)
		return sandlot__error(err, st == 127 ? ENOENT : EIO, "%s install %s (exit status %d)",
				      mgr_name[m], st == 127 ? "is not available in the sandbox"
							     : "failed", st);
	return 0;
}

static int install_one(sandlot_t *sb, enum mgr m, const char *const *specs, int pinned,
		       struct capture *out, int *downloaded, sandlot_error_t **err)
{
	pthread_mutex_lock(&C.lock);
	int r = config_locked(err);
	pthread_mutex_unlock(&C.lock);
	if (r < 0)
		return -1;
	char root[4200];
	if (C.cache_dir)
		snprintf(root, sizeof(root), "%s/%s", C.cache_dir, mgr_name[m]);
	else
		snprintf(root, sizeof(root), "%s/cache/packages/%s", sb->data_dir, mgr_name[m]);
	if (sandlot__mkdir_p(root, 0700) < 0)
		return sandlot__error_errno(err, errno, "create the package cache %s", root);
	cleanup_close int mgrfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mgrfd < 0)
		return sandlot__error_errno(err, errno, "open the package cache %s", root);
	/* A built image by digest: a rebuilt image may have another Python. */
	cleanup_free char *t = key_text(m, sb->img.lock_fd >= 0 ? sb->img.digest : sb->image, specs);
	if (!t)
		return sandlot__error(err, ENOMEM, "out of memory");
	char name[17];
	key_name(t, name);
	int entry = pinned ? cache_lookup(mgrfd, name, t) : -1;
	if (entry < 0) {
		if (!pinned)
			remove_tree_at(mgrfd, name); /* refreshed: what the registry has now */
		if (fetch(sb, m, specs, mgrfd, name, t, out, err) < 0)
			return -1;
		*downloaded = 1;
		entry = cache_lookup(mgrfd, name, t);
		if (entry < 0)
			return sandlot__error(err, EIO, "the package cache entry %s/%s is not what this "
					      "install downloaded", root, name);
	}
	r = install_from(sb, m, specs, entry, out, err);
	close(entry);
	return r;
}

int sandlot_install_packages(sandlot_t *sb, const sandlot_packages_t *pk,
			     sandlot_install_result_t *caller, sandlot_error_t **err)
{
	/* Filled in both cases (sandlot.h), so checked first: a caller whose
	 * struct cannot be written gets nothing but the error. */
	if (sandlot__out_check("sandlot_install_result_t", caller, sizeof(*caller), err) < 0)
		return -1;
	sandlot_install_result_t full;
	sandlot_install_result_t *res = &full;
	memset(res, 0, sizeof(*res));
	sandlot_packages_t buf;
	if (pk) {
		if (sandlot__packages_copy(pk, &buf, err) < 0) {
			res->output = strdup("");
			sandlot__out_put(caller, &full, sizeof(full));
			return -1;
		}
		pk = &buf;
	}
	uint64_t t0 = sandlot__now_ms();
	struct capture out = { .lock = PTHREAD_MUTEX_INITIALIZER };
	int pinned[2], downloaded = 0, rc = 0;
	const char *const *lists[2] = { pk ? pk->pip : NULL, pk ? pk->npm : NULL };
	for (int m = 0; m < 2 && rc == 0; m++)
		rc = validate_list((enum mgr)m, lists[m], &pinned[m], err);
	for (int m = 0; m < 2 && rc == 0; m++)
		if (lists[m] && lists[m][0])
			rc = install_one(sb, (enum mgr)m, lists[m], pinned[m], &out, &downloaded, err);
	res->output = out.buf ? out.buf : strdup("");
	res->from_cache = !downloaded;
	res->duration_ms = sandlot__now_ms() - t0;
	pthread_mutex_destroy(&out.lock);
	sandlot__out_put(caller, &full, sizeof(full));
	if (!SANDLOT_HAS(caller, output))
		free(full.output); /* (a struct too short to hold it) */
	return rc;
}
