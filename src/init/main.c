#include "init.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct init_config cfg;
	if (init_parse_args(argc, argv, &cfg) < 0)
		return 2;
	if (init_setup(&cfg) < 0)
		return 1;
	return init_serve(&cfg);
}
