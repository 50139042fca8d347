// Package redact replaces secret values in what a request printed, and in
// its errors, with [redacted:NAME] markers.
//
// Redaction runs over a whole stream before it is cut into lines, pieces or
// a byte budget: Prefix replaces every value that starts before a cut whole,
// even where it extends past the cut, so no cut can split a value and no
// value is stored in two halves (a value may itself hold newlines, such as a
// PEM key).
package redact

import (
	"bytes"
	"sort"
)

// MinLen is the shortest form that is matched: shorter ones would redact
// ordinary text.
const MinLen = 3

type form struct {
	marker []byte
	value  []byte
}

// Redactor matches a fixed set of values. A nil *Redactor matches nothing.
// It is immutable and safe for concurrent use.
type Redactor struct {
	forms []form // longest first, so that a value wins over its trimmed form
	span  int
}

// New returns a Redactor for values (name → value). Each value is matched
// as given and with surrounding white space trimmed (`zygo secret set` from
// a file keeps its newline); forms shorter than MinLen bytes are not
// matched. It returns nil when there is nothing to match.
func New(values map[string][]byte) *Redactor {
	if len(values) == 0 {
		return nil // most requests: no secrets, and nothing allocated for them
	}
	r := &Redactor{}
	seen := map[string]bool{}
	for name, v := range values {
		for _, f := range [][]byte{v, bytes.TrimSpace(v)} {
			if len(f) < MinLen || seen[string(f)] {
				continue
			}
			seen[string(f)] = true
			r.forms = append(r.forms, form{marker: []byte("[redacted:" + name + "]"), value: bytes.Clone(f)})
			r.span = max(r.span, len(f))
		}
	}
	if len(r.forms) == 0 {
		return nil
	}
	sort.SliceStable(r.forms, func(i, j int) bool { return len(r.forms[i].value) > len(r.forms[j].value) })
	return r
}

// Span returns the length of the longest value matched, bytes (0 for nil).
// A reader that cuts a stream at n bytes reads n+Span()-1 of it, so that
// Prefix sees whole every value that starts before n.
func (r *Redactor) Span() int {
	if r == nil {
		return 0
	}
	return r.span
}

// Prefix returns b[:cut] with every value that starts before cut replaced by
// its marker, whole: a value that starts before cut and ends past it is
// replaced, and nothing of b past it is kept. b is not modified; the result
// may share its memory when nothing matched. cut is clamped to len(b).
func (r *Redactor) Prefix(b []byte, cut int) []byte {
	cut = min(max(cut, 0), len(b))
	if r == nil {
		return b[:cut]
	}
	next := make([]int, len(r.forms)) // next occurrence of each form at or after pos, -1 none
	for i, f := range r.forms {
		next[i] = indexFrom(b, 0, f.value)
	}
	var out []byte
	matched := false
	pos := 0
	for pos < cut {
		best := -1
		for i, f := range r.forms {
			if next[i] >= 0 && next[i] < pos {
				next[i] = indexFrom(b, pos, f.value)
			}
			if next[i] >= 0 && next[i] < cut && (best < 0 || next[i] < next[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		matched = true
		at := next[best]
		out = append(out, b[pos:at]...)
		out = append(out, r.forms[best].marker...)
		pos = at + len(r.forms[best].value)
	}
	if !matched {
		return b[:cut]
	}
	if pos < cut {
		out = append(out, b[pos:cut]...)
	}
	return out
}

// Bytes returns b with every value replaced (Prefix of all of b).
func (r *Redactor) Bytes(b []byte) []byte { return r.Prefix(b, len(b)) }

// String returns s with every value replaced.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	return string(r.Bytes([]byte(s)))
}

func indexFrom(b []byte, from int, v []byte) int {
	if from > len(b) {
		return -1
	}
	i := bytes.Index(b[from:], v)
	if i < 0 {
		return -1
	}
	return from + i
}
