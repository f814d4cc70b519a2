/* placeholder until the module lands */
#include "daemon/daemon.h"
const struct http_route file_routes[] = { { 0 } };
