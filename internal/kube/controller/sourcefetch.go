package controller

// What a Function source's fetch may bring into the controller, and what of it reaches the
// Function's status: bodies are bounded before they are read (a manifest by maxManifestBytes,
// anything else by maxSourceBodyBytes), and an error's text in a condition is the status line
// and the controller's own words, never a response body (sourceErrText), since the source
// may be a service the tenant cannot reach itself.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Bounds of a source response's body, bytes. A one-layer manifest is about 1 KiB; a blob (the
// layer, the config, a redirect's target) is at most the bundle's bound plus room for an
// uncompressed-tar layer's slack checked later against its declared size.
const (
	maxManifestBytes   = 4 << 20
	maxSourceBodyBytes = wire.MaxBundleBytes + 1<<20
	maxConfigBytes     = 1 << 20 // an artifact's config blob, by the manifest's size
	maxErrTextBytes    = 300     // of a library's error text in a condition
)

// errBodyTooLarge is a response body past its bound.
type errBodyTooLarge struct {
	what string
	max  int64
}

func (e *errBodyTooLarge) Error() string {
	return fmt.Sprintf("the %s is larger than %d bytes", e.what, e.max)
}

// boundedTransport refuses a response whose Content-Length is past its bound and ends the
// reading of any other at the bound with an *errBodyTooLarge; a manifest request (a path
// with /manifests/) is bounded by maxManifestBytes, anything else by maxSourceBodyBytes.
type boundedTransport struct{ base http.RoundTripper }

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	e := &errBodyTooLarge{what: "response", max: maxSourceBodyBytes}
	if strings.Contains(req.URL.Path, "/manifests/") {
		e = &errBodyTooLarge{what: "manifest", max: maxManifestBytes}
	}
	if resp.ContentLength > e.max {
		resp.Body.Close()
		return nil, e
	}
	resp.Body = &boundedBody{rc: resp.Body, left: e.max, err: e}
	return resp, nil
}

// boundedBody reads at most left bytes of rc, then fails with err.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly the bound from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, b.err
		}
		return b.rc.Read(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// sourceErrText is what a condition says of a source fetch's error: the address policy's
// refusal, a bound, the registry's status line (and its error codes when they are the
// distribution spec's), a timeout, or else the error's first line cut to maxErrTextBytes. It
// never carries a response body.
func sourceErrText(err error) string {
	if r, ok := refusedAddress(err); ok {
		return r.Error()
	}
	var big *errBodyTooLarge
	if errors.As(err, &big) {
		return big.Error()
	}
	var te *transport.Error
	if errors.As(err, &te) {
		s := fmt.Sprintf("the registry answered %d %s", te.StatusCode, http.StatusText(te.StatusCode))
		var codes []string
		for _, d := range te.Errors {
			if knownRegistryCodes[d.Code] {
				codes = append(codes, string(d.Code))
			}
		}
		if len(codes) > 0 {
			s += " (" + strings.Join(codes, ", ") + ")"
		}
		return s
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > maxErrTextBytes {
		s = s[:maxErrTextBytes] + "…"
	}
	return s
}

// knownRegistryCodes are the distribution spec's error codes, which a condition may name.
var knownRegistryCodes = map[transport.ErrorCode]bool{
	transport.BlobUnknownErrorCode: true, transport.DigestInvalidErrorCode: true, transport.ManifestBlobUnknownErrorCode: true,
	transport.ManifestInvalidErrorCode: true, transport.ManifestUnknownErrorCode: true, transport.NameInvalidErrorCode: true,
	transport.NameUnknownErrorCode: true, transport.SizeInvalidErrorCode: true, transport.TagInvalidErrorCode: true,
	transport.UnauthorizedErrorCode: true, transport.DeniedErrorCode: true, transport.UnsupportedErrorCode: true,
	transport.TooManyRequestsErrorCode: true, transport.UnknownErrorCode: true, transport.UnavailableErrorCode: true,
}
