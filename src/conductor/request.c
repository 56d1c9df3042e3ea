/*
 * conductor/request.c - decoders of mooncake_conductor's request bodies
 * (request.h).
 *
 * Each is a pure function from bytes to a struct: jansson parses (no
 * hand-written JSON), then every field is checked for presence, type and
 * range, and a field the call does not know is refused by name, so a typo
 * in a client ("queue" for "queue_s") fails loudly instead of being
 * ignored.  The service maps the status to HTTP (400, 413, 500) and sends
 * mc_last_error as the message.  Nothing here knows about instances, the
 * store or the scheduler; it never allocates more than the body asks for
 * within its bounds (max_keys blocks).
 */
#include "conductor/request.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "conductor/chain_hash.h"

/* ---- helpers ------------------------------------------------------------- */

static mc_status body_object(const void *body, size_t len, json_t **out)
{
	json_error_t err;
	json_t *j;

	if (!body || !len)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "bad JSON: empty body");
	j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
	if (!j)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "bad JSON: line %d column %d: %s",
				    err.line, err.column, err.text);
	if (!json_is_object(j)) {
		json_decref(j);
		return mc_set_error(MC_ERR_MALFORMED_JSON, "bad JSON: the body is not an object");
	}
	*out = j;
	return MC_OK;
}

/* MC_ERR_INVALID_PARAMS naming the first key of o not in allowed. */
static mc_status check_keys(json_t *o, const char *const *allowed, const char *list)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		size_t i;
		for (i = 0; allowed[i]; i++)
			if (strcmp(k, allowed[i]) == 0)
				break;
		if (!allowed[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS, "unknown field \"%s\" (%s)", k,
					    list);
	}
	return MC_OK;
}

/* An optional number >= 0: *out unchanged when absent. */
static mc_status opt_number(json_t *o, const char *key, double *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return MC_OK;
	if (!json_is_number(v) || json_number_value(v) < 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "\"%s\" must be a number >= 0", key);
	*out = json_number_value(v);
	return MC_OK;
}

bool mc_conductor_id_valid(const char *s, size_t n)
{
	if (!n || n > MC_CONDUCTOR_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == ':'))
			return false;
	}
	return true;
}

/* ---- POST /instances ----------------------------------------------------- */

mc_status mc_conductor_inst_req_decode(const void *body, size_t len,
				       struct mc_conductor_inst_req *out)
{
	static const char *const allowed[] = {
		"id", "role", "segment", "bandwidth_Bps", "capacity_blocks", NULL,
	};
	json_t *o = NULL, *v;
	const char *seg = "", *role;
	mc_status st;

	memset(out, 0, sizeof(*out));
	if ((st = body_object(body, len, &o)) != MC_OK)
		return st;
	if ((st = check_keys(o, allowed, "id, role, segment, bandwidth_Bps, capacity_blocks")))
		goto out;
	v = json_object_get(o, "id");
	if (!json_is_string(v) ||
	    !mc_conductor_id_valid(json_string_value(v), json_string_length(v))) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "\"id\" must be a string of 1-%d characters of [A-Za-z0-9._:-]",
				  MC_CONDUCTOR_ID_MAX);
		goto out;
	}
	snprintf(out->id, sizeof(out->id), "%s", json_string_value(v));
	v = json_object_get(o, "role");
	role = json_is_string(v) ? json_string_value(v) : "";
	if (strcmp(role, "decode") == 0) {
		out->decode = true;
	} else if (strcmp(role, "prefill") != 0) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "\"role\" must be \"prefill\" or \"decode\"");
		goto out;
	}
	v = json_object_get(o, "segment");
	if (v && !json_is_string(v)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "\"segment\" must be a string");
		goto out;
	}
	if (v)
		seg = json_string_value(v);
	if ((v && json_string_length(v) != strlen(seg)) || strlen(seg) > MC_PROTO_STR_MAX ||
	    (!out->decode && !*seg)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "\"segment\" (the store segment of its KV cache) is required for "
				  "a prefill instance, at most %u bytes, no NUL",
				  (unsigned)MC_PROTO_STR_MAX);
		goto out;
	}
	if ((st = opt_number(o, "bandwidth_Bps", &out->bandwidth_Bps)) ||
	    (st = opt_number(o, "capacity_blocks", &out->capacity_blocks)))
		goto out;
	if (out->capacity_blocks > 1e18)
		out->capacity_blocks = 1e18;
	if (!(out->segment = mc_strdup(seg)))
		st = mc_set_error(MC_ERR_NOMEM, "no memory for the segment name");
out:
	json_decref(o);
	if (st != MC_OK)
		mc_conductor_inst_req_release(out);
	return st;
}

void mc_conductor_inst_req_release(struct mc_conductor_inst_req *r)
{
	mc_free(r->segment);
	r->segment = NULL;
}

/* ---- POST /instances/<id>/load ------------------------------------------- */

mc_status mc_conductor_load_req_decode(const void *body, size_t len,
				       struct mc_conductor_load_req *out)
{
	static const char *const allowed[] = {
		"queue_s", "queue_tokens", "running_requests", "ctx_tokens", "now_s", NULL,
	};
	json_t *o = NULL;
	mc_status st;

	*out = (struct mc_conductor_load_req){-1, -1, -1, -1, -1};
	if ((st = body_object(body, len, &o)) != MC_OK)
		return st;
	if (!(st = check_keys(o, allowed,
			      "queue_s, queue_tokens, running_requests, ctx_tokens, now_s")) &&
	    !(st = opt_number(o, "queue_s", &out->queue_s)) &&
	    !(st = opt_number(o, "queue_tokens", &out->queue_tokens)) &&
	    !(st = opt_number(o, "running_requests", &out->running_requests)) &&
	    !(st = opt_number(o, "ctx_tokens", &out->ctx_tokens)))
		st = opt_number(o, "now_s", &out->now_s);
	json_decref(o);
	if (st != MC_OK)
		*out = (struct mc_conductor_load_req){-1, -1, -1, -1, -1};
	return st;
}

/* ---- POST /schedule ------------------------------------------------------ */

static mc_status keys_alloc(struct mc_conductor_sched_req *r, size_t w, size_t n)
{
	r->keys = mc_calloc(n, sizeof(*r->keys));
	r->text = mc_calloc(n, w);
	if (!r->keys || !r->text)
		return mc_set_error(MC_ERR_NOMEM, "no memory for %zu keys", n);
	r->n = n;
	return MC_OK;
}

/* prefix + key as 16 lowercase hex digits, by hand: snprintf per key was
 * a visible share of a /schedule of a hundred keys */
static void key_format(struct mc_conductor_sched_req *r, const char *prefix, size_t w, size_t i,
		       uint64_t key)
{
	static const char hex[] = "0123456789abcdef";
	char *s = r->text + i * w;
	size_t plen = w - 17;

	memcpy(s, prefix, plen);
	for (int d = 15; d >= 0; d--) {
		s[plen + (size_t)d] = hex[key & 15];
		key >>= 4;
	}
	s[plen + 16] = '\0';
	r->keys[i] = (struct mc_proto_str){.ptr = s, .len = (uint32_t)(plen + 16)};
}

static mc_status from_tokens(struct mc_conductor_sched_req *r, json_t *tokens,
			     const struct mc_conductor_sched_opts *opts, size_t w)
{
	size_t n = json_array_size(tokens), nb = mc_chain_hash_blocks(n, r->block_size);
	uint32_t *t = NULL;
	uint64_t *h = NULL;
	mc_status st = MC_OK;

	if (nb > opts->max_keys || n > UINT32_MAX)
		return mc_set_error(MC_ERR_TOO_LARGE,
				    "%zu tokens make %zu blocks, more than max_keys %zu", n, nb,
				    opts->max_keys);
	t = mc_calloc(n, sizeof(*t));
	h = mc_calloc(nb, sizeof(*h));
	if (!t || !h) {
		st = mc_set_error(MC_ERR_NOMEM, "no memory for %zu tokens", n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(tokens, i);
		json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
		if (x < 0 || x > (json_int_t)UINT32_MAX) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "tokens[%zu] is not a token id (0-%u)", i, UINT32_MAX);
			goto out;
		}
		t[i] = (uint32_t)x;
	}
	if ((st = mc_chain_hash(t, n, r->block_size, h, nb)) != MC_OK ||
	    (st = keys_alloc(r, w, nb)) != MC_OK)
		goto out;
	for (size_t i = 0; i < nb; i++)
		key_format(r, opts->key_prefix, w, i, h[i]);
	r->hashed = true;
	r->input_len = (uint32_t)n;
out:
	mc_free(t);
	mc_free(h);
	return st;
}

static mc_status from_keys(struct mc_conductor_sched_req *r, json_t *keys,
			   const struct mc_conductor_sched_opts *opts, size_t w)
{
	size_t n = json_array_size(keys);
	mc_status st;

	if (n > opts->max_keys)
		return mc_set_error(MC_ERR_TOO_LARGE, "%zu keys, more than max_keys %zu", n,
				    opts->max_keys);
	if ((st = keys_alloc(r, w, n)) != MC_OK)
		return st;
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(keys, i);
		if (json_is_string(v) && json_string_length(v) >= 1 &&
		    json_string_length(v) <= MC_STORE_KEY_MAX) {
			r->keys[i] = (struct mc_proto_str){.ptr = json_string_value(v),
							   .len = (uint32_t)json_string_length(v)};
		} else if (json_is_integer(v) && json_integer_value(v) >= 0) {
			key_format(r, opts->key_prefix, w, i, (uint64_t)json_integer_value(v));
		} else {
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "keys[%zu] is neither a store key (a string of 1-%u "
					    "bytes) nor an integer block key >= 0",
					    i, MC_STORE_KEY_MAX);
		}
	}
	return MC_OK;
}

mc_status mc_conductor_sched_req_decode(const void *body, size_t len,
					const struct mc_conductor_sched_opts *opts,
					struct mc_conductor_sched_req *out)
{
	static const char *const allowed[] = {
		"keys", "tokens", "block_size", "input_length", "request_id", "now_s", NULL,
	};
	const char *prefix = opts->key_prefix ? opts->key_prefix : "";
	size_t w = strlen(prefix) + 17; /* prefix, 16 hex digits, NUL */
	json_t *o = NULL, *keys, *tokens, *v;
	mc_status st;

	memset(out, 0, sizeof(*out));
	out->now_s = -1;
	if (strlen(prefix) + 16 > MC_STORE_KEY_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "key_prefix is too long");
	if ((st = body_object(body, len, &o)) != MC_OK)
		return st;
	out->root = o;
	if ((st = check_keys(o, allowed,
			     "keys, tokens, block_size, input_length, request_id, now_s")) ||
	    (st = opt_number(o, "now_s", &out->now_s)))
		goto fail;
	keys = json_object_get(o, "keys");
	tokens = json_object_get(o, "tokens");
	if (!!keys == !!tokens) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "give either \"keys\" (the chained block keys) or \"tokens\" "
				  "(token ids, hashed per block_size)");
		goto fail;
	}
	out->block_size = opts->default_block ? opts->default_block : 512;
	v = json_object_get(o, "block_size");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > (1 << 20)) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "\"block_size\" must be an integer in 1-%d", 1 << 20);
			goto fail;
		}
		out->block_size = (uint32_t)json_integer_value(v);
	}
	if (!json_is_array(keys ? keys : tokens)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "\"%s\" must be an array",
				  keys ? "keys" : "tokens");
		goto fail;
	}
	if (!json_array_size(keys ? keys : tokens)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "empty %s list: nothing to schedule",
				  keys ? "key" : "token");
		goto fail;
	}
	st = tokens ? from_tokens(out, tokens, opts, w) : from_keys(out, keys, opts, w);
	if (st != MC_OK)
		goto fail;
	v = json_object_get(o, "input_length");
	if (!v && keys) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "\"input_length\" (prompt tokens) is required with \"keys\"");
		goto fail;
	}
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > (json_int_t)UINT32_MAX) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "\"input_length\" must be an integer >= 1");
			goto fail;
		}
		out->input_len = (uint32_t)json_integer_value(v);
	}
	if (out->n > mc_chain_hash_blocks(out->input_len, out->block_size)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "%zu blocks of %u tokens are more than input_length %u covers "
				  "(%zu)",
				  out->n, out->block_size, out->input_len,
				  mc_chain_hash_blocks(out->input_len, out->block_size));
		goto fail;
	}
	v = json_object_get(o, "request_id");
	if (json_is_string(v) && json_string_length(v) <= MC_CONDUCTOR_REQUEST_ID_MAX) {
		out->rid_kind = MC_CONDUCTOR_RID_STR;
		out->rid_str = json_string_value(v);
		out->rid_len = json_string_length(v);
	} else if (json_is_integer(v)) {
		out->rid_kind = MC_CONDUCTOR_RID_INT;
		out->rid_int = json_integer_value(v);
	} else if (v) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "\"request_id\" must be a string of at most %d bytes or an "
				  "integer",
				  MC_CONDUCTOR_REQUEST_ID_MAX);
		goto fail;
	}
	return MC_OK;
fail:
	mc_conductor_sched_req_release(out);
	return st;
}

void mc_conductor_sched_req_release(struct mc_conductor_sched_req *r)
{
	mc_free(r->keys);
	mc_free(r->text);
	json_decref(r->root);
	memset(r, 0, sizeof(*r));
}
