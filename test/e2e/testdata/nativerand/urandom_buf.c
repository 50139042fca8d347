/* A library that buffers OS randomness when it is loaded: fopen + fread of /dev/urandom fill
 * 16 bytes in an ELF constructor, and zygo_token hands them out on every call. Built by the
 * test (test/e2e/nativerand_test.go) with gcc -O2. */
#include <stdio.h>
#include <string.h>

static unsigned char buf[16];

__attribute__((constructor)) static void init(void)
{
	FILE *f = fopen("/dev/urandom", "rb");
	if (f) {
		if (fread(buf, 1, sizeof buf, f) != sizeof buf)
			memset(buf, 0, sizeof buf);
		fclose(f);
	}
}

void zygo_token(unsigned char *out) { memcpy(out, buf, sizeof buf); }
