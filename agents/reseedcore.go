package agents

import _ "embed"

// The Python reseed module has one source, python/zygo_agent/reseedcore.py. The function agent
// imports it from its package; the guest's code interpreter gets it from ReseedCorePy; the
// in-sandbox SDK, which must stay a self-contained directory, carries a byte-for-byte copy
// that this directive writes (TestSDKReseedCoreIsTheAgents fails when the two differ).
//go:generate cp python/zygo_agent/reseedcore.py ../sdk/python/zygo_sandbox/reseedcore.py

// ReseedCorePy is the source of reseedcore.py, Zygo's one implementation of "reseed this
// process's in-memory random generators" (random, NumPy, torch, OpenSSL, uuid1, tempfile
// names, generator objects). Standard-library Python 3.6+, no relative imports: it can be run
// as a module of any name.
//
//go:embed python/zygo_agent/reseedcore.py
var ReseedCorePy string
