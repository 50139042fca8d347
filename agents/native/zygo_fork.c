/*
 * zygo_fork.c, built into zygo_rand.so: the fork-mode zygote's loop in C.
 *
 * Right after a fork every page the zygote writes is a copy-on-write fault while its newest
 * child still shares it. The Python loop (zygo_agent/zygote.py) wrote about 110 pages between
 * two forks (its frames, objects and reference counts); this loop writes a few: its stack, a
 * static table, the interpreter's fork hooks and the stdio flush. It does the common path
 * only and hands everything else back to the agent, which does it as before:
 *
 *   - control socket readable: one datagram is received; exactly {"type":"fork","seq":N}
 *     with one descriptor (what the supervisor sends; N a JSON integer of at most 18
 *     digits) is forked here, after the agent's flush callable (rule 6) and a check that the
 *     process has one thread (the link count of /proc/self/task is 2 plus the threads);
 *     any other datagram, end of stream, more than one thread, a fork the kernel or an
 *     audit hook refuses, goes back to the agent (return 0 or ZYGO_LOOP_FORK_REQUEST);
 *   - wake-up pipe readable (SIGCHLD, through signal.set_wakeup_fd): drained, every exited
 *     child reaped and reported ({"type":"exited",...}, the bytes wire.encode makes).
 *
 * A fork is the interpreter's own sequence, as os.fork does it: the "os.fork" audit event,
 * PyOS_BeforeFork, fork, then PyOS_AfterFork_Child or PyOS_AfterFork_Parent (at-fork hooks,
 * the import lock, threading's state). The GIL is held throughout (the agent calls through
 * ctypes.PyDLL); Python signal handlers are left pending (the child's are cleared by
 * PyOS_AfterFork_Child, the zygote's run when the loop returns).
 *
 * Children forked here or by zygo_fork_one are tracked in a static table (pid -> seq) for
 * their "exited"; the agent must not reap.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

/* The few CPython functions used (stable since 3.9); resolved in the interpreter. */
typedef struct _object PyObject;
extern void PyOS_BeforeFork(void);
extern void PyOS_AfterFork_Parent(void);
extern void PyOS_AfterFork_Child(void);
extern int PySys_Audit(const char *event, const char *format, ...);
extern PyObject *PyObject_CallNoArgs(PyObject *callable);
extern void Py_DecRef(PyObject *o);
extern void PyErr_Clear(void);

#define ZYGO_MAX_FDS 8
#define ZYGO_LOOP_CLOSED (-1)       /* the control socket failed: errno says why */
#define ZYGO_LOOP_FORK_REQUEST (-2) /* seq and fds[0] hold a fork the agent must do */
#define ZYGO_LOOP_FULL (-3)         /* no room in the children's table */

/* What the agent and the loop share (zygote.py _LoopState mirrors it). */
struct zygo_loop {
	int control;                /* the control socket */
	int wakeup;                 /* the read end of the wake-up pipe (non-blocking) */
	PyObject *flush;            /* flush_stdio: called before every fork */
	unsigned char *buf;         /* a datagram handed back: buf[0:len] */
	size_t bufsize;
	size_t len;
	int msg_flags;              /* recvmsg's flags of that datagram */
	int nfds;                   /* and its descriptors */
	int fds[ZYGO_MAX_FDS];
	long long seq;              /* ZYGO_LOOP_FORK_REQUEST: the request's seq */
};

/* pid -> seq of the children alive; open addressing, pid 0 = free, -1 = removed. */
#define TABLE 4096
static pid_t pids[TABLE];
static long long seqs[TABLE];
static int nchildren;

static unsigned slot(pid_t pid) { return ((unsigned)pid * 2654435761u) % TABLE; }

static int track(pid_t pid, long long seq)
{
	if (nchildren >= TABLE / 2)
		return -1;
	unsigned i = slot(pid);
	while (pids[i] > 0)
		i = (i + 1) % TABLE;
	pids[i] = pid;
	seqs[i] = seq;
	nchildren++;
	return 0;
}

static int untrack(pid_t pid, long long *seq)
{
	unsigned i = slot(pid);
	for (unsigned n = 0; n < TABLE && pids[i] != 0; n++, i = (i + 1) % TABLE) {
		if (pids[i] == pid) {
			*seq = seqs[i];
			pids[i] = -1;
			nchildren--;
			return 0;
		}
	}
	return -1;
}

/* zygo_track records a child the agent forked itself (os.fork, after this loop handed a
 * fork back), so that its exit is reported too. Returns 0, or -1 when the table is full. */
int zygo_track(int pid, long long seq) { return track((pid_t)pid, seq); }

/* zygo_children_tracked returns the number of children the table holds (for tests). */
int zygo_children_tracked(void) { return nchildren; }

static int send_all(int fd, const char *data, size_t len)
{
	ssize_t n;
	do
		n = send(fd, data, len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)len ? 0 : -1;
}

static void say(const char *text)
{
	ssize_t n = write(2, text, strlen(text));
	(void)n;
}

/* one_thread: the link count of /proc/self/task is 2 plus the number of threads. */
static int one_thread(void)
{
	struct stat st;
	return stat("/proc/self/task", &st) == 0 && st.st_nlink == 3;
}

/* fork_seq parses exactly {"type":"fork","seq":N} (zygote.py _fork_seq); -1 if not. */
static long long fork_seq(const unsigned char *d, size_t len)
{
	static const char head[] = "{\"type\":\"fork\",\"seq\":";
	size_t h = sizeof head - 1;
	if (len < h + 2 || memcmp(d, head, h) != 0 || d[len - 1] != '}')
		return -1;
	size_t digits = len - h - 1;
	if (digits > 18 || (digits > 1 && d[h] == '0'))
		return -1;
	long long seq = 0;
	for (size_t i = h; i < len - 1; i++) {
		if (d[i] < '0' || d[i] > '9')
			return -1;
		seq = seq * 10 + (d[i] - '0');
	}
	return seq;
}

/*
 * zygo_fork_one forks the request of seq whose socket is fd: the os.fork sequence, then in
 * the zygote closes fd, tracks the child and sends {"type":"forked",...}. The caller has
 * flushed and checked the threads. Returns the request socket in the child (fd, or a copy
 * of it at 3 or above when fd is below 3: always above 0), 0 in the zygote,
 * ZYGO_LOOP_FORK_REQUEST when the audit hook or the kernel refused (fd left open: the
 * agent's os.fork then says why), ZYGO_LOOP_FULL, or ZYGO_LOOP_CLOSED (errno) when the
 * forked message cannot be sent.
 */
int zygo_fork_one(struct zygo_loop *z, long long seq, int fd)
{
	if (nchildren >= TABLE / 2)
		return ZYGO_LOOP_FULL;
	/* The child is told from the zygote by a return above 0, so its socket is moved to 3 or
	 * above: an import that closed stdin leaves fd 0 free for the next socket received, and
	 * a child given 0 back would carry on as a second zygote. */
	int sock = fd;
	if (fd < 3 && (sock = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
		return ZYGO_LOOP_FORK_REQUEST;
	if (PySys_Audit("os.fork", NULL) < 0) {
		PyErr_Clear();
		if (sock != fd)
			close(sock);
		return ZYGO_LOOP_FORK_REQUEST;
	}
	PyOS_BeforeFork();
	pid_t pid = fork();
	if (pid == 0) {
		/* The table is the zygote's; the child never uses it (nor writes it: a write
		 * would be one more copy-on-write fault). */
		PyOS_AfterFork_Child();
		if (sock != fd)
			close(fd); /* no second descriptor of the request socket stays in the child */
		return sock;
	}
	int saved = errno;
	PyOS_AfterFork_Parent();
	if (pid < 0) {
		if (sock != fd)
			close(sock);
		errno = saved;
		return ZYGO_LOOP_FORK_REQUEST;
	}
	if (sock != fd)
		close(sock);
	close(fd);
	track(pid, seq);
	char msg[96];
	int n = snprintf(msg, sizeof msg, "{\"type\":\"forked\",\"seq\":%lld,\"pid\":%d}", seq, (int)pid);
	if (send_all(z->control, msg, (size_t)n) != 0)
		return ZYGO_LOOP_CLOSED;
	return 0;
}

/* reap reaps every exited child and reports the tracked ones. */
static int reap(struct zygo_loop *z)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			return 0; /* none exited, or no children (ECHILD) */
		long long seq;
		if (untrack(pid, &seq) != 0) {
			char line[96];
			snprintf(line, sizeof line, "zygo-agent: reaped process %d, which no fork request made\n", (int)pid);
			say(line);
			continue;
		}
		char msg[128];
		int n;
		if (WIFSIGNALED(status))
			n = snprintf(msg, sizeof msg, "{\"type\":\"exited\",\"seq\":%lld,\"pid\":%d,\"signal\":%d}",
				     seq, (int)pid, WTERMSIG(status));
		else
			n = snprintf(msg, sizeof msg, "{\"type\":\"exited\",\"seq\":%lld,\"pid\":%d,\"code\":%d}",
				     seq, (int)pid, WEXITSTATUS(status));
		if (send_all(z->control, msg, (size_t)n) != 0)
			return -1;
	}
}

static void take_fds(struct zygo_loop *z, struct msghdr *mh)
{
	z->nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *in = (int *)CMSG_DATA(c);
		for (size_t i = 0; i < n; i++) {
			if (z->nfds < ZYGO_MAX_FDS)
				z->fds[z->nfds++] = in[i];
			else
				close(in[i]); /* more than a message may carry: its fds were truncated anyway */
		}
	}
}

/*
 * zygo_fork_loop serves the control socket until something needs the agent. Returns a
 * request socket (> 0) in a forked child; 0 with a datagram in z->buf, z->len, z->fds,
 * z->nfds, z->msg_flags (len 0 and no fds: end of stream); ZYGO_LOOP_FORK_REQUEST with
 * z->seq and z->fds[0] when a fork request needs the agent's checks; ZYGO_LOOP_FULL likewise
 * when the children's table is full; ZYGO_LOOP_CLOSED (errno) when the control socket fails.
 */
int zygo_fork_loop(struct zygo_loop *z)
{
	union {
		char space[CMSG_SPACE(ZYGO_MAX_FDS * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} anc;
	struct pollfd pfd[2] = {{.fd = z->control, .events = POLLIN}, {.fd = z->wakeup, .events = POLLIN}};
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return ZYGO_LOOP_CLOSED;
		}
		if (pfd[1].revents) {
			char drain[512];
			ssize_t r = read(z->wakeup, drain, sizeof drain);
			(void)r;
			if (reap(z) != 0)
				return ZYGO_LOOP_CLOSED;
		}
		if (!pfd[0].revents)
			continue;
		struct iovec iov = {.iov_base = z->buf, .iov_len = z->bufsize};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = anc.space, .msg_controllen = sizeof anc.space};
		ssize_t n;
		do
			n = recvmsg(z->control, &mh, MSG_CMSG_CLOEXEC);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return ZYGO_LOOP_CLOSED;
		take_fds(z, &mh);
		z->len = (size_t)n;
		z->msg_flags = mh.msg_flags;
		long long seq = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? -1 : fork_seq(z->buf, z->len);
		if (seq < 0 || z->nfds != 1)
			return 0;
		z->seq = seq;
		PyObject *r = PyObject_CallNoArgs(z->flush);
		if (r)
			Py_DecRef(r);
		else
			PyErr_Clear(); /* flush_stdio never raises; a broken stream must not stop a fork */
		if (!one_thread())
			return ZYGO_LOOP_FORK_REQUEST;
		int rc = zygo_fork_one(z, seq, z->fds[0]);
		if (rc != 0)
			return rc; /* the child's socket, or something for the agent */
	}
}
