package sandbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// AccessTokenPrefix starts every sandbox access token the API hands out: "zygo_sbx_" + the
// sandbox's id + "_" + AccessMAC. It is wire.SandboxAccessTokenPrefix, for the packages that
// do not speak the wire types (internal/e2b refuses such a token on its control API).
const AccessTokenPrefix = "zygo_sbx_"

// AccessKeyBytes is the least size of the key AccessMAC takes.
const AccessKeyBytes = 32

// AccessMAC returns the access MAC of a sandbox: HMAC-SHA256 under key (at least
// AccessKeyBytes of secret the daemon keeps, STATE/sandbox-access.key) of the sandbox's id and
// creation time (Unix nanoseconds, as the registry stores it), 64 hex digits. It is the secret
// part of the sandbox's access token (the API's "zygo_sbx_ID_MAC", internal/api/access.go) and
// the E2B envd access token of the sandbox (internal/e2b): both reach that one sandbox and
// nothing else.
//
// It needs no stored row: whoever checks one recomputes it from the record. It dies with the
// sandbox (no record, nothing to recompute it from) and never comes back: a later sandbox of
// the same name has another id and another creation time, and a copy (fork, restore) is a new
// record with both new, so its parent's token does not reach it. It survives what keeps the
// record (pause, resume, rollback, a daemon restart). Revoking one means removing its sandbox;
// replacing the key file (and restarting the daemon) revokes every sandbox's at once.
func AccessMAC(key []byte, rec SandboxRecord) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("zygo sandbox access v1\x00"))
	mac.Write([]byte(rec.ID))
	var ns [9]byte
	binary.BigEndian.PutUint64(ns[1:], uint64(rec.CreatedAt.UnixNano()))
	mac.Write(ns[:])
	return hex.EncodeToString(mac.Sum(nil))
}
