package agentproc

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/zygo-run/zygo/internal/redact"
)

// What the daemon keeps of a sandbox's output is bounded at the source, per
// request and stream and per zygote, in bytes and in lines: every line
// becomes a string, a log row and a database insert, so a flood of empty
// lines costs as much as a flood of bytes. A request keeps the head of each
// stream (maxLogBytes, at most maxLogLines lines, a line longer than
// maxLogPiece in pieces) and one final line saying what was dropped. The
// zygote's own output outside requests (import-time prints, agent
// diagnostics) has the same budget per stream over the zygote's life.
const (
	maxLogBytes = 1 << 20  // bytes kept of one stream of one request
	maxLogLines = 2000     // lines (pieces included) kept of one stream of one request
	maxLogPiece = 16 << 10 // bytes of one stored line; a longer line is cut into pieces
	maxTailLine = 1 << 10  // bytes of one line kept in stderrTail
)

// streamLog collects one stream of one request's output: it keeps the first
// maxLogBytes, plus span-1 bytes more so that a secret value that starts
// before the cut is seen whole by the redactor, and counts the rest.
type streamLog struct {
	keep    int
	kept    []byte
	written int64 // bytes the request wrote to the stream
}

func newStreamLog(r *redact.Redactor) *streamLog {
	return &streamLog{keep: maxLogBytes + max(r.Span()-1, 0)}
}

// Write keeps what fits and counts all of p; it never fails.
func (s *streamLog) Write(p []byte) (int, error) {
	s.written += int64(len(p))
	if room := s.keep - len(s.kept); room > 0 {
		s.kept = append(s.kept, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// lines redacts the kept bytes as one text (so no cut splits a value) and
// returns them as lines: at most maxLogLines, each at most maxLogPiece
// bytes of valid UTF-8, then one "[zygo: ... dropped]" line when anything
// was dropped. The stream's name goes into that note.
func (s *streamLog) lines(stream string, r *redact.Redactor) []string {
	b := r.Prefix(s.kept, maxLogBytes)
	out, rest := splitLines(b, maxLogLines)
	var keptBytes int
	for _, l := range out {
		keptBytes += len(l)
	}
	unread := s.written - int64(len(s.kept))
	if len(rest) == 0 && unread <= 0 && len(s.kept) <= maxLogBytes {
		return out
	}
	lines := bytes.Count(rest, []byte("\n"))
	if len(rest) > 0 && rest[len(rest)-1] != '\n' {
		lines++
	}
	more := ""
	if unread > 0 || len(s.kept) > maxLogBytes {
		more = " and everything past the first " + fmt.Sprint(maxLogBytes) + " bytes"
	}
	return append(out, fmt.Sprintf("[zygo: %s truncated: %d bytes written, %d lines (%d bytes) kept; %d more lines%s dropped (a request keeps at most %d lines and %d bytes of each stream)]",
		stream, s.written, len(out), keptBytes, lines, more, maxLogLines, maxLogBytes))
}

// splitLines cuts b at newlines (a trailing line without one counts too)
// and each line into pieces of at most maxLogPiece bytes, at a rune
// boundary where one is near, into at most limit strings of valid UTF-8.
// rest is what did not fit.
func splitLines(b []byte, limit int) (out []string, rest []byte) {
	for len(b) > 0 {
		if len(out) == limit {
			return out, b
		}
		line := b
		next := len(b)
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, next = b[:i], i+1
		}
		if len(line) > maxLogPiece {
			cut := pieceCut(line)
			line, next = line[:cut], cut
		}
		out = append(out, string(bytes.ToValidUTF8(line, []byte("\uFFFD"))))
		b = b[next:]
	}
	return out, nil
}

// pieceCut returns where to cut a line longer than maxLogPiece: before a
// redaction marker the cut would split, else at a rune boundary near
// maxLogPiece, else at maxLogPiece.
func pieceCut(line []byte) int {
	cut := maxLogPiece
	if i := bytes.LastIndex(line[max(cut-maxMarker, 0):cut], []byte("[redacted:")); i >= 0 {
		start := max(cut-maxMarker, 0) + i
		if end := bytes.IndexByte(line[start:], ']'); start > 0 && (end < 0 || start+end >= cut) {
			return start
		}
	}
	for k := 0; k < utf8.UTFMax && cut > 0 && !utf8.RuneStart(line[cut]); k++ {
		cut--
	}
	if cut == 0 {
		return maxLogPiece
	}
	return cut
}

// maxMarker is how far back pieceCut looks for a marker, bytes.
const maxMarker = 256

// agentLog splits the zygote's own output on one stream (what it prints
// outside requests) into lines as they arrive, keeping at most maxLogLines
// lines and maxLogBytes bytes over the zygote's life, and counts the rest.
type agentLog struct {
	stream  string
	partial []byte // an unterminated line, shorter than maxLogPiece
	lines   int    // kept so far
	bytes   int
	dropped struct{ lines, bytes int64 }
}

// write returns the lines p completes, within the budget (the first one
// over it is followed by a note that the rest is dropped).
func (a *agentLog) write(p []byte) []string {
	var out []string
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if room := maxLogPiece - len(a.partial); len(seg) > room || (i < 0 && len(seg) == room) {
			seg = seg[:room]
			i = -2 // a full piece: emit it, go on with the same line
		}
		a.partial = append(a.partial, seg...)
		switch {
		case i == -1:
			return out
		case i == -2:
			p = p[len(seg):]
		default:
			p = p[i+1:]
		}
		out = a.keep(out)
	}
	return out
}

// flush returns the unterminated line and, when anything was dropped, a
// note counting it: at end of file.
func (a *agentLog) flush() []string {
	var out []string
	if len(a.partial) > 0 {
		out = a.keep(out)
	}
	if a.dropped.lines > 0 {
		out = append(out, fmt.Sprintf("[zygo: %d lines (%d bytes) of the zygote's own %s dropped (it keeps at most %d lines and %d bytes outside requests)]",
			a.dropped.lines, a.dropped.bytes, a.stream, maxLogLines, maxLogBytes))
	}
	return out
}

// flushPartial returns the unterminated line, if any (a request is taking
// over the process's output).
func (a *agentLog) flushPartial() []string {
	if len(a.partial) == 0 {
		return nil
	}
	return a.keep(nil)
}

// keep moves the partial line to out, or counts it as dropped.
func (a *agentLog) keep(out []string) []string {
	line := a.partial
	a.partial = a.partial[:0]
	if a.lines >= maxLogLines || a.bytes+len(line) > maxLogBytes {
		if a.dropped.lines == 0 {
			out = append(out, fmt.Sprintf("[zygo: the zygote's own %s is over %d lines or %d bytes; the rest is dropped and counted]",
				a.stream, maxLogLines, maxLogBytes))
		}
		a.dropped.lines++
		a.dropped.bytes += int64(len(line)) + 1
		return out
	}
	a.lines++
	a.bytes += len(line)
	return append(out, string(bytes.ToValidUTF8(line, []byte("\uFFFD"))))
}

// outputOwner is the request that the output on a spawned agent's or a
// worker's own fds 1 and 2 belongs to, after GO, and how to redact it.
type outputOwner struct {
	id     string
	redact *redact.Redactor
}
