/* tests/support/master.c - an in-process master for the store tests. */
#include <stdio.h>

#include "base/alloc.h"
#include "master/server.h"
#include "mooncake/log.h"
#include "support.h"

static void set_str(char **field, const char *v)
{
	mc_free(*field);
	*field = mc_strdup(v);
}

struct mc_master_server *mc_test_master_start(void (*tune)(struct mc_master_server_config *c),
					      char *addr, size_t addr_len, char *meta,
					      size_t meta_len)
{
	struct mc_master_server_config c;
	struct mc_master_server *m = NULL;

	mc_master_server_config_defaults(&c);
	set_str(&c.rpc_address, "127.0.0.1");
	set_str(&c.metrics_host, "127.0.0.1");
	set_str(&c.http_metadata_server_host, "127.0.0.1");
	c.rpc_port = 0;
	c.port = 0;
	c.metrics_port = 0;
	c.enable_metric_reporting = false;
	c.enable_http_metadata_server = true;
	c.http_metadata_server_port = 0;
	if (tune)
		tune(&c);
	if (mc_master_server_start(&c, &m) != MC_OK) {
		fprintf(stderr, "master start: %s\n", mc_last_error());
		m = NULL;
	}
	mc_master_server_config_release(&c);
	if (m) {
		snprintf(addr, addr_len, "127.0.0.1:%u", mc_master_server_rpc_port(m));
		snprintf(meta, meta_len, "http://127.0.0.1:%u/metadata",
			 mc_master_server_metadata_port(m));
	}
	return m;
}
