package api

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Pages of a list (wire.Page). A list route reads its query with pageQueryOf, loads the whole
// list, and answers with writePage, giving each item's key: a string unique in the list whose
// byte order is the list's order. The cursor is the last key of the page before, so a page
// starts after it whatever was added or removed meanwhile (no offset to shift). The cursor is
// the route's pattern and the key, base64url: opaque to a client, and a cursor of another
// list is refused rather than read as a position in this one.

// pageQuery is a list call's ?limit= and ?cursor=.
type pageQuery struct {
	limit int    // 1..wire.MaxPageLimit
	after string // the key the page starts after; "" for the first page
	list  string // the route's pattern, which the cursor must name
}

// pageQueryOf reads r's ?limit= (default wire.DefaultPageLimit) and ?cursor=; on a bad one it
// has answered 400 naming the field, and returns false.
func pageQueryOf(w http.ResponseWriter, r *http.Request) (pageQuery, bool) {
	q := pageQuery{limit: wire.DefaultPageLimit, list: r.Pattern}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > wire.MaxPageLimit {
			badRequest(w, fmt.Sprintf("limit: %.20q: must be a number from 1 to %d", v, wire.MaxPageLimit))
			return q, false
		}
		q.limit = n
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		list, key, ok := strings.Cut(string(raw), "\x00")
		if err != nil || !ok || list != q.list {
			badRequest(w, "cursor: not one this list gave: pass a page's next_cursor as it came")
			return q, false
		}
		q.after = key
	}
	return q, true
}

// writePage answers the page of items that q selects, as a wire.Page: items ordered by key
// (which must be unique), the first q.limit after q.after, and a next_cursor when more follow.
// items is reordered in place.
func writePage[T any](w http.ResponseWriter, q pageQuery, items []T, key func(T) string) {
	slices.SortFunc(items, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	start := 0
	if q.after != "" {
		start, _ = slices.BinarySearchFunc(items, q.after, func(it T, k string) int {
			if key(it) <= k {
				return -1
			}
			return 1
		})
	}
	page := wire.Page[T]{Items: items[start:min(start+q.limit, len(items))]}
	if end := start + len(page.Items); end < len(items) {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(q.list + "\x00" + key(items[end-1])))
	}
	if page.Items == nil {
		page.Items = []T{}
	}
	writeJSON(w, http.StatusOK, page)
}

// timeKeyLayout writes a time as text whose byte order is the time's order (years 0-9999, UTC).
const timeKeyLayout = "20060102T150405.000000000"

// timeKey is the key of an item listed oldest first: its creation time, then its id.
func timeKey(t time.Time, id string) string {
	return t.UTC().Format(timeKeyLayout) + " " + id
}
