/*
 * tests/fuzz/fuzz_master_config.c - mooncake_master's config-file and
 * flag-value parsers on arbitrary bytes.
 *
 * Input layout: the bytes before the first NUL are a config file's text
 * (JSON when it starts with '{', else flat YAML), fed to
 * mc_master_server_config_load_buffer; every NUL-separated piece after it
 * is a "name=value" flag (a piece without '=' sets the flag from the
 * empty string), fed to mc_master_server_config_set, as the argv parser
 * does.  Whatever the input, the parsers must not crash or leak, and a
 * configuration they accept must stay within the bounds the table
 * promises (ratios in [0, 1], ports in range, TTLs non-zero, strings
 * non-NULL), since mooncake_master starts on it.
 *
 * The argv front end itself is not fuzzed here: it may open the file
 * --config_path names, and a fuzzer must not read arbitrary paths.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fuzz.h"
#include "master/server.h"

static void check_config(const struct mc_master_server_config *c)
{
	check(c->rpc_port >= 0 && c->rpc_port <= 65535);
	check(c->port >= 0 && c->port <= 65535);
	check(c->metrics_port >= 0 && c->metrics_port <= 65535);
	check(c->http_metadata_server_port >= 0 && c->http_metadata_server_port <= 65535);
	check(c->rpc_conn_timeout_seconds <= INT64_MAX);
	check(c->master.eviction_ratio >= 0 && c->master.eviction_ratio <= 1);
	check(c->master.eviction_high_watermark_ratio >= 0 &&
	      c->master.eviction_high_watermark_ratio <= 1);
	check(c->master.default_kv_lease_ttl_ms > 0);
	check(c->master.client_ttl_ms > 0);
	check(c->master.default_kv_soft_pin_ttl_ms > 0 && c->master.max_kv_soft_pin_ttl_ms > 0);
	check(c->master.offloading_queue_limit >= 1 &&
	      c->master.offloading_queue_limit <= 100000000);
	check(c->master.offload_cap_ratio >= 0 && c->master.offload_cap_ratio <= 1);
	check(c->master.promotion_admission_threshold >= 0 &&
	      c->master.promotion_admission_threshold <= UINT32_MAX);
	check(c->master.promotion_queue_limit >= 0 && c->master.promotion_max_per_heartbeat >= 0);
	check(c->rpc_address && c->rpc_interface && c->metrics_host && c->cluster_id);
	check(c->http_metadata_server_host && c->memory_allocator && c->allocation_strategy);
	check(strcmp(c->memory_allocator, "offset") == 0);
	check(strlen(c->cluster_id) >= 1 && strlen(c->cluster_id) <= 128);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	struct mc_master_server_config c;
	const uint8_t *nul = memchr(data, 0, size);
	size_t text_len = nul ? (size_t)(nul - data) : size;
	char err[512];

	if (!quiet) {
		mc_log_set_level(MC_LOG_FATAL); /* unknown keys are warned about */
		quiet = 1;
	}
	mc_master_server_config_defaults(&c);
	check_config(&c);
	if (mc_master_server_config_load_buffer(&c, (const char *)data, text_len, err,
						sizeof(err)) == MC_OK)
		check_config(&c);
	else
		check(err[0] != '\0');

	if (nul) {
		const uint8_t *p = nul + 1, *end = data + size;
		while (p < end) {
			const uint8_t *q = memchr(p, 0, (size_t)(end - p));
			size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
			char *piece = malloc(n + 1), *eq;
			mc_status st;

			if (!piece)
				break;
			memcpy(piece, p, n);
			piece[n] = '\0';
			eq = strchr(piece, '=');
			if (eq)
				*eq++ = '\0';
			st = mc_master_server_config_set(&c, piece, eq ? eq : "", err, sizeof(err));
			check(st == MC_OK || err[0] != '\0');
			check_config(&c);
			free(piece);
			p += n + 1;
		}
	}
	mc_master_server_config_release(&c);
	return 0;
}
