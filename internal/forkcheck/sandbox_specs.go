package forkcheck

import "fmt"

// SandboxProbeOrder is the order the sandbox mode's probes are reported in:
//
//	python, node, go        processes started before the checkpoint, still running in the copy
//	python-new, node-new,   processes started in the copy (exec, after the copy was made)
//	go-new
//	interpreter             the persistent code interpreter (run-code), which reseal reseeds
//	python-service,         probes declared as services with on_fork = "restart"
//	node-service
//	sandbox                 the copy as a whole: identity, clocks, a buffered line, a connection
var SandboxProbeOrder = []string{"python", "node", "go", "python-new", "node-new", "go-new",
	"interpreter", "python-service", "node-service", "sandbox"}

// Names of rows the host derives (sandbox_collect.go).
const (
	RowMonotonic = "monotonic clock: seconds it did not count (wall − monotonic, whole s)"
	RowTimer     = "timer armed before the checkpoint: monotonic s until it fired"
)

// Reasons and mitigations shared by several rows.
const (
	whyKernel = "asks the kernel (getrandom) on every call, and gVisor answers each from the host's getrandom, " +
		"so copies cannot share bytes (docs/sandboxes.md, Reseal)"
	whyNew = "a process started after the copy seeds itself from the kernel when it starts"
	whyPID = "the pid counter is part of the copied kernel: a running process keeps its pid in every copy, " +
		"and new processes draw from the same counter, so pids repeat across copies; Zygo cannot renumber processes"
	mitigatePID = "never use a pid alone as a unique name across copies (temp files, lock files, request ids); " +
		"combine it with /run/zygo/generation"
	whyInProcess = "the generator's state is memory inside a process that was running at the checkpoint, and every copy " +
		"has the same memory; Zygo reseeds its own code interpreter (see the interpreter rows) but cannot reach into a process it does not control"
	mitigateRestart = "declare the process as a service with on_fork = \"restart\" (a new process per copy, see the %s rows), " +
		"or have it watch /run/zygo/generation and reseed or restart itself when it changes; draw anything secret from the kernel (%s)"
	whyRestart = "on_fork = \"restart\": reseal stops the service and starts a new process, which seeds itself fresh; " +
		"this is the mitigation for the same row of the running probe"
)

func restartMitigation(probe, kernelCalls string) string {
	return fmt.Sprintf(mitigateRestart, probe, kernelCalls)
}

var (
	pyKernel   = "os.urandom, secrets, uuid.uuid4"
	nodeKernel = "none of Node's crypto calls do: start a new process for keys and tokens"
)

// SandboxSpecs are the expectations of the sandbox mode, per probe (SandboxProbeOrder).
var SandboxSpecs = map[string]map[string]Spec{
	"python": {
		"random.random()":          {Expect: Documented, Why: whyInProcess, Mitigation: restartMitigation("python-service", pyKernel)},
		"numpy np.random.random()": {Expect: Documented, Why: whyInProcess, Mitigation: restartMitigation("python-service", pyKernel)},
		"ssl.RAND_bytes(16)": {Expect: Documented,
			Why: "OpenSSL's generator runs inside the process; the copy has the same state and the same pid, " +
				"so OpenSSL's fork detection (fork() or a new pid) does not fire; Zygo calls ssl.RAND_add only in its own interpreter",
			Mitigation: restartMitigation("python-service", pyKernel) + "; a process that watches the generation can call ssl.RAND_add(os.urandom(32))"},
		"uuid.uuid4()":          {Expect: Differs, Why: whyKernel},
		"os.urandom(16)":        {Expect: Differs, Why: whyKernel},
		"secrets.token_hex(16)": {Expect: Differs, Why: whyKernel},
		"pid":                   {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"node": {
		"Math.random()": {Expect: Documented, Why: whyInProcess, Mitigation: restartMitigation("node-service", nodeKernel)},
		"crypto.randomUUID()": {Expect: Documented,
			Why: "Node's crypto draws from OpenSSL's generator inside the process (and randomUUID from a cache of " +
				"pre-drawn bytes); the copy has the same state and the same pid, so OpenSSL's fork detection does not fire, " +
				"and nothing outside the process can reseed it",
			Mitigation: restartMitigation("node-service", nodeKernel)},
		"crypto.randomUUID({disableEntropyCache: true})": {Expect: Documented,
			Why: "without the UUID cache the bytes still come from OpenSSL's generator inside the process, " +
				"which is the same in every copy (the seed's finding)",
			Mitigation: restartMitigation("node-service", nodeKernel)},
		"crypto.randomBytes(16)": {Expect: Documented,
			Why:        "OpenSSL's generator inside the process, the same in every copy (the seed's finding)",
			Mitigation: restartMitigation("node-service", nodeKernel)},
		"pid": {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"go": {
		"math/rand rand.Int63()": {Expect: Documented,
			Why: "the Go runtime's generator state (one per thread) is memory in the copy; " +
				"which thread answers varies, so some copies repeat each other and some do not",
			Mitigation: restartMitigation("python-service and node-service", "crypto/rand")},
		"crypto/rand.Read(16 bytes)": {Expect: Differs, Why: "Go's crypto/rand " + whyKernel},
		"pid":                        {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"python-new": {
		"random.random()":          {Expect: Differs, Why: whyNew},
		"numpy np.random.random()": {Expect: Differs, Why: whyNew},
		"uuid.uuid4()":             {Expect: Differs, Why: whyKernel},
		"os.urandom(16)":           {Expect: Differs, Why: whyKernel},
		"secrets.token_hex(16)":    {Expect: Differs, Why: whyKernel},
		"ssl.RAND_bytes(16)":       {Expect: Differs, Why: whyNew},
		"pid":                      {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"node-new": {
		"Math.random()":       {Expect: Differs, Why: whyNew},
		"crypto.randomUUID()": {Expect: Differs, Why: whyNew},
		"crypto.randomUUID({disableEntropyCache: true})": {Expect: Differs, Why: whyNew},
		"crypto.randomBytes(16)":                         {Expect: Differs, Why: whyNew},
		"pid":                                            {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"go-new": {
		"math/rand rand.Int63()":     {Expect: Differs, Why: whyNew},
		"crypto/rand.Read(16 bytes)": {Expect: Differs, Why: "Go's crypto/rand " + whyKernel},
		"pid":                        {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"interpreter": {
		"random.random()": {Expect: Differs,
			Why: "reseal tells the interpreter to reseed before its next run-code (random, from host bytes and os.urandom)"},
		"numpy np.random.random()": {Expect: Differs, Why: "reseal reseeds NumPy's global state and its Generator/RandomState objects"},
		"random.Random() made before the checkpoint": {Expect: Differs,
			Why: "reseal reseeds every random.Random the interpreter's garbage collector can reach"},
		"ssl.RAND_bytes(16)": {Expect: Differs, Why: "reseal mixes fresh bytes into OpenSSL with ssl.RAND_add"},
		"x set before the checkpoint": {Expect: Same, Want: "41",
			Why: "the interpreter's variables are memory, carried into every copy"},
	},
	"python-service": {
		"random.random()":          {Expect: Differs, Why: whyRestart},
		"numpy np.random.random()": {Expect: Differs, Why: whyRestart},
		"ssl.RAND_bytes(16)":       {Expect: Differs, Why: whyRestart},
		"pid":                      {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"node-service": {
		"Math.random()":          {Expect: Differs, Why: whyRestart},
		"crypto.randomUUID()":    {Expect: Differs, Why: whyRestart},
		"crypto.randomBytes(16)": {Expect: Differs, Why: whyRestart},
		"pid":                    {Expect: Documented, Why: whyPID, Mitigation: mitigatePID},
	},
	"sandbox": {
		"hostname":             {Expect: Differs, Why: "each copy's engine instance has its own name, set by runsc and by reseal"},
		"/etc/machine-id":      {Expect: Differs, Why: "reseal writes a fresh machine id in every copy"},
		"/run/zygo/generation": {Expect: Differs, Why: "reseal publishes a new random 128-bit generation in every copy, rollbacks included"},
		"generation is the copy's own (the host's record)": {Expect: Same, Want: "true",
			Why: "what a process reads in /run/zygo/generation is what the host recorded for that copy"},
		"sandbox id (identity.json)": {Expect: Documented,
			Why: "each fork is a new sandbox with its own id; a rollback is the same sandbox moved back in time and keeps its id, " +
				"so the two rollbacks share the source's",
			Mitigation: "tell copies apart by /run/zygo/generation, which differs in every copy"},
		"sandbox id is the copy's own (the host's record)": {Expect: Same, Want: "true",
			Why: "identity.json names the sandbox the host recorded for that copy"},
		"boot_id": {Expect: Documented,
			Why: "gVisor makes /proc/sys/kernel/random/boot_id once per boot and saves it in the image, " +
				"so every copy of one checkpoint reports its source's; /proc cannot be written from inside or out",
			Mitigation: "use /etc/machine-id or /run/zygo/generation, which reseal renews in every copy"},
		"wall clock agrees with the host's (±1 s)": {Expect: Same, Want: "true",
			Why: "the guest's wall clock is gVisor's view of the host's, right after a restore; reseal reports any offset"},
		RowMonotonic: {Expect: Same, Want: "0",
			Why: "gVisor moves the monotonic clock forward on restore by the wall time the copy spent as an image " +
				"(pkg/sentry/kernel/timekeeper.go), so the two clocks agree; the seed's VM left it behind"},
		RowTimer: {Expect: Documented,
			Why: "the monotonic clock counts the time as an image, so a timer fires on time, or, if it came due while " +
				"the copy was an image, as soon as the copy resumes (as if the process had not been scheduled)",
			Mitigation: "code that must act before a deadline should not rely on being scheduled; watch /run/zygo/generation " +
				"to learn that a copy resumed"},
		"suspended_ns in identity.json (s)": {Expect: Documented,
			Why: "how long this copy spent as an image (wall time from the checkpoint to the restore); on gVisor the " +
				"monotonic clock already counted it (the monotonic clock row)",
			Mitigation: "do not add suspended_ns to monotonic deadlines on gVisor; use it to learn how stale the copy's view is"},
		"connection to a listener in the sandbox": {Expect: Same, Want: `"answered"`,
			Why: "both ends live inside the copied sandbox, so the connection is copied whole and each copy's own listener " +
				"answers; Zygo's own channel is dialled again by the agent"},
		RowHostConn: {Expect: Same, Want: `"fails fast"`,
			Why: "the copy's address is not the image's, so at the restore netstack finds no route for a connection " +
				"that was open at the checkpoint and closes it without a packet: a read gets EOF, a write EPIPE, at once " +
				"(never a hang); the host's end stays the source's, and a new connection works at once"},
		RowMAC: {Expect: Differs, Why: "each copy runs in a network namespace of its own whose veth has a random MAC; " +
			"runsc rebuilds the copy's interfaces from it at the restore, and reseal checks the copy sees it"},
		RowIPv4: {Expect: Differs, Why: "each copy gets a /30 of its own from the host's pool before it is restored, " +
			"never the image's (reseal fails a copy that still has it)"},
		RowHostAddr: {Expect: Differs, Why: "the host's record of each copy names its own address: " +
			"connections from the host (zygo sandbox port) reach that copy only"},
		RowOwnRecord: {Expect: Same, Want: "true", Why: "what the copy sees on its interface is what the host recorded for it"},
		"unflushed line survived": {Expect: Same, Want: "true",
			Why: "a line in a process's write buffer is memory, copied with it; each copy flushes its own"},
	},
}

// SandboxControlRow is a row the Python probe always reports and no default spec reads: a
// generator with a fixed seed, built to repeat in every copy.
const SandboxControlRow = "control: random.Random(42), a fixed seed"

// WithSandboxControl returns a copy of specs that also expects the control row to differ, so
// that it fails: the proof that the check can fail (tests, and the hidden --control flag).
func WithSandboxControl(specs map[string]map[string]Spec) map[string]map[string]Spec {
	out := make(map[string]map[string]Spec, len(specs))
	for probe, rows := range specs {
		out[probe] = make(map[string]Spec, len(rows)+1)
		for k, v := range rows {
			out[probe][k] = v
		}
	}
	out["python"][SandboxControlRow] = Spec{Expect: Differs,
		Why: "a control built to fail: a generator seeded with a constant repeats in every copy"}
	return out
}
