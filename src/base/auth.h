/*
 * base/auth.h - the cluster secret and what checks it (issue 16 part 2).
 *
 * One secret, shared by every program of a cluster, turns authentication
 * on: MC_AUTH_SECRET_FILE names a file holding it, or MC_AUTH_SECRET holds
 * it (a program's flag, where it has one, comes first).  Without one the
 * programs behave as upstream's (no authentication at all), and each logs
 * one warning when it then listens on an address other than loopback.
 *
 * The secret guards the binary ports with a challenge-response handshake
 * (base/auth_hs.h: the engine's TCP data and RPC ports, the master's RPC
 * port, the offload port) and the HTTP services' requests that change
 * state (base/http.h, bearer): the metadata server's PUT and DELETE, which
 * the HTTP metadata client (meta/meta_http.c) sends with
 * "Authorization: Bearer <secret>".  docs/security.md says what is and is
 * not protected.
 *
 * Threads: mc_auth_secret_load and _release on one thread; the checks are
 * pure and reentrant.
 */
#ifndef MC_BASE_AUTH_H
#define MC_BASE_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/config.h"
#include "mooncake/status.h"

#define MC_AUTH_SECRET_MAX 4096 /* bytes; a longer file is refused */

struct mc_auth_secret {
	char *bytes; /* NUL-terminated; NULL: no secret, authentication off */
	size_t len;
};

/* What mc_auth_config_table fills (MC_AUTH_SECRET_FILE, MC_AUTH_SECRET). */
struct mc_auth_config {
	char *file;
	char *secret;
};
extern const struct mc_config_entry mc_auth_config_table[];
extern const size_t mc_auth_config_table_len;
/* A program's flags take the table's first MC_AUTH_FLAG_ROWS rows:
 * --auth_secret_file, never the secret itself (it would show in ps). */
#define MC_AUTH_FLAG_ROWS 1

/*
 * A program's --auth_secret_file: checked now (readable, not empty, not
 * readable by group or others), then set as MC_AUTH_SECRET_FILE, which
 * every part of the program loads (engine, store client, master, dummy
 * socket).  NULL or "": nothing, the environment's choice stands.
 */
mc_status mc_auth_use_file(const char *file);

/*
 * The secret: from the file file names when file is not NULL or "" (a
 * program's flag), else from MC_AUTH_SECRET_FILE's file, else from
 * MC_AUTH_SECRET, else none (out->bytes NULL, MC_OK).  A file's trailing
 * newlines and spaces are not part of it.  A file that cannot be read, is
 * empty or holds more than MC_AUTH_SECRET_MAX bytes, or an empty
 * MC_AUTH_SECRET, fails (MC_ERR_INVALID_PARAMS naming the cause): a
 * program told to authenticate must not start without it.  So does a file
 * its group or others may read (mode & 044; chmod 600).  Release with
 * mc_auth_secret_release.
 */
mc_status mc_auth_secret_load(const char *file, struct mc_auth_secret *out);
void mc_auth_secret_release(struct mc_auth_secret *s);

enum mc_auth_file_kind {
	MC_AUTH_FILE_PUBLIC,  /* a certificate: anyone may read it */
	MC_AUTH_FILE_KEY,     /* a TLS key: warned about when others may read it */
	MC_AUTH_FILE_PRIVATE, /* the cluster secret: refused when group or others may read it */
};

/* The whole file path into *out (NUL-terminated, mc_free it; *len_out its
 * length): MC_ERR_INVALID_PARAMS naming what and path when it cannot be
 * read, holds more than max bytes, or is MC_AUTH_FILE_PRIVATE and readable
 * by group or others. */
mc_status mc_auth_file_read(const char *what, const char *path, size_t max,
			    enum mc_auth_file_kind kind, char **out, size_t *len_out);

static inline bool mc_auth_on(const struct mc_auth_secret *s)
{
	return s && s->bytes;
}

/* a[0..alen) equals b[0..blen), in time that depends on the lengths only. */
bool mc_auth_equal(const void *a, size_t alen, const void *b, size_t blen);

/* An HTTP Authorization header value ("Bearer <token>", NULL when absent)
 * carries the secret s. */
bool mc_auth_bearer_ok(const struct mc_auth_secret *s, const char *header);

/* host (a bind address; NULL or "" = every interface) is a loopback one. */
bool mc_auth_host_loopback(const char *host);

/* The one warning of a program that listens on host without a secret:
 * logged when host is not loopback. */
void mc_auth_warn_open(const struct mc_auth_secret *s, const char *what, const char *host);

#endif
