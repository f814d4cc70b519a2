/* client_init(): the daemon and token a verb talks to, from its options,
 * the options before the verb and the environment (see client.h). */
#include "client.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/cleanup.h"

#define TOKEN_FILE_MAX 4096

/* Read the first line of a token file.  Returns a new string, or NULL
 * after printing why. */
static char *read_token_file(const char *verb, const char *path)
{
	cleanup_fclose FILE *f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "sandlot %s: cannot read token file %s: %s\n", verb, path, strerror(errno));
		return NULL;
	}
	char *buf = calloc(1, TOKEN_FILE_MAX + 1);
	if (!buf)
		return NULL;
	size_t n = fread(buf, 1, TOKEN_FILE_MAX, f);
	buf[n] = '\0';
	char *nl = strpbrk(buf, "\r\n");
	if (nl)
		*nl = '\0';
	n = strlen(buf);
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		buf[--n] = '\0';
	if (n == 0) {
		fprintf(stderr, "sandlot %s: token file %s is empty\n", verb, path);
		free(buf);
		return NULL;
	}
	return buf;
}

int client_init(struct client *c, const char *verb, const char *host, const char *token_file)
{
	memset(c, 0, sizeof(*c));
	if (!host)
		host = cli_host;
	if (!token_file)
		token_file = cli_token_file;
	if (!host || !*host)
		host = getenv("SANDLOT_HOST");
	if (!host || !*host)
		host = CLIENT_DEFAULT_HOST;

	/* --token-file beats SANDLOT_TOKEN beats SANDLOT_TOKEN_FILE. */
	cleanup_free char *token = NULL;
	const char *env_token = getenv("SANDLOT_TOKEN");
	if (!token_file && !(env_token && *env_token)) {
		token_file = getenv("SANDLOT_TOKEN_FILE");
		if (token_file && !*token_file)
			token_file = NULL;
	}
	if (token_file) {
		token = read_token_file(verb, token_file);
		if (!token)
			return EXIT_SANDLOT;
	} else if (env_token && *env_token) {
		token = strdup(env_token);
		if (!token)
			return EXIT_SANDLOT;
	}
	int rc = client_open(c, verb, host, token);
	if (token)
		explicit_bzero(token, strlen(token));
	if (rc == 0)
		return 0;
	if (errno == EINVAL)
		return cli_usage_error(verb, "invalid host \"%s\": expected unix:PATH, tcp:HOST:PORT or "
				       "http://HOST:PORT", host);
	if (errno == EBADMSG) {
		fprintf(stderr, "sandlot %s: the token contains a line break\n", verb);
		return EXIT_USAGE;
	}
	if (errno == ENOTSUP)
		fprintf(stderr, "sandlot %s: cannot initialise libcurl\n", verb);
	return EXIT_SANDLOT;
}
