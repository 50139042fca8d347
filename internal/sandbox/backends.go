package sandbox

import (
	"fmt"
	"sort"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// backends is the Manager's engines by Backend.Name. Every record names the backend its
// instance runs on (SandboxRecord.Backend) and every checkpoint the backend that wrote its
// image (CheckpointRecord.Backend); calls on a sandbox go to its record's backend, and an image
// is only ever restored by the backend that wrote it: gVisor's checkpoint.img means nothing to
// a VM, and the other way round.
type backends struct {
	def    Backend            // ManagerConfig.Backend: where Create puts new sandboxes
	byName map[string]Backend // def and ManagerConfig.Backends
}

// newBackends indexes def and more by name. It returns an error wrapping
// errdefs.ErrInvalidArgument for a nil backend or two of one name.
func newBackends(def Backend, more []Backend) (backends, error) {
	bs := backends{def: def, byName: map[string]Backend{}}
	for _, b := range append([]Backend{def}, more...) {
		if b == nil {
			return bs, fmt.Errorf("manager backends: a nil backend: %w", errdefs.ErrInvalidArgument)
		}
		if _, dup := bs.byName[b.Name()]; dup {
			return bs, fmt.Errorf("manager backends: two backends named %q: %w", b.Name(), errdefs.ErrInvalidArgument)
		}
		bs.byName[b.Name()] = b
	}
	return bs, nil
}

// names returns the backends' names, sorted, for messages.
func (bs backends) names() string {
	ns := make([]string, 0, len(bs.byName))
	for n := range bs.byName {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return strings.Join(ns, ", ")
}

// named returns the backend called name; "" (a record that names none) is the default
// backend's. It returns an error wrapping errdefs.ErrFailedPrecondition when the Manager has none
// of that name (a record written by a daemon configured with another engine).
func (bs backends) named(name string) (Backend, error) {
	if name == "" {
		return bs.def, nil
	}
	if b, ok := bs.byName[name]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("backend %q is not configured on this daemon (it runs %s): %w", name, bs.names(),
		errdefs.ErrFailedPrecondition)
}

// checkpointer returns the backend called name and its Checkpointer, or an error wrapping
// errdefs.ErrFailedPrecondition when there is no such backend or it cannot checkpoint.
func (bs backends) checkpointer(name string) (Backend, Checkpointer, error) {
	b, err := bs.named(name)
	if err != nil {
		return nil, nil, err
	}
	ck, ok := b.(Checkpointer)
	if !ok {
		return nil, nil, fmt.Errorf("backend %s cannot checkpoint: %w", name, errdefs.ErrFailedPrecondition)
	}
	return b, ck, nil
}

// restorer returns what restores cp into a sandbox running on backend `on` (the sandbox rolled
// back, or the parent whose children a fork makes): on's Checkpointer, provided cp's image was
// written by that same backend. An image of another backend is refused with an error wrapping
// errdefs.ErrFailedPrecondition that names both, before anything is touched.
func (bs backends) restorer(cp CheckpointRecord, on string) (Backend, Checkpointer, error) {
	if bs.canon(cp.Backend) != bs.canon(on) {
		return nil, nil, fmt.Errorf("checkpoint %s is an image of backend %q; sandboxes on %q cannot restore it: %w",
			cp.ID, cp.Backend, on, errdefs.ErrFailedPrecondition)
	}
	return bs.checkpointer(on)
}

// canon returns name, or the default backend's name for "".
func (bs backends) canon(name string) string {
	if name == "" {
		return bs.def.Name()
	}
	return name
}
