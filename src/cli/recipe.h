/* Image recipes (docs/images.md): a small line-based file.
 *
 *   # a comment (whole lines only)
 *   suite bookworm              Debian suite to bootstrap (required)
 *   variant minbase             debootstrap variant: minbase (default), buildd, default
 *   packages python3 git        Debian packages (repeatable; NAME or NAME=VERSION)
 *   npm typescript@5.4.5        npm packages installed globally (needs `packages npm`)
 *   file SRC DEST               copy SRC (relative to the recipe) to DEST in the image
 *   run CMD...                  run CMD with /bin/sh -c in the image, as root
 *   env KEY=VALUE               environment of the build's commands and of sandboxes
 *   user NAME                   login name of the sandbox user (uid 1000)
 *   workdir DIR                 default working directory of commands
 *
 * A line ending in a backslash continues on the next one.  Packages go in
 * first (one apt transaction), then npm packages, then file and run steps
 * in the order written.
 */
#ifndef SANDLOT_CLI_RECIPE_H
#define SANDLOT_CLI_RECIPE_H

#include <stddef.h>

struct recipe_item {
	int line;        /* 1-based line of the directive */
	char *a, *b;     /* package/spec/command/KEY=VALUE in a; file: SRC in a, DEST in b */
	int is_run;      /* steps: 1 run, 0 file */
};

struct recipe {
	char *path;      /* as given */
	char *dir;       /* directory of the recipe (for file SRC) */
	char *text;      /* the whole file */
	size_t text_len;
	char *suite;
	char *variant;   /* "minbase", "buildd" or "default" */
	struct recipe_item *packages, *npm, *steps, *env;
	size_t npackages, nnpm, nsteps, nenv;
	char *user, *workdir;
	int packages_line;  /* first `packages` line */
	int npm_line;       /* first `npm` line */
};

/* Read and check `path`.  0, or -1 with "PATH:LINE: reason" (or "PATH:
 * reason") in msg. */
int recipe_parse(const char *path, struct recipe *r, char *msg, size_t msglen);
/* The same for a recipe given as text (text_len bytes, not NUL-terminated;
 * a NUL byte is an error), read as if from `path` (file SRC is relative to
 * its directory, and messages name it).  The fuzz entry point's way in. */
int recipe_parse_text(const char *path, const char *text, size_t text_len, struct recipe *r,
		      char *msg, size_t msglen);
/* Frees what recipe_parse*() made, after success or failure alike. */
void recipe_free(struct recipe *r);

/* The recipe line that asked for Debian package `name` (with or without
 * =VERSION), or 0. */
int recipe_package_line(const struct recipe *r, const char *name);

#endif
