/* sandlot image build: a root filesystem from a recipe, with debootstrap
 * and apt (docs/images.md).
 *
 * Steps, each announced on stderr with the time since the start:
 *   1. parse the recipe; find the mirror for its suite in apt's own
 *      sources (apt-get indextargets), never a built-in host;
 *   2. in images/.build-XXXXXX (locked while we work): the base tree from
 *      the cache, or debootstrap (then cached);
 *   3. apt sources of the image = the machine's entries for the suite and
 *      its -updates/-security; apt-get update, upgrade, install PACKAGES;
 *   4. npm install -g; file and run steps in recipe order;
 *   5. tidy (no apt lists, no build-time config), list the packages
 *      (dpkg-query) for the manifest, hash the tree (the digest), rename
 *      the build directory to images/<digest>, point the name at it.
 *
 * Everything that runs in the tree (debootstrap included) runs in a
 * private mount and pid namespace: its /proc and bind mounts exist only
 * there and vanish with it, and killing the namespace's first process
 * kills all of them.  Each such process also dies with the builder
 * (PR_SET_PDEATHSIG), so even a SIGKILLed build leaves no process and no
 * mount, only the .build directory, which the next build removes.
 * SIGINT/SIGTERM/SIGHUP remove it at once.
 */
/* Paths here are built from the data and cache directories, which
 * image_build() and images_dir() limit to 1024 bytes, plus names of known
 * length: the fixed buffers cannot truncate them. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "image.h"
#include "recipe.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "core/images.h"

#define BASE_MAX_AGE_S (7 * 86400)
#define TAIL_LINES 25
#define PATH_ENV "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static volatile sig_atomic_t interrupted;
static volatile pid_t current_child;

static void on_signal(int sig)
{
	interrupted = sig;
	pid_t c = current_child;
	if (c > 0)
		kill(c, SIGKILL);
}

struct build {
	struct recipe r;
	const char *name;
	char images[4096];      /* <data-dir>/images */
	char dir[4200];         /* images/.build-XXXXXX */
	char root[4300];        /* dir/rootfs */
	char cache[4096];       /* --cache-dir */
	char debs[4200];        /* cache/debs */
	int lock_fd;
	int quiet, no_cache;
	uint64_t t0;
	char tail[TAIL_LINES][400];
	unsigned ntail;
	char bad_package[128];  /* from apt's complaint about a package */
	char arch[32], mirror[1024], components[256];
	json_t *sources;        /* [{uri, suites: [..], components: [..]}] */
	char proxy[1024];
	char base_state[16];    /* "cached" or "bootstrapped" */
	char **env;             /* for commands in the tree */
};

static double elapsed(const struct build *b)
{
	return (double)(sandlot__now_ms() - b->t0) / 1000.0;
}

static void say(const struct build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const struct build *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%6.1fs] ", elapsed(b));
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void tail_clear(struct build *b)
{
	b->ntail = 0;
}

static void tail_print(const struct build *b)
{
	unsigned n = b->ntail < TAIL_LINES ? b->ntail : TAIL_LINES;
	if (!n)
		return;
	fprintf(stderr, "sandlot image build: last lines of its output:\n");
	for (unsigned i = b->ntail - n; i < b->ntail; i++)
		fprintf(stderr, "  | %s\n", b->tail[i % TAIL_LINES]);
}

/* apt's ways of saying a package does not exist. */
static void note_apt_line(struct build *b, const char *line)
{
	static const char *const pats[] = {
		"Unable to locate package ", "E: Package '", "Package '", "for '",
	};
	if (b->bad_package[0])
		return;
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(pats); i++) {
		const char *p = strstr(line, pats[i]);
		if (!p)
			continue;
		if (i >= 1 && !strstr(line, "has no installation candidate") &&
		    !strstr(line, "was not found"))
			continue;
		p += strlen(pats[i]);
		size_t n = strcspn(p, "' \t");
		if (n && n < sizeof(b->bad_package)) {
			memcpy(b->bad_package, p, n);
			b->bad_package[n] = '\0';
			return;
		}
	}
}

static void on_line(struct build *b, char *line)
{
	snprintf(b->tail[b->ntail++ % TAIL_LINES], sizeof(b->tail[0]), "%s", line);
	note_apt_line(b, line);
	if (!b->quiet)
		fprintf(stderr, "[%6.1fs]   %s\n", elapsed(b), line);
}

struct run {
	const char *root;               /* chroot here (NULL: stay on the host) */
	const char *const *binds;       /* pairs: host source, path in root; NULL-ended */
	char *const *env;
	int out_fd;                     /* stdout to this fd (-1: to the log like stderr) */
};

/* Child side of run_ns(): new mount + pid namespaces, pid 1 there reaps
 * and returns the command's status. */
static __attribute__((noreturn)) void run_child(char *const *argv, const struct run *o,
						 int log_fd, pid_t parent)
{
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(125);
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	int devnull = open("/dev/null", O_RDONLY);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(o->out_fd >= 0 ? o->out_fd : log_fd, 1) < 0 ||
	    dup2(log_fd, 2) < 0)
		_exit(125);
	if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0) {
		fprintf(stderr, "unshare: %s\n", strerror(errno));
		_exit(125);
	}
	pid_t init = fork();
	if (init < 0)
		_exit(125);
	if (init == 0) {
		/* (Its parent is outside its pid namespace: getppid() says 0.) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
			fprintf(stderr, "make mounts private: %s\n", strerror(errno));
			_exit(125);
		}
		if (o->root) {
			char p[4400];
			snprintf(p, sizeof(p), "%s/proc", o->root);
			mkdir(p, 0555);
			if (mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
				fprintf(stderr, "mount %s: %s\n", p, strerror(errno));
				_exit(125);
			}
			for (size_t i = 0; o->binds && o->binds[i]; i += 2) {
				snprintf(p, sizeof(p), "%s%s", o->root, o->binds[i + 1]);
				sandlot__mkdir_p(p, 0755);
				if (mount(o->binds[i], p, NULL, MS_BIND | MS_REC, NULL) < 0) {
					fprintf(stderr, "bind %s: %s\n", o->binds[i], strerror(errno));
					_exit(125);
				}
			}
			if (chroot(o->root) < 0 || chdir("/") < 0) {
				fprintf(stderr, "chroot %s: %s\n", o->root, strerror(errno));
				_exit(125);
			}
		}
		pid_t cmd = fork();
		if (cmd < 0)
			_exit(125);
		if (cmd == 0) {
			execvpe(argv[0], argv, o->env);
			fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
			_exit(errno == ENOENT ? 127 : 126);
		}
		int st;
		pid_t w;
		while ((w = wait(&st)) != cmd)
			if (w < 0 && errno != EINTR)
				_exit(125);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	int st;
	while (waitpid(init, &st, 0) < 0)
		if (errno != EINTR)
			_exit(125);
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Run argv (in the tree if o->root), its output shown as progress.
 * Returns its exit status (128+N for signal N), or -1 if the build was
 * interrupted or the command could not be started. */
static int run_ns(struct build *b, char *const *argv, const struct run *o)
{
	int pfd[2];
	tail_clear(b);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	fflush(stderr);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid == 0) {
		close(pfd[0]);
		run_child(argv, o, pfd[1], parent);
	}
	current_child = pid;
	if (interrupted)
		kill(pid, SIGKILL);
	close(pfd[1]);
	char buf[8192], line[400];
	size_t ll = 0;
	for (;;) {
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			char c = buf[i];
			if (c == '\n' || c == '\r') {
				if (ll) {
					line[ll] = '\0';
					on_line(b, line);
				}
				ll = 0;
			} else if (ll < sizeof(line) - 1) {
				line[ll++] = c;
			}
		}
	}
	if (ll) {
		line[ll] = '\0';
		on_line(b, line);
	}
	close(pfd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	current_child = 0;
	if (interrupted)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A command on the host with its stdout captured (small outputs). */
static char *capture(char *const argv[])
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return NULL;
	pid_t pid = fork();
	if (pid < 0)
		return NULL;
	if (pid == 0) {
		dup2(pfd[1], 1);
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 0);
		dup2(devnull, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	size_t len = 0, cap = 4096;
	char *out = malloc(cap);
	for (;;) {
		if (out && len + 4096 > cap) {
			char *n = realloc(out, cap *= 2);
			if (!n) {
				free(out);
				out = NULL;
			}
			out = n;
		}
		char scratch[4096];
		ssize_t n = read(pfd[0], out ? out + len : scratch, 4096);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += out ? (size_t)n : 0;
	}
	close(pfd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!out || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		free(out);
		return NULL;
	}
	out[len] = '\0';
	return out;
}

/* ---- removing trees ----------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (remove(path) < 0 && errno != ENOENT && flag != FTW_DNR)
		return 0; /* keep going: remove what can be removed */
	return 0;
}

/* Unmount whatever is mounted under `dir` in our namespace (nothing,
 * normally: builds mount only in namespaces of their own), deepest first. */
static void unmount_under(const char *dir)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return;
	char *line = NULL, *found[256];
	size_t cap = 0, n = 0, dl = strlen(dir);
	while (getline(&line, &cap, f) > 0 && n < SANDLOT_ARRAY_SIZE(found)) {
		char *save = NULL, *mp = NULL;
		char *tok = strtok_r(line, " ", &save);
		for (int i = 0; tok && i < 4; i++)
			tok = strtok_r(NULL, " ", &save);
		mp = tok;
		if (!mp)
			continue;
		/* Octal escapes (\040) in mountinfo: a path needing them is
		 * not one of ours (ours have no spaces). */
		if (strncmp(mp, dir, dl) == 0 && (mp[dl] == '/' || mp[dl] == '\0'))
			found[n++] = strdup(mp);
	}
	free(line);
	fclose(f);
	while (n--) {
		if (found[n])
			umount2(found[n], MNT_DETACH);
		free(found[n]);
	}
}

void image_rm_tree(const char *dir)
{
	unmount_under(dir);
	nftw(dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Builds whose builder is gone (its lock is free), removals that did not
 * finish. */
static void remove_stale(const char *images)
{
	cleanup_closedir DIR *d = opendir(images);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".build-", 7) != 0 && strncmp(de->d_name, ".rm-", 4) != 0)
			continue;
		char path[4400];
		snprintf(path, sizeof(path), "%s/%s/lock", images, de->d_name);
		cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0)
			continue; /* someone is working on it */
		snprintf(path, sizeof(path), "%s/%s", images, de->d_name);
		image_rm_tree(path);
	}
}

/* ---- apt's sources ------------------------------------------------------ */

static void add_unique(json_t *arr, const char *s)
{
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
		if (strcmp(json_string_value(v), s) == 0)
			return;
	json_array_append_new(arr, json_string(s));
}

/* The machine's apt sources, through apt's own parser: the mirror and
 * components of the recipe's suite, and every source of that suite and
 * its -updates/-security/-backports companions for the image. */
static int find_sources(struct build *b, char *msg, size_t len)
{
	char *argv[] = { "apt-get", "indextargets", "--format",
			 "$(TARGET_OF)\t$(REPO_URI)\t$(RELEASE)\t$(COMPONENT)", NULL };
	cleanup_free char *out = capture(argv);
	if (!out) {
		snprintf(msg, len, "cannot read apt's sources (apt-get indextargets failed)");
		return -1;
	}
	const char *suite = b->r.suite;
	size_t sl = strlen(suite);
	b->sources = json_array();
	char seen[1024] = "";
	for (char *save = NULL, *ln = strtok_r(out, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		char *f[4];
		char *s2 = NULL;
		int k = 0;
		for (char *t = strtok_r(ln, "\t", &s2); t && k < 4; t = strtok_r(NULL, "\t", &s2))
			f[k++] = t;
		if (k < 4 || strcmp(f[0], "deb") != 0)
			continue;
		size_t seenl = strlen(seen);
		if (seenl + strlen(f[2]) + 2 < sizeof(seen) && !strstr(seen, f[2]))
			snprintf(seen + seenl, sizeof(seen) - seenl, "%s%s", seenl ? ", " : "", f[2]);
		const char *rel = f[2];
		if (strncmp(rel, suite, sl) != 0 || (rel[sl] && rel[sl] != '-'))
			continue;
		if (rel[sl] == '-' && strcmp(rel + sl, "-updates") && strcmp(rel + sl, "-security") &&
		    strcmp(rel + sl, "-backports"))
			continue;
		char uri[1024];
		snprintf(uri, sizeof(uri), "%s", f[1]);
		size_t ul = strlen(uri);
		while (ul > 1 && uri[ul - 1] == '/')
			uri[--ul] = '\0';
		json_t *src = NULL, *v;
		size_t i;
		json_array_foreach(b->sources, i, v)
			if (strcmp(json_string_value(json_object_get(v, "uri")), uri) == 0)
				src = v;
		if (!src) {
			src = json_pack("{s:s, s:[], s:[]}", "uri", uri, "suites", "components");
			json_array_append_new(b->sources, src);
		}
		add_unique(json_object_get(src, "suites"), rel);
		add_unique(json_object_get(src, "components"), f[3]);
		if (!rel[sl] && !b->mirror[0])
			snprintf(b->mirror, sizeof(b->mirror), "%s", uri);
	}
	if (!b->mirror[0]) {
		snprintf(msg, len,
			 "%s: no apt source of this machine offers suite \"%s\" (its sources offer: "
			 "%s); add one under /etc/apt/sources.list.d", b->r.path, suite,
			 seen[0] ? seen : "nothing");
		return -1;
	}
	/* The suite's own components, for debootstrap. */
	size_t i;
	json_t *v;
	json_array_foreach(b->sources, i, v) {
		if (strcmp(json_string_value(json_object_get(v, "uri")), b->mirror) != 0)
			continue;
		size_t j;
		json_t *c;
		json_array_foreach(json_object_get(v, "components"), j, c) {
			size_t cl = strlen(b->components);
			snprintf(b->components + cl, sizeof(b->components) - cl, "%s%s", cl ? "," : "",
				 json_string_value(c));
		}
	}
	/* An HTTP proxy apt is configured with is used for the build too. */
	char *pargv[] = { "apt-config", "dump", "Acquire::http::Proxy", NULL };
	cleanup_free char *p = capture(pargv);
	const char *q = p ? strchr(p, '"') : NULL;
	if (q && strncmp(p, "Acquire::http::Proxy ", 21) == 0) {
		size_t n = strcspn(q + 1, "\"");
		if (n && n < sizeof(b->proxy) && strncmp(q + 1, "DIRECT", 6) != 0)
			snprintf(b->proxy, sizeof(b->proxy), "%.*s", (int)n, q + 1);
	}
	return 0;
}

static int write_text(const char *path, const char *text, mode_t mode)
{
	unlink(path);
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	return sandlot__write_all(fd, text, strlen(text));
}

/* deb822 sources for the image, from b->sources. */
static int write_sources(struct build *b)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/etc/apt/sources.list", b->root);
	unlink(path);
	size_t cap = 8192, len = 0;
	cleanup_free char *text = calloc(1, cap);
	if (!text)
		return -1;
	len += (size_t)snprintf(text, cap, "# From the apt sources of the machine that built this "
				"image (sandlot image build).\n");
	size_t i;
	json_t *v;
	json_array_foreach(b->sources, i, v) {
		char suites[512] = "", comps[256] = "";
		size_t j;
		json_t *s;
		json_array_foreach(json_object_get(v, "suites"), j, s) {
			size_t l = strlen(suites);
			snprintf(suites + l, sizeof(suites) - l, "%s%s", l ? " " : "", json_string_value(s));
		}
		json_array_foreach(json_object_get(v, "components"), j, s) {
			size_t l = strlen(comps);
			snprintf(comps + l, sizeof(comps) - l, "%s%s", l ? " " : "", json_string_value(s));
		}
		if (len + 2048 > cap)
			break;
		len += (size_t)snprintf(text + len, cap - len,
					"\nTypes: deb\nURIs: %s\nSuites: %s\nComponents: %s\n",
					json_string_value(json_object_get(v, "uri")), suites, comps);
	}
	snprintf(path, sizeof(path), "%s/etc/apt/sources.list.d/debian.sources", b->root);
	return write_text(path, text, 0644);
}

/* ---- hashing the tree --------------------------------------------------- */

struct tree_stats {
	uint64_t files, bytes;
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void hex(const uint8_t *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

/* One record per entry, in byte order of names: "path\0type mode uid gid
 * (size sha256 | target | major:minor)\n".  Returns 0 or -1 (errno). */
static int hash_dir(int dfd, const char *rel, struct sha256_ctx *tree, struct tree_stats *stats)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **nn = realloc(names, cap * sizeof(char *));
			if (!nn)
				goto fail;
			names = nn;
		}
		if (!(names[n++] = strdup(de->d_name)))
			goto fail;
	}
	if (n) /* an empty directory: names is NULL, which qsort may not be given */
		qsort(names, n, sizeof(char *), cmp_names);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0 && !interrupted; i++) {
		struct stat st;
		char path[8192], rec[8400 + 128];
		snprintf(path, sizeof(path), "%s/%s", rel, names[i]);
		if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -1;
			break;
		}
		int k = snprintf(rec, sizeof(rec), "%s%c%o %u %u ", path, 0, (unsigned)st.st_mode,
				 (unsigned)st.st_uid, (unsigned)st.st_gid);
		if (S_ISREG(st.st_mode)) {
			int fd = openat(dirfd(d), names[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				rc = -1;
				break;
			}
			struct sha256_ctx c;
			sha256_init(&c);
			static uint8_t buf[1 << 18];
			ssize_t r;
			while ((r = read(fd, buf, sizeof(buf))) > 0)
				sha256_update(&c, (size_t)r, buf);
			close(fd);
			if (r < 0) {
				rc = -1;
				break;
			}
			uint8_t dg[SHA256_DIGEST_SIZE];
			sha256_digest(&c, sizeof(dg), dg);
			char hx[65];
			hex(dg, sizeof(dg), hx);
			k += snprintf(rec + k, sizeof(rec) - (size_t)k, "%llu %s\n",
				      (unsigned long long)st.st_size, hx);
			stats->files++;
			stats->bytes += (uint64_t)st.st_size;
		} else if (S_ISLNK(st.st_mode)) {
			char target[4096];
			ssize_t r = readlinkat(dirfd(d), names[i], target, sizeof(target) - 1);
			if (r < 0) {
				rc = -1;
				break;
			}
			target[r] = '\0';
			k += snprintf(rec + k, sizeof(rec) - (size_t)k, "%s\n", target);
		} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
			k += snprintf(rec + k, sizeof(rec) - (size_t)k, "%u:%u\n", major(st.st_rdev),
				      minor(st.st_rdev));
		} else {
			k += snprintf(rec + k, sizeof(rec) - (size_t)k, "\n");
		}
		sha256_update(tree, (size_t)(k < (int)sizeof(rec) ? k : (int)sizeof(rec) - 1),
			      (const uint8_t *)rec);
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || hash_dir(sub, path, tree, stats) < 0)
				rc = -1;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
fail:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	errno = ENOMEM;
	return -1;
}

/* ---- the build ---------------------------------------------------------- */

static int fail_at(struct build *b, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Print "sandlot image build: RECIPE:LINE: message" and return -1. */
static int fail_at(struct build *b, int line, const char *fmt, ...)
{
	char what[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (line > 0)
		fprintf(stderr, "sandlot image build: %s:%d: %s\n", b->r.path, line, what);
	else
		fprintf(stderr, "sandlot image build: %s: %s\n", b->r.path, what);
	return -1;
}

static char **build_env(const struct build *b)
{
	size_t n = 0;
	char **env = calloc(b->r.nenv + 8, sizeof(char *));
	if (!env)
		return NULL;
	env[n++] = strdup(PATH_ENV);
	env[n++] = strdup("HOME=/root");
	env[n++] = strdup("LANG=C.UTF-8");
	env[n++] = strdup("DEBIAN_FRONTEND=noninteractive");
	env[n++] = strdup("TMPDIR=/tmp");
	for (size_t i = 0; i < b->r.nenv; i++)
		env[n++] = strdup(b->r.env[i].a);
	return env;
}

static int bootstrap(struct build *b)
{
	/* The base tree depends on nothing but these: cache it under them. */
	char key_text[2048];
	snprintf(key_text, sizeof(key_text), "base-v1\n%s\n%s\n%s\n%s\n%s\n", b->r.suite,
		 b->r.variant, b->arch, b->mirror, b->components);
	struct sha256_ctx c;
	uint8_t dg[SHA256_DIGEST_SIZE];
	char key[65];
	sha256_init(&c);
	sha256_update(&c, strlen(key_text), (const uint8_t *)key_text);
	sha256_digest(&c, sizeof(dg), dg);
	hex(dg, sizeof(dg), key);
	key[16] = '\0';
	char base_dir[4200], tarball[4400];
	snprintf(base_dir, sizeof(base_dir), "%s/base", b->cache);
	snprintf(tarball, sizeof(tarball), "%s/%s-%s-%s-%s.tar", base_dir, b->r.suite, b->r.variant,
		 b->arch, key);
	struct stat st;
	struct run host = { .env = b->env, .out_fd = -1 };
	if (!b->no_cache && stat(tarball, &st) == 0 && time(NULL) - st.st_mtime < BASE_MAX_AGE_S) {
		say(b, "base: %s %s from the cache (%s)", b->r.suite, b->r.variant, tarball);
		char *argv[] = { "tar", "-x", "-p", "--numeric-owner", "--xattrs", "--xattrs-include=*",
				 "-f", tarball, "-C", b->root, NULL };
		int rc = run_ns(b, argv, &host);
		if (rc == 0) {
			snprintf(b->base_state, sizeof(b->base_state), "cached");
			return 0;
		}
		if (rc < 0)
			return -1;
		say(b, "the cached base could not be unpacked (status %d); bootstrapping instead", rc);
		image_rm_tree(b->root);
		if (mkdir(b->root, 0755) < 0)
			return fail_at(b, 0, "mkdir %s: %s", b->root, strerror(errno));
	}
	say(b, "base: debootstrap %s (%s) from %s", b->r.suite, b->r.variant, b->mirror);
	char variant[64], comps[300], cachearg[4300], archarg[64];
	snprintf(variant, sizeof(variant), "--variant=%s", b->r.variant);
	snprintf(comps, sizeof(comps), "--components=%s", b->components);
	snprintf(cachearg, sizeof(cachearg), "--cache-dir=%s", b->debs);
	snprintf(archarg, sizeof(archarg), "--arch=%s", b->arch);
	char *argv[12];
	int ac = 0;
	argv[ac++] = "debootstrap";
	if (strcmp(b->r.variant, "default") != 0)
		argv[ac++] = variant;
	argv[ac++] = comps;
	argv[ac++] = archarg;
	argv[ac++] = cachearg;
	argv[ac++] = b->r.suite;
	argv[ac++] = b->root;
	argv[ac++] = b->mirror;
	argv[ac] = NULL;
	int rc = run_ns(b, argv, &host);
	if (rc < 0)
		return -1;
	if (rc != 0) {
		tail_print(b);
		return fail_at(b, 0, "debootstrap of %s failed with status %d", b->r.suite, rc);
	}
	snprintf(b->base_state, sizeof(b->base_state), "bootstrapped");
	/* Into the cache, under a temporary name renamed into place. */
	if (sandlot__mkdir_p(base_dir, 0755) == 0) {
		char tmp[4500];
		snprintf(tmp, sizeof(tmp), "%s.%d.tmp", tarball, (int)getpid());
		char *targv[] = { "tar", "-c", "--numeric-owner", "--xattrs", "--xattrs-include=*",
				  "-f", tmp, "-C", b->root, ".", NULL };
		say(b, "base: saving to the cache %s", tarball);
		int t = run_ns(b, targv, &host);
		if (t == 0 && rename(tmp, tarball) == 0)
			return 0;
		unlink(tmp);
		if (t < 0)
			return -1;
		say(b, "base: could not be cached (status %d); continuing", t);
	}
	return 0;
}

static int apt_steps(struct build *b)
{
	char conf[4400], text[2048];
	snprintf(conf, sizeof(conf), "%s/etc/apt/apt.conf.d/99sandlot-build", b->root);
	snprintf(text, sizeof(text),
		 "// sandlot image build (removed when the build ends)\n"
		 "APT::Install-Recommends \"false\";\nAPT::Install-Suggests \"false\";\n"
		 "Dpkg::Use-Pty \"false\";\nquiet \"1\";\n%s%s%s",
		 b->proxy[0] ? "Acquire::http::Proxy \"" : "", b->proxy, b->proxy[0] ? "\";\n" : "");
	if (write_text(conf, text, 0644) < 0)
		return fail_at(b, 0, "write %s: %s", conf, strerror(errno));
	char partial[4400];
	snprintf(partial, sizeof(partial), "%s/partial", b->debs);
	sandlot__mkdir_p(partial, 0755);
	const char *binds[] = { b->debs, "/var/cache/apt/archives", NULL };
	struct run in = { .root = b->root, .binds = binds, .env = b->env, .out_fd = -1 };

	say(b, "apt-get update");
	char *upd[] = { "apt-get", "update", NULL };
	int rc = run_ns(b, upd, &in);
	if (rc < 0)
		return -1;
	if (rc) {
		tail_print(b);
		return fail_at(b, 0, "apt-get update failed with status %d", rc);
	}
	say(b, "apt-get upgrade");
	char *upg[] = { "apt-get", "-y", "upgrade", NULL };
	if ((rc = run_ns(b, upg, &in)) < 0)
		return -1;
	if (rc) {
		tail_print(b);
		return fail_at(b, 0, "apt-get upgrade failed with status %d", rc);
	}
	if (!b->r.npackages)
		return 0;
	say(b, "apt-get install: %zu packages", b->r.npackages);
	char **argv = calloc(b->r.npackages + 4, sizeof(char *));
	if (!argv)
		return fail_at(b, 0, "out of memory");
	int ac = 0;
	argv[ac++] = "apt-get";
	argv[ac++] = "-y";
	argv[ac++] = "install";
	for (size_t i = 0; i < b->r.npackages; i++)
		argv[ac++] = b->r.packages[i].a;
	b->bad_package[0] = '\0';
	rc = run_ns(b, argv, &in);
	free(argv);
	if (rc < 0)
		return -1;
	if (rc) {
		int line = b->bad_package[0] ? recipe_package_line(&b->r, b->bad_package) : 0;
		if (line)
			return fail_at(b, line, "unknown package \"%s\": apt has no installation "
				       "candidate for it in %s", b->bad_package, b->r.suite);
		tail_print(b);
		return fail_at(b, b->r.packages_line, "apt-get install failed with status %d", rc);
	}
	return 0;
}

static int npm_step(struct build *b)
{
	if (!b->r.nnpm)
		return 0;
	char npm_cache[4300];
	snprintf(npm_cache, sizeof(npm_cache), "%s/npm", b->cache);
	sandlot__mkdir_p(npm_cache, 0755);
	const char *binds[] = { npm_cache, "/root/.npm", NULL };
	struct run in = { .root = b->root, .binds = binds, .env = b->env, .out_fd = -1 };
	say(b, "npm install -g: %zu packages", b->r.nnpm);
	char **argv = calloc(b->r.nnpm + 8, sizeof(char *));
	if (!argv)
		return fail_at(b, 0, "out of memory");
	int ac = 0;
	argv[ac++] = "npm";
	argv[ac++] = "install";
	argv[ac++] = "--global";
	argv[ac++] = "--no-audit";
	argv[ac++] = "--no-fund";
	argv[ac++] = "--no-update-notifier";
	for (size_t i = 0; i < b->r.nnpm; i++)
		argv[ac++] = b->r.npm[i].a;
	int rc = run_ns(b, argv, &in);
	free(argv);
	if (rc < 0)
		return -1;
	if (rc) {
		tail_print(b);
		return fail_at(b, b->r.npm_line, "npm install failed with status %d", rc);
	}
	return 0;
}

static int steps(struct build *b)
{
	char staging[4400];
	snprintf(staging, sizeof(staging), "%s/.sandlot-build", b->root);
	for (size_t i = 0; i < b->r.nsteps; i++) {
		const struct recipe_item *it = &b->r.steps[i];
		struct run in = { .root = b->root, .env = b->env, .out_fd = -1 };
		int rc;
		if (it->is_run) {
			say(b, "line %d: run %s", it->line, it->a);
			char *argv[] = { "/bin/sh", "-c", it->a, NULL };
			if ((rc = run_ns(b, argv, &in)) < 0)
				return -1;
			if (rc) {
				tail_print(b);
				return fail_at(b, it->line, "command failed with exit status %d: %s", rc,
					       it->a);
			}
			continue;
		}
		say(b, "line %d: file %s -> %s", it->line, it->a, it->b);
		/* Copied in two hops: from the host into a directory of our own
		 * in the tree, then inside the chroot, where the destination's
		 * links resolve against the image and never the host. */
		image_rm_tree(staging);
		if (mkdir(staging, 0700) < 0)
			return fail_at(b, it->line, "mkdir %s: %s", staging, strerror(errno));
		char dst[4500];
		snprintf(dst, sizeof(dst), "%s/src", staging);
		char *cp1[] = { "cp", "-R", "--preserve=mode,timestamps", "--", it->a, dst, NULL };
		struct run host = { .env = b->env, .out_fd = -1 };
		if ((rc = run_ns(b, cp1, &host)) < 0)
			return -1;
		if (rc) {
			tail_print(b);
			return fail_at(b, it->line, "copying %s failed", it->a);
		}
		const char *script =
			"set -e; d=\"$1\"; case \"$d\" in */) d=\"$d$(basename \"$2\")\";; esac; "
			"mkdir -p \"$(dirname \"$d\")\"; rm -rf \"$d\"; "
			"cp -R --preserve=mode,timestamps /.sandlot-build/src \"$d\"; chown -R 0:0 \"$d\"";
		char *cp2[] = { "/bin/sh", "-c", (char *)script, "sh", it->b, it->a, NULL };
		if ((rc = run_ns(b, cp2, &in)) < 0)
			return -1;
		if (rc) {
			tail_print(b);
			return fail_at(b, it->line, "installing %s as %s failed", it->a, it->b);
		}
	}
	image_rm_tree(staging);
	return 0;
}

/* The tree as sandboxes want it (see the header of src/init/setup.c). */
static int tidy(struct build *b)
{
	static const char *const gone[] = {
		"/etc/apt/apt.conf.d/99sandlot-build", "/usr/sbin/policy-rc.d", "/var/cache/apt/pkgcache.bin",
		"/var/cache/apt/srcpkgcache.bin", "/.sandlot-build",
	};
	char p[4500];
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(gone); i++) {
		snprintf(p, sizeof(p), "%s%s", b->root, gone[i]);
		image_rm_tree(p);
	}
	/* Package lists are for installing, which a read-only image never does. */
	snprintf(p, sizeof(p), "%s/var/lib/apt/lists", b->root);
	cleanup_closedir DIR *d = opendir(p);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, "partial") || !strcmp(de->d_name, "lock"))
			continue;
		char f[4800];
		snprintf(f, sizeof(f), "%s/%s", p, de->d_name);
		unlink(f);
	}
	/* Files sandlot writes in every sandbox must exist to be bound over. */
	static const char *const etc[] = { "passwd", "group", "nsswitch.conf", "hosts", "hostname" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(etc); i++) {
		snprintf(p, sizeof(p), "%s/etc/%s", b->root, etc[i]);
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0)
			return fail_at(b, 0, "create %s: %s", p, strerror(errno));
		close(fd);
	}
	snprintf(p, sizeof(p), "%s/etc/resolv.conf", b->root);
	if (write_text(p, "# written by sandlot in every sandbox\n", 0644) < 0)
		return fail_at(b, 0, "write %s: %s", p, strerror(errno));
	snprintf(p, sizeof(p), "%s/etc/machine-id", b->root);
	if (access(p, F_OK) == 0)
		write_text(p, "", 0444);
	/* /var/tmp is the sandbox's /tmp, as on the host image. */
	snprintf(p, sizeof(p), "%s/var/tmp", b->root);
	image_rm_tree(p);
	if (symlink("../tmp", p) < 0)
		return fail_at(b, 0, "symlink %s: %s", p, strerror(errno));
	/* Left-overs of the build in the places sandboxes get fresh. */
	static const char *const emptied[] = { "/tmp", "/root", "/run", "/home" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(emptied); i++) {
		snprintf(p, sizeof(p), "%s%s", b->root, emptied[i]);
		image_rm_tree(p);
		mkdir(p, !strcmp(emptied[i], "/tmp") ? 01777 : !strcmp(emptied[i], "/root") ? 0700 : 0755);
		chmod(p, !strcmp(emptied[i], "/tmp") ? 01777 : !strcmp(emptied[i], "/root") ? 0700 : 0755);
	}
	return 0;
}

static json_t *package_list(struct build *b)
{
	int fd = memfd_create("packages", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct run in = { .root = b->root, .env = b->env, .out_fd = fd };
	char *argv[] = { "dpkg-query", "-W", "-f", "${binary:Package}\\t${Version}\\t${Architecture}\\n",
			 NULL };
	int quiet = b->quiet;
	b->quiet = 1;
	int rc = run_ns(b, argv, &in);
	b->quiet = quiet;
	json_t *out = NULL;
	if (rc == 0) {
		off_t n = lseek(fd, 0, SEEK_END);
		char *text = n > 0 ? malloc((size_t)n + 1) : NULL;
		if (text && pread(fd, text, (size_t)n, 0) == n) {
			text[n] = '\0';
			/* Sorted by name: dpkg-query's order is its database's. */
			char **lines = NULL;
			size_t nl = 0;
			for (char *s = NULL, *l = strtok_r(text, "\n", &s); l; l = strtok_r(NULL, "\n", &s)) {
				char **nn = realloc(lines, (nl + 1) * sizeof(char *));
				if (!nn)
					break;
				lines = nn;
				lines[nl++] = l;
			}
			qsort(lines, nl, sizeof(char *), cmp_names);
			out = json_array();
			for (size_t i = 0; i < nl; i++) {
				char *f[3] = { lines[i], NULL, NULL };
				char *t1 = strchr(f[0], '\t');
				if (!t1)
					continue;
				*t1 = '\0';
				f[1] = t1 + 1;
				char *t2 = strchr(f[1], '\t');
				if (!t2)
					continue;
				*t2 = '\0';
				f[2] = t2 + 1;
				json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "name", f[0], "version",
								     f[1], "architecture", f[2]));
			}
			free(lines);
		}
		free(text);
	}
	close(fd);
	return out;
}

static json_t *npm_list(struct build *b)
{
	if (!b->r.nnpm)
		return json_object();
	int fd = memfd_create("npm", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct run in = { .root = b->root, .env = b->env, .out_fd = fd };
	char *argv[] = { "npm", "ls", "--global", "--depth=0", "--json", NULL };
	int quiet = b->quiet;
	b->quiet = 1;
	int rc = run_ns(b, argv, &in);
	b->quiet = quiet;
	json_t *out = json_object();
	if (rc == 0) {
		lseek(fd, 0, SEEK_SET);
		FILE *f = fdopen(dup(fd), "r");
		json_t *j = f ? json_loadf(f, 0, NULL) : NULL;
		if (f)
			fclose(f);
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(j, "dependencies"), k, v)
			if (strcmp(k, "npm") != 0 && strcmp(k, "corepack") != 0)
				json_object_set_new(out, k, json_copy(json_object_get(v, "version")));
		json_decref(j);
	}
	close(fd);
	return out;
}

/* The tree again as one erofs file, rootfs.erofs beside rootfs/: the
 * read-only root disk of vm sandboxes on the image (docs/vm.md), which
 * cannot share a directory with their guest.  LZ4 (not LZ4HC): on the 2-CPU
 * test machine, 59 MB of /usr/lib/python3.11 took 0.5 s and became 31 MB
 * (LZ4HC: 3.4 s, 28 MB; none: 0.2 s, 58 MB).  Without erofs-utils the image
 * is made all the same, for ns sandboxes only, and the build says so. */
static int write_erofs(struct build *b)
{
	char out[4400];
	snprintf(out, sizeof(out), "%s/rootfs.erofs", b->dir);
	struct run host = { .env = b->env, .out_fd = -1 };
	char *argv[] = { "mkfs.erofs", "-zlz4", out, b->root, NULL };
	say(b, "writing rootfs.erofs (the root disk of vm sandboxes)");
	int rc = run_ns(b, argv, &host);
	if (rc < 0)
		return -1;
	if (rc == 127) {
		unlink(out);
		say(b, "mkfs.erofs is not installed (erofs-utils): vm sandboxes cannot use this image");
		return 0;
	}
	if (rc != 0) {
		tail_print(b);
		return fail_at(b, 0, "mkfs.erofs failed with status %d", rc);
	}
	return 0;
}

static int finish(struct build *b, json_t *packages, json_t *npm, char *digest_out)
{
	say(b, "hashing the file tree");
	struct sha256_ctx tree;
	sha256_init(&tree);
	const char *magic = "sandlot-image-tree-v1\n";
	sha256_update(&tree, strlen(magic), (const uint8_t *)magic);
	struct tree_stats stats = { 0, 0 };
	int rfd = open(b->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0 || hash_dir(rfd, "", &tree, &stats) < 0) {
		if (interrupted)
			return -1;
		return fail_at(b, 0, "hash the tree %s: %s", b->root, strerror(errno));
	}
	if (interrupted)
		return -1;
	uint8_t dg[SHA256_DIGEST_SIZE];
	char digest[65];
	sha256_digest(&tree, sizeof(dg), dg);
	hex(dg, sizeof(dg), digest);

	/* The package set alone, to compare builds. */
	char *ptext = json_dumps(packages, JSON_COMPACT | JSON_SORT_KEYS);
	struct sha256_ctx pc;
	sha256_init(&pc);
	sha256_update(&pc, ptext ? strlen(ptext) : 0, (const uint8_t *)(ptext ? ptext : ""));
	sha256_digest(&pc, sizeof(dg), dg);
	free(ptext);
	char pdigest[65], rdigest[65];
	hex(dg, sizeof(dg), pdigest);
	sha256_init(&pc);
	sha256_update(&pc, b->r.text_len, (const uint8_t *)b->r.text);
	sha256_digest(&pc, sizeof(dg), dg);
	hex(dg, sizeof(dg), rdigest);

	char created[32];
	time_t now = time(NULL);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	char sha[80], psha[80], rsha[80];
	snprintf(sha, sizeof(sha), "sha256:%s", digest);
	snprintf(psha, sizeof(psha), "sha256:%s", pdigest);
	snprintf(rsha, sizeof(rsha), "sha256:%s", rdigest);
	json_t *env = json_array();
	for (size_t i = 0; i < b->r.nenv; i++)
		json_array_append_new(env, json_string(b->r.env[i].a));
	json_t *m = json_pack(
		"{s:i, s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:s, s:s, s:s, s:s, s:O, s:O, s:s, s:O, "
		"s:o, s:s?, s:s, s:I, s:I, s:s, s:f}",
		"schema", 1, "name", b->name, "digest", sha, "created", created, "recipe", "path",
		b->r.path, "sha256", rsha, "text", b->r.text, "suite", b->r.suite, "variant",
		b->r.variant, "architecture", b->arch, "mirror", b->mirror, "sources", b->sources,
		"packages", packages, "packages_sha256", psha, "npm", npm, "env", env, "workdir",
		b->r.workdir, "user", b->r.user ? b->r.user : "user", "size_bytes",
		(json_int_t)stats.bytes, "files", (json_int_t)stats.files, "base", b->base_state,
		"build_seconds", elapsed(b));
	if (!m)
		return fail_at(b, 0, "out of memory");
	char path[4400];
	snprintf(path, sizeof(path), "%s/manifest.json", b->dir);
	int rc = json_dump_file(m, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(m);
	if (rc < 0)
		return fail_at(b, 0, "write %s", path);

	size_t cap = 1024 + b->r.nenv * 64 + b->r.text_len, len = 0;
	cleanup_free char *cfg = calloc(1, cap);
	if (!cfg)
		return fail_at(b, 0, "out of memory");
	for (size_t i = 0; i < b->r.nenv; i++)
		len += (size_t)snprintf(cfg + len, cap - len, "env %s\n", b->r.env[i].a);
	if (b->r.workdir)
		len += (size_t)snprintf(cfg + len, cap - len, "workdir %s\n", b->r.workdir);
	if (b->r.user)
		len += (size_t)snprintf(cfg + len, cap - len, "user %s\n", b->r.user);
	snprintf(path, sizeof(path), "%s/config", b->dir);
	if (write_text(path, cfg, 0644) < 0)
		return fail_at(b, 0, "write %s: %s", path, strerror(errno));
	if (write_erofs(b) < 0)
		return -1;
	if (chmod(b->dir, 0755) < 0)
		return fail_at(b, 0, "chmod %s: %s", b->dir, strerror(errno));
	if (interrupted)
		return -1;

	char final[4400];
	snprintf(final, sizeof(final), "%s/%s", b->images, digest);
	if (rename(b->dir, final) < 0) {
		if (errno != EEXIST && errno != ENOTEMPTY)
			return fail_at(b, 0, "rename %s to %s: %s", b->dir, final, strerror(errno));
		/* The very same tree is already there. */
		image_rm_tree(b->dir);
	}
	b->dir[0] = '\0'; /* nothing to clean up any more */
	close(b->lock_fd);
	b->lock_fd = -1;
	memcpy(digest_out, digest, 65);
	say(b, "image sha256:%.12s: %llu files, %.1f MB, %zu Debian packages", digest,
	    (unsigned long long)stats.files, (double)stats.bytes / 1e6, json_array_size(packages));
	return 0;
}

static const char build_help[] =
	"NAME\n"
	"    sandlot image build - build a root filesystem image from a recipe\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot image build [OPTIONS] RECIPE\n"
	"\n"
	"DESCRIPTION\n"
	"    Bootstraps the recipe's Debian suite with debootstrap from the mirror\n"
	"    this machine's apt is configured with, installs its packages with apt\n"
	"    (and npm), copies its files, runs its commands, and stores the result\n"
	"    under the data directory as an immutable image, named NAME and\n"
	"    identified by the SHA-256 digest of its file tree.  Progress goes to\n"
	"    stderr; the digest is printed on stdout at the end.  A failed or\n"
	"    interrupted build leaves nothing behind.  Needs root.  The recipe\n"
	"    format is in docs/images.md.\n"
	"\n"
	"OPTIONS\n"
	"    -n, --name NAME       the image's name (default: the recipe's file name\n"
	"                          without .recipe); an existing image of that name\n"
	"                          is replaced (and removed if no sandbox uses it)\n"
	"        --cache-dir DIR   downloaded packages and bootstrapped base trees\n"
	"                          (default $SANDLOT_CACHE_DIR, else /var/cache/sandlot)\n"
	"        --no-cache        bootstrap the base afresh (downloaded packages are\n"
	"                          still reused when their checksums match)\n"
	"    -q, --quiet           show the steps only, not the tools' output\n"
	"    -h, --help            show this help\n"
	"\n"
	"ENVIRONMENT\n"
	"    SANDLOT_DATA_DIR      where images are stored (default /var/lib/sandlot)\n"
	"\n"
	"EXIT STATUS\n"
	"    0 when built, 1 when the recipe or the build failed (the message names\n"
	"    the recipe line), 2 for bad arguments, 130/143 when interrupted.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot image build images/python-data.recipe\n"
	"    sandlot run --image python-data -- python3 -c 'import pandas'\n";

enum { OPT_CACHE_DIR = 300, OPT_NO_CACHE };

static const struct option build_opts[] = {
	{ "name", required_argument, NULL, 'n' },
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "no-cache", no_argument, NULL, OPT_NO_CACHE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Point names/<name> at digest; returns the digest it pointed at before
 * (65 bytes in old, "" if none). */
static int set_name(const char *images, const char *name, const char *digest, char *old)
{
	char dir[4200], link[4400], tmp[4500], target[128];
	old[0] = '\0';
	snprintf(dir, sizeof(dir), "%s/names", images);
	if (sandlot__mkdir_p(dir, 0755) < 0)
		return -1;
	snprintf(link, sizeof(link), "%s/%s", dir, name);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n > 3) {
		target[n] = '\0';
		snprintf(old, 65, "%s", target + 3);
	}
	snprintf(tmp, sizeof(tmp), "%s/.%s.%d", dir, name, (int)getpid());
	snprintf(target, sizeof(target), "../%s", digest);
	unlink(tmp);
	if (symlink(target, tmp) < 0)
		return -1;
	if (rename(tmp, link) < 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

int image_build(int argc, char **argv)
{
	const char *name = NULL, *cache = NULL;
	int quiet = 0, no_cache = 0, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+n:qh", build_opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			name = optarg;
			break;
		case OPT_CACHE_DIR:
			cache = optarg;
			break;
		case OPT_NO_CACHE:
			no_cache = 1;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			fputs(build_help, stdout);
			return 0;
		default:
			return cli_option_error("image build", c, argv);
		}
	}
	if (optind + 1 != argc)
		return cli_usage_error("image build", optind == argc ? "missing RECIPE"
								       : "one RECIPE at a time");
	const char *recipe_path = argv[optind];
	char defname[80];
	if (!name) {
		const char *base = strrchr(recipe_path, '/');
		base = base ? base + 1 : recipe_path;
		size_t bl = strlen(base);
		if (bl > 7 && strcmp(base + bl - 7, ".recipe") == 0)
			bl -= 7;
		snprintf(defname, sizeof(defname), "%.*s", (int)(bl < 64 ? bl : 64), base);
		name = defname;
	}
	if (!sandlot__image_name_valid(name))
		return cli_usage_error("image build",
				       "invalid image name \"%s\" ([a-z0-9][a-z0-9._-]*, at most 64, not "
				       "\"host\" or a digest); use --name", name);
	if (!cache) {
		const char *e = getenv("SANDLOT_CACHE_DIR");
		cache = e && *e ? e : "/var/cache/sandlot";
	}
	if (cache[0] != '/')
		return cli_usage_error("image build", "--cache-dir needs an absolute path");

	static struct build bs;
	struct build *b = &bs;
	memset(b, 0, sizeof(*b));
	b->t0 = sandlot__now_ms();
	b->lock_fd = -1;
	b->quiet = quiet;
	b->no_cache = no_cache;
	b->name = name;
	char msg[1200];
	if (recipe_parse(recipe_path, &b->r, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "sandlot image build: %s\n", msg);
		recipe_free(&b->r);
		return 1;
	}
	if (geteuid() != 0) {
		cli_err("image build needs root (debootstrap, chroot, namespaces)");
		recipe_free(&b->r);
		return 1;
	}
	const char *dd = sandlot__data_dir(NULL);
	if (strlen(dd) > 1024 || strlen(cache) > 1024) {
		cli_err("the data and cache directories need paths of at most 1024 bytes");
		recipe_free(&b->r);
		return 1;
	}
	snprintf(b->images, sizeof(b->images), "%s/images", dd);
	snprintf(b->cache, sizeof(b->cache), "%s", cache);
	snprintf(b->debs, sizeof(b->debs), "%s/debs", cache);
	int status = 1, cache_lock = -1;
	cleanup_free char *arch = NULL, *dbs = NULL, *resolv = NULL;
	json_t *packages = NULL, *npm = NULL;
	char digest[65] = "";

	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	char *aargv[] = { "dpkg", "--print-architecture", NULL };
	arch = capture(aargv);
	if (!arch) {
		cli_err("cannot tell this machine's architecture (dpkg --print-architecture)");
		goto out;
	}
	snprintf(b->arch, sizeof(b->arch), "%.*s", (int)strcspn(arch, "\n"), arch);
	char *dargv[] = { "sh", "-c", "command -v debootstrap", NULL };
	dbs = capture(dargv);
	if (!dbs) {
		cli_err("debootstrap is not installed (apt-get install debootstrap)");
		goto out;
	}
	if (find_sources(b, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "sandlot image build: %s\n", msg);
		goto out;
	}
	say(b, "recipe %s: %s %s, %zu Debian packages, %zu npm packages, %zu steps; image \"%s\"",
	    b->r.path, b->r.suite, b->r.variant, b->r.npackages, b->r.nnpm, b->r.nsteps, name);
	b->env = build_env(b);
	if (!b->env || sandlot__mkdir_p(b->images, 0700) < 0 || sandlot__mkdir_p(b->debs, 0755) < 0) {
		cli_err("create %s or %s: %s", b->images, b->debs, strerror(errno));
		goto out;
	}
	remove_stale(b->images);
	snprintf(b->dir, sizeof(b->dir), "%s/.build-XXXXXX", b->images);
	if (!mkdtemp(b->dir)) {
		cli_err("create a build directory in %s: %s", b->images, strerror(errno));
		b->dir[0] = '\0';
		goto out;
	}
	char lock[4400];
	snprintf(lock, sizeof(lock), "%s/lock", b->dir);
	b->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (b->lock_fd < 0 || flock(b->lock_fd, LOCK_EX) < 0) {
		cli_err("lock %s: %s", lock, strerror(errno));
		goto out;
	}
	snprintf(b->root, sizeof(b->root), "%s/rootfs", b->dir);
	if (mkdir(b->root, 0755) < 0) {
		cli_err("mkdir %s: %s", b->root, strerror(errno));
		goto out;
	}
	/* One build at a time uses the package cache (apt locks its archives
	 * directory and gives up at once when another apt holds it). */
	snprintf(lock, sizeof(lock), "%s/lock", b->cache);
	cache_lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (cache_lock < 0) {
		cli_err("open %s: %s", lock, strerror(errno));
		goto out;
	}
	if (flock(cache_lock, LOCK_EX | LOCK_NB) < 0) {
		say(b, "waiting for another build that uses the cache %s", b->cache);
		while (flock(cache_lock, LOCK_EX) < 0)
			if (errno != EINTR || interrupted)
				goto out;
	}
	if (bootstrap(b) < 0 || interrupted)
		goto out;
	char p[4400];
	snprintf(p, sizeof(p), "%s/usr/sbin/policy-rc.d", b->root);
	/* No service starts in the tree while packages are installed. */
	if (write_text(p, "#!/bin/sh\nexit 101\n", 0755) < 0 || write_sources(b) < 0) {
		cli_err("configure apt in %s: %s", b->root, strerror(errno));
		goto out;
	}
	/* Name resolution for apt and the recipe's commands during the build. */
	snprintf(p, sizeof(p), "%s/etc/resolv.conf", b->root);
	resolv = sandlot__read_file("/etc/resolv.conf", 1 << 16);
	if (write_text(p, resolv ? resolv : "", 0644) < 0) {
		cli_err("write %s: %s", p, strerror(errno));
		goto out;
	}
	if (apt_steps(b) < 0 || interrupted || npm_step(b) < 0 || interrupted || steps(b) < 0 ||
	    interrupted)
		goto out;
	close(cache_lock);
	cache_lock = -1;
	say(b, "tidying up, listing packages");
	packages = package_list(b);
	npm = npm_list(b);
	if (!packages || !npm) {
		if (!interrupted)
			fail_at(b, 0, "cannot list the installed packages");
		goto out;
	}
	if (tidy(b) < 0 || interrupted)
		goto out;
	if (finish(b, packages, npm, digest) < 0)
		goto out;
	char old[65];
	if (set_name(b->images, name, digest, old) < 0) {
		cli_err("name the image %s: %s", name, strerror(errno));
		goto out;
	}
	if (old[0] && strcmp(old, digest) != 0) {
		char why[256];
		int r = image_remove_digest(b->images, old, why, sizeof(why));
		if (r == 0)
			say(b, "removed the previous \"%s\" (sha256:%.12s)", name, old);
		else if (r > 0)
			say(b, "the previous \"%s\" (sha256:%.12s) stays: %s", name, old, why);
	}
	say(b, "built \"%s\" sha256:%s", name, digest);
	printf("sha256:%s\n", digest);
	status = 0;
out:
	if (b->dir[0]) {
		if (interrupted)
			fprintf(stderr, "sandlot image build: interrupted; removing %s\n", b->dir);
		image_rm_tree(b->dir);
	}
	if (b->lock_fd >= 0)
		close(b->lock_fd);
	if (cache_lock >= 0)
		close(cache_lock);
	json_decref(packages);
	json_decref(npm);
	json_decref(b->sources);
	if (b->env) {
		for (char **e = b->env; *e; e++)
			free(*e);
		free(b->env);
	}
	recipe_free(&b->r);
	if (interrupted)
		return 128 + interrupted;
	return status;
}
