package errdefs

import (
	"errors"
	"strings"
)

// predicates are the categories that read as the predicate of the subject they were wrapped
// onto ("function %q: %w" with ErrNotFound reads `function "x" not found`). The others
// ("invalid argument", "failed precondition", "unavailable", …) are tags: the text they are
// wrapped onto says what is wrong ("must be between 1 and 16", "remove them first"), and the
// category only classifies it.
var predicates = map[error]string{
	ErrNotFound: " not found",
	ErrExists:   " already exists",
}

// Message returns err's text as a person reads it: one sentence in which a category err
// wraps appears at most once, and only where it is the predicate. A category wrapped alone
// at the end of a subject (`fmt.Errorf("function %q: %w", name, ErrNotFound)`) is kept as
// that subject's predicate (`function "x" not found`, predicates); every other category, and
// one tagged onto a cause that says what went wrong itself (`"%w: %w", err, ErrNotFound`, or in front:
// `"%w: n %d: must be …", ErrInvalidArgument`) is taken out, since the cause already reads
// as a sentence and the category travels as a code (the API's) or not at all (the CLI's).
// An error that is nothing but its category keeps that text. The API sends this as an
// error's message and the CLI prints it, so the two always agree (docs/errors.md).
func Message(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	cats := All() // context.DeadlineExceeded's text is a cause's, left as it is
	done := map[string]bool{}
	walk(err, func(e error) {
		kids := wrapped(e)
		if len(kids) != 1 || !isCategory(kids[0], cats) {
			return
		}
		text, cat := e.Error(), kids[0].Error()
		subject, ok := strings.CutSuffix(text, ": "+cat)
		if !ok || subject == "" || done[text] {
			return
		}
		done[text] = true
		pred, ok := predicates[kids[0]]
		if !ok || strings.HasSuffix(subject, pred) {
			return
		}
		msg = strings.ReplaceAll(msg, text, subject+pred)
	})
	for _, c := range cats {
		if errors.Is(err, c) {
			msg = stripCategory(msg, c.Error())
		}
	}
	return msg
}

// walk calls fn on err and on every error it wraps, depth first.
func walk(err error, fn func(error)) {
	fn(err)
	for _, k := range wrapped(err) {
		if k != nil {
			walk(k, fn)
		}
	}
}

// wrapped returns the errors err wraps directly (Unwrap() error or Unwrap() []error).
func wrapped(err error) []error {
	switch u := err.(type) { //nolint:errorlint // the tree's own shape, not a category test
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		if k := u.Unwrap(); k != nil {
			return []error{k}
		}
	}
	return nil
}

func isCategory(err error, cats []error) bool {
	for _, c := range cats {
		if err == c { //nolint:errorlint // identity with the sentinel itself, not errors.Is
			return true
		}
	}
	return false
}

// stripCategory removes each occurrence of cat that stands as an element of a wrapped
// message ("cat: …", "…: cat", "…: cat: …" or "… (cat)"); text that merely contains the
// words is left alone, and so is a message that is nothing but cat.
func stripCategory(msg, cat string) string {
	for {
		prev := msg
		msg = strings.ReplaceAll(msg, ": "+cat+": ", ": ")
		msg = strings.ReplaceAll(msg, " ("+cat+")", "")
		if rest, ok := strings.CutPrefix(msg, cat+": "); ok && rest != "" {
			msg = rest
		}
		if rest, ok := strings.CutSuffix(msg, ": "+cat); ok && rest != "" {
			msg = rest
		}
		if msg == prev {
			return msg
		}
	}
}
