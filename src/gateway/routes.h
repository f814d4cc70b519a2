/* The gateway's HTTP server (routes.c). */
#ifndef SANDLOT_GATEWAY_ROUTES_H
#define SANDLOT_GATEWAY_ROUTES_H

/* Listen on --listen with libmicrohttpd.  Returns 0, or -1 after printing why. */
int gw_routes_start(void);
void gw_routes_stop(void);

#endif
