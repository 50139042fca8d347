package zygote

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// TestRequestDirErrorNamesTheCause: a request directory that cannot be
// made is ErrUnavailable (503) naming the cause, without the host path the
// underlying error carries.
func TestRequestDirErrorNamesTheCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{unix.ENOSPC, "request tmpfs (--run-tmpfs-mib) is full"},
		{unix.EDQUOT, "request tmpfs (--run-tmpfs-mib) is full"},
		{unix.EMFILE, "out of file descriptors"},
		{unix.ENFILE, "out of file descriptors"},
		{unix.EIO, "making the request directory failed"},
	} {
		err := requestDirError(fmt.Errorf("creating request tmp: mkdirat /state/run/z1/req/tok/tmp: %w", c.err))
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "/state") {
			t.Errorf("%v: got %q, want ErrUnavailable saying %q and no host path", c.err, err, c.want)
		}
	}
}
