#include "init.h"

int main(int argc, char **argv)
{
	(void)argv;
	/* PID 1 of a microVM: make the guest's devices into what the ns host
	 * hands init (vm.c), then the same start as everywhere. */
	if (init_vm_guest(argc) && init_vm_boot() < 0)
		return 1;
	struct init_config cfg;
	struct sl_reader rd;
	sl_reader_init(&rd);
	if (init_start(&cfg, &rd) < 0) {
		sl_reader_free(&rd);
		return 1;
	}
	return init_serve(&cfg, &rd);
}
