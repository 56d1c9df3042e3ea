/*
 * master/server_probe.c - mount probes, moved out of server.c (the RPC
 * loop); what they share with it is in server_probe.h.
 *
 * A MountSegment or ReMountSegment that the master would accept and that
 * names a segment not mounted yet is not handed to the master at once: it
 * becomes a mount_probe.  Its connection reads no further frame (answers
 * stay in request order) and one thread per probe asks the transfer
 * engine of each new segment for a Probe (te/rpc.h) by one deadline,
 * mount_probe_timeout after the request.  Where that engine listens: the
 * rpc_meta record of the segment's te_endpoint (then of its name) in the
 * embedded HTTP metadata server when there is one, else te_endpoint read as
 * host:port (a store client names its segment after its engine's RPC
 * address).  When the thread is done it puts the probe on probes_done and
 * writes the eventfd; the loop joins it and, if the connection is still
 * there, re-decodes the saved frame and lets the master apply it (success)
 * or refuses it with ENDPOINT and the cause, logged once.  A connection
 * that closes first leaves its probe behind (p->c = NULL): the result is
 * dropped.  The loop never waits for a probe; stopping the server joins
 * what is still in flight, each bounded by its deadline.
 */
#define MC_LOG_MODULE "master"
#include "master/server_probe.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sock.h"
#include "meta/desc.h"
#include "meta/http_server.h"
#include "te/rpc.h"

#define PROBES_MAX	64   /* mount probes in flight at most; more are refused */
#define PROBE_MAX_FRAME 4096 /* a Probe answer is {"status":"success"} */

void mc_master_probe_free(struct mount_probe *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n; i++) {
		mc_free(p->t[i].name);
		mc_free(p->t[i].endpoint);
	}
	mc_free(p->t);
	mc_free(p->frame);
	mc_free(p);
}

/* Where t's engine answers RPCs: its rpc_meta record, else te_endpoint. */
static mc_status probe_locate(struct mc_master_server *s, const struct probe_target *t, char *host,
			      size_t host_len, uint16_t *port, char *why, size_t why_len)
{
	const char *names[2] = {t->endpoint, t->name};

	for (int i = 0; s->meta && i < 2; i++) {
		char *key, *v = NULL;
		size_t vlen = 0;
		struct mc_rpc_meta rm = {0};
		mc_status st;

		if (i == 1 && strcmp(t->name, t->endpoint) == 0)
			break;
		key = mc_meta_key_rpc(names[i]);
		if (!key)
			return MC_ERR_NOMEM;
		st = mc_http_meta_server_get(s->meta, key, &v, &vlen);
		mc_free(key);
		if (st == MC_ERR_NOT_FOUND)
			continue;
		if (st == MC_OK)
			st = mc_rpc_meta_decode(v, vlen, &rm);
		mc_free(v);
		if (st == MC_OK && rm.ip_or_host_name && *rm.ip_or_host_name && rm.rpc_port &&
		    strlen(rm.ip_or_host_name) < host_len) {
			snprintf(host, host_len, "%s", rm.ip_or_host_name);
			*port = rm.rpc_port;
			mc_rpc_meta_release(&rm);
			return MC_OK;
		}
		mc_rpc_meta_release(&rm);
		if (st == MC_ERR_NOMEM)
			return st;
		/* an unreadable record: te_endpoint may still say where */
	}
	if (!mc_sock_split_hostport(t->endpoint, host, host_len, port, 0) || !host[0] || !*port) {
		snprintf(why, why_len,
			 "segment %.80s: te_endpoint '%.80s' is not host:port%s, so the master "
			 "cannot probe its transfer engine (--mount_probe=false skips the check)",
			 t->name, t->endpoint,
			 s->meta ? " and has no rpc_meta record in the master's metadata server"
				 : "");
		return MC_ERR_ENDPOINT;
	}
	return MC_OK;
}

/* Ask t's engine for a Probe by deadline_ms. */
static mc_status probe_one(struct mc_master_server *s, const struct probe_target *t,
			   uint64_t deadline_ms, char *why, size_t why_len)
{
	char host[256], *resp = NULL;
	uint16_t port = 0;
	size_t len = 0;
	mc_status st;

	st = probe_locate(s, t, host, sizeof(host), &port, why, why_len);
	if (st != MC_OK)
		return st;
	st = mc_rpc_call_until(&s->rpc_secret, host, port, MC_RPC_PROBE, "{}", 2, deadline_ms,
			       PROBE_MAX_FRAME, &resp, &len);
	if (st == MC_OK) {
		json_error_t jerr;
		json_t *j = json_loadb(resp, len, JSON_DISABLE_EOF_CHECK, &jerr);
		const char *v = json_string_value(json_object_get(j, "status"));

		if (!v || strcmp(v, "success") != 0)
			st = mc_set_error(MC_ERR_PROTOCOL, "answered %.60s, not a probe's success",
					  resp);
		json_decref(j);
	}
	mc_free(resp);
	if (st == MC_ERR_NOMEM)
		return st;
	if (st != MC_OK) {
		snprintf(why, why_len,
			 "segment %.80s: its transfer engine at %.100s:%u (te_endpoint %.80s) did "
			 "not answer the mount probe: %.160s; --mount_probe=false skips this check",
			 t->name, host, port, t->endpoint, mc_last_error());
		return MC_ERR_ENDPOINT;
	}
	return MC_OK;
}

static void *probe_main(void *arg)
{
	struct mount_probe *p = arg;
	struct mc_master_server *s = p->s;
	uint64_t one = 1;

	p->st = MC_OK;
	for (uint32_t i = 0; i < p->n && p->st == MC_OK; i++)
		p->st = probe_one(s, &p->t[i], p->deadline_ms, p->why, sizeof(p->why));
	if (p->st == MC_ERR_NOMEM)
		snprintf(p->why, sizeof(p->why), "out of memory probing the segment's endpoint");
	/* from here on p is the loop's: it may be freed at any moment */
	pthread_mutex_lock(&s->probe_lock);
	mc_list_add_tail(&s->probes_done, &p->done_link);
	pthread_mutex_unlock(&s->probe_lock);
	if (write(s->probe_efd.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		mc_error("rpc: mount probe cannot wake the loop: %s", strerror(errno));
	return NULL;
}

/*
 * Answer p's request into out: the master applies it when the probe
 * succeeded, else refuses it with p->st and p->why.  Returns the status
 * answered; MC_ERR_NOMEM with nothing appended when no answer fit.  The
 * state lock is held.
 */
mc_status mc_master_probe_answer_locked(struct mc_master_server *s, struct mount_probe *p,
					struct mc_buf *out, uint64_t now_ms)
{
	struct mc_store_msg msg;
	struct mc_master_job *job = NULL;
	mc_status st;

	if (mc_store_msg_decode(p->frame, p->frame_len, MC_PROTO_MAX_PAYLOAD, &msg) != MC_OK) {
		/* it decoded when it arrived; only memory can fail now */
		p->st = MC_ERR_NOMEM;
		snprintf(p->why, sizeof(p->why), "out of memory decoding the mount again");
		return MC_ERR_NOMEM;
	}
	if (p->st == MC_OK && !ha_serving(s)) {
		st = ha_refuse(s, &msg, out);
	} else if (p->st == MC_OK) {
		st = mc_master_handle_start(s->master, &msg, now_ms, out, &job);
		if (st == MC_INPROGRESS) {
			mc_master_job_free(s->master, job); /* a mount is never a job */
			st = MC_ERR_INTERNAL;
		}
	} else {
		st = mc_master_refuse(s->master, &msg, p->st, p->why, out);
	}
	mc_store_msg_release(&msg);
	return st;
}

/*
 * Does msg need a probe before the master applies it?  Then make one for c
 * (launched by mc_master_probe_launch once the state lock is released).  false: hand
 * msg to the master now (another type, a mount it refuses by itself, or
 * one with no new segment).  The state lock is held.
 */
bool mc_master_probe_new_locked(struct mc_master_server *s, struct conn *c, const uint8_t *frame,
				size_t len, const struct mc_store_msg *msg, uint64_t now_ms)
{
	const struct mc_store_segment *segs;
	struct mount_probe *p;
	uint32_t n, k = 0;

	if (!s->mount_probe || !mc_master_mount_acceptable(s->master, msg))
		return false;
	if (msg->hdr.type == MC_STORE_MOUNT_SEGMENT) {
		segs = &msg->body.mount_req.segment;
		n = 1;
	} else {
		segs = msg->body.remount_req.segments;
		n = msg->body.remount_req.n_segments;
	}
	for (uint32_t i = 0; i < n; i++)
		k += !mc_master_segment_mounted(s->master, &segs[i].id);
	if (!k)
		return false;
	if (s->nprobes >= PROBES_MAX) {
		char text[160];
		snprintf(text, sizeof(text),
			 "%u mount probes are in flight already; try the mount again later",
			 (unsigned)PROBES_MAX);
		mc_master_refuse(s->master, msg, MC_ERR_AGAIN, text, &c->wbuf);
		return true;
	}
	p = mc_calloc(1, sizeof(*p));
	if (p) {
		p->frame = mc_malloc(len);
		p->t = mc_calloc(k, sizeof(*p->t));
	}
	if (!p || !p->frame || !p->t)
		goto nomem;
	memcpy(p->frame, frame, len);
	p->frame_len = len;
	for (uint32_t i = 0; i < n; i++) {
		const struct mc_store_segment *g = &segs[i];
		struct probe_target *t;

		if (mc_master_segment_mounted(s->master, &g->id))
			continue;
		t = &p->t[p->n++];
		t->name = mc_strndup(g->name.ptr ? g->name.ptr : "", g->name.len);
		t->endpoint = mc_strndup(g->te_endpoint.ptr ? g->te_endpoint.ptr : "",
					 g->te_endpoint.len);
		if (!t->name || !t->endpoint)
			goto nomem;
	}
	p->s = s;
	p->c = c;
	p->deadline_ms = now_ms + s->mount_probe_timeout_ms;
	mc_list_add_tail(&s->probes, &p->link);
	s->nprobes++;
	c->probe = p;
	return true;

nomem:
	mc_master_probe_free(p);
	if (mc_master_refuse(s->master, msg, MC_ERR_NOMEM, "out of memory starting the mount probe",
			     &c->wbuf) == MC_ERR_NOMEM)
		conn_fail(c, "out of memory answering %s", mc_store_msg_name(msg->hdr.type));
	return true;
}

/* Start c's probe thread; without one, the mount is refused at once. */
void mc_master_probe_launch(struct mc_master_server *s, struct conn *c, uint64_t now_ms)
{
	struct mount_probe *p = c->probe;
	size_t before = c->wbuf.len;
	int err = pthread_create(&p->thread, NULL, probe_main, p);
	mc_status st;

	if (err == 0) {
		p->launched = true;
		return;
	}
	p->st = MC_ERR_AGAIN;
	snprintf(p->why, sizeof(p->why), "cannot start a mount probe thread: %s", strerror(err));
	mc_warn("rpc: refusing a mount from %s: %s", c->peer, p->why);
	pthread_mutex_lock(&s->lock);
	st = mc_master_probe_answer_locked(s, p, &c->wbuf, now_ms);
	conn_wal_mark(s, c);
	mc_master_server_unlock(s);
	if (st == MC_ERR_NOMEM && c->wbuf.len == before)
		conn_fail(c, "out of memory answering a mount");
	c->probe = NULL;
	mc_list_del(&p->link);
	s->nprobes--;
	mc_master_probe_free(p);
}
