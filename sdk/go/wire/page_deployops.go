package wire

// A copy of branch apispec's Page (sdk/go/wire/wire.go there), so that this branch's list
// (GET /v1/functions/{name}/versions) has the same shape before the merge. At the merge,
// delete this file: apispec's definitions are the same.

// Bounds of a page of a list (see Page).
const (
	DefaultPageLimit = 100  // the items of a page when ?limit= is not given
	MaxPageLimit     = 1000 // the largest ?limit=
)

// Page is one page of a list: the answer of GET of every list route. The route takes
// ?limit=N (1..MaxPageLimit, default DefaultPageLimit) and ?cursor=C, C being a previous
// page's NextCursor, opaque; an out-of-range limit or a cursor the list did not give is a 400
// naming the field.
type Page[T any] struct {
	Items []T `json:"items"`
	// NextCursor continues the list; empty (left out) on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}
