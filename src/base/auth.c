/*
 * base/auth.c - the cluster secret: where it comes from, and the checks
 * that compare against it (see auth.h).
 *
 * The secret is read once, when a server or client starts, and kept in
 * memory as given.  Comparisons run in time that depends only on the
 * lengths, never on where the first differing byte is, so a peer cannot
 * learn the secret a byte at a time from response times.  Nothing here
 * ever logs the secret or a candidate for it.
 */
#define MC_LOG_MODULE "auth"
#include "base/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"

#define CFG(f) offsetof(struct mc_auth_config, f)
const struct mc_config_entry mc_auth_config_table[] = {
	{.f = {"auth_secret_file", "MC_AUTH_SECRET_FILE", "",
	       "a file holding the cluster secret (trailing newlines dropped; refused when its "
	       "group or others may read it: chmod 600): every connection to an engine's data "
	       "and RPC ports and same-host endpoint, the master's RPC port, the offload port and "
	       "a daemon's dummy-client socket then opens with a challenge-response handshake, "
	       "and the HTTP services require \"Authorization: Bearer <secret>\" on what "
	       "changes state (docs/security.md); empty: no secret.  Also the flag "
	       "--auth_secret_file of mooncake_master, mooncake_client, "
	       "mooncake_http_metadata_server, mooncake_conductor and transfer_engine_bench",
	       CFG(file), MC_CONFIG_STRING, 0, 0}},
	{.f = {"auth_secret", "MC_AUTH_SECRET", "",
	       "the cluster secret itself, when MC_AUTH_SECRET_FILE is not set (visible in the "
	       "process environment: prefer the file)",
	       CFG(secret), MC_CONFIG_STRING, 0, 0}},
};
#undef CFG
const size_t mc_auth_config_table_len = MC_ARRAY_SIZE(mc_auth_config_table);

mc_status mc_auth_file_read(const char *what, const char *path, size_t max,
			    enum mc_auth_file_kind kind, char **out, size_t *len_out)
{
	char *buf = mc_malloc(max + 2);
	size_t len = 0;
	struct stat st;
	int fd = buf ? open(path, O_RDONLY | O_CLOEXEC) : -1, e;

	if (!buf)
		return MC_ERR_NOMEM;
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) == 0 && (st.st_mode & 044) && kind == MC_AUTH_FILE_PRIVATE) {
		close(fd);
		mc_free(buf);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "%s %s: mode %03o lets other users read it: chmod 600 %s "
				    "(docs/security.md)",
				    what, path, (unsigned)(st.st_mode & 0777), path);
	}
	if (kind == MC_AUTH_FILE_KEY && fstat(fd, &st) == 0 && (st.st_mode & 077))
		mc_warn("%s %s may be read by others (mode %03o): chmod 600 it", what, path,
			(unsigned)(st.st_mode & 0777));
	while (len < max + 1) {
		ssize_t n = read(fd, buf + len, max + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (len > max) {
		memset(buf, 0, len);
		mc_free(buf);
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: longer than %zu bytes", what,
				    path, max);
	}
	buf[len] = '\0';
	*out = buf;
	*len_out = len;
	return MC_OK;
fail:
	e = errno;
	if (fd >= 0)
		close(fd);
	mc_free(buf);
	return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: %s", what, path, strerror(e));
}

static mc_status read_secret_file(const char *path, struct mc_auth_secret *out)
{
	size_t len;
	char *buf;
	mc_status rc = mc_auth_file_read("auth secret file", path, MC_AUTH_SECRET_MAX,
					 MC_AUTH_FILE_PRIVATE, &buf, &len);

	if (rc != MC_OK)
		return rc;
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
		       buf[len - 1] == '\t'))
		buf[--len] = '\0';
	if (!len) {
		mc_free(buf);
		return mc_set_error(MC_ERR_INVALID_PARAMS, "auth secret file %s: empty", path);
	}
	out->bytes = buf;
	out->len = len;
	return MC_OK;
}

mc_status mc_auth_use_file(const char *file)
{
	struct mc_auth_secret s;
	mc_status rc;

	if (!file || !*file)
		return MC_OK;
	rc = read_secret_file(file, &s); /* a bad file stops the program at its flags */
	if (rc != MC_OK)
		return rc;
	mc_auth_secret_release(&s);
	if (setenv("MC_AUTH_SECRET_FILE", file, 1) != 0)
		return mc_set_error(MC_ERR_NOMEM, "setenv MC_AUTH_SECRET_FILE: %s",
				    strerror(errno));
	return MC_OK;
}

mc_status mc_auth_secret_load(const char *file, struct mc_auth_secret *out)
{
	struct mc_auth_config env;
	mc_status rc = MC_OK;

	memset(out, 0, sizeof(*out));
	if (file && *file)
		return read_secret_file(file, out);
	memset(&env, 0, sizeof(env));
	mc_config_entry_defaults(mc_auth_config_table, mc_auth_config_table_len, &env);
	mc_config_entry_load_env(mc_auth_config_table, mc_auth_config_table_len, &env);
	if (env.file && *env.file) {
		rc = read_secret_file(env.file, out);
	} else if (getenv("MC_AUTH_SECRET")) {
		if (!env.secret || !*env.secret)
			rc = mc_set_error(MC_ERR_INVALID_PARAMS, "MC_AUTH_SECRET is empty");
		else if (strlen(env.secret) > MC_AUTH_SECRET_MAX)
			rc = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "MC_AUTH_SECRET: longer than %d bytes",
					  MC_AUTH_SECRET_MAX);
		else if (!(out->bytes = mc_strdup(env.secret)))
			rc = MC_ERR_NOMEM;
		else
			out->len = strlen(out->bytes);
	}
	mc_config_entry_release(mc_auth_config_table, mc_auth_config_table_len, &env);
	return rc;
}

void mc_auth_secret_release(struct mc_auth_secret *s)
{
	if (!s || !s->bytes)
		return;
	memset(s->bytes, 0, s->len);
	mc_free(s->bytes);
	s->bytes = NULL;
	s->len = 0;
}

bool mc_auth_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	const volatile uint8_t *x = a, *y = b;
	size_t n = alen > blen ? alen : blen;
	uint8_t d = alen != blen;

	/* every byte of the longer one is looked at, whatever differs */
	for (size_t i = 0; i < n; i++)
		d |= (uint8_t)((i < alen ? x[i] : 0) ^ (i < blen ? y[i] : 0));
	return d == 0;
}

bool mc_auth_bearer_ok(const struct mc_auth_secret *s, const char *header)
{
	static const char scheme[] = "Bearer ";

	if (!mc_auth_on(s))
		return true;
	if (!header || strncasecmp(header, scheme, sizeof(scheme) - 1) != 0)
		return false;
	header += sizeof(scheme) - 1;
	return mc_auth_equal(header, strlen(header), s->bytes, s->len);
}

bool mc_auth_host_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!host || !*host)
		return false; /* every interface */
	if (strcmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

void mc_auth_warn_open(const struct mc_auth_secret *s, const char *what, const char *host)
{
	if (mc_auth_on(s) || mc_auth_host_loopback(host))
		return;
	mc_warn("%s listens on %s with no cluster secret: anyone who reaches it may change "
		"state (set MC_AUTH_SECRET_FILE; docs/security.md)",
		what, host && *host ? host : "every interface");
}
