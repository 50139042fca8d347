package envd

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path"
	"strings"
)

const (
	// maxPathBytes is the longest path inside a sandbox: PATH_MAX less its NUL.
	maxPathBytes = 4095
	// maxUserBytes is the longest user name accepted (Linux's useradd allows 32).
	maxUserBytes = 32
)

// userFromHeader returns the user an RPC runs as: the SDK sends it as HTTP Basic
// authentication with an empty password ("Authorization: Basic base64(user:)"), and none
// means DefaultUser.
func userFromHeader(h http.Header) (string, error) {
	auth := h.Get("Authorization")
	if auth == "" {
		return DefaultUser, nil
	}
	scheme, enc, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", invalidf("header Authorization: want \"Basic base64(user:)\" naming the user to run as")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", invalidf("header Authorization: the Basic credentials are not base64: %v", err)
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return checkUser("header Authorization", user)
}

// checkUser validates a user name from field; "" means DefaultUser.
func checkUser(field, user string) (string, error) {
	if user == "" {
		return DefaultUser, nil
	}
	if len(user) > maxUserBytes {
		return "", invalidf("%s: user name is %d bytes long: at most %d", field, len(user), maxUserBytes)
	}
	for i, c := range user {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' ||
			i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.')
		if !ok {
			return "", invalidf("%s: user %q: want a user name of the sandbox (letters, digits, '_', '-', '.')", field, user)
		}
	}
	return user, nil
}

// resolvePath returns the absolute, clean path p names inside sandbox id: a relative p
// (or "~/...") is relative to user's home, which the backend reads from the sandbox's
// /etc/passwd; ".." never leaves the root (every path is inside the sandbox). field names
// p in errors.
func (s *Server) resolvePath(ctx context.Context, id, field, p, user string) (string, error) {
	if err := checkPath(field, p); err != nil {
		return "", err
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = strings.TrimLeft(p[1:], "/")
		if p == "" {
			p = "."
		}
	}
	if !path.IsAbs(p) {
		h, err := s.sb.UserHome(ctx, id, user)
		if err != nil {
			return "", fmt.Errorf("%s %q is relative to the home of user %q: %w", field, p, user, err)
		}
		p = path.Join(h, p)
	}
	return path.Clean(p), nil
}

// checkPath validates a path from field, before any resolution.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return invalidf("%s is empty: want a path inside the sandbox", field)
	case strings.IndexByte(p, 0) >= 0:
		return invalidf("%s contains a NUL byte", field)
	case len(p) > maxPathBytes:
		return invalidf("%s is %d bytes long: at most %d", field, len(p), maxPathBytes)
	}
	return nil
}
