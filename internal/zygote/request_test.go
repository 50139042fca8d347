package zygote

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

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

// TestChildStepsAreBoundedTokens: the child's timing in result.json becomes
// child.NAME phases only for well-formed [name, ns] pairs whose name is a
// short token (it goes into a Server-Timing header), at most maxChildSteps;
// anything else is dropped without failing the request.
func TestChildStepsAreBoundedTokens(t *testing.T) {
	var rf resultFile
	body := `{"ok": true, "value": 1, "steps": [["reseed", 1500], ["bad name", 1], ["x\r\nSet-Cookie", 1], [3, 4], ["neg", -1], "junk", ["handler", 2000000]]}`
	if err := json.Unmarshal([]byte(body), &rf); err != nil {
		t.Fatalf("a result with odd steps must still decode: %v", err)
	}
	got := childPhases(rf.Steps)
	want := []Phase{{"child.reseed", 1500 * time.Nanosecond}, {"child.handler", 2 * time.Millisecond}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	many := strings.Repeat(`["s", 1],`, 100)
	if err := json.Unmarshal([]byte(`{"ok": true, "steps": [`+many+`["s", 1]]}`), &rf); err != nil {
		t.Fatal(err)
	}
	if n := len(childPhases(rf.Steps)); n != maxChildSteps {
		t.Errorf("%d phases from 101 steps, want %d", n, maxChildSteps)
	}
}
