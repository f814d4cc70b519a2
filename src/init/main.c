#include "init.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct init_config cfg;
	if (init_parse_args(argc, argv, &cfg) < 0)
		return 2;
	/* PID 1 of a microVM: make the devices into what the ns host hands
	 * init (vm.c). */
	if (init_vm_guest(argc) && init_vm_boot(&cfg) < 0)
		return 1;
	if (init_setup(&cfg) < 0)
		return 1;
	return init_serve(&cfg);
}
