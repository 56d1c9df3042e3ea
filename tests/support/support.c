/* tests/support/support.c - helpers shared by the C tests. */
#include "support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

void mc_test_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i = 0;
	while (i + 8 <= len) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
		i += 8;
	}
	while (i < len) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i++] = (uint8_t)x;
	}
}

uint16_t mc_test_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t l = sizeof(a);
	uint16_t port = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

#include "mooncake/te.h"

struct mc_te *mc_test_engine_new(const char *uri, const char *name)
{
	struct mc_te_params p = {
		.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_HOST,
		.metadata_uri = uri,
		.local_name = name,
		.host = "127.0.0.1",
	};
	struct mc_te *te = NULL;
	if (mc_te_new(&p, &te) != MC_OK) {
		fprintf(stderr, "mc_te_new(%s, %s): %s\n", uri, name, mc_last_error());
		return NULL;
	}
	return te;
}

bool mc_test_tmpdir(const char *base, const char *prefix, char *dir, size_t len)
{
	struct stat sb;
	if (!base || stat(base, &sb) != 0 || !S_ISDIR(sb.st_mode))
		base = "/tmp";
	if ((size_t)snprintf(dir, len, "%s/%s-XXXXXX", base, prefix) >= len)
		return false;
	return mkdtemp(dir) != NULL;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int mc_test_rmtree(const char *dir)
{
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

bool mc_test_flip_byte(const char *path, uint64_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	bool ok;

	if (fd < 0)
		return false;
	ok = pread(fd, &b, 1, (off_t)at) == 1;
	b ^= 0x5a;
	ok = ok && pwrite(fd, &b, 1, (off_t)at) == 1;
	close(fd);
	return ok;
}
