/* placeholder until the module lands */
#include "daemon/daemon.h"
const struct http_route exec_routes[] = { { 0 } };
