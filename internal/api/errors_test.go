package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// TestCategoryCodes: every errdefs category has exactly one code in the table, the code's
// status is the one the wire contract gives it, and a category's phrase in the wire contract
// is the category's own text (what the daemon strips, the client puts back).
func TestCategoryCodes(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, cat := range errdefs.All() {
		n := 0
		for _, c := range categoryCodes {
			if errors.Is(c.category, cat) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("category %q has %d entries in categoryCodes, want 1", cat, n)
		}
		code, status := s.errorCode(fmt.Errorf("doing it: %w", cat))
		if code == wire.CodeInternal || status != wire.StatusOf(code) {
			t.Errorf("category %q: code %q status %d", cat, code, status)
		}
		if code.Text() != cat.Error() {
			t.Errorf("category %q: wire phrase %q", cat, code.Text())
		}
	}
	if code, _ := s.errorCode(errors.New("plain")); code != wire.CodeInternal {
		t.Errorf("an error of no category: %q, want internal", code)
	}
	// Two categories: the first in errdefs.All's order wins.
	if code, _ := s.errorCode(fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrNotFound)); code != wire.CodeNotFound {
		t.Errorf("unavailable+not found: %q, want not_found", code)
	}
}

// TestErrorAnswerHasNoCategorySuffix: a failed call's body carries the code, its status, and
// a message without the category's text tagged on (errdefs.Message), through the server's
// real handler.
func TestErrorAnswerHasNoCategorySuffix(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, cat := range errdefs.All() {
		rec := httptest.NewRecorder()
		s.fail(rec, fmt.Errorf("reading manifest: %w: %w", errors.New(`field "limits": must be a table`), cat))
		code, _ := s.errorCode(cat)
		var ans wire.ErrorAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
			t.Fatalf("%q: %v: %s", cat, err, rec.Body)
		}
		want := wire.ErrorBody{Code: code, Message: `reading manifest: field "limits": must be a table`}
		if rec.Code != wire.StatusOf(code) || ans.Error != want {
			t.Errorf("%q: %d %+v, want %d %+v", cat, rec.Code, ans.Error, wire.StatusOf(code), want)
		}
	}
	rec := httptest.NewRecorder()
	s.fail(rec, fmt.Errorf("waiting: %w", context.Canceled))
	if rec.Code != 499 {
		t.Errorf("cancelled: %d, want 499", rec.Code)
	}
}

// retryIn is an error that says when to retry.
type retryIn time.Duration

func (r retryIn) Error() string             { return "the queue is full" }
func (r retryIn) RetryAfter() time.Duration { return time.Duration(r) }

// TestTooManyRequestsRetryAfter: every 429 carries Retry-After, in whole seconds rounded up:
// the error's own RetryAfter, else 1 (a refusal that does not say when, such as a wrapped
// errdefs.ErrTooManyRequests); other answers only when their error says when.
func TestTooManyRequestsRetryAfter(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("tenant %q: %w", "acme", errdefs.ErrTooManyRequests), "1"},
		{fmt.Errorf("%w: %w", retryIn(1500*time.Millisecond), errdefs.ErrTooManyRequests), "2"},
		{fmt.Errorf("function %q: %w", "x", errdefs.ErrNotFound), ""},
		{fmt.Errorf("%w: %w", retryIn(3*time.Second), errdefs.ErrUnavailable), "3"},
	} {
		rec := httptest.NewRecorder()
		s.fail(rec, c.err)
		if got := rec.Header().Get("Retry-After"); got != c.want {
			t.Errorf("%v: %d Retry-After %q, want %q", c.err, rec.Code, got, c.want)
		}
	}
}
