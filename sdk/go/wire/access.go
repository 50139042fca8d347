package wire

import "strings"

// Sandbox access tokens (POST /v1/sandboxes/{id}/access-token): a bearer token that reaches one
// sandbox and only what a user of that sandbox needs — its record, exec (and its streams),
// run-code, files, generation, services and ports — and is refused (403,
// CodePermissionDenied) on everything else: other sandboxes, create, remove, fork, checkpoint,
// rollback, pause, resume, timeout, functions, secrets, pools, tokens, the E2B control API. It
// is "zygo_sbx_" + the sandbox's id + "_" + 64 hex digits, derived by the daemon from the
// sandbox's id and creation time under a key of its own: it needs no stored row, dies with
// the sandbox (a removed sandbox's token is refused, 401), and a fork or restore of the
// sandbox is another sandbox that its token does not reach.

// SandboxAccessTokenPrefix starts every sandbox access token.
const SandboxAccessTokenPrefix = "zygo_sbx_"

// SandboxAccessToken is the answer of POST /v1/sandboxes/{id}/access-token (200).
type SandboxAccessToken struct {
	SandboxID string `json:"sandbox_id"` // the sandbox's id (the route takes an id or a name)
	Token     string `json:"token"`      // send it as Authorization: Bearer TOKEN (ZYGO_TOKEN for the CLI)
}

// SandboxOfAccessToken returns the sandbox id a sandbox access token names, ok false when tok
// is not one in shape (the prefix, an id starting "sb-", "_" and 64 lower-case hex digits). It
// checks nothing else: only the daemon can tell a valid one.
func SandboxOfAccessToken(tok string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(tok, SandboxAccessTokenPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 || len(rest)-i-1 != 64 || !strings.HasPrefix(rest[:i], "sb-") {
		return "", false
	}
	for _, c := range rest[i+1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return rest[:i], true
}
