/*
 * tools/mc_config_doc.c - print docs/config.md from the configuration tables.
 *
 *   mc_config_doc            print the document
 *   mc_config_doc --check F  exit 1 (and say so) when F differs from it
 *
 * The test suite runs the --check form, so the document cannot drift from the
 * tables.  Regenerate with: build/tools/mc_config_doc > docs/config.md
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auth.h"
#include "base/config.h"
#include "base/http.h"
#include "conductor/costmodel.h"
#include "conductor/sched.h"
#include "conductor/service.h"
#include "master/server.h"
#include "mem/devmem.h"
#include "mem/hostmem.h"
#include "meta/http_server.h"
#include "meta/meta_config.h"
#include "store/client_config.h"
#include "store/disk_store.h"
#include "store/offload_server.h"
#include "te/engine.h"
#include "transport/transport.h"

static void emit_table(FILE *out, const struct mc_config_entry *tab, size_t n)
{
	fprintf(out, "| Variable | Default | Type | Range | Meaning |\n|---|---|---|---|---|\n");
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i].f;
		char range[64] = "";
		if (f->type == MC_CONFIG_INT || f->type == MC_CONFIG_SIZE)
			snprintf(range, sizeof(range), "%lld-%lld", (long long)f->min,
				 (long long)f->max);
		fprintf(out, "| `%s` | %s | %s | %s | %s |\n", f->env ? f->env : f->name,
			f->def ? f->def : "unset",
			mc_config_type_name(f->type, tab[i].bare_unit_ms), range, f->doc);
	}
}

static void emit(FILE *out)
{
	fprintf(out,
		"# Configuration\n\n"
		"Generated from the configuration tables by `tools/mc_config_doc`; do not edit.\n"
		"Environment variables keep upstream's names. A value outside its range is "
		"ignored with a warning. Sizes take k/m/g/t suffixes (binary). Presence flags "
		"are on when the variable is set at all, as upstream.\n\n"
		"## Transfer Engine\n\n");
	emit_table(out, mc_te_config_table, mc_te_config_table_len);
	/* each transport's own table, in the registry's order */
	for (size_t i = 0; i < mc_transport_registry_len; i++) {
		const struct mc_transport_ops *ops = mc_transport_registry[i].ops;
		if (!ops->nconfig)
			continue;
		fprintf(out, "\n### Transport %s\n\n", ops->name);
		emit_table(out, ops->config, ops->nconfig);
	}
	fprintf(out, "\n### Device memory\n\n");
	emit_table(out, mc_devmem_config_table, mc_devmem_config_table_len);
	fprintf(out,
		"\n## Metadata backends\n\n"
		"Connection strings: `http(s)://host:port/path`, `etcd://host:port[,host:port...]` "
		"(or a bare `host:port[,...]`), `redis://[user:password@]host:port`, "
		"`P2PHANDSHAKE`.\n\n"
		"`MC_METADATA_SERVER` (Transfer Engine, above) is used when a program names no "
		"connection string.\n\n");
	emit_table(out, mc_meta_config_table, mc_meta_config_table_len);
	fprintf(out, "\n### HTTP metadata server\n\n");
	emit_table(out, mc_http_meta_server_config_table, mc_http_meta_server_config_table_len);
	fprintf(out, "\n### Cluster secret (docs/security.md)\n\n");
	emit_table(out, mc_auth_config_table, mc_auth_config_table_len);
	fprintf(out, "\n### HTTPS for the HTTP services (docs/security.md)\n\n");
	emit_table(out, mc_http_tls_config_table, mc_http_tls_config_table_len);
	fprintf(out, "\n## Store client\n\n");
	emit_table(out, mc_store_client_config_table, mc_store_client_config_table_len);
	fprintf(out, "\n### Segment memory\n\n");
	emit_table(out, mc_hostmem_config_table, mc_hostmem_config_table_len);
	fprintf(out, "\n### SSD tier (offload directory)\n\n");
	emit_table(out, mc_disk_store_config_table, mc_disk_store_config_table_len);
	fprintf(out, "\n### SSD tier (offload heartbeat and RPC)\n\n");
	emit_table(out, mc_offload_config_table, mc_offload_config_table_len);
	fprintf(out,
		"\n## mooncake_master\n\n"
		"Upstream's flags and defaults (`--flag=value`, `-flag=value`, `--flag value`, "
		"`--bool_flag`, `--nobool_flag`), also read from `--config_path` (JSON, or flat "
		"YAML `key: value`); flags on the command line override the file. Durations take "
		"`ms`, `s`, `m`, `h` suffixes. Flags for features this build lacks are accepted at "
		"their default and refused otherwise (\"only the default\"). "
		"`mooncake_master --dump-config` prints the effective configuration.\n\n");
	mc_master_server_config_print_doc(out);
	fprintf(out,
		"\n## Conductor\n\n"
		"The scheduler's and the cost model's options (docs/conductor.md), as flags of "
		"`mooncake_replay` and `mooncake_conductor` (`--name=value`; `-` and `_` are the "
		"same).\n\n"
		"### mooncake_conductor\n\n"
		"The daemon's own flags; they come first, so its `reject` (on) shadows the "
		"scheduler's (off, the replay's default).\n\n");
	emit_table(out, mc_conductor_config_table, mc_conductor_config_table_len);
	fprintf(out, "\n### Scheduler (Algorithm 1)\n\n");
	emit_table(out, mc_sched_config_table, mc_sched_config_table_len);
	fprintf(out, "\n### Cost model (paper.md 5.4, Table 1)\n\n");
	emit_table(out, mc_costmodel_config_table, mc_costmodel_config_table_len);
}

int main(int argc, char **argv)
{
	char *want = NULL, *have = NULL;
	size_t wl = 0, hl = 0;
	FILE *m, *f;
	int same;

	if (argc < 3 || strcmp(argv[1], "--check") != 0) {
		emit(stdout);
		return 0;
	}
	m = open_memstream(&want, &wl);
	emit(m);
	fclose(m);
	f = fopen(argv[2], "rb");
	if (f) {
		have = malloc(wl + 2);
		hl = fread(have, 1, wl + 1, f);
		fclose(f);
	}
	same = have && hl == wl && memcmp(have, want, wl) == 0;
	if (!same)
		fprintf(stderr, "%s is out of date: run build/tools/mc_config_doc > %s\n", argv[2],
			argv[2]);
	free(have);
	free(want);
	return same ? 0 : 1;
}
