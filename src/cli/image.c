/* sandlot image: build, ls, inspect, rm — the image store of the data
 * directory (src/core/images.h), no daemon needed. */
/* Paths here are built from the data and cache directories, which
 * image_build() and images_dir() limit to 1024 bytes, plus names of known
 * length: the fixed buffers cannot truncate them. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "image.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "core/images.h"

static const char image_help[] =
	"NAME\n"
	"    sandlot image - build and manage root filesystem images\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot image build [--name NAME] RECIPE\n"
	"    sandlot image ls [--json | -q]\n"
	"    sandlot image inspect IMAGE\n"
	"    sandlot image rm IMAGE...\n"
	"\n"
	"DESCRIPTION\n"
	"    Images are Debian root filesystems built from recipes (images/*.recipe,\n"
	"    format in docs/images.md) and stored read-only under the data directory\n"
	"    ($SANDLOT_DATA_DIR, default /var/lib/sandlot), shared by every sandbox\n"
	"    that uses them: sandlot run --image NAME, sandlot create --image NAME,\n"
	"    \"image\" in sandlotd's API.  IMAGE is a name, or a digest (sha256:...)\n"
	"    or a unique prefix of it of 12 digits or more.  The image \"host\" (the\n"
	"    host's own /usr) is built in and always there.\n"
	"\n"
	"    build     Build an image (see sandlot image build --help).\n"
	"    ls        List images: name, digest, size, creation time, and how\n"
	"              many sandboxes use it now.\n"
	"    inspect   Print an image's manifest (recipe, exact package versions,\n"
	"              digest) as JSON.\n"
	"    rm        Remove images (or one of several names of an image); refused\n"
	"              while a sandbox uses the image.\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if an image is unknown, in use, or a build failed, 2 for\n"
	"    bad arguments.\n";

static int is_digest(const char *s)
{
	if (strlen(s) != SANDLOT_DIGEST_HEX)
		return 0;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static void images_dir(char *out, size_t n)
{
	const char *dd = sandlot__data_dir(NULL);
	snprintf(out, n, "%.1024s/images", dd);
}

/* How many sandboxes hold the image's in-use lock (from /proc/locks: one
 * entry per holder; nothing is locked to find out). */
static int users(const char *images, const char *digest)
{
	char path[4400];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s/lock", images, digest);
	if (stat(path, &st) < 0)
		return 0;
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	char line[256], want[96];
	snprintf(want, sizeof(want), ":%lu ", (unsigned long)st.st_ino);
	int n = 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "FLOCK") && strstr(line, want))
			n++;
	fclose(f);
	return n;
}

/* Names (names/<name> links) pointing at digest, as a JSON array. */
static json_t *names_of(const char *images, const char *digest)
{
	json_t *out = json_array();
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/names", images);
	cleanup_closedir DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char link[4400], target[128];
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strcmp(target + (strncmp(target, "../", 3) == 0 ? 3 : 0), digest) == 0)
			json_array_append_new(out, json_string(de->d_name));
	}
	return out;
}

static json_t *load_manifest(const char *images, const char *digest)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s/manifest.json", images, digest);
	return json_load_file(path, 0, NULL);
}

int image_remove_digest(const char *images, const char *digest, char *why, size_t whylen)
{
	char path[4400], gone[4400];
	snprintf(path, sizeof(path), "%s/%s/lock", images, digest);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, whylen, "open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int n = users(images, digest);
		snprintf(why, whylen, "in use by %d sandbox%s", n ? n : 1, n > 1 ? "es" : "");
		return 1;
	}
	json_t *names = names_of(images, digest);
	size_t nn = json_array_size(names);
	if (nn) {
		snprintf(why, whylen, "still named \"%s\"", json_string_value(json_array_get(names, 0)));
		json_decref(names);
		return 1;
	}
	json_decref(names);
	/* Out of sight in one step, then deleted; a sandbox that opened the
	 * directory just before sees the rename once it gets the lock. */
	snprintf(path, sizeof(path), "%s/%s", images, digest);
	snprintf(gone, sizeof(gone), "%s/.rm-%s-%d", images, digest, (int)getpid());
	if (rename(path, gone) < 0) {
		snprintf(why, whylen, "rename %s: %s", path, strerror(errno));
		return -1;
	}
	image_rm_tree(gone);
	return 0;
}

static int image_ls(int argc, char **argv)
{
	int json = 0, quiet = 0, c;
	static const struct option o[] = {
		{ "json", no_argument, NULL, 'j' }, { "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((c = getopt_long(argc, argv, "+qh", o, NULL)) != -1) {
		if (c == 'j')
			json = 1;
		else if (c == 'q')
			quiet = 1;
		else if (c == 'h')
			return fputs("usage: sandlot image ls [--json | -q]\n", stdout), 0;
		else
			return cli_option_error("image ls", c, argv);
	}
	if (optind != argc)
		return cli_usage_error("image ls", "unexpected argument \"%s\"", argv[optind]);
	char images[4200];
	images_dir(images, sizeof(images));
	json_t *list = json_array();
	cleanup_closedir DIR *d = opendir(images);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!is_digest(de->d_name))
			continue;
		json_t *m = load_manifest(images, de->d_name);
		char sha[80];
		snprintf(sha, sizeof(sha), "sha256:%s", de->d_name);
		json_t *e = json_pack("{s:o, s:s, s:O?, s:O?, s:i, s:i}", "names",
				      names_of(images, de->d_name), "digest", sha, "created",
				      json_object_get(m, "created"), "size_bytes",
				      json_object_get(m, "size_bytes"), "packages",
				      (int)json_array_size(json_object_get(m, "packages")), "in_use",
				      users(images, de->d_name));
		json_decref(m);
		if (e)
			json_array_append_new(list, e);
	}
	size_t i;
	json_t *e;
	if (json) {
		json_t *out = json_pack("{s:o}", "images", list);
		char *text = json_dumps(out, JSON_COMPACT);
		printf("%s\n", text ? text : "{}");
		free(text);
		json_decref(out);
		return 0;
	}
	if (!quiet)
		printf("%-24s %-14s %9s  %-20s %s\n", "NAME", "DIGEST", "SIZE", "CREATED", "IN USE");
	json_array_foreach(list, i, e) {
		json_t *names = json_object_get(e, "names");
		const char *dg = json_string_value(json_object_get(e, "digest")) + 7;
		if (quiet) {
			if (json_array_size(names))
				printf("%s\n", json_string_value(json_array_get(names, 0)));
			else
				printf("sha256:%s\n", dg);
			continue;
		}
		char namebuf[256] = "";
		size_t j;
		json_t *n;
		json_array_foreach(names, j, n) {
			size_t l = strlen(namebuf);
			snprintf(namebuf + l, sizeof(namebuf) - l, "%s%s", l ? "," : "", json_string_value(n));
		}
		const char *created = json_string_value(json_object_get(e, "created"));
		printf("%-24s %-14.12s %7.1fMB  %-20s %d\n", namebuf[0] ? namebuf : "<none>", dg,
		       (double)json_integer_value(json_object_get(e, "size_bytes")) / 1e6,
		       created ? created : "?", (int)json_integer_value(json_object_get(e, "in_use")));
	}
	json_decref(list);
	return 0;
}

static int image_inspect(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return fputs("usage: sandlot image inspect IMAGE\n", stdout), 0;
	if (argc != 2)
		return cli_usage_error("image inspect", "expected one IMAGE");
	char images[4200], digest[SANDLOT_DIGEST_HEX + 1];
	images_dir(images, sizeof(images));
	sandlot_error_t *err = NULL;
	if (sandlot__image_resolve(sandlot__data_dir(NULL), argv[1], digest, &err) < 0) {
		cli_err("%s", sandlot_error_message(err));
		sandlot_error_free(err);
		return 1;
	}
	json_t *m = load_manifest(images, digest);
	if (!m) {
		cli_err("image %s has no readable manifest", argv[1]);
		return 1;
	}
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s/rootfs", images, digest);
	json_object_set_new(m, "names", names_of(images, digest));
	json_object_set_new(m, "in_use", json_integer(users(images, digest)));
	json_object_set_new(m, "path", json_string(path));
	char *text = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	printf("%s\n", text ? text : "{}");
	free(text);
	json_decref(m);
	return 0;
}

static int remove_one(const char *images, const char *ref)
{
	char digest[SANDLOT_DIGEST_HEX + 1], why[256];
	sandlot_error_t *err = NULL;
	if (!strcmp(ref, "host")) {
		cli_err("image rm: \"host\" is built in and cannot be removed");
		return 1;
	}
	if (sandlot__image_resolve(sandlot__data_dir(NULL), ref, digest, &err) < 0) {
		cli_err("image rm: %s", sandlot_error_message(err));
		sandlot_error_free(err);
		return 1;
	}
	json_t *names = names_of(images, digest);
	int by_name = sandlot__image_name_valid(ref);
	char link[4400];
	if (by_name && json_array_size(names) > 1) {
		/* Another name keeps the image: only this name goes. */
		snprintf(link, sizeof(link), "%s/names/%s", images, ref);
		json_decref(names);
		if (unlink(link) < 0) {
			cli_err("image rm: remove %s: %s", link, strerror(errno));
			return 1;
		}
		fprintf(stderr, "removed the name %s (the image keeps its other names)\n", ref);
		return 0;
	}
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s/lock", images, digest);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int n = users(images, digest);
		json_decref(names);
		if (fd < 0) {
			cli_err("image rm: open %s: %s", path, strerror(errno));
			return 1;
		}
		cli_err("image rm: image \"%s\" is in use by %d sandbox%s; remove those first", ref,
			n ? n : 1, n > 1 ? "es" : "");
		return 1;
	}
	/* Not in use and we hold it: the names go, then the image. */
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n) {
		snprintf(link, sizeof(link), "%s/names/%s", images, json_string_value(n));
		unlink(link);
	}
	json_decref(names);
	close(fd);
	fd = -1;
	int r = image_remove_digest(images, digest, why, sizeof(why));
	if (r != 0) {
		cli_err("image rm: %s: %s", ref, why);
		return 1;
	}
	printf("sha256:%s\n", digest);
	return 0;
}

static int image_rm(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return fputs("usage: sandlot image rm IMAGE...\n", stdout), 0;
	if (argc < 2)
		return cli_usage_error("image rm", "expected at least one IMAGE");
	char images[4200];
	images_dir(images, sizeof(images));
	int rc = 0;
	for (int i = 1; i < argc; i++)
		if (remove_one(images, argv[i]))
			rc = 1;
	return rc;
}

int cmd_image(int argc, char **argv)
{
	if (argc < 2) {
		fputs(image_help, stderr);
		return EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
		fputs(image_help, stdout);
		return 0;
	}
	if (!strcmp(sub, "build"))
		return image_build(argc - 1, argv + 1);
	if (!strcmp(sub, "ls") || !strcmp(sub, "list"))
		return image_ls(argc - 1, argv + 1);
	if (!strcmp(sub, "inspect"))
		return image_inspect(argc - 1, argv + 1);
	if (!strcmp(sub, "rm") || !strcmp(sub, "remove"))
		return image_rm(argc - 1, argv + 1);
	return cli_usage_error("image", "unknown command \"%s\" (build, ls, inspect, rm)", sub);
}
