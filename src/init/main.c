#include "init.h"

int main(void)
{
	struct init_config cfg;
	struct sl_reader rd;
	sl_reader_init(&rd);
	if (init_start(&cfg, &rd) < 0) {
		sl_reader_free(&rd);
		return 1;
	}
	return init_serve(&cfg, &rd);
}
