/*
 * conductor/costmodel.c - the cost model's arithmetic; see costmodel.h
 * for the formulas and where each default comes from.
 *
 * Everything is in double seconds, bytes and tokens: the replay sums
 * millions of these and the scheduler compares them, and neither needs
 * more than the model's own accuracy (a few percent).  Pure functions of
 * the config struct; nothing here keeps state or reads the clock.  The
 * defaults live in one place, the option table, so that flags, the
 * generated docs/config.md and the code cannot disagree.
 */
#include "conductor/costmodel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/log.h"

/* A value that must be above zero (divisors, sizes). */
static bool positive(const char *value, char *why, size_t why_len)
{
	double d;
	if (mc_parse_double(value, &d) && d > 0)
		return true;
	snprintf(why, why_len, "must be above 0");
	return false;
}

#define CM_DOUBLE(name, def, doc, check_cb)                \
	{                                                  \
		.f = {#name,                               \
		      NULL,                                \
		      def,                                 \
		      doc,                                 \
		      offsetof(struct mc_costmodel, name), \
		      MC_CONFIG_DOUBLE,                    \
		      0,                                   \
		      INT64_MAX},                          \
		.check = check_cb                          \
	}
#define CM_INT(name, def, doc, lo, hi)                      \
	{                                                   \
		.f = { #name,                               \
		       NULL,                                \
		       def,                                 \
		       doc,                                 \
		       offsetof(struct mc_costmodel, name), \
		       MC_CONFIG_INT,                       \
		       lo,                                  \
		       hi }                                 \
	}

const struct mc_config_entry mc_costmodel_config_table[] = {
	CM_DOUBLE(prefill_lin_s, "1.082e-4",
		  "prefill seconds per prompt token (T(n) = lin n + quad n^2, fit to Fig. 14a)",
		  NULL),
	CM_DOUBLE(prefill_quad_s, "7.74e-10", "prefill seconds per prompt token squared", NULL),
	CM_INT(layers, "80", "model layers l (Table 1)", 1, 100000),
	CM_INT(dim, "8192", "model dimension d", 1, 1 << 24),
	CM_DOUBLE(coef_a, "4", "a in flops(n) = l (a n^2 d + b n d^2)", NULL),
	CM_DOUBLE(coef_b, "22", "b in flops(n)", NULL),
	CM_INT(gqa, "8", "query heads per KV head", 1, 1 << 16),
	CM_INT(elem_size, "2", "bytes per KV element (BF16: 2)", 1, 16),
	CM_DOUBLE(gpu_flops, "2.496e15", "instance FLOP/s G (8 x 312 TFLOPS)", positive),
	CM_DOUBLE(h2d_Bps, "128e9", "host to device bytes per second (0: no limit)", NULL),
	CM_DOUBLE(nic_bps, "800e9", "NIC bits per second of an instance", positive),
	CM_DOUBLE(nic_efficiency, "0.87", "share of the NIC rate a KV fetch reaches (Fig. 12)",
		  positive),
	CM_INT(block_tokens, "512", "tokens per KV block (the traces' hash_ids: 512)", 1, 1 << 20),
	CM_DOUBLE(tbt_base_s, "0.00875",
		  "decode step seconds with no context (ours: 140 GB of weights at 16 TB/s)", NULL),
	CM_DOUBLE(tbt_per_ctx_token_s, "2.048e-8",
		  "decode step seconds per token of context in the batch (327,680 B at 16 TB/s)",
		  NULL),
	CM_DOUBLE(ttft_slo_s, "30", "TTFT SLO of early rejection, seconds", positive),
	CM_DOUBLE(tbt_slo_s, "0.1", "TBT SLO of early rejection, seconds", positive),
};
const size_t mc_costmodel_config_table_len =
	sizeof(mc_costmodel_config_table) / sizeof(mc_costmodel_config_table[0]);

void mc_costmodel_defaults(struct mc_costmodel *cm)
{
	memset(cm, 0, sizeof(*cm));
	mc_config_entry_defaults(mc_costmodel_config_table, mc_costmodel_config_table_len, cm);
}

mc_status mc_costmodel_load_buffer(struct mc_costmodel *cm, const char *buf, size_t len)
{
	json_error_t jerr;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr), *v;
	struct mc_costmodel tmp = *cm;
	const char *key;
	mc_status st = MC_OK;

	if (!root)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "cost model: line %d: %s", jerr.line,
				    jerr.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return mc_set_error(MC_ERR_MALFORMED_JSON, "cost model: not a JSON object");
	}
	json_object_foreach(root, key, v)
	{
		const struct mc_config_entry *e = mc_config_entry_find(
			mc_costmodel_config_table, mc_costmodel_config_table_len, key);
		char text[64];
		if (!e) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "cost model: unknown key \"%s\"",
					  key);
			break;
		}
		if (json_is_integer(v))
			snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
		else if (json_is_real(v) && e->f.type == MC_CONFIG_DOUBLE)
			snprintf(text, sizeof(text), "%.17g", json_real_value(v));
		else {
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "cost model: \"%s\" is not %s",
					  key,
					  e->f.type == MC_CONFIG_INT ? "an integer" : "a number");
			break;
		}
		if ((st = mc_config_entry_set(e, &tmp, text)) != MC_OK)
			break;
	}
	json_decref(root);
	if (st == MC_OK)
		*cm = tmp;
	return st;
}

mc_status mc_costmodel_load_file(struct mc_costmodel *cm, const char *path)
{
	FILE *f = fopen(path, "re");
	char buf[65536];
	size_t n;
	mc_status st;

	if (!f)
		return mc_set_error(errno == ENOENT ? MC_ERR_FILE_NOT_FOUND : MC_ERR_FILE_OPEN_FAIL,
				    "cost model %s: %s", path, strerror(errno));
	n = fread(buf, 1, sizeof(buf), f);
	if (ferror(f) || (n == sizeof(buf) && !feof(f))) {
		bool big = !ferror(f);
		fclose(f);
		return mc_set_error(big ? MC_ERR_TOO_LARGE : MC_ERR_FILE_READ_FAIL,
				    "cost model %s: %s", path,
				    big ? "larger than 64 KiB" : "read failed");
	}
	fclose(f);
	st = mc_costmodel_load_buffer(cm, buf, n);
	return st;
}

double mc_cost_kv_bytes_per_token(const struct mc_costmodel *cm)
{
	return (double)cm->layers * 2 * ((double)cm->dim / cm->gqa) * cm->elem_size;
}

double mc_cost_transfer_Bps(const struct mc_costmodel *cm)
{
	double nic = cm->nic_bps / 8 * cm->nic_efficiency;
	return cm->h2d_Bps > 0 && cm->h2d_Bps < nic ? cm->h2d_Bps : nic;
}

double mc_cost_prefill_full_s(const struct mc_costmodel *cm, double n)
{
	return n <= 0 ? 0 : cm->prefill_lin_s * n + cm->prefill_quad_s * n * n;
}

double mc_cost_prefill_s(const struct mc_costmodel *cm, double n, double p)
{
	if (p < 0)
		p = 0;
	if (p > n)
		p = n;
	return mc_cost_prefill_full_s(cm, n) - mc_cost_prefill_full_s(cm, p);
}

double mc_cost_transfer_s(const struct mc_costmodel *cm, double tokens, double Bps)
{
	if (tokens <= 0)
		return 0;
	if (Bps <= 0)
		Bps = mc_cost_transfer_Bps(cm);
	return tokens * mc_cost_kv_bytes_per_token(cm) / Bps;
}

double mc_cost_flops(const struct mc_costmodel *cm, double n)
{
	double d = cm->dim;
	return cm->layers * (cm->coef_a * n * n * d + cm->coef_b * n * d * d);
}

double mc_cost_min_reuse_Bps(const struct mc_costmodel *cm, double p)
{
	double d = cm->dim;
	return cm->gpu_flops * 2 * d * cm->elem_size /
	       (cm->gqa * (cm->coef_a * p * d + cm->coef_b * d * d));
}

double mc_cost_tbt_s(const struct mc_costmodel *cm, double ctx_tokens)
{
	return cm->tbt_base_s + cm->tbt_per_ctx_token_s * (ctx_tokens > 0 ? ctx_tokens : 0);
}

double mc_cost_ttft_s(double queue_s, double transfer_s, double prefill_s)
{
	return queue_s + transfer_s + prefill_s;
}

bool mc_cost_fetch_wins(const struct mc_costmodel *cm, double n, double local_p, double remote_p,
			double Bps)
{
	if (remote_p > n)
		remote_p = n;
	if (remote_p <= local_p)
		return false;
	return mc_cost_transfer_s(cm, remote_p - local_p, Bps) +
		       mc_cost_prefill_s(cm, n, remote_p) <
	       mc_cost_prefill_s(cm, n, local_p);
}
