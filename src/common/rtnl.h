/* The two rtnetlink requests sandlot makes: an IPv4 address on an
 * interface and a default route.  Shared by the host (a sandbox network
 * namespace's loopback address, linux/netns.c) and sandlot-init (a VM
 * guest's NIC, init/vm-net.c); libc only, so sandlot-init links it
 * statically. */
#ifndef SANDLOT_COMMON_RTNL_H
#define SANDLOT_COMMON_RTNL_H

#include <stdint.h>

/* Give interface `index` the IPv4 address `addr` (host byte order) with
 * `prefix` bits, on the NETLINK_ROUTE socket fd.  0, or -1 with errno
 * (EPROTO: the kernel's answer was not an acknowledgement).  An address
 * already there counts as done. */
int sandlot__rtnl_add_addr(int fd, int index, uint32_t addr, unsigned prefix);

/* Add the default route out of interface `index`: through `gateway` (host
 * byte order; 0: none, a link-scope route) with source address `src`
 * (0: none).  0, or -1 with errno; a route already there counts as done. */
int sandlot__rtnl_add_default_route(int fd, int index, uint32_t gateway, uint32_t src);

#endif
