package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// pageOf decodes a list answer, failing the test on anything but a 200 page.
func pageOf(t *testing.T, rec *httptest.ResponseRecorder) wire.Page[wire.Function] {
	t.Helper()
	var p wire.Page[wire.Function]
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Items == nil {
		t.Fatalf("not a page: %s (%v)", rec.Body, err)
	}
	return p
}

func names(fs []wire.Function) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// Paging through a list while it changes: each item present from start to end is listed
// exactly once, in key order; the cursor is a position, not an offset.
func TestPageCursorStableUnderInserts(t *testing.T) {
	f := newFixture()
	f.fns.statuses = nil
	for _, n := range []string{"e", "a", "c", "g", "i"} { // unsorted on purpose
		f.fns.statuses = append(f.fns.statuses, function.Status{Name: n})
	}
	p := pageOf(t, f.do("GET", "/v1/functions?limit=2", nil))
	if got := names(p.Items); !slices.Equal(got, []string{"a", "c"}) || p.NextCursor == "" {
		t.Fatalf("first page %q, next %q", got, p.NextCursor)
	}
	seen := names(p.Items)
	// Before the next page: one item sorts before the cursor, one after; one listed item goes.
	f.fns.statuses = append(f.fns.statuses, function.Status{Name: "b"}, function.Status{Name: "h"})
	f.fns.statuses = slices.DeleteFunc(f.fns.statuses, func(s function.Status) bool { return s.Name == "a" })
	for p.NextCursor != "" {
		p = pageOf(t, f.do("GET", "/v1/functions?limit=2&cursor="+p.NextCursor, nil))
		seen = append(seen, names(p.Items)...)
	}
	if want := []string{"a", "c", "e", "g", "h", "i"}; !slices.Equal(seen, want) {
		t.Errorf("paged %q, want %q", seen, want)
	}
}

func TestPageDefaultsAndBounds(t *testing.T) {
	f := newFixture()
	f.fns.statuses = nil
	for i := range wire.DefaultPageLimit + 1 {
		f.fns.statuses = append(f.fns.statuses, function.Status{Name: fmt.Sprintf("f%04d", i)})
	}
	if p := pageOf(t, f.do("GET", "/v1/functions", nil)); len(p.Items) != wire.DefaultPageLimit || p.NextCursor == "" {
		t.Errorf("default page: %d items, next %q", len(p.Items), p.NextCursor)
	}
	if p := pageOf(t, f.do("GET", fmt.Sprintf("/v1/functions?limit=%d", wire.MaxPageLimit), nil)); len(p.Items) != wire.DefaultPageLimit+1 || p.NextCursor != "" {
		t.Errorf("whole list: %d items, next %q", len(p.Items), p.NextCursor)
	}
	f.fns.statuses = nil
	if rec := f.do("GET", "/v1/functions", nil); strings.TrimSpace(rec.Body.String()) != "{\n  \"items\": []\n}" {
		t.Errorf("empty list: %s", rec.Body)
	}
}

// A bad ?limit= or ?cursor= is a 400 naming the field, on every list.
func TestPageBadQuery(t *testing.T) {
	f := newFixture()
	p := pageOf(t, f.do("GET", "/v1/functions?limit=1", nil))
	for _, list := range []string{"/v1/functions", "/v1/secrets"} {
		for _, c := range []struct{ query, field string }{
			{"limit=0", "limit"}, {"limit=1001", "limit"}, {"limit=x", "limit"}, {"limit=-1", "limit"},
			{"cursor=!!", "cursor"}, {"cursor=abc", "cursor"},
		} {
			rec := f.do("GET", list+"?"+c.query, nil)
			if rec.Code != 400 {
				t.Errorf("%s?%s: status %d, want 400", list, c.query, rec.Code)
				continue
			}
			if eb := errorOf(t, rec); eb.Code != wire.CodeBadRequest || !strings.HasPrefix(eb.Message, c.field+": ") {
				t.Errorf("%s?%s: %+v, want a message naming %s", list, c.query, eb, c.field)
			}
		}
	}
	// A cursor of the functions list is not one of the secrets list.
	rec := f.do("GET", "/v1/secrets?cursor="+p.NextCursor, nil)
	if eb := errorOf(t, rec); rec.Code != 400 || !strings.HasPrefix(eb.Message, "cursor: ") {
		t.Errorf("a functions cursor on secrets: %d %+v", rec.Code, eb)
	}
}

// The SDK's list calls follow the cursors to the end; its page calls return one page.
func TestClientFollowsPages(t *testing.T) {
	f := newFixture()
	f.fns.statuses = nil
	n := wire.MaxPageLimit*2 + 3
	for i := range n {
		f.fns.statuses = append(f.fns.statuses, function.Status{Name: fmt.Sprintf("f%05d", n-i)})
	}
	ts := httptest.NewServer(f.h)
	t.Cleanup(ts.Close)
	c := zygo.NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	ctx := context.Background()
	fs, err := c.Functions(ctx)
	if err != nil || len(fs) != n || fs[0].Name != "f00001" || !slices.IsSortedFunc(fs, func(a, b wire.Function) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatalf("Functions: %d items (%v)", len(fs), err)
	}
	p, err := c.FunctionsPage(ctx, zygo.PageQuery{Limit: 3})
	if err != nil || len(p.Items) != 3 || p.NextCursor == "" {
		t.Fatalf("FunctionsPage: %+v (%v)", p, err)
	}
	p, err = c.FunctionsPage(ctx, zygo.PageQuery{Limit: 3, Cursor: p.NextCursor})
	if err != nil || p.Items[0].Name != "f00004" {
		t.Errorf("second page: %+v (%v)", p, err)
	}
	_, err = c.FunctionsPage(ctx, zygo.PageQuery{Limit: wire.MaxPageLimit + 1})
	if !zygo.IsBadRequest(err) || !strings.HasPrefix(err.Error(), "limit: ") {
		t.Errorf("limit over the bound: %v", err)
	}
}

// A daemon of another API version is refused with both versions said; one without the header
// (older than it) is read.
func TestClientVersionMismatch(t *testing.T) {
	var version atomic.Value
	version.Store("2")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := version.Load().(string); v != "" {
			w.Header().Set(wire.APIVersionHeader, v)
		}
		if r.URL.Path == "/v1/sandboxes/x/fork" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": {"code": "not_found", "message": "no"}}`))
			return
		}
		w.Write([]byte(`{"version": "future"}`))
	}))
	t.Cleanup(ts.Close)
	c := zygo.NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	ctx := context.Background()
	_, err := c.Status(ctx)
	var vm *zygo.VersionMismatch
	if !errors.As(err, &vm) || vm.Daemon != "2" || !strings.Contains(err.Error(), "the daemon speaks API version 2; this client speaks 1") {
		t.Errorf("Status from a version 2 daemon: %v", err)
	}
	if _, err := c.Fork(ctx, "x", 1, "", nil); !errors.As(err, &vm) {
		t.Errorf("Fork from a version 2 daemon: %v", err)
	}
	version.Store("")
	if st, err := c.Status(ctx); err != nil || st.Version != "future" {
		t.Errorf("Status from a daemon without the header: %+v, %v", st, err)
	}
}
