/* The code interpreter of E2B's code-interpreter template (e2b_envd.h). */
#include "daemon/e2b_envd.h"

const struct http_route e2b_interp_routes[] = {
	{ 0 },
};
