/*
 * zygo_rand.so: the native-randomness guard of the Python zygote (docs/fork-safety.md).
 *
 * Preloaded (LD_PRELOAD, set by bwrap --setenv) into a fork-mode zygote only. While the
 * zygote imports the user's code it records which shared object drew bytes from the
 * kernel's random sources, through which function, and how many; a library that keeps such
 * bytes in its own memory would hand the same ones to every forked request. The agent reads
 * the records at warm-up and names each library (zygo_agent.nativerand).
 *
 * Interposed: getrandom, getentropy, syscall(SYS_getrandom), and open/open64/openat/
 * openat64/__open_2/__open64_2/fopen/fopen64 of /dev/urandom or /dev/random, with read and
 * fread on what those returned. The caller is dladdr(__builtin_return_address(0)): the
 * shared object whose code made the call. Calls made inside libc (fread's own read(2)) do
 * not pass through the PLT and are not seen; nor are raw syscall instructions.
 *
 * Cost: once zygo_rand_stop() has run (the agent calls it before `ready`, so before the
 * first fork), every interposed function is one relaxed atomic load and a tail call to
 * libc. Nothing is allocated: the records live in a fixed static table.
 *
 * The constructor removes this object from LD_PRELOAD in the process's environment, so
 * nothing the zygote or a request execs loads it.
 *
 * Exported for the agent (ctypes): zygo_rand_stop(), zygo_rand_records(buf, len). The same
 * shared object carries the zygote's fork loop (zygo_fork.c), compiled in beside this file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_RECORDS 64
#define MAX_FDS 16
#define PATH_LEN 256

struct record {
	const char *function; /* a string literal */
	char library[PATH_LEN];
	int via_loader; /* the return address was in ld.so: see newest_object */
	unsigned long long bytes;
	unsigned long calls;
};

static int recording = 1;          /* cleared by zygo_rand_stop; read relaxed */
static char lock;                  /* guards records, nrecords, fds, dropped */
static struct record records[MAX_RECORDS];
static int nrecords;
static unsigned long dropped;      /* calls not recorded: the table was full */
static int fds[MAX_FDS];           /* descriptors open on a random device; -1 when free */
static char self_path[PATH_LEN];

static ssize_t (*real_getrandom)(void *, size_t, unsigned int);
static int (*real_getentropy)(void *, size_t);
static long (*real_syscall)(long, ...);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_open_2)(const char *, int);
static int (*real_open64_2)(const char *, int);
static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fopen64)(const char *, const char *);
static ssize_t (*real_read)(int, void *, size_t);
static size_t (*real_fread)(void *, size_t, size_t, FILE *);
static int (*real_close)(int);
static int (*real_fclose)(FILE *);

/* REAL(name, symbol) is libc's function, looked up on first use (a constructor that runs
 * before ours may already call it). */
#define REAL(name, symbol) (real_##name ? real_##name : (*(void **)&real_##name = dlsym(RTLD_NEXT, symbol), real_##name))

static int on(void) { return __atomic_load_n(&recording, __ATOMIC_RELAXED); }

static void take(void) { while (__atomic_test_and_set(&lock, __ATOMIC_ACQUIRE)) {} }
static void give(void) { __atomic_clear(&lock, __ATOMIC_RELEASE); }

/* newest_object_cb keeps the name of the last object in load order that has one. */
static int newest_object_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	if (info->dlpi_name && info->dlpi_name[0])
		*(const char **)data = info->dlpi_name;
	return 0;
}

/*
 * is_loader says whether lib is the dynamic loader. A library initialiser (an ELF
 * constructor) whose last act is the call (a tail call, as gcc -O2 compiles it) returns to
 * ld.so's _dl_init, so the caller seen is the loader: the draw is then attributed to the
 * newest loaded object, which is the one being initialised when a single library (and no
 * new dependency of it) is loaded, as a Python extension module usually is.
 */
static int is_loader(const char *lib)
{
	const char *base = strrchr(lib, '/');
	base = base ? base + 1 : lib;
	return strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld64.so", 7) == 0;
}

/* note adds one call of function by the object holding caller, drawing bytes. */
static void note(const char *function, const void *caller, long long bytes)
{
	Dl_info info;
	const char *lib = "?";
	int saved = errno;
	if (dladdr(caller, &info) && info.dli_fname)
		lib = info.dli_fname[0] ? info.dli_fname : "(main program)";
	int via_loader = is_loader(lib);
	if (via_loader)
		dl_iterate_phdr(newest_object_cb, &lib);
	take();
	int i;
	for (i = 0; i < nrecords; i++)
		if (records[i].function == function && records[i].via_loader == via_loader &&
		    strcmp(records[i].library, lib) == 0)
			break;
	if (i == nrecords) {
		if (nrecords == MAX_RECORDS) {
			dropped++;
			give();
			errno = saved;
			return;
		}
		nrecords++;
		records[i].function = function;
		records[i].via_loader = via_loader;
		snprintf(records[i].library, PATH_LEN, "%s", lib);
	}
	records[i].calls++;
	if (bytes > 0)
		records[i].bytes += (unsigned long long)bytes;
	give();
	errno = saved;
}

static int is_random_device(const char *path)
{
	return path && (strcmp(path, "/dev/urandom") == 0 || strcmp(path, "/dev/random") == 0);
}

static void track(int fd, int add)
{
	take();
	for (int i = 0; i < MAX_FDS; i++) {
		if (add && fds[i] < 0) {
			fds[i] = fd;
			break;
		}
		if (!add && fds[i] == fd) {
			fds[i] = -1;
			break;
		}
	}
	give();
}

static int tracked(int fd)
{
	int found = 0;
	take();
	for (int i = 0; i < MAX_FDS && !found; i++)
		found = fds[i] == fd;
	give();
	return found;
}

static void drop_self_from_env(void)
{
	const char *cur = getenv("LD_PRELOAD");
	if (!cur || !self_path[0])
		return;
	char out[4096] = "";
	size_t n = 0;
	const char *p = cur;
	while (*p) {
		size_t len = strcspn(p, ": ");
		if (len && !(len == strlen(self_path) && strncmp(p, self_path, len) == 0) &&
		    n + len + 2 < sizeof out) {
			if (n)
				out[n++] = ':';
			memcpy(out + n, p, len);
			n += len;
			out[n] = 0;
		}
		p += len;
		if (*p)
			p++;
	}
	if (n)
		setenv("LD_PRELOAD", out, 1);
	else
		unsetenv("LD_PRELOAD");
}

__attribute__((constructor)) static void init(void)
{
	Dl_info info;
	for (int i = 0; i < MAX_FDS; i++)
		fds[i] = -1;
	if (dladdr((void *)init, &info) && info.dli_fname)
		snprintf(self_path, sizeof self_path, "%s", info.dli_fname);
	drop_self_from_env();
}

/* zygo_rand_stop ends recording: from now on every interposed call passes straight on. */
void zygo_rand_stop(void) { __atomic_store_n(&recording, 0, __ATOMIC_RELAXED); }

/*
 * zygo_rand_records writes the records into buf (len bytes, NUL-terminated, truncated to
 * fit), one per line: function TAB bytes TAB calls TAB via_loader (0 or 1) TAB library; a last
 * line "dropped TAB n"
 * when the table overflowed. Returns the length the full text needs (without the NUL).
 */
int zygo_rand_records(char *buf, size_t len)
{
	size_t need = 0;
	char line[PATH_LEN + 96];
	if (len)
		buf[0] = 0;
	take();
	for (int i = 0; i <= nrecords; i++) {
		int n;
		if (i < nrecords)
			n = snprintf(line, sizeof line, "%s\t%llu\t%lu\t%d\t%s\n", records[i].function,
				     records[i].bytes, records[i].calls, records[i].via_loader,
				     records[i].library);
		else if (dropped)
			n = snprintf(line, sizeof line, "dropped\t%lu\n", dropped);
		else
			break;
		if (need + (size_t)n < len)
			memcpy(buf + need, line, (size_t)n + 1);
		need += (size_t)n;
	}
	give();
	return (int)need;
}

ssize_t getrandom(void *buf, size_t n, unsigned int flags)
{
	ssize_t r = REAL(getrandom, "getrandom")(buf, n, flags);
	if (on())
		note("getrandom", __builtin_return_address(0), r);
	return r;
}

int getentropy(void *buf, size_t n)
{
	int r = REAL(getentropy, "getentropy")(buf, n);
	if (on())
		note("getentropy", __builtin_return_address(0), r == 0 ? (long long)n : 0);
	return r;
}

long syscall(long number, ...)
{
	va_list ap;
	long a[6];
	va_start(ap, number);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	long r = REAL(syscall, "syscall")(number, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (number == SYS_getrandom && on())
		note("syscall(SYS_getrandom)", __builtin_return_address(0), r);
	return r;
}

static int opened(const char *function, const char *path, int fd, const void *caller)
{
	if (fd >= 0 && is_random_device(path)) {
		note(function, caller, 0);
		track(fd, 1);
	}
	return fd;
}

#define OPEN_MODE(flags, mode)                                                                \
	mode_t mode = 0;                                                                      \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {                                              \
		va_list ap;                                                                   \
		va_start(ap, flags);                                                          \
		mode = va_arg(ap, mode_t);                                                    \
		va_end(ap);                                                                   \
	}

int open(const char *path, int flags, ...)
{
	OPEN_MODE(flags, mode);
	int fd = REAL(open, "open")(path, flags, mode);
	return on() ? opened("open(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

int open64(const char *path, int flags, ...)
{
	OPEN_MODE(flags, mode);
	int fd = REAL(open64, "open64")(path, flags, mode);
	return on() ? opened("open(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

int openat(int dir, const char *path, int flags, ...)
{
	OPEN_MODE(flags, mode);
	int fd = REAL(openat, "openat")(dir, path, flags, mode);
	return on() ? opened("openat(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

int openat64(int dir, const char *path, int flags, ...)
{
	OPEN_MODE(flags, mode);
	int fd = REAL(openat64, "openat64")(dir, path, flags, mode);
	return on() ? opened("openat(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

int __open_2(const char *path, int flags)
{
	int fd = REAL(open_2, "__open_2")(path, flags);
	return on() ? opened("open(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

int __open64_2(const char *path, int flags)
{
	int fd = REAL(open64_2, "__open64_2")(path, flags);
	return on() ? opened("open(/dev/*random)", path, fd, __builtin_return_address(0)) : fd;
}

FILE *fopen(const char *path, const char *mode)
{
	FILE *f = REAL(fopen, "fopen")(path, mode);
	if (on() && f)
		opened("fopen(/dev/*random)", path, fileno(f), __builtin_return_address(0));
	return f;
}

FILE *fopen64(const char *path, const char *mode)
{
	FILE *f = REAL(fopen64, "fopen64")(path, mode);
	if (on() && f)
		opened("fopen(/dev/*random)", path, fileno(f), __builtin_return_address(0));
	return f;
}

ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t r = REAL(read, "read")(fd, buf, n);
	if (on() && r > 0 && tracked(fd))
		note("read(/dev/*random)", __builtin_return_address(0), r);
	return r;
}

size_t fread(void *buf, size_t size, size_t n, FILE *f)
{
	size_t r = REAL(fread, "fread")(buf, size, n, f);
	if (on() && r > 0 && tracked(fileno(f)))
		note("fread(/dev/*random)", __builtin_return_address(0), (long long)(r * size));
	return r;
}

int close(int fd)
{
	if (on())
		track(fd, 0);
	return REAL(close, "close")(fd);
}

int fclose(FILE *f)
{
	if (on())
		track(fileno(f), 0);
	return REAL(fclose, "fclose")(f);
}
