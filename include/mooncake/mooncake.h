/* mooncake/mooncake.h - umbrella header for the public C API. */
#ifndef MOONCAKE_MOONCAKE_H
#define MOONCAKE_MOONCAKE_H

#include "mooncake/log.h"
#include "mooncake/status.h"
#include "mooncake/te.h"
#include "mooncake/version.h"

#endif
