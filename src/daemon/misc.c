/* placeholder until the module lands */
#include "daemon/daemon.h"
