/*
 * p2p/payload.c - encode and decode the P2P store's catalog JSON.
 *
 * The layout is upstream's (see payload.h), so a Go peer and ours can
 * share one etcd.  Decoding treats the bytes as hostile: any peer, or
 * anyone with etcd access, wrote them.  Every field is type-checked, every
 * count bounded, and the shards must be exactly what size_list and
 * max_shard_size produce, so the reader never indexes past a buffer when it
 * copies shard i into its own memory.  Unknown fields are ignored, as Go's
 * encoding/json does; a missing field is an error (Go would read a zero,
 * which would then fail the shard check anyway, so the message is clearer).
 *
 * Encoding keeps the Go field order and writes an empty list as null.
 * jansson writes integers as signed 64-bit; every value here (sizes,
 * addresses below 2^63) fits, and decode refuses a negative one.
 *
 * This file does no I/O and holds no state; the fuzz target
 * tests/fuzz/fuzz_p2p_payload.c drives decode and re-encodes what it accepts.
 */
#include "p2p/payload.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mooncake/status.h"

#define MAX_CHUNK ((uint64_t)4 << 30)

size_t mc_p2p_shard_count(const uint64_t *size_list, size_t n, uint64_t max_shard_size)
{
	uint64_t total = 0;

	if (!max_shard_size)
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = size_list[i] / max_shard_size + (size_list[i] % max_shard_size != 0);
		total += k;
		if (total > MC_P2P_SHARDS_MAX)
			return 0;
	}
	return (size_t)total;
}

mc_status mc_p2p_payload_split(struct mc_p2p_payload *p)
{
	size_t count = mc_p2p_shard_count(p->size_list, p->nsizes, p->max_shard_size), k = 0;

	if (!count)
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"p2p: %zu buffers split by %llu bytes make no shard or more than %u",
			p->nsizes, (unsigned long long)p->max_shard_size, MC_P2P_SHARDS_MAX);
	p->shards = mc_calloc(count, sizeof(*p->shards));
	if (!p->shards)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory splitting %zu shards", count);
	p->nshards = count;
	for (size_t i = 0; i < p->nsizes; i++) {
		for (uint64_t off = 0; off < p->size_list[i]; off += p->max_shard_size) {
			uint64_t left = p->size_list[i] - off;
			p->shards[k++].size = left < p->max_shard_size ? left : p->max_shard_size;
		}
	}
	return MC_OK;
}

/* ---- locations ----------------------------------------------------------------- */

void mc_p2p_locs_clear(struct mc_p2p_locs *l)
{
	for (size_t i = 0; i < l->n; i++)
		mc_free(l->v[i].segment_name);
	mc_free(l->v);
	l->v = NULL;
	l->n = 0;
}

mc_status mc_p2p_locs_add(struct mc_p2p_locs *l, const char *segment_name, uint64_t offset)
{
	struct mc_p2p_loc *grown;
	char *copy;

	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].offset == offset && strcmp(l->v[i].segment_name, segment_name) == 0)
			return MC_OK;
	if (l->n >= MC_P2P_LOCS_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "p2p: a shard has %d locations already",
				    MC_P2P_LOCS_MAX);
	copy = mc_strdup(segment_name);
	grown = copy ? mc_realloc(l->v, (l->n + 1) * sizeof(*grown)) : NULL;
	if (!grown) {
		mc_free(copy);
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory adding a location");
	}
	l->v = grown;
	l->v[l->n].segment_name = copy;
	l->v[l->n++].offset = offset;
	return MC_OK;
}

size_t mc_p2p_locs_remove(struct mc_p2p_locs *l, const char *segment_name)
{
	size_t kept = 0, gone;

	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->v[i].segment_name, segment_name) == 0)
			mc_free(l->v[i].segment_name);
		else
			l->v[kept++] = l->v[i];
	}
	gone = l->n - kept;
	l->n = kept;
	if (!kept)
		mc_p2p_locs_clear(l);
	return gone;
}

bool mc_p2p_payload_held(const struct mc_p2p_payload *p)
{
	for (size_t i = 0; i < p->nshards; i++)
		if (p->shards[i].gold.n || p->shards[i].replicas.n)
			return true;
	return false;
}

void mc_p2p_payload_release(struct mc_p2p_payload *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nshards; i++) {
		mc_p2p_locs_clear(&p->shards[i].gold);
		mc_p2p_locs_clear(&p->shards[i].replicas);
	}
	mc_free(p->shards);
	mc_free(p->size_list);
	mc_free(p->name);
	memset(p, 0, sizeof(*p));
}

/* ---- decode ------------------------------------------------------------------- */

static mc_status bad(const char *what)
{
	return mc_set_error(MC_ERR_MALFORMED_JSON, "p2p payload: %s", what);
}

static bool get_u64(const json_t *obj, const char *key, uint64_t *out)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

static mc_status decode_locs(const json_t *arr, struct mc_p2p_locs *out)
{
	size_t i;
	const json_t *e;

	if (!arr || json_is_null(arr))
		return MC_OK;
	if (!json_is_array(arr))
		return bad("a location list is neither a list nor null");
	if (json_array_size(arr) > MC_P2P_LOCS_MAX)
		return bad("a shard has too many locations");
	json_array_foreach(arr, i, e)
	{
		const json_t *seg = json_object_get(e, "segment_name");
		uint64_t off;
		mc_status st;

		if (!json_is_object(e) || !json_is_string(seg) || !get_u64(e, "offset", &off))
			return bad("a location lacks a string segment_name or an unsigned offset");
		if (json_string_length(seg) == 0 || json_string_length(seg) > MC_P2P_SEGMENT_MAX ||
		    strlen(json_string_value(seg)) != json_string_length(seg))
			return bad("a segment_name is empty, too long or holds a NUL");
		st = mc_p2p_locs_add(out, json_string_value(seg), off);
		if (st)
			return st;
	}
	return MC_OK;
}

static mc_status decode_obj(const json_t *root, struct mc_p2p_payload *p)
{
	const json_t *name = json_object_get(root, "name"), *sizes, *shards, *e;
	uint64_t total = 0;
	size_t i;
	mc_status st;

	if (!json_is_object(root))
		return bad("not an object");
	if (!json_is_string(name) || json_string_length(name) > MC_P2P_NAME_MAX ||
	    strlen(json_string_value(name)) != json_string_length(name))
		return bad("name is not a string of at most 1024 bytes without NUL");
	p->name = mc_strdup(json_string_value(name));
	if (!p->name)
		return mc_set_error(MC_ERR_NOMEM, "p2p payload: out of memory");
	if (!get_u64(root, "size", &p->size) ||
	    !get_u64(root, "max_shard_size", &p->max_shard_size))
		return bad("size or max_shard_size is not an unsigned integer");
	if (p->max_shard_size == 0 || p->max_shard_size > MAX_CHUNK)
		return bad("max_shard_size is 0 or over 4 GiB");
	sizes = json_object_get(root, "size_list");
	if (!json_is_array(sizes) || json_array_size(sizes) == 0 ||
	    json_array_size(sizes) > MC_P2P_BUFFERS_MAX)
		return bad("size_list is not a list of 1 to 4096 sizes");
	p->size_list = mc_calloc(json_array_size(sizes), sizeof(uint64_t));
	if (!p->size_list)
		return mc_set_error(MC_ERR_NOMEM, "p2p payload: out of memory");
	json_array_foreach(sizes, i, e)
	{
		if (!json_is_integer(e) || json_integer_value(e) <= 0)
			return bad("a size_list entry is not a positive integer");
		p->size_list[i] = (uint64_t)json_integer_value(e);
		if (total + p->size_list[i] < total)
			return bad("size_list overflows");
		total += p->size_list[i];
	}
	p->nsizes = json_array_size(sizes);
	if (total != p->size)
		return bad("size is not the sum of size_list");
	st = mc_p2p_payload_split(p);
	if (st)
		return st == MC_ERR_NOMEM ? st : bad("size_list splits into too many shards");
	shards = json_object_get(root, "shards");
	if (!json_is_array(shards) || json_array_size(shards) != p->nshards)
		return bad(
			"shards is not a list of one entry per max_shard_size split of size_list");
	json_array_foreach(shards, i, e)
	{
		uint64_t size;

		if (!json_is_object(e) || !get_u64(e, "size", &size) || size != p->shards[i].size)
			return bad("a shard's size is not its split of size_list");
		st = decode_locs(json_object_get(e, "gold"), &p->shards[i].gold);
		if (!st)
			st = decode_locs(json_object_get(e, "replica_list"),
					 &p->shards[i].replicas);
		if (st)
			return st;
	}
	return MC_OK;
}

mc_status mc_p2p_payload_decode(const char *json, size_t len, struct mc_p2p_payload *out)
{
	json_error_t jerr;
	json_t *root;
	mc_status st;

	memset(out, 0, sizeof(*out));
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "p2p payload: %s at byte %d", jerr.text,
				    jerr.position);
	st = decode_obj(root, out);
	json_decref(root);
	if (st)
		mc_p2p_payload_release(out);
	return st;
}

/* ---- encode ------------------------------------------------------------------- */

static json_t *encode_locs(const struct mc_p2p_locs *l)
{
	json_t *arr;

	if (!l->n)
		return json_null();
	arr = json_array();
	for (size_t i = 0; arr && i < l->n; i++) {
		json_t *o = json_object();
		if (!o ||
		    json_object_set_new(o, "segment_name", json_string(l->v[i].segment_name)) ||
		    json_object_set_new(o, "offset", json_integer((json_int_t)l->v[i].offset)) ||
		    json_array_append_new(arr, o)) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

mc_status mc_p2p_payload_encode(const struct mc_p2p_payload *p, char **json_out, size_t *len_out)
{
	json_t *root = json_object(), *sizes = json_array(), *shards = json_array();
	char *text = NULL;
	bool ok;

	/* the lists go into root first (set_new steals them even on failure),
	 * in Go's field order, and are filled through borrowed pointers */
	ok = root && !json_object_set_new(root, "name", json_string(p->name)) &&
	     !json_object_set_new(root, "size", json_integer((json_int_t)p->size)) &&
	     !json_object_set_new(root, "size_list", sizes) &&
	     !json_object_set_new(root, "max_shard_size",
				  json_integer((json_int_t)p->max_shard_size)) &&
	     !json_object_set_new(root, "shards", shards);
	for (size_t i = 0; ok && i < p->nsizes; i++)
		ok = json_array_append_new(sizes, json_integer((json_int_t)p->size_list[i])) == 0;
	for (size_t i = 0; ok && i < p->nshards; i++) {
		json_t *s = json_object();
		ok = s && !json_array_append_new(shards, s) &&
		     !json_object_set_new(s, "size", json_integer((json_int_t)p->shards[i].size)) &&
		     !json_object_set_new(s, "gold", encode_locs(&p->shards[i].gold)) &&
		     !json_object_set_new(s, "replica_list", encode_locs(&p->shards[i].replicas));
	}
	if (ok)
		text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		return mc_set_error(MC_ERR_NOMEM, "p2p payload: out of memory encoding %s",
				    p->name);
	/* jansson's allocation; hand back one of ours, as callers free with mc_free */
	*json_out = mc_strdup(text);
	free(text);
	if (!*json_out)
		return mc_set_error(MC_ERR_NOMEM, "p2p payload: out of memory encoding %s",
				    p->name);
	if (len_out)
		*len_out = strlen(*json_out);
	return MC_OK;
}
