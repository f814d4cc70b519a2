/* Image recipe parser (format in recipe.h and docs/images.md). */
#include "recipe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"

#define RECIPE_MAX (1 << 20)

static int fail(char *msg, size_t len, const char *path, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int fail(char *msg, size_t len, const char *path, int line, const char *fmt, ...)
{
	char what[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (line > 0)
		snprintf(msg, len, "%s:%d: %s", path, line, what);
	else
		snprintf(msg, len, "%s: %s", path, what);
	return -1;
}

static int push(struct recipe_item **v, size_t *n, int line, const char *a, const char *b,
		int is_run)
{
	struct recipe_item *nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -1;
	*v = nv;
	nv[*n].line = line;
	nv[*n].is_run = is_run;
	nv[*n].a = strdup(a);
	nv[*n].b = b ? strdup(b) : NULL;
	if (!nv[*n].a || (b && !nv[*n].b)) {
		free(nv[*n].a);
		free(nv[*n].b);
		return -1;
	}
	(*n)++;
	return 0;
}

static int all_of(const char *s, const char *allowed)
{
	return *s && strspn(s, allowed) == strlen(s);
}

#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define DIGIT "0123456789"

/* Debian policy 5.6.1: [a-z0-9][a-z0-9+.-]+; versions [A-Za-z0-9.+~:-]. */
static int valid_package(const char *spec)
{
	const char *eq = strchr(spec, '=');
	size_t n = eq ? (size_t)(eq - spec) : strlen(spec);
	if (n < 2 || !strchr(LOWER DIGIT, spec[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr(LOWER DIGIT "+.-", spec[i]))
			return 0;
	return !eq || all_of(eq + 1, LOWER UPPER DIGIT ".+~:-");
}

static int valid_npm(const char *spec)
{
	return strlen(spec) < 200 && all_of(spec, LOWER UPPER DIGIT "@/._~^<>=-") &&
	       spec[0] != '-' && spec[0] != '.';
}

static int valid_env_key(const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv || strchr(DIGIT, kv[0]))
		return 0;
	for (const char *p = kv; p < eq; p++)
		if (!strchr(LOWER UPPER DIGIT "_", *p))
			return 0;
	return 1;
}

static int valid_user(const char *u)
{
	return strlen(u) <= 32 && strchr(LOWER "_", u[0]) && all_of(u, LOWER DIGIT "_-") &&
	       strcmp(u, "root") != 0 && strcmp(u, "nobody") != 0;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static const char known[] = "suite, variant, packages, npm, file, run, env, user, workdir";

/* One logical line (continuations joined): directive and its argument. */
static int directive(struct recipe *r, int line, char *text, char *msg, size_t len)
{
	const char *path = r->path;
	char *arg = text + strcspn(text, " \t");
	if (*arg)
		*arg++ = '\0';
	arg = trim(arg);
	const char *d = text;
	if (!*arg)
		return fail(msg, len, path, line, "\"%s\" needs an argument", d);

	if (!strcmp(d, "suite") || !strcmp(d, "variant") || !strcmp(d, "user") ||
	    !strcmp(d, "workdir")) {
		char **dst = !strcmp(d, "suite") ? &r->suite : !strcmp(d, "variant") ? &r->variant
			     : !strcmp(d, "user") ? &r->user : &r->workdir;
		if (*dst)
			return fail(msg, len, path, line, "\"%s\" given twice", d);
		if (!strcmp(d, "suite") && (!all_of(arg, LOWER DIGIT "-") || !strchr(LOWER, arg[0])))
			return fail(msg, len, path, line, "invalid suite \"%s\" (e.g. bookworm)", arg);
		if (!strcmp(d, "variant") && strcmp(arg, "minbase") && strcmp(arg, "buildd") &&
		    strcmp(arg, "default"))
			return fail(msg, len, path, line,
				    "unknown variant \"%s\" (minbase, buildd or default)", arg);
		if (!strcmp(d, "user") && !valid_user(arg))
			return fail(msg, len, path, line,
				    "invalid user name \"%s\" ([a-z_][a-z0-9_-]*, at most 32, not root)",
				    arg);
		if (!strcmp(d, "workdir") && (arg[0] != '/' || strlen(arg) > 1024))
			return fail(msg, len, path, line, "workdir needs an absolute path, not \"%s\"",
				    arg);
		if (!(*dst = strdup(arg)))
			return fail(msg, len, path, line, "out of memory");
		return 0;
	}
	if (!strcmp(d, "packages") || !strcmp(d, "npm")) {
		int deb = d[0] == 'p';
		if (deb && !r->packages_line)
			r->packages_line = line;
		if (!deb && !r->npm_line)
			r->npm_line = line;
		for (char *save = NULL, *w = strtok_r(arg, " \t", &save); w;
		     w = strtok_r(NULL, " \t", &save)) {
			if (deb && !valid_package(w))
				return fail(msg, len, path, line,
					    "invalid Debian package name \"%s\" (NAME or NAME=VERSION, "
					    "lowercase)", w);
			if (!deb && !valid_npm(w))
				return fail(msg, len, path, line, "invalid npm package \"%s\"", w);
			if (deb ? push(&r->packages, &r->npackages, line, w, NULL, 0)
				: push(&r->npm, &r->nnpm, line, w, NULL, 0))
				return fail(msg, len, path, line, "out of memory");
		}
		return 0;
	}
	if (!strcmp(d, "file")) {
		char *save = NULL;
		char *src = strtok_r(arg, " \t", &save), *dst = strtok_r(NULL, " \t", &save);
		if (!src || !dst || strtok_r(NULL, " \t", &save))
			return fail(msg, len, path, line, "file needs exactly SRC and DEST");
		if (dst[0] != '/')
			return fail(msg, len, path, line, "file DEST must be absolute, not \"%s\"", dst);
		/* Allocated, not a fixed buffer: a long SRC cut short could name
		 * another file (a run of slashes cut down to "/"). */
		char *full = NULL;
		if (asprintf(&full, "%s/%s", src[0] == '/' ? "" : r->dir, src) < 0)
			return fail(msg, len, path, line, "out of memory");
		struct stat st;
		int rc = 0;
		if (lstat(full, &st) < 0)
			rc = fail(msg, len, path, line, "file %.1024s: %s", full, strerror(errno));
		else if (push(&r->steps, &r->nsteps, line, full, dst, 0))
			rc = fail(msg, len, path, line, "out of memory");
		free(full);
		return rc;
	}
	if (!strcmp(d, "run")) {
		if (push(&r->steps, &r->nsteps, line, arg, NULL, 1))
			return fail(msg, len, path, line, "out of memory");
		return 0;
	}
	if (!strcmp(d, "env")) {
		if (!valid_env_key(arg))
			return fail(msg, len, path, line, "env needs KEY=VALUE with KEY of [A-Za-z0-9_], "
				    "not \"%s\"", arg);
		if (push(&r->env, &r->nenv, line, arg, NULL, 0))
			return fail(msg, len, path, line, "out of memory");
		return 0;
	}
	return fail(msg, len, path, line, "unknown directive \"%.40s\" (known: %s)", d, known);
}

/* path and dir set, nothing else. */
static int recipe_begin(const char *path, struct recipe *r, char *msg, size_t len)
{
	memset(r, 0, sizeof(*r));
	r->path = strdup(path);
	const char *slash = strrchr(path, '/');
	r->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
	if (!r->path || !r->dir)
		return fail(msg, len, path, 0, "out of memory");
	return 0;
}

static int parse_text(struct recipe *r, char *msg, size_t len);

int recipe_parse(const char *path, struct recipe *r, char *msg, size_t len)
{
	if (recipe_begin(path, r, msg, len) < 0)
		return -1;
	struct stat st;
	if (stat(path, &st) < 0)
		return fail(msg, len, path, 0, "%s", strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size > RECIPE_MAX)
		return fail(msg, len, path, 0, "not a recipe (a text file of at most 1 MiB)");
	r->text = sandlot__read_file(path, RECIPE_MAX);
	if (!r->text)
		return fail(msg, len, path, 0, "%s", strerror(errno));
	r->text_len = strlen(r->text);
	if (r->text_len != (size_t)st.st_size)
		return fail(msg, len, path, 0, "contains a NUL byte: not a recipe");
	return parse_text(r, msg, len);
}

int recipe_parse_text(const char *path, const char *text, size_t text_len, struct recipe *r,
		      char *msg, size_t len)
{
	if (recipe_begin(path, r, msg, len) < 0)
		return -1;
	if (text_len > RECIPE_MAX)
		return fail(msg, len, path, 0, "not a recipe (a text file of at most 1 MiB)");
	if (memchr(text, 0, text_len))
		return fail(msg, len, path, 0, "contains a NUL byte: not a recipe");
	if (!(r->text = strndup(text, text_len)))
		return fail(msg, len, path, 0, "out of memory");
	r->text_len = text_len;
	return parse_text(r, msg, len);
}

/* Parse r->text (NUL-free) into r. */
static int parse_text(struct recipe *r, char *msg, size_t len)
{
	const char *path = r->path;
	char *copy = strdup(r->text);
	if (!copy)
		return fail(msg, len, path, 0, "out of memory");
	char *logical = NULL;
	size_t lcap = 0, llen = 0;
	int start = 0, lineno = 0, rc = 0;
	char *p = copy;
	while (p && rc == 0) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		lineno++;
		char *line = p;
		p = nl ? nl + 1 : NULL;
		if (!nl && !*line)
			break;
		size_t n = strlen(line);
		if (n && line[n - 1] == '\r')
			line[--n] = '\0';
		int cont = n && line[n - 1] == '\\';
		if (cont)
			line[--n] = '\0';
		if (!llen) {
			const char *t = line + strspn(line, " \t");
			if (!*t || *t == '#') {
				if (cont)
					rc = fail(msg, len, path, lineno,
						  "a comment or empty line cannot continue");
				continue;
			}
			start = lineno;
		}
		if (llen + n + 2 > lcap) {
			lcap = (llen + n + 2) * 2;
			char *nlp = realloc(logical, lcap);
			if (!nlp) {
				rc = fail(msg, len, path, lineno, "out of memory");
				break;
			}
			logical = nlp;
		}
		if (llen)
			logical[llen++] = ' ';
		memcpy(logical + llen, line, n);
		llen += n;
		logical[llen] = '\0';
		if (cont && p)
			continue;
		char *t = trim(logical);
		rc = directive(r, start, t, msg, len);
		llen = 0;
	}
	free(logical);
	free(copy);
	if (rc < 0)
		return -1;
	if (!r->suite)
		return fail(msg, len, path, 0, "no \"suite\" line (e.g. \"suite bookworm\")");
	if (!r->variant && !(r->variant = strdup("minbase")))
		return fail(msg, len, path, 0, "out of memory");
	if (r->nnpm && !recipe_package_line(r, "npm"))
		return fail(msg, len, path, r->npm_line,
			    "npm packages need npm in the image: add \"packages npm\"");
	return 0;
}

int recipe_package_line(const struct recipe *r, const char *name)
{
	size_t n = strcspn(name, "=");
	for (size_t i = 0; i < r->npackages; i++) {
		const char *a = r->packages[i].a;
		if (strcspn(a, "=") == n && strncmp(a, name, n) == 0)
			return r->packages[i].line;
	}
	return 0;
}

static void free_items(struct recipe_item *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].a);
		free(v[i].b);
	}
	free(v);
}

void recipe_free(struct recipe *r)
{
	free(r->path);
	free(r->dir);
	free(r->text);
	free(r->suite);
	free(r->variant);
	free(r->user);
	free(r->workdir);
	free_items(r->packages, r->npackages);
	free_items(r->npm, r->nnpm);
	free_items(r->steps, r->nsteps);
	free_items(r->env, r->nenv);
	memset(r, 0, sizeof(*r));
}
