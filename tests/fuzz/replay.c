/*
 * tests/fuzz/replay.c - feed corpus files to a libFuzzer target without libFuzzer.
 *
 * Linked with one fuzz_<name>.c, it runs LLVMFuzzerTestOneInput on every
 * file named on the command line (directories are walked one level), so
 * gcc builds replay the committed corpora as ordinary regression tests
 * under ASan/UBSan.  Exit 0 when every input ran; a crash is the failure.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;
	if (!f) {
		perror(path);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
		fclose(f);
		free(buf);
		return 1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int count = 0, bad = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			perror(argv[i]);
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			DIR *d = opendir(argv[i]);
			struct dirent *e;
			while (d && (e = readdir(d))) {
				char p[4096];
				if (e->d_name[0] == '.')
					continue;
				snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
				bad |= run_file(p);
				count++;
			}
			if (d)
				closedir(d);
		} else {
			bad |= run_file(argv[i]);
			count++;
		}
	}
	printf("replayed %d inputs\n", count);
	return bad || count == 0;
}
