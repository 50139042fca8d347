package redact

import (
	"bytes"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	r := New(map[string][]byte{
		"API_KEY": []byte("s3cr3t-value"),
		"PADDED":  []byte("  tok-123\n"), // as `zygo secret set` from a file with a newline
		"THREE":   []byte("xyz"),
		"SHORT":   []byte("ab"), // too short to redact without destroying the text
		"PEM":     []byte("-----BEGIN-----\nline-two\n-----END-----"),
		"EMPTY":   nil,
	})
	for _, c := range []struct{ in, want string }{
		{"nothing to hide", "nothing to hide"},
		{"key=s3cr3t-value", "key=[redacted:API_KEY]"},
		{"s3cr3t-value and s3cr3t-value again", "[redacted:API_KEY] and [redacted:API_KEY] again"},
		{"token tok-123 printed trimmed", "token [redacted:PADDED] printed trimmed"},
		{"raw '  tok-123\n' printed whole", "raw '[redacted:PADDED]' printed whole"},
		{"xyz", "[redacted:THREE]"},
		{"about abc", "about abc"},
		{"s3cr3t-valuexyz", "[redacted:API_KEY][redacted:THREE]"},
		{"key:\n-----BEGIN-----\nline-two\n-----END-----\nok", "key:\n[redacted:PEM]\nok"},
		{"", ""},
	} {
		if got := r.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if New(map[string][]byte{"SHORT": []byte("ab")}) != nil {
		t.Error("a Redactor with nothing to match is not nil")
	}
	var none *Redactor
	if none.String("s3cr3t-value") != "s3cr3t-value" || none.Span() != 0 || string(none.Prefix([]byte("abcdef"), 3)) != "abc" {
		t.Error("a nil Redactor changed its input")
	}
}

// TestPrefixKeepsAValueWholeAcrossTheCut: a value that starts before the cut
// is replaced whole, one that starts after it is not kept at all, and no
// part of either survives.
func TestPrefixKeepsAValueWholeAcrossTheCut(t *testing.T) {
	secret := []byte("S3CR3T-VALUE-abc123xyz")
	r := New(map[string][]byte{"APIKEY": secret})
	if r.Span() != len(secret) {
		t.Fatalf("Span = %d", r.Span())
	}
	const cut = 64 << 10
	for _, start := range []int{cut - 10, cut - 1, cut - len(secret), cut, cut + 1} {
		b := append(bytes.Repeat([]byte("A"), start), secret...)
		b = append(b, "\ntail"...)
		got := r.Prefix(b, cut)
		if bytes.Contains(got, []byte("S3CR")) || bytes.Contains(got, []byte("xyz")) {
			t.Errorf("start %d: part of the value kept: ...%q", start, got[max(len(got)-40, 0):])
		}
		if start < cut && !bytes.HasSuffix(got, []byte("[redacted:APIKEY]")) {
			t.Errorf("start %d: value before the cut not replaced: ...%q", start, got[max(len(got)-40, 0):])
		}
		if start >= cut && len(got) != cut {
			t.Errorf("start %d: kept %d bytes, want the %d before the cut", start, len(got), cut)
		}
	}
	// b is not modified.
	b := []byte("xx S3CR3T-VALUE-abc123xyz xx")
	r.Bytes(b)
	if !strings.Contains(string(b), "S3CR3T") {
		t.Error("Bytes modified its input")
	}
}
