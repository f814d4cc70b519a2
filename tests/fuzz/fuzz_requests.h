/* The request fuzz target's stand-in for a libmicrohttpd request (see
 * http_stub.c). */
#ifndef SANDLOT_TESTS_FUZZ_REQUESTS_H
#define SANDLOT_TESTS_FUZZ_REQUESTS_H

#include "daemon/http.h"

#define FUZZ_MAX_PAIRS 16

struct fuzz_req {
	struct http_req pub;               /* first: handlers see only this */
	const char *query[FUZZ_MAX_PAIRS][2];
	size_t nquery;
	const char *header[FUZZ_MAX_PAIRS][2];
	size_t nheader;
	int answers;                       /* answers given (1 is right) */
	json_t *body;                      /* the first answer's JSON body */
};

#endif
