/*
 * base/auth_hs.c - the challenge-response handshake (see auth_hs.h): the
 * frame codec, the state machine, its socket drivers, and the count of
 * refusals.  HMAC-SHA256 is OpenSSL's libcrypto.
 */
#define MC_LOG_MODULE "auth"
#include "base/auth_hs.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"

static const uint8_t magic[4] = {'M', 'C', 'A', 'U'};
#define VERSION 1

enum { ST_HELLO, ST_CHALLENGE, ST_PROOF, ST_DONE, ST_FAILED };

atomic_uint_fast64_t mc_auth_refused_total;

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

void mc_auth_hdr_encode(uint8_t type, uint16_t len, uint8_t out[MC_AUTH_HDR_LEN])
{
	memcpy(out, magic, 4);
	out[4] = VERSION;
	out[5] = type;
	put_le16(out + 6, len);
}

mc_status mc_auth_hdr_decode(const uint8_t in[MC_AUTH_HDR_LEN], struct mc_auth_hdr *out)
{
	if (memcmp(in, magic, 4) != 0 || in[4] != VERSION)
		return MC_ERR_PROTOCOL;
	out->type = in[5];
	out->len = (uint16_t)(in[6] | (in[7] << 8));
	if (out->type < MC_AUTH_HELLO || out->type > MC_AUTH_PROOF || out->len > MC_AUTH_BODY_MAX)
		return MC_ERR_PROTOCOL;
	return MC_OK;
}

static bool mac(const struct mc_auth_hs *h, bool server, uint8_t out[MC_AUTH_MAC_LEN])
{
	static const char lserver[] = "mooncake-auth-v1 server",
			  lclient[] = "mooncake-auth-v1 client";
	const char *label = server ? lserver : lclient;
	uint8_t msg[64 + 64 + 2 * MC_AUTH_NONCE_LEN];
	size_t ll = strlen(label), cl = strnlen(h->channel, 63), n = 0;
	unsigned int olen = 0;

	memcpy(msg, label, ll);
	n += ll;
	msg[n++] = 0;
	memcpy(msg + n, h->channel, cl);
	n += cl;
	msg[n++] = 0;
	memcpy(msg + n, h->cn, MC_AUTH_NONCE_LEN);
	n += MC_AUTH_NONCE_LEN;
	memcpy(msg + n, h->sn, MC_AUTH_NONCE_LEN);
	n += MC_AUTH_NONCE_LEN;
	return HMAC(EVP_sha256(), h->secret->bytes, (int)h->secret->len, msg, n, out, &olen) &&
	       olen == MC_AUTH_MAC_LEN;
}

static bool nonce(uint8_t *p)
{
	size_t got = 0;
	while (got < MC_AUTH_NONCE_LEN) {
		ssize_t n = getrandom(p + got, MC_AUTH_NONCE_LEN - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static void queue(struct mc_auth_hs *h, uint8_t type, const uint8_t *a, size_t alen,
		  const uint8_t *b, size_t blen)
{
	uint8_t *o;
	if (h->out_pos == h->out_len)
		h->out_pos = h->out_len = 0;
	o = h->out + h->out_len;
	mc_auth_hdr_encode(type, (uint16_t)(alen + blen), o);
	memcpy(o + MC_AUTH_HDR_LEN, a, alen);
	if (blen)
		memcpy(o + MC_AUTH_HDR_LEN + alen, b, blen);
	h->out_len += MC_AUTH_HDR_LEN + alen + blen;
}

mc_status mc_auth_hs_init(struct mc_auth_hs *h, const struct mc_auth_secret *secret,
			  enum mc_auth_role role, const char *channel)
{
	memset(h, 0, sizeof(*h));
	h->secret = secret;
	h->channel = channel;
	h->role = role;
	h->in_want = MC_AUTH_HDR_LEN;
	if (!nonce(role == MC_AUTH_CLIENT ? h->cn : h->sn))
		return mc_set_error(MC_ERR_INTERNAL, "no random bytes for an auth nonce: %s",
				    strerror(errno));
	if (role == MC_AUTH_CLIENT) {
		queue(h, MC_AUTH_HELLO, h->cn, MC_AUTH_NONCE_LEN, NULL, 0);
		h->step = ST_CHALLENGE;
	} else {
		h->step = ST_HELLO;
	}
	return MC_OK;
}

size_t mc_auth_hs_need(const struct mc_auth_hs *h)
{
	if (h->step == ST_DONE || h->step == ST_FAILED)
		return 0;
	return h->in_want - h->in_len;
}

static enum mc_auth_result fail(struct mc_auth_hs *h, const char *why)
{
	h->step = ST_FAILED;
	h->why = why;
	return MC_AUTH_FAIL;
}

/* The body of the frame this step expects: its type and length. */
static void expect(const struct mc_auth_hs *h, uint8_t *type, uint16_t *len)
{
	switch (h->step) {
	case ST_HELLO:
		*type = MC_AUTH_HELLO;
		*len = MC_AUTH_NONCE_LEN;
		break;
	case ST_CHALLENGE:
		*type = MC_AUTH_CHALLENGE;
		*len = MC_AUTH_NONCE_LEN + MC_AUTH_MAC_LEN;
		break;
	default:
		*type = MC_AUTH_PROOF;
		*len = MC_AUTH_MAC_LEN;
		break;
	}
}

/* A whole frame is in h->in: act on it. */
static enum mc_auth_result frame(struct mc_auth_hs *h)
{
	const uint8_t *body = h->in + MC_AUTH_HDR_LEN;
	uint8_t m[MC_AUTH_MAC_LEN];

	switch (h->step) {
	case ST_HELLO: /* server */
		memcpy(h->cn, body, MC_AUTH_NONCE_LEN);
		if (!mac(h, true, m))
			return fail(h, "HMAC failed");
		queue(h, MC_AUTH_CHALLENGE, h->sn, MC_AUTH_NONCE_LEN, m, MC_AUTH_MAC_LEN);
		h->step = ST_PROOF;
		break;
	case ST_CHALLENGE: /* client */
		memcpy(h->sn, body, MC_AUTH_NONCE_LEN);
		if (!mac(h, true, m))
			return fail(h, "HMAC failed");
		if (CRYPTO_memcmp(m, body + MC_AUTH_NONCE_LEN, MC_AUTH_MAC_LEN) != 0)
			return fail(h, "the server's proof does not match our secret");
		if (!mac(h, false, m))
			return fail(h, "HMAC failed");
		queue(h, MC_AUTH_PROOF, m, MC_AUTH_MAC_LEN, NULL, 0);
		h->step = ST_DONE;
		return MC_AUTH_DONE;
	case ST_PROOF: /* server */
		if (!mac(h, false, m))
			return fail(h, "HMAC failed");
		if (CRYPTO_memcmp(m, body, MC_AUTH_MAC_LEN) != 0)
			return fail(h, "the client's proof does not match our secret");
		h->step = ST_DONE;
		return MC_AUTH_DONE;
	}
	h->in_len = 0;
	h->in_want = MC_AUTH_HDR_LEN;
	return MC_AUTH_AGAIN;
}

enum mc_auth_result mc_auth_hs_feed(struct mc_auth_hs *h, const uint8_t *p, size_t n)
{
	while (n) {
		size_t k;
		if (h->step == ST_FAILED)
			return MC_AUTH_FAIL;
		if (h->step == ST_DONE)
			return fail(h, "bytes after the handshake's last frame");
		k = h->in_want - h->in_len;
		if (k > n)
			k = n;
		memcpy(h->in + h->in_len, p, k);
		h->in_len += k;
		p += k;
		n -= k;
		if (h->in_len < h->in_want)
			break;
		if (h->in_want == MC_AUTH_HDR_LEN) {
			struct mc_auth_hdr hd;
			uint8_t type;
			uint16_t len;
			if (mc_auth_hdr_decode(h->in, &hd) != MC_OK)
				return fail(h, "not an auth frame (a peer without the secret?)");
			expect(h, &type, &len);
			if (hd.type != type || hd.len != len)
				return fail(h, "an auth frame out of order or of the wrong size");
			h->in_want = MC_AUTH_HDR_LEN + hd.len;
			continue;
		}
		{
			enum mc_auth_result r = frame(h);
			if (r != MC_AUTH_AGAIN)
				return n && r == MC_AUTH_DONE
					       ? fail(h, "bytes after the handshake's last frame")
					       : r;
		}
	}
	return h->step == ST_DONE     ? MC_AUTH_DONE
	       : h->step == ST_FAILED ? MC_AUTH_FAIL
				      : MC_AUTH_AGAIN;
}

enum mc_auth_result mc_auth_hs_io(struct mc_auth_hs *h, int fd, bool *want_out)
{
	*want_out = false;
	for (;;) {
		size_t need;
		ssize_t n;
		bool sent = false;
		while (h->out_pos < h->out_len) {
			n = send(fd, h->out + h->out_pos, h->out_len - h->out_pos,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				*want_out = true;
				return MC_AUTH_AGAIN;
			}
			if (n < 0)
				return fail(h,
					    "the peer closed the connection during the handshake");
			h->out_pos += (size_t)n;
			sent = true;
		}
		/* each side answers the other at once, which puts its socket
		 * in the kernel's delayed-ACK ("ping-pong") mode: leave it
		 * after every frame, so that the next frame and the bulk that
		 * follows the handshake are acknowledged as they come (a late
		 * ACK there is taken by BBR for a full link); the server's
		 * last frame (PROOF) is acknowledged when it is done */
		if (sent || h->step == ST_DONE)
			mc_sock_quickack(fd);
		if (h->step == ST_DONE) {
			mc_sock_restart_cc(fd);
			return MC_AUTH_DONE;
		}
		if (h->step == ST_FAILED)
			return MC_AUTH_FAIL;
		need = mc_auth_hs_need(h);
		{
			uint8_t buf[MC_AUTH_FRAME_MAX];
			n = recv(fd, buf, need, MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return MC_AUTH_AGAIN;
			if (n <= 0)
				return fail(h,
					    "the peer closed the connection during the handshake");
			if (mc_auth_hs_feed(h, buf, (size_t)n) == MC_AUTH_FAIL)
				return MC_AUTH_FAIL;
		}
	}
}

mc_status mc_auth_hs_run(int fd, const struct mc_auth_secret *secret, enum mc_auth_role role,
			 const char *channel, int timeout_ms)
{
	struct mc_auth_hs h;
	uint64_t end = mc_now_ms() + (uint64_t)timeout_ms;
	mc_status st = mc_auth_hs_init(&h, secret, role, channel);

	if (st != MC_OK)
		return st;
	for (;;) {
		bool want_out;
		enum mc_auth_result r = mc_auth_hs_io(&h, fd, &want_out);
		struct pollfd p = {.fd = fd, .events = (short)(want_out ? POLLOUT : POLLIN)};
		uint64_t now = mc_now_ms();
		if (r == MC_AUTH_DONE)
			return MC_OK;
		if (r == MC_AUTH_FAIL)
			return mc_set_error(MC_ERR_PERMISSION, "authentication failed on %s: %s",
					    channel, h.why);
		if (now >= end)
			return mc_set_error(MC_ERR_TIMEOUT,
					    "authentication on %s not complete within %d ms",
					    channel, timeout_ms);
		if (poll(&p, 1, (int)(end - now)) < 0 && errno != EINTR)
			return mc_set_error(MC_ERR_SOCKET, "poll: %s", strerror(errno));
	}
}

/* One log limiter per listener name, so that one port's refusals cannot
 * silence another's (a flood on the data port must not hide the same-host
 * port's).  Names are few and fixed; past the table they share its last slot. */
#define REFUSE_SLOTS 16
static struct refuse_slot {
	char what[24];
	uint64_t next_log_ms, quiet;
} refuse_slots[REFUSE_SLOTS];
static pthread_mutex_t refuse_lock = PTHREAD_MUTEX_INITIALIZER;

void mc_auth_refused(const char *what, const char *peer, const char *why)
{
	uint64_t now = mc_now_ms(), q = 0;
	bool log = false;
	struct refuse_slot *s = &refuse_slots[REFUSE_SLOTS - 1];

	atomic_fetch_add(&mc_auth_refused_total, 1);
	pthread_mutex_lock(&refuse_lock);
	for (int i = 0; i < REFUSE_SLOTS; i++) {
		if (!refuse_slots[i].what[0])
			snprintf(refuse_slots[i].what, sizeof(refuse_slots[i].what), "%s", what);
		if (!strncmp(refuse_slots[i].what, what, sizeof(refuse_slots[i].what) - 1)) {
			s = &refuse_slots[i];
			break;
		}
	}
	if (now >= s->next_log_ms) {
		s->next_log_ms = now + 1000;
		q = s->quiet;
		s->quiet = 0;
		log = true;
	} else {
		s->quiet++;
	}
	pthread_mutex_unlock(&refuse_lock);
	if (log)
		mc_warn("refused a connection to the %s port from %s: %s (%llu more refused since "
			"the last line)",
			what, peer, why, (unsigned long long)q);
}
