package network

import (
	"errors"
	"testing"

	"github.com/google/nftables"
)

// FailNextAttach makes h's Attach calls fail after their rules are in.
func FailNextAttach(h *Host) { h.failAttach = func() error { return errors.New("injected failure") } }

// TableExists reports whether the inet table name exists.
func TableExists(t *testing.T, name string) bool {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := tableExists(c, &nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
