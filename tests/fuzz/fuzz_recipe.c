/* Fuzz entry point for the image recipe parser (src/cli/recipe.c).
 *
 * The input is a recipe's text, read as if from /recipe (so `file SRC`
 * resolves against / and real host files can be named).  Besides the
 * sanitizers (and LeakSanitizer: recipe_free() must free what a failed
 * parse left), a few oracles:
 *   - a failure names the recipe, and a line no further than the text has;
 *   - a success has a suite of [a-z0-9-] starting with a letter, one of the
 *     three variants, items whose lines are within the text and in order,
 *     and file steps whose source exists and is the SRC as written (not
 *     cut short) under /.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/recipe.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void check_items(const struct recipe_item *v, size_t n, int lines, int ordered)
{
	int last = 0;
	for (size_t i = 0; i < n; i++) {
		check(v[i].line >= 1 && v[i].line <= lines && v[i].a && *v[i].a);
		if (ordered)
			check(v[i].line >= last);
		last = v[i].line;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int lines = 1;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	struct recipe r;
	char msg[512];
	int rc = recipe_parse_text("/recipe", (const char *)data, size, &r, msg, sizeof(msg));
	if (rc < 0) {
		check(strncmp(msg, "/recipe:", 8) == 0);
		int line = 0;
		if (sscanf(msg, "/recipe:%d:", &line) == 1)
			check(line >= 1 && line <= lines);
		recipe_free(&r);
		return 0;
	}
	check(r.suite && strspn(r.suite, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(r.suite));
	check(r.suite[0] >= 'a' && r.suite[0] <= 'z');
	check(!strcmp(r.variant, "minbase") || !strcmp(r.variant, "buildd") ||
	      !strcmp(r.variant, "default"));
	check(r.text_len == size && !memcmp(r.text, data, size));
	check_items(r.packages, r.npackages, lines, 1);
	check_items(r.npm, r.nnpm, lines, 1);
	check_items(r.steps, r.nsteps, lines, 1);
	check_items(r.env, r.nenv, lines, 1);
	for (size_t i = 0; i < r.nsteps; i++) {
		if (r.steps[i].is_run)
			continue;
		struct stat st;
		check(r.steps[i].a[0] == '/' && lstat(r.steps[i].a, &st) == 0);
		check(r.steps[i].b && r.steps[i].b[0] == '/');
		/* The SRC as written, whole: the path is "/" + SRC or "//" + SRC,
		 * and SRC appears in the text. */
		const char *src = r.steps[i].a + 1 + (r.steps[i].a[1] == '/');
		check(*src == '\0' || memmem(data, size, src, strlen(src)) != NULL);
		check(strlen(r.steps[i].a) <= size + 2);
	}
	recipe_free(&r);
	return 0;
}
