package forkcheck

// PythonSpecs are the expectations for the Python probe's rows
// (probes/python/main.py). docs/fork-safety.md explains each.
var PythonSpecs = map[string]Spec{
	"random.random()":          {Expect: Differs, Why: "the stdlib generator is reseeded in every child (CPython's at-fork hook and Zygo's)"},
	"numpy np.random.random()": {Expect: Differs, Why: "Zygo reseeds NumPy's global generator in every child (BH-01)"},
	"uuid.uuid4()":             {Expect: Differs, Why: "asks the kernel every call"},
	"os.urandom(16)":           {Expect: Differs, Why: "asks the kernel every call"},
	"secrets.token_hex(16)":    {Expect: Differs, Why: "asks the kernel every call"},
	"uuid.uuid1()":             {Expect: Differs, Why: "Zygo resets uuid1's state and uses a reseeded clock sequence (BH-09)"},
	"ssl.RAND_bytes(16)":       {Expect: Differs, Why: "OpenSSL >= 1.1.1d reseeds from the OS after a fork (a child's pid differs from the zygote's); for an older one (or LibreSSL) Zygo mixes fresh OS entropy in with ssl.RAND_add in every child (BH-04)"},
	"random.Random() made at import": {Expect: Differs,
		Why: "generator objects made at import without a seed are found at warm-up and reseeded in every child"},
	"tempfile name": {Expect: Differs, Why: "tempfile's name sequence is reset in every child (BH-19)"},
	"TMPDIR":        {Expect: Differs, Why: "every request gets a private temp folder"},
	"pid":           {Expect: Differs, Why: "every request is a new process"},
	"global set by an earlier request": {Expect: Same, Want: "null",
		Why: "a child is a copy of the zygote, never of an earlier child (protocol rule 1)"},
	"sockets in the fd table": {Expect: Same, Want: "0",
		Why: "the child closes the supervisor's sockets before user code (protocol rule 3)"},
	"another function's secret": {Expect: Same, Want: "[]",
		Why: "secrets are files in the holding function's own sandbox only"},
	"zygote atexit ran in a child": {Expect: Same, Want: "false",
		Why: "children leave with os._exit; the zygote's atexit handlers never run in them (BH-18)"},
	"hostname": {Expect: Same, Want: `"zygo"`, Why: "every sandbox is called zygo; a request id names a request"},
	"heap address of an import-time object": {Expect: Documented,
		Why:        "fork copies the zygote's address layout (ASLR), so every child of one zygote has the same addresses",
		Mitigation: "the layout changes when the zygote restarts (zygo up of a new version, a daemon restart); use mode = \"spawn\" where one layout per request matters"},
	"native buffer drawn at import": {Expect: Documented,
		Why: "a native library (libtoken.so) filled a buffer of its own from getrandom() when the import loaded it: memory the agent cannot reseed, so every child of one zygote has the same bytes; " +
			"the zygote's guard (zygo_rand.so) saw the draw and the warm-up check native_random names the library in zygo logs",
		Mitigation: "mode = \"spawn\", or on_native_random = \"spawn\" (fork until such a draw is seen), gives each request its own: see the zygo-check-native row"},
}

// NativeSpecs are the expectations for the native-randomness probe's rows
// (probes/native/main.py, on_native_random = "spawn").
var NativeSpecs = map[string]Spec{
	"native buffer drawn at import (on_native_random = spawn)": {Expect: Differs,
		Why: "native buffer drawn at import: reported at warm-up (native_random), and on_native_random = \"spawn\" serves each request from a fresh interpreter, which loads the library and draws its own"},
}

// NodeSpecs are the expectations for the Node probe's rows
// (probes/node/index.js). Node workers are fresh processes.
var NodeSpecs = map[string]Spec{
	"Math.random()":       {Expect: Differs, Why: "each worker is a fresh process with its own V8 state (BH-07)"},
	"crypto.randomUUID()": {Expect: Differs, Why: "each worker's OpenSSL is seeded at start"},
	"crypto.randomUUID({disableEntropyCache: true})": {Expect: Differs,
		Why: "each worker's OpenSSL is seeded at start"},
	"crypto.randomBytes(16)":       {Expect: Differs, Why: "each worker's OpenSSL is seeded at start"},
	"vm new context Math.random()": {Expect: Differs, Why: "a new context draws its seed from the worker's fresh isolate"},
	"TMPDIR":                       {Expect: Differs, Why: "every request gets a private temp folder"},
	"pid": {Expect: Same, Why: "each worker runs in a pid namespace of its own, so it has the same small pid every time; " +
		"that it is a new process shows in the next row"},
	"import time (monotonic ns)":       {Expect: Differs, Why: "every request is served by a worker that imported the handler itself"},
	"global set by an earlier request": {Expect: Same, Want: "null", Why: "a worker serves one request and exits"},
	"sockets in the fd table":          {Expect: Same, Want: "0", Why: "the worker closes its channel to the supervisor before user code"},
	"another function's secret":        {Expect: Same, Want: "[]", Why: "secrets are files in the holding function's own sandbox only"},
	"hostname":                         {Expect: Same, Want: `"zygo"`, Why: "every sandbox is called zygo"},
}
