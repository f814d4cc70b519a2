/* The sandlot command-line tool: one file per verb. */
#ifndef SANDLOT_CLI_H
#define SANDLOT_CLI_H

#include <stdio.h>

#include "sandlot.h"

/* Exit statuses of our own (the command's status is passed through). */
#define EXIT_USAGE 2        /* bad arguments: sizes, durations, paths, options */
#define EXIT_SANDLOT 125    /* sandlot itself failed (as `docker run` does) */
#define EXIT_TIMEOUT 124    /* as timeout(1) */

/* Print "sandlot: <message>" to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print a usage error and a hint, return EXIT_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cmd_run(int argc, char **argv);

#endif
