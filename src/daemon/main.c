/* placeholder until the daemon core lands */
#include <stdio.h>
int main(void)
{
	fputs("sandlotd: not built yet\n", stderr);
	return 1;
}
