/*
 * master/wal_rec.c - the payloads of the write-ahead log records (see
 * wal_rec.h for the layout).
 */
#include "master/wal_rec.h"

#include <string.h>

#include "base/endian.h"
#include "base/log.h"

/* ---- encode ---- */

static void put8(struct mc_buf *b, uint8_t v)
{
	mc_buf_append(b, &v, 1);
}

static void put16(struct mc_buf *b, uint16_t v)
{
	uint8_t t[2];

	mc_put_le16(t, v);
	mc_buf_append(b, t, 2);
}

static void put64(struct mc_buf *b, uint64_t v)
{
	uint8_t t[8];

	mc_put_le64(t, v);
	mc_buf_append(b, t, 8);
}

static void put_str(struct mc_buf *b, const struct mc_walrec_str *s)
{
	put16(b, s->len);
	mc_buf_append(b, s->p, s->len);
}

static void put_uuid(struct mc_buf *b, const struct mc_store_uuid *u)
{
	put64(b, u->first);
	put64(b, u->second);
}

static void put32(struct mc_buf *b, uint32_t v)
{
	uint8_t t[4];

	mc_put_le32(t, v);
	mc_buf_append(b, t, 4);
}

static void put_names(struct mc_buf *b, const struct mc_walrec_names *l)
{
	put16(b, l->n);
	if (!l->v) { /* a decoded record, re-encoded */
		mc_buf_append(b, l->raw, l->raw_len);
		return;
	}
	for (uint32_t i = 0; i < l->n; i++) {
		size_t n = strlen(l->v[i]);
		struct mc_walrec_str x = {l->v[i], (uint16_t)(n > UINT16_MAX ? UINT16_MAX : n)};

		put_str(b, &x);
	}
}

/* The lowest payload version that can say r. */
static uint8_t rec_version(const struct mc_walrec *r)
{
	switch (r->type) {
	case MC_WALREC_OBJ_PUT:
		return (r->u.obj.flags & MC_WALREC_F_TRAILER)  ? 4
		       : (r->u.obj.flags & MC_WALREC_F_CHUNKS) ? 2
							       : 1;
	case MC_WALREC_TASK:
	case MC_WALREC_JOB:
	case MC_WALREC_TASK_SEQ:
	case MC_WALREC_SEG_GRACEFUL:
		return 3;
	default:
		return 1;
	}
}

void mc_walrec_encode(struct mc_buf *out, const struct mc_walrec *r)
{
	/* version 1 where it says all: older masters read those records */
	put8(out, rec_version(r));
	switch (r->type) {
	case MC_WALREC_OBJ_PUT: {
		const struct mc_walrec_obj *o = &r->u.obj;

		put_str(out, &o->tenant);
		put_str(out, &o->key);
		put64(out, o->size);
		put8(out, o->flags);
		if (o->flags & MC_WALREC_F_CKSUM)
			put64(out, o->checksum);
		if (o->flags & MC_WALREC_F_CHUNKS) {
			put32(out, o->nchunks);
			if (o->chunks)
				for (uint32_t i = 0; i < o->nchunks; i++)
					put64(out, o->chunks[i]);
			else /* a decoded record, re-encoded */
				mc_buf_append(out, o->chunks_le, (size_t)o->nchunks * 8);
		}
		put_str(out, &o->group);
		put8(out, o->nrep);
		for (uint32_t i = 0; i < o->nrep; i++) {
			put8(out, o->reps[i].kind);
			put_uuid(out, &o->reps[i].seg);
			put64(out, o->reps[i].addr);
		}
		break;
	}
	case MC_WALREC_OBJ_DEL:
		put_str(out, &r->u.obj.tenant);
		put_str(out, &r->u.obj.key);
		break;
	case MC_WALREC_SEG_MOUNT: {
		const struct mc_walrec_seg *s = &r->u.seg;

		put_uuid(out, &s->id);
		put_uuid(out, &s->client);
		put64(out, s->base);
		put64(out, s->size);
		put_str(out, &s->name);
		put_str(out, &s->te_endpoint);
		put_str(out, &s->protocol);
		break;
	}
	case MC_WALREC_SEG_UNMOUNT:
		put_uuid(out, &r->u.seg.id);
		break;
	case MC_WALREC_VIEW:
		put64(out, r->u.view.version);
		put_str(out, &r->u.view.leader);
		break;
	case MC_WALREC_TASK: {
		const struct mc_walrec_task *t = &r->u.task;

		put_uuid(out, &t->id);
		put8(out, t->type);
		put8(out, t->status);
		put32(out, t->tries);
		put_str(out, &t->tenant);
		put_str(out, &t->key);
		put64(out, t->size);
		put_uuid(out, &t->src_seg);
		put64(out, t->src_addr);
		put_uuid(out, &t->client);
		put64(out, t->created);
		put64(out, t->updated);
		put_names(out, &t->targets);
		put_str(out, &t->msg);
		break;
	}
	case MC_WALREC_JOB: {
		const struct mc_walrec_job *j = &r->u.job;

		put_uuid(out, &j->id);
		put8(out, j->status);
		put32(out, j->max_conc);
		put64(out, j->created);
		put64(out, j->updated);
		put64(out, j->succeeded);
		put64(out, j->failed);
		put64(out, j->blocked);
		put64(out, j->bytes);
		put_names(out, &j->segs);
		put_names(out, &j->targets);
		put_str(out, &j->msg);
		break;
	}
	case MC_WALREC_TASK_SEQ:
		put64(out, r->u.seq);
		break;
	case MC_WALREC_SEG_GRACEFUL:
		put_uuid(out, &r->u.grace.seg);
		put64(out, r->u.grace.deadline_epoch_ms);
		break;
	default:
		break;
	}
}

/* ---- decode ---- */

struct rd {
	const uint8_t *p;
	size_t len, off;
	const char *bad; /* the first field that did not fit */
};

static bool need(struct rd *d, size_t n, const char *field)
{
	if (d->bad)
		return false;
	if (n > d->len - d->off) {
		d->bad = field;
		return false;
	}
	return true;
}

static uint8_t get8(struct rd *d, const char *field)
{
	if (!need(d, 1, field))
		return 0;
	return d->p[d->off++];
}

static uint32_t get32(struct rd *d, const char *field)
{
	uint32_t v;

	if (!need(d, 4, field))
		return 0;
	v = mc_get_le32(d->p + d->off);
	d->off += 4;
	return v;
}

static uint64_t get64(struct rd *d, const char *field)
{
	uint64_t v;

	if (!need(d, 8, field))
		return 0;
	v = mc_get_le64(d->p + d->off);
	d->off += 8;
	return v;
}

static void get_str(struct rd *d, struct mc_walrec_str *s, const char *field)
{
	uint16_t n;

	s->p = "";
	s->len = 0;
	if (!need(d, 2, field))
		return;
	n = mc_get_le16(d->p + d->off);
	d->off += 2;
	if (!need(d, n, field))
		return;
	s->p = (const char *)d->p + d->off;
	s->len = n;
	d->off += n;
}

static void get_uuid(struct rd *d, struct mc_store_uuid *u, const char *field)
{
	u->first = get64(d, field);
	u->second = get64(d, field);
}

/* A list of names: each one non-empty. */
static void get_names(struct rd *d, struct mc_walrec_names *l, const char *field)
{
	size_t start;

	l->n = 0;
	if (!need(d, 2, field))
		return;
	l->n = mc_get_le16(d->p + d->off);
	d->off += 2;
	start = d->off;
	for (uint32_t i = 0; i < l->n && !d->bad; i++) {
		struct mc_walrec_str s;

		get_str(d, &s, field);
		if (!d->bad && s.len == 0)
			d->bad = field;
	}
	if (d->bad)
		return;
	l->raw = d->p + start;
	l->raw_len = (uint32_t)(d->off - start);
}

bool mc_walrec_names_next(const struct mc_walrec_names *l, const uint8_t **pos,
			  struct mc_walrec_str *out)
{
	uint16_t n;

	if (!l->raw || *pos < l->raw || *pos + 2 > l->raw + l->raw_len)
		return false;
	n = mc_get_le16(*pos);
	if (*pos + 2 + n > l->raw + l->raw_len)
		return false;
	out->p = (const char *)*pos + 2;
	out->len = n;
	*pos += 2 + (size_t)n;
	return true;
}

mc_status mc_walrec_decode(uint16_t type, const uint8_t *p, size_t len, struct mc_walrec *r)
{
	struct rd d = {p, len, 0, NULL};
	uint8_t ver;

	mc_walrec_clear(r);
	r->type = type;
	if (len < 1)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "wal record type %u: empty payload",
				    type);
	ver = get8(&d, "version");
	if (ver == 0 || ver > MC_WALREC_VERSION)
		return mc_set_error(ver > MC_WALREC_VERSION ? MC_ERR_INVALID_VERSION
							    : MC_ERR_MALFORMED_JSON,
				    "wal record type %u: payload version %u, this master reads %u",
				    type, ver, MC_WALREC_VERSION);
	switch (type) {
	case MC_WALREC_OBJ_PUT: {
		struct mc_walrec_obj *o = &r->u.obj;

		get_str(&d, &o->tenant, "tenant");
		get_str(&d, &o->key, "key");
		o->size = get64(&d, "size");
		o->flags = get8(&d, "flags");
		if (!d.bad && (o->flags & ~(MC_WALREC_F_HARD | MC_WALREC_F_CKSUM |
					    MC_WALREC_F_CHUNKS | MC_WALREC_F_TRAILER)))
			d.bad = "flags";
		if (!d.bad && (o->flags & MC_WALREC_F_CHUNKS) && !(o->flags & MC_WALREC_F_CKSUM))
			d.bad = "flags";
		if (!d.bad && (o->flags & MC_WALREC_F_CHUNKS) && (o->flags & MC_WALREC_F_TRAILER))
			d.bad = "flags";
		/* each record has the lowest version that can say it */
		if (!d.bad && ver != ((o->flags & MC_WALREC_F_TRAILER)	? 4
				      : (o->flags & MC_WALREC_F_CHUNKS) ? 2
									: 1))
			d.bad = "version";
		if (!d.bad && (o->flags & MC_WALREC_F_TRAILER)) {
			uint64_t v = mc_store_untrailer(o->size);

			if (!mc_store_trailer_fits(v) || v + mc_store_trailer_len(v) != o->size)
				d.bad = "size with a trailer";
		}
		if (o->flags & MC_WALREC_F_CKSUM)
			o->checksum = get64(&d, "checksum");
		if (!d.bad && (o->flags & MC_WALREC_F_CHUNKS)) {
			o->nchunks = get32(&d, "chunk count");
			if (!d.bad &&
			    (o->nchunks == 0 || o->nchunks != mc_store_chunk_count(o->size)))
				d.bad = "chunk count";
			if (!d.bad && need(&d, (size_t)o->nchunks * 8, "chunk checksums")) {
				o->chunks_le = d.p + d.off;
				d.off += (size_t)o->nchunks * 8;
			}
		}
		get_str(&d, &o->group, "group");
		o->nrep = get8(&d, "replica count");
		if (!d.bad && o->nrep > MC_WALREC_MAX_REPS)
			d.bad = "replica count";
		for (uint32_t i = 0; !d.bad && i < o->nrep; i++) {
			o->reps[i].kind = get8(&d, "replica kind");
			if (!d.bad && (o->reps[i].kind < MC_WALREC_REP_MEMORY ||
				       o->reps[i].kind > MC_WALREC_REP_LOCAL_DISK))
				d.bad = "replica kind";
			get_uuid(&d, &o->reps[i].seg, "replica segment");
			o->reps[i].addr = get64(&d, "replica address");
		}
		if (!d.bad && o->key.len == 0)
			d.bad = "key";
		break;
	}
	case MC_WALREC_OBJ_DEL:
		if (ver != 1)
			d.bad = "version";
		get_str(&d, &r->u.obj.tenant, "tenant");
		get_str(&d, &r->u.obj.key, "key");
		if (!d.bad && r->u.obj.key.len == 0)
			d.bad = "key";
		break;
	case MC_WALREC_SEG_MOUNT: {
		struct mc_walrec_seg *s = &r->u.seg;

		if (ver != 1)
			d.bad = "version";
		get_uuid(&d, &s->id, "segment id");
		get_uuid(&d, &s->client, "client id");
		s->base = get64(&d, "base");
		s->size = get64(&d, "size");
		get_str(&d, &s->name, "name");
		get_str(&d, &s->te_endpoint, "te_endpoint");
		get_str(&d, &s->protocol, "protocol");
		if (!d.bad && s->base + s->size < s->base)
			d.bad = "size";
		break;
	}
	case MC_WALREC_SEG_UNMOUNT:
		if (ver != 1)
			d.bad = "version";
		get_uuid(&d, &r->u.seg.id, "segment id");
		break;
	case MC_WALREC_VIEW:
		if (ver != 1)
			d.bad = "version";
		r->u.view.version = get64(&d, "view version");
		get_str(&d, &r->u.view.leader, "leader");
		break;
	case MC_WALREC_TASK: {
		struct mc_walrec_task *t = &r->u.task;

		if (ver != 3)
			d.bad = "version";
		get_uuid(&d, &t->id, "task id");
		t->type = get8(&d, "task type");
		if (!d.bad && t->type != MC_STORE_TASK_REPLICA_COPY &&
		    t->type != MC_STORE_TASK_REPLICA_MOVE)
			d.bad = "task type";
		t->status = get8(&d, "task status");
		if (!d.bad && t->status > MC_STORE_TASK_SUCCESS)
			d.bad = "task status";
		t->tries = get32(&d, "tries");
		get_str(&d, &t->tenant, "tenant");
		get_str(&d, &t->key, "key");
		if (!d.bad && t->key.len == 0)
			d.bad = "key";
		t->size = get64(&d, "size");
		get_uuid(&d, &t->src_seg, "source segment");
		t->src_addr = get64(&d, "source address");
		get_uuid(&d, &t->client, "source client");
		t->created = get64(&d, "created");
		t->updated = get64(&d, "updated");
		get_names(&d, &t->targets, "targets");
		if (!d.bad && t->targets.n == 0)
			d.bad = "targets";
		get_str(&d, &t->msg, "message");
		break;
	}
	case MC_WALREC_JOB: {
		struct mc_walrec_job *j = &r->u.job;

		if (ver != 3)
			d.bad = "version";
		get_uuid(&d, &j->id, "job id");
		j->status = get8(&d, "job status");
		if (!d.bad && j->status > 5) /* MC_JOB_CANCELED */
			d.bad = "job status";
		j->max_conc = get32(&d, "max_concurrency");
		j->created = get64(&d, "created");
		j->updated = get64(&d, "updated");
		j->succeeded = get64(&d, "succeeded");
		j->failed = get64(&d, "failed");
		j->blocked = get64(&d, "blocked");
		j->bytes = get64(&d, "bytes");
		get_names(&d, &j->segs, "segments");
		if (!d.bad && j->segs.n == 0)
			d.bad = "segments";
		get_names(&d, &j->targets, "targets");
		get_str(&d, &j->msg, "message");
		break;
	}
	case MC_WALREC_TASK_SEQ:
		if (ver != 3)
			d.bad = "version";
		r->u.seq = get64(&d, "task seq");
		break;
	case MC_WALREC_SEG_GRACEFUL:
		if (ver != 3)
			d.bad = "version";
		get_uuid(&d, &r->u.grace.seg, "segment id");
		r->u.grace.deadline_epoch_ms = get64(&d, "deadline");
		break;
	default:
		return mc_set_error(MC_ERR_NOT_SUPPORTED, "wal record type %u is unknown", type);
	}
	if (!d.bad && d.off != len)
		d.bad = "trailing bytes";
	if (d.bad)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "wal record type %u: bad %s at byte %zu of %zu", type, d.bad,
				    d.off, len);
	return MC_OK;
}
