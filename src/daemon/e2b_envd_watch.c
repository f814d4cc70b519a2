/* filesystem.Filesystem's directory watches (e2b_envd.h). */
#include "daemon/e2b_envd.h"

int e2b_watch_call(struct http_req *req, struct e2b_call *c)
{
	(void)req;
	(void)c;
	return 1;
}
