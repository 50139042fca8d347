/* A library that buffers OS randomness when it is loaded: getrandom(2) fills 16 bytes in an
 * ELF constructor, and zygo_token hands them out on every call (as a generator seeded once
 * at import would). Built by the test (test/e2e/nativerand_test.go) with gcc -O2. */
#include <string.h>
#include <sys/random.h>

static unsigned char buf[16];

__attribute__((constructor)) static void init(void) { getrandom(buf, sizeof buf, 0); }

void zygo_token(unsigned char *out) { memcpy(out, buf, sizeof buf); }
