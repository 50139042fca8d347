package function

import "context"

// callerKey is the context key of the caller's id.
type callerKey struct{}

// WithCallerID returns ctx carrying the id the caller gave its request (its X-Request-Id,
// or its traceparent's trace id; the API validates it). Invoke keeps it with the request's
// log lines (store.LogLine.CallerID) and names it in the request's status line.
func WithCallerID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// CallerID returns the id WithCallerID put in ctx, or "".
func CallerID(ctx context.Context) string {
	id, _ := ctx.Value(callerKey{}).(string)
	return id
}
