/* base/status.c - names and descriptions for mc_status, from the X-macro table. */
#include "mooncake/status.h"

const char *mc_strerror(mc_status status)
{
	switch (status) {
#define MC__STATUS_DESC(name, value, desc) \
	case MC_##name:                    \
		return (desc);
		MC_STATUS_MAP(MC__STATUS_DESC)
#undef MC__STATUS_DESC
	}
	return "unknown status";
}

const char *mc_status_name(mc_status status)
{
	switch (status) {
#define MC__STATUS_NAME(name, value, desc) \
	case MC_##name:                    \
		return #name;
		MC_STATUS_MAP(MC__STATUS_NAME)
#undef MC__STATUS_NAME
	}
	return "UNKNOWN";
}
