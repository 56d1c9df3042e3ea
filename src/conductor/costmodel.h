/*
 * conductor/costmodel.h - predicted times of prefill, KV transfer and
 * decode, as the scheduler and the virtual-time replay use them.
 *
 * Defaults are the paper's (paper.md 5.4 and Table 1, LLaMA3-70B on
 * 8xA800): prefill T(n) = 1.082e-4 n + 7.74e-10 n^2 seconds fitted to
 * Fig. 14a; an incremental prefill over a reused prefix of p tokens costs
 * T(n) - T(p) (Eq. 1); moving KV costs tokens x 327,680 B at min(host to
 * device, NIC x efficiency); TTFT = queue + transfer + prefill.  Decode
 * time per token (TBT) is not modelled by the paper; ours is the
 * memory-bound step of a decode instance: a fixed part (reading the
 * weights) plus a part per token of context held by the batch.
 */
#ifndef MC_CONDUCTOR_COSTMODEL_H
#define MC_CONDUCTOR_COSTMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

struct mc_costmodel {
	/* prefill regression (paper.md 5.4) */
	double prefill_lin_s;  /* seconds per prompt token */
	double prefill_quad_s; /* seconds per prompt token squared */
	/* Table 1 */
	int64_t layers;	       /* l */
	int64_t dim;	       /* d */
	double coef_a;	       /* a in flops(n) = l (a n^2 d + b n d^2) */
	double coef_b;	       /* b */
	int64_t gqa;	       /* query heads per KV head */
	int64_t elem_size;     /* bytes per element (BF16: 2) */
	double gpu_flops;      /* G, whole instance */
	double h2d_Bps;	       /* host to device bytes per second */
	double nic_bps;	       /* NIC bits per second */
	double nic_efficiency; /* share of nic_bps a transfer reaches (Fig. 12: 0.87) */
	/* tokens per block (the traces: 512) */
	int64_t block_tokens;
	/* decode step time: tbt = tbt_base_s + tbt_per_ctx_token_s x context tokens */
	double tbt_base_s;
	double tbt_per_ctx_token_s;
	/* SLOs of early rejection (paper 5.1: TTFT 30 s; TBT 100 ms) */
	double ttft_slo_s;
	double tbt_slo_s;
};

/* Every field as an option (base/config): name, default, doc, bounds.
 * mc_costmodel_defaults fills a model from it; programs expose it as
 * flags (--prefill_lin_s=...), docs/config.md lists it. */
extern const struct mc_config_entry mc_costmodel_config_table[];
extern const size_t mc_costmodel_config_table_len;

/* The paper's model (see above), from the table's defaults. */
void mc_costmodel_defaults(struct mc_costmodel *cm);

/*
 * Overlay a model file on cm: one JSON object whose keys are names of
 * mc_costmodel_config_table and whose values are numbers, e.g. a fitted
 * prefill regression {"prefill_lin_s": 1.1e-4, "prefill_quad_s": 7.5e-10}.
 * All or nothing: on any error cm is unchanged.  MC_ERR_MALFORMED_JSON
 * (not JSON, not an object), MC_ERR_INVALID_PARAMS (an unknown key, a
 * value that is not a number or out of range; the message names the
 * key), MC_ERR_FILE_NOT_FOUND / MC_ERR_FILE_READ_FAIL (the _file form).
 */
mc_status mc_costmodel_load_buffer(struct mc_costmodel *cm, const char *buf, size_t len);
mc_status mc_costmodel_load_file(struct mc_costmodel *cm, const char *path);

/* KV bytes of one token: l x 2 x (d / gqa) x s (327,680 B by default). */
double mc_cost_kv_bytes_per_token(const struct mc_costmodel *cm);

/* Bytes per second a fetch of reused KV runs at: min(h2d, nic x efficiency). */
double mc_cost_transfer_Bps(const struct mc_costmodel *cm);

/* Fitted prefill seconds of n prompt tokens with none reused: T(n). */
double mc_cost_prefill_full_s(const struct mc_costmodel *cm, double n);

/* Prefill seconds of n tokens reusing a prefix of p: T(n) - T(p), with p
 * clamped to [0, n]. */
double mc_cost_prefill_s(const struct mc_costmodel *cm, double n, double p);

/* Seconds to move the KV of tokens at Bps bytes per second (Bps <= 0: the
 * model's mc_cost_transfer_Bps). */
double mc_cost_transfer_s(const struct mc_costmodel *cm, double tokens, double Bps);

/* Eq. 1: flops of a full prefill of n tokens, l (a n^2 d + b n d^2). */
double mc_cost_flops(const struct mc_costmodel *cm, double n);

/* Eq. 2: the least bandwidth (bytes/s) at which loading the KV of a
 * prefix of p tokens beats recomputing it at gpu_flops:
 * G x 2 d s / (gqa (a p d + b d^2)). */
double mc_cost_min_reuse_Bps(const struct mc_costmodel *cm, double p);

/* Predicted time per output token of a decode instance whose batch holds
 * ctx_tokens of context. */
double mc_cost_tbt_s(const struct mc_costmodel *cm, double ctx_tokens);

/* TTFT = queue + transfer + prefill. */
double mc_cost_ttft_s(double queue_s, double transfer_s, double prefill_s);

/*
 * Fetch versus recompute (paper 4.3): whether fetching the KV of the
 * tokens between a local prefix of local_p and a remote one of remote_p
 * at Bps (<= 0: the model's rate) and then prefilling the rest is faster
 * than prefilling from the local prefix.  False when remote_p <= local_p.
 */
bool mc_cost_fetch_wins(const struct mc_costmodel *cm, double n, double local_p, double remote_p,
			double Bps);

#endif
