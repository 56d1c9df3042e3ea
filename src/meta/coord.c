/*
 * meta/coord.c - the leader view's front door: picks the backend from the
 * connection string's scheme and forwards each call to it.
 *
 * The backends live with the rest of their protocol's plumbing (the etcd
 * gateway client in meta_etcd.c, the hiredis connection in meta_redis.c),
 * so there is one way of talking to each coordinator.  This file holds no
 * policy: when to campaign, how long a lease is trusted and what a lost one
 * means are the caller's (master/ha.c).  It also holds the candidate
 * entry's codec, a parser of bytes read from the coordinator: pure, every
 * byte checked, fuzzed (tests/fuzz/fuzz_coord_cand.c).
 */
#include "meta/coord.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

mc_status mc_coord_open(const char *uri, long timeout_ms, struct mc_coord **out)
{
	if (!uri || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "coordinator: NULL argument");
	if (strncasecmp(uri, "etcd://", 7) == 0)
		return mc_coord_etcd_open(uri, timeout_ms, out);
	if (strncasecmp(uri, "redis://", 8) == 0)
		return mc_coord_redis_open(uri, timeout_ms, out);
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "coordinator %s: not an etcd:// or redis:// connection string", uri);
}

void mc_coord_close(struct mc_coord *c)
{
	if (c)
		c->ops->close(c);
}

void mc_coord_view_key(const char *cluster_id, char *buf, size_t len)
{
	snprintf(buf, len, "mooncake-store/%s/master_view",
		 cluster_id && *cluster_id ? cluster_id : "mooncake_cluster");
}

mc_status mc_coord_campaign(struct mc_coord *c, const char *key, const char *addr, int64_t ttl_s,
			    bool *won_out, uint64_t *version_out)
{
	*won_out = false;
	return c->ops->campaign(c, key, addr, ttl_s, won_out, version_out);
}

mc_status mc_coord_renew(struct mc_coord *c, bool *held_out)
{
	*held_out = false;
	return c->ops->renew(c, held_out);
}

void mc_coord_resign(struct mc_coord *c)
{
	c->ops->resign(c);
}

mc_status mc_coord_read(struct mc_coord *c, const char *key, struct mc_coord_view *out)
{
	out->present = false;
	out->addr[0] = '\0';
	out->version = 0;
	return c->ops->read(c, key, out);
}

mc_status mc_coord_evict(struct mc_coord *c, const char *key, uint64_t version, bool *ended_out)
{
	*ended_out = false;
	return c->ops->evict(c, key, version, ended_out);
}

/* ---- candidates ---------------------------------------------------------------- */

bool mc_coord_cand_better(const struct mc_coord_cand *a, const struct mc_coord_cand *b)
{
	if (a->view != b->view)
		return a->view > b->view;
	if (a->seq != b->seq)
		return a->seq > b->seq;
	return strcmp(a->addr, b->addr) < 0;
}

void mc_coord_cand_encode(const struct mc_coord_cand *c, char *buf, size_t len)
{
	snprintf(buf, len, "1 %" PRIu64 " %" PRIu64 " %d", c->view, c->seq, c->electing ? 1 : 0);
}

/* One decimal u64 at *p (no sign, no leading zero unless "0"), up to a
 * space or the end; *p moves past it. */
static bool dec_u64(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (s >= end || *s < '0' || *s > '9' || (*s == '0' && s + 1 < end && s[1] != ' '))
		return false;
	for (; s < end && *s != ' '; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*out = v;
	return true;
}

mc_status mc_coord_cand_decode(const char *name, size_t nlen, const char *val, size_t vlen,
			       struct mc_coord_cand *out)
{
	const char *p = val, *end = val + vlen;
	uint64_t version = 0, electing = 0;

	memset(out, 0, sizeof(*out));
	if (!nlen || nlen >= sizeof(out->addr))
		return mc_set_error(MC_ERR_METADATA, "a candidate entry's name of %zu bytes", nlen);
	for (size_t i = 0; i < nlen; i++)
		if ((unsigned char)name[i] <= ' ' || (unsigned char)name[i] >= 0x7f)
			return mc_set_error(MC_ERR_METADATA,
					    "a candidate entry's name with byte 0x%02x",
					    (unsigned char)name[i]);
	if (vlen >= MC_COORD_CAND_LEN || !dec_u64(&p, end, &version) || version != 1 || p >= end ||
	    *p++ != ' ' || !dec_u64(&p, end, &out->view) || p >= end || *p++ != ' ' ||
	    !dec_u64(&p, end, &out->seq) || p >= end || *p++ != ' ' ||
	    !dec_u64(&p, end, &electing) || electing > 1 || p != end) {
		memset(out, 0, sizeof(*out));
		return mc_set_error(MC_ERR_METADATA,
				    "candidate %.*s: entry of %zu bytes is not \"1 <view> <seq> "
				    "<0|1>\"",
				    (int)nlen, name, vlen);
	}
	memcpy(out->addr, name, nlen);
	out->addr[nlen] = '\0';
	out->electing = electing == 1;
	return MC_OK;
}

void mc_coord_cand_key(const char *view_key, char *buf, size_t len)
{
	snprintf(buf, len, "%s/candidates", view_key);
}

mc_status mc_coord_cand_post(struct mc_coord *c, const char *key, const struct mc_coord_cand *me,
			     int64_t ttl_s)
{
	char entry[MC_COORD_CAND_LEN];

	mc_coord_cand_encode(me, entry, sizeof(entry));
	return c->ops->cand_post(c, key, me->addr, entry, ttl_s);
}

struct cand_acc {
	struct mc_coord_cand *out;
	size_t max, n;
};

static void cand_add(void *arg, const char *name, size_t nlen, const char *val, size_t vlen)
{
	struct cand_acc *a = arg;

	if (a->n >= a->max)
		return;
	if (mc_coord_cand_decode(name, nlen, val, vlen, &a->out[a->n]) != MC_OK) {
		mc_warn("skipping a candidate entry: %s", mc_last_error());
		return;
	}
	a->n++;
}

mc_status mc_coord_cand_list(struct mc_coord *c, const char *key, struct mc_coord_cand *out,
			     size_t max, size_t *n_out)
{
	struct cand_acc a = {.out = out, .max = max};
	mc_status st = c->ops->cand_list(c, key, cand_add, &a);

	*n_out = st == MC_OK ? a.n : 0;
	return st;
}

void mc_coord_cand_drop(struct mc_coord *c, const char *key, const char *addr)
{
	c->ops->cand_drop(c, key, addr);
}
